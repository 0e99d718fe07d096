package outboxwriter_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/go-sql-driver/mysql"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outbox-cdc/outbox-cdc/outboxwriter"
	"github.com/outbox-cdc/outbox-cdc/router"
	"github.com/outbox-cdc/outbox-cdc/schema"
	"github.com/outbox-cdc/outbox-cdc/test/testenv"
	"github.com/outbox-cdc/outbox-cdc/wal"
)

// db is one database prepared for a test: the seed outbox table with two
// header columns (tenant, aggregate_seq), an orders table and the
// sequence counter table.
type db struct {
	dialect outboxwriter.Dialect
	sql     *sql.DB
	dsn     string
	prefix  string // "" (MySQL: the DSN's database) or "schema."
	// begin opens a transaction; RecordPgx is used when pgx is set.
	pgx bool
}

func (d *db) q(s string) string {
	s = strings.ReplaceAll(s, "T.", d.prefix)
	if d.dialect == outboxwriter.Postgres {
		n := 0
		var b strings.Builder
		for _, c := range s {
			if c == '?' {
				n++
				fmt.Fprintf(&b, "$%d", n)
				continue
			}
			b.WriteRune(c)
		}
		s = b.String()
	}
	return s
}

func (d *db) table(name string) string { return d.prefix + name }

func forEachDB(t *testing.T, test func(t *testing.T, d *db)) {
	for _, kind := range []string{"mysql", "postgres", "pgx"} {
		t.Run(kind, func(t *testing.T) {
			name := testenv.UniqueName(t, "ow")
			d := &db{}
			var stmts []string
			switch kind {
			case "mysql":
				d.dialect = outboxwriter.MySQL
				d.sql, d.dsn = testenv.ScratchMySQL(t, name)
				stmts = []string{schema.MySQL("outbox_message"),
					"ALTER TABLE outbox_message ADD COLUMN tenant VARCHAR(32) DEFAULT 'none', ADD COLUMN aggregate_seq BIGINT NULL",
					"CREATE TABLE orders (order_no VARCHAR(32) PRIMARY KEY, state VARCHAR(16) NOT NULL)",
					outboxwriter.SequenceTableDDL(outboxwriter.MySQL, "outbox_sequence")}
			default:
				d.dialect, d.pgx, d.prefix = outboxwriter.Postgres, kind == "pgx", name+"."
				d.sql, d.dsn = testenv.ScratchPostgres(t, name)
				stmts = append(schema.Postgres(name+".outbox_message"),
					"ALTER TABLE "+name+".outbox_message ADD COLUMN tenant VARCHAR(32) DEFAULT 'none', ADD COLUMN aggregate_seq BIGINT NULL",
					"CREATE TABLE "+name+".orders (order_no VARCHAR(32) PRIMARY KEY, state VARCHAR(16) NOT NULL)",
					outboxwriter.SequenceTableDDL(outboxwriter.Postgres, name+".outbox_sequence"))
			}
			for _, s := range stmts {
				if _, err := d.sql.Exec(s); err != nil {
					t.Fatalf("%s: %v", s, err)
				}
			}
			test(t, d)
		})
	}
}

