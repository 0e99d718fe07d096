package e2e

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/outbox-cdc/outbox-cdc/test/testenv"
)

// multiBackend is a server with outbox tables a, b and, created while the
// connector runs, c; each written with one statement per row.
type multiBackend struct {
	db      *sql.DB
	name    string
	source  string              // the source: section
	table   func(string) string // a, b, c -> the table's name in statements
	topicOf func(string) string // a, b, c -> the topic route.topic gives it
	create  func(t *testing.T, which string)
	insert  string
}

func mysqlMulti(t *testing.T) *multiBackend {
	dsn := testenv.PrivateMariaDB(t, testenv.MariaDBOptions{RowMetadata: "FULL"})
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	name := testObjectName(t)
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, w := range []string{"a", "b", "c"} {
			db.Exec("DROP DATABASE IF EXISTS " + name + "_" + w)
		}
		db.Close()
	})
	m := &multiBackend{db: db, name: name,
		table:   func(w string) string { return name + "_" + w + ".outbox_message" },
		topicOf: func(w string) string { return "mt." + name + "_" + w + ".ORDER" },
		insert:  "INSERT INTO %s (message_id, aggregate_type, aggregate_id, event_type, payload) VALUES (?, 'ORDER', ?, 'CREATED', '{}')",
	}
	m.create = func(t *testing.T, w string) {
		for _, q := range []string{"CREATE DATABASE " + name + "_" + w, testenv.SeedTableMySQL(m.table(w))} {
			if _, err := db.Exec(q); err != nil {
				t.Fatal(err)
			}
		}
	}
	cfg.DBName = name + "_a"
	m.create(t, "a")
	m.create(t, "b")
	m.source = fmt.Sprintf("  type: mysql\n  dsn: %q\n  tables: [%q]\n  start: latest\n", cfg.FormatDSN(), name+"_%.outbox_message")
	return m
}

func postgresMulti(t *testing.T) *multiBackend {
	dsn := testenv.PostgresDSN(t)
	name := testObjectName(t)
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	m := &multiBackend{db: db, name: name,
		table:   func(w string) string { return name + ".outbox_" + w },
		topicOf: func(w string) string { return "mt." + name + ".outbox_" + w + ".ORDER" },
		insert:  "INSERT INTO %s (message_id, aggregate_type, aggregate_id, event_type, payload) VALUES ($1, 'ORDER', $2, 'CREATED', '{}')",
	}
	m.create = func(t *testing.T, w string) {
		for _, q := range testenv.SeedTablePostgres(m.table(w)) {
			if _, err := db.Exec(q); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := db.Exec("DROP SCHEMA IF EXISTS " + name + " CASCADE; CREATE SCHEMA " + name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for i := 0; i < 50; i++ {
			if _, err := db.ExecContext(ctx, "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1", name); err == nil {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		db.ExecContext(ctx, "DROP PUBLICATION IF EXISTS "+name)
		db.ExecContext(ctx, "DROP SCHEMA IF EXISTS "+name+" CASCADE")
		db.Close()
	})
	m.create(t, "a")
	m.create(t, "b")
	m.source = fmt.Sprintf("  type: postgres\n  dsn: %q\n  tables: [%q]\n  slot: %s\n  publication: %s\n", dsn, name+".outbox_%", name, name)
	return m
}

// TestSeveralTablesOneConnector: one connector process over a pattern of
// outbox tables, one of them created while it runs, routes each table's
// rows by {database}/{schema} and {table}, and table b by its own
// route.tables topic: every row is delivered once to its table's topic,
// a transaction across tables included.
func TestSeveralTablesOneConnector(t *testing.T) {
	for _, be := range []struct {
		kind  string
		setup func(t *testing.T) *multiBackend
	}{{"mysql", mysqlMulti}, {"postgres", postgresMulti}} {
		t.Run(be.kind, func(t *testing.T) {
			m := be.setup(t)
			k := newBroker(t)
			topic := "mt.{database}.{aggregate_type}"
			if be.kind == "postgres" {
				topic = "mt.{schema}.{table}.{aggregate_type}"
			}
			special := "special." + m.name + ".{table}"
			cfg := writeConfig(t, fmt.Sprintf(`
name: %s
source:
%sroute:
  topic: %q
  tables:
    %q:
      topic: %q
sink:
  type: kafka
  brokers: [%q]
checkpoint:
  type: file
  path: %q
`, m.name, m.source, topic, m.table("b"), special, k.brokers()[0], filepath.Join(t.TempDir(), "checkpoint")))
			c := testenv.Start(t, cfg)
			cons := newConsumer(t, k.brokers(), "^(mt|special)\\..*")

			want := map[string]string{} // message id -> topic
			topicOf := func(w string) string {
				if w == "b" {
					return "special." + m.name + "." + m.table("b")[strings.LastIndex(m.table("b"), ".")+1:]
				}
				return m.topicOf(w)
			}
			write := func(rows ...string) {
				tx, err := m.db.Begin()
				if err != nil {
					t.Fatal(err)
				}
				for _, r := range rows {
					w, id, _ := strings.Cut(r, "=")
					if _, err := tx.Exec(fmt.Sprintf(m.insert, m.table(w)), id, "agg-"+id); err != nil {
						t.Fatal(err)
					}
					want[id] = topicOf(w)
				}
				if err := tx.Commit(); err != nil {
					t.Fatal(err)
				}
			}
			write("a=1", "b=2", "a=3")
			write("b=4")
			m.create(t, "c")
			write("c=5", "a=6")
			write("c=7")

			got := cons.waitFor(t, len(want), 60*time.Second)
			seen := map[string]bool{}
			for _, r := range got {
				id := r.Headers["id"]
				if seen[id] {
					t.Errorf("message %s delivered twice", id)
				}
				seen[id] = true
				if want[id] != r.Topic {
					t.Errorf("message %s on topic %q, want %q", id, r.Topic, want[id])
				}
			}
			if len(seen) != len(want) {
				t.Fatalf("%d of %d messages delivered: %+v", len(seen), len(want), got)
			}
			if err := c.Stop(20 * time.Second); err != nil {
				t.Fatalf("connector exit: %v", err)
			}
		})
	}
}
