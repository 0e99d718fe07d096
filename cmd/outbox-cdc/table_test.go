package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/rs/zerolog"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
	"github.com/outbox-cdc/outbox-cdc/router"
	"github.com/outbox-cdc/outbox-cdc/test/testenv"
)

// The converters read the outbox table's types, nullability and defaults
// from the real catalogs; these tests create tables on the local MariaDB
// and PostgreSQL and check what the route then writes.

func TestReadOutboxTableMariaDB(t *testing.T) {
	base := testenv.MySQLDSN(t)
	dc, err := mysql.ParseDSN(base)
	if err != nil {
		t.Fatal(err)
	}
	name := fmt.Sprintf("cmd_table_%d", time.Now().UnixNano()%1e9)
	admin := testenv.MySQL(t)
	for _, q := range []string{"CREATE DATABASE " + name,
		"CREATE TABLE " + name + `.outboxevent (
  id CHAR(36) NOT NULL PRIMARY KEY,
  aggregatetype VARCHAR(255) NOT NULL,
  aggregateid BIGINT UNSIGNED NOT NULL,
  type ENUM('Created','Paid') NOT NULL DEFAULT 'Created',
  payload JSON NULL,
  tenant VARCHAR(32) NOT NULL DEFAULT 'it''s',
  created_at DATETIME(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3)
)`} {
		if _, err := admin.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { admin.Exec("DROP DATABASE IF EXISTS " + name) })
	dc.DBName = name
	cfg := defaultConfig()
	cfg.Source.Type = "mysql"
	cfg.Source.MySQL.DSN = dc.FormatDSN()
	cfg.Source.MySQL.Table = "outboxevent"
	table, err := readOutboxTable(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if table.Flavor != router.FlavorMariaDB || table.Schema != name || len(table.Columns) != 7 {
		t.Fatalf("table %+v", table)
	}
	rc := router.DefaultConfig()
	rc.Preset = router.PresetDebezium
	rc.Converters.Key, rc.Converters.Value, rc.Converters.Headers = "json", "json", "json"
	rc.Headers = []string{"type:eventType", "tenant", "created_at"}
	rt, err := router.NewForTable(rc, table)
	if err != nil {
		t.Fatal(err)
	}
	ev := outboxcdc.Event{MessageID: "m-1", AggregateType: "Order", AggregateID: "18446744073709551615", EventType: "Paid",
		Payload: []byte(`{"a":1}`), Extra: []outboxcdc.Column{{Name: "tenant", Value: []byte("acme")}, {Name: "created_at", Value: []byte("2026-03-14T15:09:26.5")}}}
	rec, err := rt.Route(&ev)
	if err != nil {
		t.Fatal(err)
	}
	// BIGINT UNSIGNED under Debezium's default long mode wraps to -1;
	// MariaDB's JSON is a LONGTEXT, a plain string.
	want := map[string]string{
		"key":        `{"schema":{"type":"int64","optional":false},"payload":-1}`,
		"value":      `{"schema":{"type":"string","optional":true},"payload":"{\"a\":1}"}`,
		"eventType":  `{"schema":{"type":"string","optional":false,"name":"io.debezium.data.Enum","version":1,"parameters":{"allowed":"Created,Paid"},"default":"Created"},"payload":"Paid"}`,
		"tenant":     `{"schema":{"type":"string","optional":false,"default":"it's"},"payload":"acme"}`,
		"created_at": `{"schema":{"type":"int64","optional":false,"name":"io.debezium.time.Timestamp","version":1,"default":0},"payload":1773500966500}`,
	}
	got := map[string]string{"key": string(rec.Key), "value": string(rec.Value)}
	for _, h := range rec.Headers {
		got[h.Key] = string(h.Value)
	}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("%s\n got %s\nwant %s", k, got[k], w)
		}
	}
}