// inTx runs f in a transaction of the kind d uses and commits it, or rolls
// it back when commit is false or f fails.
func (d *db) inTx(t testing.TB, w *outboxwriter.Writer, commit bool, f func(rec func(...outboxwriter.Event) ([]string, error), exec func(q string, args ...any) error) error) error {
	t.Helper()
	ctx := context.Background()
	if d.pgx {
		conn, err := pgx.Connect(ctx, d.dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		err = f(func(evs ...outboxwriter.Event) ([]string, error) { return w.RecordPgx(ctx, tx, evs...) },
			func(q string, args ...any) error { _, err := tx.Exec(ctx, d.q(q), args...); return err })
		if err != nil || !commit {
			tx.Rollback(ctx)
			return err
		}
		return tx.Commit(ctx)
	}
	tx, err := d.sql.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = f(func(evs ...outboxwriter.Event) ([]string, error) { return w.Record(ctx, tx, evs...) },
		func(q string, args ...any) error { _, err := tx.ExecContext(ctx, d.q(q), args...); return err })
	if err != nil || !commit {
		tx.Rollback()
		return err
	}
	return tx.Commit()
}

func (d *db) writer(t testing.TB, mod func(*outboxwriter.Config)) *outboxwriter.Writer {
	t.Helper()
	l := outboxwriter.SeedLayout(d.table("outbox_message"))
	l.Headers = map[string]string{"tenant": "tenant", "aggregate_seq": "aggregate_seq"}
	cfg := outboxwriter.Config{Dialect: d.dialect, Layout: l}
	if mod != nil {
		mod(&cfg)
	}
	w, err := outboxwriter.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

type stored struct {
	ID, AggType, AggID, EvType, Payload, Tenant string
	Seq                                         sql.NullInt64
}

// rows reads the outbox in insertion order.
func (d *db) rows(t testing.TB) []stored {
	t.Helper()
	rs, err := d.sql.Query(d.q("SELECT message_id, aggregate_type, aggregate_id, event_type, payload, tenant, aggregate_seq FROM T.outbox_message ORDER BY id"))
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	var out []stored
	for rs.Next() {
		var s stored
		if err := rs.Scan(&s.ID, &s.AggType, &s.AggID, &s.EvType, &s.Payload, &s.Tenant, &s.Seq); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	if err := rs.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestRecordInsideTheTransaction: the events of a committed transaction
// are in the outbox in the order given, with a UUIDv7 id each, the payload
// as JSON and the header columns (a header left out gets the column's
// default); a rolled-back transaction, or an invalid event, leaves no row
// at all.
func TestRecordInsideTheTransaction(t *testing.T) {
	forEachDB(t, func(t *testing.T, d *db) {
		w := d.writer(t, nil)
		var ids []string
		err := d.inTx(t, w, true, func(rec func(...outboxwriter.Event) ([]string, error), exec func(string, ...any) error) error {
			if err := exec("INSERT INTO T.orders (order_no, state) VALUES (?, ?)", "A-1", "CREATED"); err != nil {
				return err
			}
			var err error
			ids, err = rec(
				outboxwriter.Event{AggregateType: "ORDER", AggregateID: "A-1", EventType: "ORDER_CREATED",
					Payload: map[string]any{"order_no": "A-1", "note": "<b>&"}, Headers: map[string]any{"tenant": "acme"}},
				outboxwriter.Event{MessageID: "given-id", AggregateType: "ORDER", AggregateID: "A-1", EventType: "ORDER_NOTED",
					Payload: json.RawMessage(`{"n": 2}`)},
			)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(ids) != 2 || ids[1] != "given-id" {
			t.Fatalf("ids %v", ids)
		}
		if u, err := uuid.Parse(ids[0]); err != nil || u.Version() != 7 {
			t.Fatalf("generated id %q is not a UUIDv7 (%v)", ids[0], err)
		}
		// Rolled back, and refused: nothing of either is left.
		err = d.inTx(t, w, false, func(rec func(...outboxwriter.Event) ([]string, error), exec func(string, ...any) error) error {
			_, err := rec(outboxwriter.Event{AggregateType: "ORDER", AggregateID: "A-2", EventType: "ORDER_CREATED", Payload: 1})
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		for _, bad := range []outboxwriter.Event{
			{AggregateType: "ORDER", AggregateID: "", EventType: "E", Payload: 1},
			{AggregateType: "ORDER", AggregateID: "A-3", EventType: "E"},
			{AggregateType: "ORDER", AggregateID: "A-3", EventType: "E", Payload: 1, Headers: map[string]any{"unknown": "x"}},
			{AggregateType: "ORDER", AggregateID: "A-3", EventType: "E", Payload: json.RawMessage(`{`)},
		} {
			err := d.inTx(t, w, true, func(rec func(...outboxwriter.Event) ([]string, error), exec func(string, ...any) error) error {
				_, err := rec(outboxwriter.Event{AggregateType: "ORDER", AggregateID: "A-3", EventType: "OK", Payload: 1}, bad)
				return err
			})
			if err == nil {
				t.Fatalf("event %+v accepted", bad)
			}
		}
		got := d.rows(t)
		want := []stored{
			{ID: ids[0], AggType: "ORDER", AggID: "A-1", EvType: "ORDER_CREATED", Tenant: "acme"},
			{ID: "given-id", AggType: "ORDER", AggID: "A-1", EvType: "ORDER_NOTED", Tenant: "none"},
		}
		if len(got) != len(want) {
			t.Fatalf("outbox holds %d rows, want %d: %+v", len(got), len(want), got)
		}
		for i := range want {
			p := got[i].Payload
			got[i].Payload = ""
			if got[i] != want[i] {
				t.Fatalf("row %d is %+v, want %+v", i, got[i], want[i])
			}
			var v map[string]any
			if err := json.Unmarshal([]byte(p), &v); err != nil {
				t.Fatalf("row %d payload %q: %v", i, p, err)
			}
		}
		if !strings.Contains(d.rows(t)[0].Payload, "<b>&") {
			t.Fatalf("payload %q: HTML characters escaped", d.rows(t)[0].Payload)
		}
	})
}

// TestRecordBatchInOrder: 1,200 events of one call are all
// written, in order (three statements of at most 500 rows).
func TestRecordBatchInOrder(t *testing.T) {
	forEachDB(t, func(t *testing.T, d *db) {
		w := d.writer(t, nil)
		evs := make([]outboxwriter.Event, 1200)
		for i := range evs {
			evs[i] = outboxwriter.Event{MessageID: fmt.Sprintf("m-%04d", i), AggregateType: "ORDER",
				AggregateID: fmt.Sprintf("A-%d", i%7), EventType: "E", Payload: map[string]int{"i": i}}
			if i%3 == 0 {
				evs[i].Headers = map[string]any{"tenant": nil}
			}
		}
		if err := d.inTx(t, w, true, func(rec func(...outboxwriter.Event) ([]string, error), _ func(string, ...any) error) error {
			_, err := rec(evs...)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		var ids []string
		rs, err := d.sql.Query(d.q("SELECT message_id, tenant IS NULL FROM T.outbox_message ORDER BY id"))
		if err != nil {
			t.Fatal(err)
		}
		defer rs.Close()
		for i := 0; rs.Next(); i++ {
			var id string
			var null bool
			if err := rs.Scan(&id, &null); err != nil {
				t.Fatal(err)
			}
			if null != (i%3 == 0) {
				t.Fatalf("row %d: tenant NULL is %v", i, null)
			}
			ids = append(ids, id)
		}
		if len(ids) != len(evs) || !sort.StringsAreSorted(ids) {
			t.Fatalf("%d rows, in order: %v", len(ids), sort.StringsAreSorted(ids))
		}
	})
}

// TestSequenceNumbersEachAggregate: writers racing on the same
// aggregates, a quarter of them rolling back, leave each aggregate
// numbered 1..n without a gap or a repeat (a rolled-back transaction's
// numbers are taken again); an explicit Sequence is kept. That the numbers
// also follow commit order is shown through the relay (e2e
// TestConsumerKit*: the order check sees no reorder).
func TestSequenceNumbersEachAggregate(t *testing.T) {
	forEachDB(t, func(t *testing.T, d *db) {
		w := d.writer(t, func(c *outboxwriter.Config) {
			c.Sequence = &outboxwriter.SequenceConfig{Header: "aggregate_seq", Table: d.table("outbox_sequence")}
		})
		var wg sync.WaitGroup
		errs := make(chan error, 4)
		for g := 0; g < 4; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < 25; i++ {
					commit := (g+i)%4 != 0
					err := retryDeadlock(func() error {
						return d.inTx(t, w, commit, func(rec func(...outboxwriter.Event) ([]string, error), _ func(string, ...any) error) error {
							var evs []outboxwriter.Event
							for j := 0; j < 1+i%3; j++ {
								evs = append(evs, outboxwriter.Event{AggregateType: "ORDER", AggregateID: fmt.Sprintf("A-%d", (g+j)%3),
									EventType: "E", Payload: 1})
							}
							if i%5 == 0 { // an explicit sequence on another aggregate
								evs = append(evs, outboxwriter.Event{AggregateType: "ORDER", AggregateID: fmt.Sprintf("X-%d-%d", g, i),
									EventType: "E", Payload: 1, Sequence: 7})
							}
							_, err := rec(evs...)
							return err
						})
					})
					if err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		byAgg := map[string][]int64{}
		for _, r := range d.rows(t) {
			byAgg[r.AggID] = append(byAgg[r.AggID], r.Seq.Int64)
		}
		for agg, seqs := range byAgg {
			if strings.HasPrefix(agg, "X-") {
				if !reflect.DeepEqual(seqs, []int64{7}) {
					t.Fatalf("%s: explicit sequence stored as %v", agg, seqs)
				}
				continue
			}
			sorted := append([]int64(nil), seqs...)
			sort.Slice(sorted, func(i, j int) bool { return sorted[i] < sorted[j] })
			for i, s := range sorted {
				if s != int64(i+1) {
					t.Fatalf("%s: numbers %v are not 1..%d", agg, sorted, len(sorted))
				}
			}
		}
		if len(byAgg) < 3 {
			t.Fatalf("aggregates %v", byAgg)
		}
	})
}

// retryDeadlock runs f again while it fails with a deadlock: on MySQL,
// transactions creating the counter of the same new aggregate while one of
// them rolls back can deadlock (each waits for the other's shared lock on
// the key), and the server rolls one back; the application retries it, as
// any deadlock.
func retryDeadlock(f func() error) error {
	for {
		err := f()
		var me *mysql.MySQLError
		var pe *pgconn.PgError
		if errors.As(err, &me) && me.Number == 1213 || errors.As(err, &pe) && pe.Code == "40P01" {
			continue
		}
		return err
	}
}

// TestLogicalMessagesNoTable: with MessagePrefix the events are
// transactional logical decoding messages in the relay's format, in
// order; a rolled-back transaction's messages are never decoded.
func TestLogicalMessagesNoTable(t *testing.T) {
	for _, usePgx := range []bool{false, true} {
		t.Run(map[bool]string{false: "database-sql", true: "pgx"}[usePgx], func(t *testing.T) {
			name := testenv.UniqueName(t, "ow")
			sdb, dsn := testenv.ScratchPostgres(t, name)
			d := &db{dialect: outboxwriter.Postgres, sql: sdb, dsn: dsn, pgx: usePgx, prefix: name + "."}
			ctx := context.Background()
			// A temporary test_decoding slot on a connection of its own:
			// dropped by the server when the connection closes.
			slotConn, err := pgx.Connect(ctx, dsn)
			if err != nil {
				t.Fatal(err)
			}
			defer slotConn.Close(ctx)
			if _, err := slotConn.Exec(ctx, "SELECT pg_create_logical_replication_slot($1, 'test_decoding', true)", name); err != nil {
				if strings.Contains(err.Error(), "replication slots") {
					testenv.Unavailable(t, "no free replication slot (environment): %v", err)
				}
				t.Fatal(err)
			}
			l := outboxwriter.Layout{MessageID: "message_id", AggregateType: "aggregate_type", AggregateID: "aggregate_id",
				EventType: "event_type", Payload: "payload", Headers: map[string]string{"tenant": "tenant_col"}}
			w, err := outboxwriter.New(outboxwriter.Config{Dialect: outboxwriter.Postgres, Layout: l, MessagePrefix: "outbox"})
			if err != nil {
				t.Fatal(err)
			}
			var ids []string
			if err := d.inTx(t, w, true, func(rec func(...outboxwriter.Event) ([]string, error), _ func(string, ...any) error) error {
				var err error
				ids, err = rec(
					outboxwriter.Event{AggregateType: "ORDER", AggregateID: "A-1", EventType: "ORDER_CREATED",
						Payload: map[string]any{"total": 10}, Headers: map[string]any{"tenant": "acme"}},
					outboxwriter.Event{AggregateType: "ORDER", AggregateID: "A-1", EventType: "ORDER_PAID", Payload: "paid"})
				return err
			}); err != nil {
				t.Fatal(err)
			}
			if err := d.inTx(t, w, false, func(rec func(...outboxwriter.Event) ([]string, error), _ func(string, ...any) error) error {
				_, err := rec(outboxwriter.Event{MessageID: "rolled-back", AggregateType: "ORDER", AggregateID: "A-2", EventType: "E", Payload: 1})
				return err
			}); err != nil {
				t.Fatal(err)
			}
			rows, err := slotConn.Query(ctx, "SELECT data FROM pg_logical_slot_get_changes($1, NULL, NULL)", name)
			if err != nil {
				t.Fatal(err)
			}
			var contents []string
			for rows.Next() {
				var data string
				if err := rows.Scan(&data); err != nil {
					t.Fatal(err)
				}
				if strings.Contains(data, "rolled-back") {
					t.Fatalf("a rolled-back message was decoded: %s", data)
				}
				if _, c, ok := strings.Cut(data, "prefix: outbox, sz: "); ok {
					if !strings.HasPrefix(data, "message: transactional: 1") {
						t.Fatalf("not transactional: %s", data)
					}
					_, content, _ := strings.Cut(c, " content:")
					contents = append(contents, content)
				}
			}
			if err := rows.Err(); err != nil {
				t.Fatal(err)
			}
			if len(contents) != 2 {
				t.Fatalf("decoded messages %q", contents)
			}
			// The relay's own decoder reads them back as written.
			for i, want := range []struct{ typ, payload, tenant string }{{"ORDER_CREATED", `{"total":10}`, "acme"}, {"ORDER_PAID", `"paid"`, ""}} {
				ev, err := wal.DecodeMessage([]byte(contents[i]), []string{"tenant_col"})
				if err != nil {
					t.Fatalf("message %d %q: %v", i, contents[i], err)
				}
				if ev.MessageID != ids[i] || ev.AggregateType != "ORDER" || ev.AggregateID != "A-1" || ev.EventType != want.typ || string(ev.Payload) != want.payload {
					t.Fatalf("message %d decodes to %+v", i, ev)
				}
				tenant := ""
				if c, ok := ev.Column("tenant_col"); ok {
					tenant = string(c.Value)
				}
				if tenant != want.tenant {
					t.Fatalf("message %d tenant %q", i, tenant)
				}
			}
		})
	}
}

// TestLayoutFromRoute: the route's preset, column overrides, per-table
// columns and header entries give the writer the names the relay reads.
func TestLayoutFromRoute(t *testing.T) {
	r := router.DefaultConfig()
	r.Preset = router.PresetDebezium
	r.ColumnNames.Payload = "body"
	r.Headers = []string{"tenant", "trace_id:traceparent", "type:header:eventType", "seq:header:aggregate_seq"}
	r.Tables = map[string]router.TableRoute{"shop.legacy_outbox": {Columns: router.ColumnNames{AggregateID: "order_no"}}}
	got, err := outboxwriter.LayoutFromRoute("shop.outbox", r)
	if err != nil {
		t.Fatal(err)
	}
	want := outboxwriter.Layout{Table: "shop.outbox", MessageID: "id", AggregateType: "aggregatetype", AggregateID: "aggregateid",
		EventType: "type", Payload: "body", Headers: map[string]string{"tenant": "tenant", "traceparent": "trace_id", "aggregate_seq": "seq"}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("layout\n got %+v\nwant %+v", got, want)
	}
	legacy, err := outboxwriter.LayoutFromRoute("shop.legacy_outbox", r)
	if err != nil {
		t.Fatal(err)
	}
	if legacy.AggregateID != "order_no" || legacy.Payload != "body" {
		t.Fatalf("route.tables entry not applied: %+v", legacy)
	}
	r.Headers = []string{"a:b:c:d"}
	if _, err := outboxwriter.LayoutFromRoute("t", r); err == nil || !strings.Contains(err.Error(), "headers[0]") {
		t.Fatalf("bad route accepted: %v", err)
	}
	if _, err := outboxwriter.New(outboxwriter.Config{Dialect: outboxwriter.MySQL, Layout: outboxwriter.Layout{Table: "t"}}); err == nil {
		t.Fatal("a layout without columns accepted")
	}
	if _, err := outboxwriter.New(outboxwriter.Config{Dialect: outboxwriter.MySQL, Layout: outboxwriter.SeedLayout("t"), MessagePrefix: "outbox"}); err == nil {
		t.Fatal("logical messages accepted on MySQL")
	}
}
