package wal

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	outboxcdc "github.com/outbox-cdc/outbox-cdc"
	"github.com/outbox-cdc/outbox-cdc/test/testenv"
)

func TestGlobMatchAndPublicationTarget(t *testing.T) {
	for _, tc := range []struct {
		pat, name string
		want      bool
	}{
		{"outbox_%", "outbox_1", true},
		{"outbox_%", "outboxx", false},
		{"*", "x", true},
		{"Outbox", "outbox", false}, // Postgres names compare with case
		{"t*x", "tabx", true},
		{"t*x", "tabxy", false},
	} {
		if got := outboxcdc.GlobMatch(tc.pat, []byte(tc.name), false); got != tc.want {
			t.Errorf("globMatch(%q, %q) = %v", tc.pat, tc.name, got)
		}
	}
	for _, tc := range []struct {
		tables []string
		want   string
	}{
		{[]string{"a.x", "y"}, `TABLE "a"."x", "public"."y"`},
		{[]string{"a.outbox_%", "b.x", "a.o*"}, `TABLE "b"."x", TABLES IN SCHEMA "a"`},
		{[]string{"tenant_%.outbox", "a.x"}, `ALL TABLES`},
	} {
		pats, err := parseTables(tc.tables)
		if err != nil {
			t.Fatal(err)
		}
		s := &Source{pats: pats}
		if got, _, _ := s.publicationTarget(); got != tc.want {
			t.Errorf("%v: FOR %s, want FOR %s", tc.tables, got, tc.want)
		}
	}
}

// tablesEnv is a schema of its own holding several outbox tables.
type tablesEnv struct {
	*pgEnv
	schema string
}