func TestReadOutboxTablePostgres(t *testing.T) {
	dsn := testenv.PostgresDSN(t)
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	schema := fmt.Sprintf("cmd_table_%d", time.Now().UnixNano()%1e9)
	for _, q := range []string{"CREATE SCHEMA " + schema,
		"CREATE TYPE " + schema + ".kind AS ENUM ('Created', 'Paid')",
		"CREATE TABLE " + schema + `.outboxevent (
  id uuid NOT NULL DEFAULT gen_random_uuid() PRIMARY KEY,
  aggregatetype varchar(255) NOT NULL,
  aggregateid varchar(255) NOT NULL,
  type ` + schema + `.kind NOT NULL,
  payload jsonb,
  seq bigserial,
  occurred_at timestamptz NOT NULL DEFAULT now(),
  note text DEFAULT 'it''s'
)`} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { db.Exec("DROP SCHEMA IF EXISTS " + schema + " CASCADE") })
	cfg := defaultConfig()
	cfg.Source.Type = "postgres"
	cfg.Source.Postgres.DSN = dsn
	cfg.Source.Postgres.Table = schema + ".outboxevent"
	rc := router.DefaultConfig()
	rc.Preset = router.PresetDebezium
	rc.Converters.Key, rc.Converters.Value, rc.Converters.Headers = "string", "json", "json"
	rc.Converters.ValueSchemas = false
	rc.Headers = []string{"type:eventType", "seq", "occurred_at", "note"}
	cfg.Route = rc
	rt, err := newRouter(context.Background(), cfg, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	ev := outboxcdc.Event{MessageID: "6b1f3c2e-0000-4000-8000-000000000001", AggregateType: "Order", AggregateID: "SO-1", EventType: "Paid",
		Payload: []byte(`{"a": 1}`), Extra: []outboxcdc.Column{{Name: "seq", Value: []byte("7")},
			{Name: "occurred_at", Value: []byte("2026-03-14 15:09:26.25+00")}, {Name: "note", Null: true}}}
	rec, err := rt.Route(&ev)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{"key": string(rec.Key), "value": string(rec.Value)}
	for _, h := range rec.Headers {
		got[h.Key] = string(h.Value)
	}
	// Debezium's Postgres defaults: function calls become fixed
	// placeholders (zero UUID, 0, the epoch); a NULL with a default is
	// written as the default (replace.null.with.default).
	want := map[string]string{
		"key":         `SO-1`,
		"value":       `"{\"a\": 1}"`,
		"id":          `{"schema":{"type":"string","optional":false,"name":"io.debezium.data.Uuid","version":1,"default":"00000000-0000-0000-0000-000000000000"},"payload":"6b1f3c2e-0000-4000-8000-000000000001"}`,
		"eventType":   `{"schema":{"type":"string","optional":false,"name":"io.debezium.data.Enum","version":1,"parameters":{"allowed":"Created,Paid"}},"payload":"Paid"}`,
		"seq":         `{"schema":{"type":"int64","optional":false,"default":0},"payload":7}`,
		"occurred_at": `{"schema":{"type":"string","optional":false,"name":"io.debezium.time.ZonedTimestamp","version":1,"default":"1970-01-01T00:00:00Z"},"payload":"2026-03-14T15:09:26.25Z"}`,
		"note":        `{"schema":{"type":"string","optional":true,"default":"it's"},"payload":"it's"}`,
	}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("%s\n got %s\nwant %s", k, got[k], w)
		}
	}

	// check runs the same reading and says what it found.
	if r := checkRouteTable(context.Background(), cfg); !r.OK || !strings.Contains(r.Detail, "aggregateid") {
		t.Fatalf("check: %+v", r)
	}
	bad := cfg
	bad.Route.Converters.Value = "bytearray"
	if r := checkRouteTable(context.Background(), bad); r.OK || !strings.Contains(r.Detail, "ByteArrayConverter") {
		t.Fatalf("check with ByteArrayConverter on jsonb: %+v", r)
	}

	// A table that does not exist is a configuration error, not a retry.
	cfg.Source.Postgres.Table = schema + ".nope"
	_, err = newRouter(context.Background(), cfg, zerolog.Nop())
	if _, ok := err.(*tableError); !ok || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("missing table: %v (%T)", err, err)
	}
}

// TestNewRouterRetriesUnreachableDatabase: reading the column types when
// the database is not reachable yet is retried with backoff (the source
// would wait too), not a configuration error; it ends only with ctx.
func TestNewRouterRetriesUnreachableDatabase(t *testing.T) {
	cfg := defaultConfig()
	cfg.Source.Type = "postgres"
	cfg.Source.Postgres.DSN = "postgres://u@127.0.0.1:1/db?connect_timeout=1"
	cfg.Source.Postgres.Table = "public.outboxevent"
	cfg.Route.Preset = router.PresetDebezium
	cfg.Route.Converters.Key = "json"
	var logs strings.Builder
	ctx, cancel := context.WithTimeout(context.Background(), 2500*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := newRouter(ctx, cfg, zerolog.New(&logs))
	if err == nil || !strings.Contains(err.Error(), "context deadline exceeded") {
		t.Fatalf("newRouter = %v, want the context's end", err)
	}
	if _, isConfig := err.(*configError); isConfig {
		t.Fatal("an unreachable database is not a configuration error")
	}
	if time.Since(start) < 2*time.Second {
		t.Fatalf("gave up after %s, before the context ended", time.Since(start))
	}
	if n := strings.Count(logs.String(), "cannot read the outbox table's column types"); n < 2 {
		t.Fatalf("%d retries logged, want at least 2:\n%s", n, logs.String())
	}
}

func TestTopicNeedsWithRegexRouting(t *testing.T) {
	cfg := defaultConfig()
	cfg.Route.TopicRegex = "(.*)"
	cfg.Route.TopicReplacement = "shop.$1.events"
	needs := topicNeeds(cfg)
	if len(needs) != 1 || needs[0].Prefix != "shop." || needs[0].Exact {
		t.Fatalf("needs %+v, want the prefix shop.", needs)
	}
	cfg.Route.TopicReplacement = "all-events"
	if needs := topicNeeds(cfg); len(needs) != 1 || needs[0].Prefix != "all-events" || !needs[0].Exact {
		t.Fatalf("literal replacement: %+v", needs)
	}
}

// TestReadOutboxTableNotSet: route.converters without source.table (or,
// for MySQL, without a database in the DSN) is a configuration error
// naming the key, returned at once rather than retried.
func TestReadOutboxTableNotSet(t *testing.T) {
	my := defaultConfig()
	my.Source.Type = "mysql"
	my.Source.MySQL.DSN = "u@tcp(127.0.0.1:1)/"
	my.Source.MySQL.Table = "outboxevent"
	pg := defaultConfig()
	pg.Source.Type = "postgres"
	pg.Source.Postgres.DSN = "postgres://u@127.0.0.1:1/db"
	pg.Source.Postgres.Table = "" // logical decoding messages only
	for _, cfg := range []Config{my, pg} {
		cfg.Route.Preset = router.PresetDebezium
		cfg.Route.Converters.Key = "json"
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := newRouter(ctx, cfg, zerolog.Nop())
		cancel()
		var te *tableError
		var ce *configError
		if !errors.As(err, &te) || !errors.As(err, &ce) || ce.Key != "source.table" {
			t.Errorf("%s: %v (%T), want a *tableError holding a *configError about source.table", cfg.Source.Type, err, err)
		}
	}
}