func newTablesEnv(t *testing.T, n int) *tablesEnv {
	schema := "sc_" + newPgEnvSuffix(t)
	// Registered first, so it runs last: after the slot is dropped.
	t.Cleanup(func() {
		ctx := context.Background()
		db, err := pgx.Connect(ctx, testenv.PostgresDSN(t))
		if err != nil {
			t.Errorf("cleanup: %v", err)
			return
		}
		defer db.Close(ctx)
		if _, err := db.Exec(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE"); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	e := &tablesEnv{pgEnv: newPgEnv(t), schema: schema}
	e.exec("CREATE SCHEMA " + e.schema)
	for i := 1; i <= n; i++ {
		e.addTable(i)
	}
	return e
}

func newPgEnvSuffix(t *testing.T) string {
	return strings.TrimPrefix(fmt.Sprintf("%d", time.Now().UnixNano()%1e9), "-")
}

func (e *tablesEnv) tableName(i int) string { return fmt.Sprintf("%s.outbox_%d", e.schema, i) }

func (e *tablesEnv) addTable(i int) {
	e.exec(`CREATE TABLE ` + e.tableName(i) + ` (
		id bigserial PRIMARY KEY,
		message_id varchar(64) NOT NULL,
		aggregate_type varchar(64) NOT NULL,
		aggregate_id varchar(64) NOT NULL,
		event_type varchar(64) NOT NULL,
		payload json)`)
}

// write commits one transaction: each row "table=id", or "msg:prefix=id"
// for a logical decoding message.
func (e *tablesEnv) write(rows ...string) {
	e.t.Helper()
	ctx := context.Background()
	tx, err := e.db.Begin(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	for _, r := range rows {
		table, id, _ := strings.Cut(r, "=")
		if prefix, ok := strings.CutPrefix(table, "msg:"); ok {
			_, err = tx.Exec(ctx, `SELECT pg_logical_emit_message(true, $1, json_build_object('message_id', $2::text, 'aggregate_type', 'ORDER',
				'aggregate_id', 'agg-'||$2::text, 'event_type', 'CREATED', 'payload', json_build_object('id', $2::text))::text)`, prefix, id)
		} else {
			_, err = tx.Exec(ctx, `INSERT INTO `+table+` (message_id, aggregate_type, aggregate_id, event_type, payload)
				VALUES ($1::text, 'ORDER', 'agg-'||$1::text, 'CREATED', json_build_object('id', $1::text)::json)`, id)
		}
		if err != nil {
			e.t.Fatal(err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		e.t.Fatal(err)
	}
}

// walsenders counts the walsenders streaming the test's slot.
func (e *tablesEnv) walsenders() int {
	e.t.Helper()
	var n int
	if err := e.db.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_replication r JOIN pg_replication_slots s ON s.active_pid = r.pid
		WHERE s.slot_name = $1`, e.slot).Scan(&n); err != nil {
		e.t.Fatal(err)
	}
	return n
}

func expectRows(t *testing.T, tx outboxcdc.Tx, want ...string) {
	t.Helper()
	var got []string
	for _, ev := range tx.Events {
		name := ev.Schema + "." + ev.Table
		if ev.Schema == "" {
			name = "msg:" + ev.Table
		}
		got = append(got, name+"="+ev.MessageID)
		if ev.AggregateID != "agg-"+ev.MessageID {
			t.Errorf("row %s delivered with aggregate_id %q", ev.MessageID, ev.AggregateID)
		}
	}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("transaction rows [%s], want [%s]", strings.Join(got, " "), strings.Join(want, " "))
	}
}

// TestTablesOneSlotManyTables: one source over <schema>.outbox_% reads 4
// tables and a fifth created while it runs, plus logical messages of two
// prefixes, through one slot and one walsender: every row arrives once,
// in commit order within and across transactions, carrying its schema and
// table (a message: its prefix); a table laid out differently is read with
// its own columns (route.tables); a table the pattern does not match is
// not read; a dropped table leaves the others streaming.
func TestTablesOneSlotManyTables(t *testing.T) {
	e := newTablesEnv(t, 4)
	t4 := e.tableName(4)
	e.exec("ALTER TABLE " + t4 + " RENAME COLUMN message_id TO msg_id")
	e.exec("CREATE TABLE " + e.schema + ".other (id bigserial PRIMARY KEY, message_id text, aggregate_type text, aggregate_id text, event_type text, payload json)")
	cols := seedCols
	other := seedCols
	other.MessageID = "msg_id"
	cols.Tables = map[string]outboxcdc.Columns{t4: other}

	cfg := e.config()
	cfg.Table = ""
	cfg.Tables = []string{e.schema + ".outbox_%"}
	cfg.Messages.Prefixes = []string{"p1_" + e.name, "p2_" + e.name}
	src, _ := e.source(cfg, cols)
	r := start(t, src, "", 16)
	r.waitReady()
	if n := e.walsenders(); n != 1 {
		t.Fatalf("%d walsenders on the slot, want 1", n)
	}
	var forAll bool
	var nsp int
	if err := e.db.QueryRow(context.Background(), `SELECT p.puballtables, (SELECT count(*) FROM pg_publication_namespace pn WHERE pn.pnpubid = p.oid)
		FROM pg_publication p WHERE pubname = $1`, e.pub).Scan(&forAll, &nsp); err != nil {
		t.Fatal(err)
	}
	if forAll || nsp != 1 {
		t.Fatalf("publication: all tables %v, %d schemas; want FOR TABLES IN SCHEMA %s", forAll, nsp, e.schema)
	}

	t1, t2, t3 := e.tableName(1), e.tableName(2), e.tableName(3)
	// One transaction across the tables and both prefixes, interleaved.
	ctx := context.Background()
	tx, err := e.db.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ins := func(table, idCol, id string) {
		if _, err := tx.Exec(ctx, `INSERT INTO `+table+` (`+idCol+`, aggregate_type, aggregate_id, event_type, payload)
			VALUES ($1::text, 'ORDER', 'agg-'||$1::text, 'CREATED', '{}')`, id); err != nil {
			t.Fatal(err)
		}
	}
	ins(t2, "message_id", "a1")
	ins(t1, "message_id", "a2")
	ins(t4, "msg_id", "a3")
	ins(e.schema+".other", "message_id", "x1")
	if _, err := tx.Exec(ctx, `SELECT pg_logical_emit_message(true, $1, '{"message_id":"a4","aggregate_type":"ORDER","aggregate_id":"agg-a4","event_type":"E","payload":{}}')`, "p2_"+e.name); err != nil {
		t.Fatal(err)
	}
	ins(t3, "message_id", "a5")
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	expectRows(t, r.next(20*time.Second), t2+"=a1", t1+"=a2", t4+"=a3", "msg:p2_"+e.name+"=a4", t3+"=a5")
	for i, table := range []string{t1, t2, t3} {
		id := fmt.Sprint("b", i)
		e.write(table + "=" + id)
		expectRows(t, r.next(20*time.Second), table+"="+id)
	}
	e.write("msg:p1_"+e.name+"=b9", e.schema+".other=x2")
	expectRows(t, r.next(20*time.Second), "msg:p1_"+e.name+"=b9")

	// A table created while the source runs.
	e.addTable(5)
	t5 := e.tableName(5)
	e.write(t5+"=c1", t1+"=c2")
	expectRows(t, r.next(20*time.Second), t5+"=c1", t1+"=c2")

	// A dropped table: the others keep streaming.
	e.exec("DROP TABLE " + t3)
	e.write(t2+"=d1", t5+"=d2")
	expectRows(t, r.next(20*time.Second), t2+"=d1", t5+"=d2")
	if n := e.walsenders(); n != 1 {
		t.Fatalf("%d walsenders on the slot at the end, want 1", n)
	}
}

// TestTablesNewTableIncompatibleLayout: a table created while the source
// runs that matches the pattern but lacks a role column, with no
// route.tables entry, stops the source with ErrTableLayout naming it at
// its first row; the rows before were delivered, none of its own.
func TestTablesNewTableIncompatibleLayout(t *testing.T) {
	e := newTablesEnv(t, 1)
	cfg := e.config()
	cfg.Table = ""
	cfg.Tables = []string{e.schema + ".outbox_%"}
	src, _ := e.source(cfg, seedCols)
	r := start(t, src, "", 16)
	r.waitReady()
	e.write(e.tableName(1) + "=a1")
	expectRows(t, r.next(20*time.Second), e.tableName(1)+"=a1")

	bad := e.schema + ".outbox_bad"
	e.exec("CREATE TABLE " + bad + " (id text PRIMARY KEY, aggregate_type text, aggregate_id text, event_type text, payload json)")
	e.exec("INSERT INTO " + bad + " VALUES ('z1', 'ORDER', 'agg', 'E', '{}')")
	deadline := time.After(20 * time.Second)
	for {
		select {
		case tx := <-r.out:
			if len(tx.Events) > 0 {
				t.Fatalf("delivered %+v from a table without the route's columns", tx.Events)
			}
			continue
		case err := <-r.done:
			r.once.Do(func() {})
			if !errors.Is(err, ErrTableLayout) || !strings.Contains(err.Error(), bad) || !strings.Contains(err.Error(), "message_id") {
				t.Fatalf("source stopped with %v, want ErrTableLayout naming %s and message_id", err, bad)
			}
		case <-deadline:
			t.Fatal("the source did not stop")
		}
		break
	}
}

// With patterns only inserts are published: route.on_update other than
// skip is refused rather than silently never seeing UPDATEs.
func TestTablesRefuseOnUpdate(t *testing.T) {
	e := newTablesEnv(t, 1)
	cfg := e.config()
	cfg.Table = ""
	cfg.Tables = []string{e.schema + ".outbox_%"}
	cols := seedCols
	cols.OnUpdate = "fatal"
	src, _ := e.source(cfg, cols)
	r := start(t, src, "", 16)
	select {
	case err := <-r.done:
		r.once.Do(func() {})
		if err == nil || !strings.Contains(err.Error(), "route.on_update") {
			t.Fatalf("got %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the source did not stop")
	}
}
