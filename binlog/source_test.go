package binlog

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
	"github.com/outbox-cdc/outbox-cdc/test/testenv"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/rs/zerolog"
)

var seedColumns = outboxcdc.Columns{
	MessageID: "message_id", AggregateType: "aggregate_type", AggregateID: "aggregate_id",
	EventType: "event_type", Payload: "payload",
}

type fixture struct {
	t     testing.TB
	db    *sql.DB
	dsn   string
	table string
}

func newFixture(t testing.TB) *fixture {
	t.Helper()
	return newFixtureOn(t, testenv.MySQLDSN(t))
}

// newFixtureOn is newFixture on the server dsn names (a private server of
// testenv.PrivateMariaDB, for settings the shared server must keep).
func newFixtureOn(t testing.TB, dsn string) *fixture {
	t.Helper()
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	f := &fixture{t: t, db: db, dsn: dsn, table: uniqueName("outbox")}
	f.exec(testenv.SeedTableMySQL(f.table))
	t.Cleanup(func() { db.Exec("DROP TABLE IF EXISTS " + f.table) })
	return f
}

func uniqueName(prefix string) string {
	b := make([]byte, 6)
	rand.Read(b)
	return prefix + "_" + hex.EncodeToString(b)
}

func (f *fixture) exec(q string, args ...any) {
	f.t.Helper()
	if _, err := f.db.Exec(q, args...); err != nil {
		f.t.Fatalf("%s: %v", q, err)
	}
}

// insertTx commits one transaction inserting the given message ids, one
// statement per row, and returns the ids.
func (f *fixture) insertTx(ids ...string) []string {
	f.t.Helper()
	tx, err := f.db.Begin()
	if err != nil {
		f.t.Fatal(err)
	}
	for _, id := range ids {
		if _, err := tx.Exec("INSERT INTO "+f.table+" (message_id, aggregate_type, aggregate_id, event_type, payload) VALUES (?, 'ORDER', ?, 'ORDER_CREATED', ?)",
			id, "agg-"+id, `{"id": "`+id+`"}`); err != nil {
			f.t.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		f.t.Fatal(err)
	}
	return ids
}

func (f *fixture) config(mutate ...func(*Config)) Config {
	c := DefaultConfig()
	c.DSN = f.dsn
	c.Table = f.table
	c.Reconnect = BackoffConfig{Min: 50 * time.Millisecond, Max: 500 * time.Millisecond}
	c.HeartbeatPeriod = time.Second
	c.ReadTimeout = 10 * time.Second
	for _, m := range mutate {
		m(&c)
	}
	return c
}

type running struct {
	t    testing.TB
	src  *Source
	m    *outboxcdc.SourceMetrics
	out  chan outboxcdc.Tx
	done chan struct{} // closed when Run returned
	err  error         // what Run returned, once done is closed
	stop context.CancelFunc
}

// start runs a Source from `from` until the test ends (or stop is called).
func (f *fixture) start(cfg Config, cols outboxcdc.Columns, from outboxcdc.Position) *running {
	f.t.Helper()
	m := outboxcdc.NewSourceMetrics(nil)
	src, err := New(cfg, uniqueName("test"), cols, zerolog.New(zerolog.NewTestWriter(f.t)), m, nil)
	if err != nil {
		f.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{t: f.t, src: src, m: m, out: make(chan outboxcdc.Tx, 16), done: make(chan struct{}), stop: cancel}
	go func() {
		r.err = src.Run(ctx, from, r.out)
		close(r.done)
	}()
	f.t.Cleanup(func() {
		cancel()
		<-r.done
	})
	return r
}

// waitReady waits until the source streams (its start position is fixed).
func (r *running) waitReady() {
	r.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for r.src.Ready() != nil {
		if time.Now().After(deadline) {
			r.t.Fatalf("source not ready: %v", r.src.Ready())
		}
		select {
		case <-r.done:
			r.t.Fatalf("source stopped: %v", r.err)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// next returns the next Tx with events, checking every Tx's End on the way.
func (r *running) next() outboxcdc.Tx {
	r.t.Helper()
	timeout := time.After(15 * time.Second)
	for {
		select {
		case tx := <-r.out:
			if _, err := ParsePosition(tx.End); err != nil {
				r.t.Fatalf("Tx.End %q: %v", tx.End, err)
			}
			if len(tx.Events) > 0 {
				return tx
			}
		case <-r.done:
			r.t.Fatalf("source stopped: %v", r.err)
		case <-timeout:
			r.t.Fatal("no transaction within 15s")
		}
	}
}

func ids(tx outboxcdc.Tx) []string {
	var s []string
	for _, e := range tx.Events {
		s = append(s, e.MessageID)
	}
	return s
}

func expectIDs(t *testing.T, tx outboxcdc.Tx, want ...string) {
	t.Helper()
	if got := strings.Join(ids(tx), ","); got != strings.Join(want, ",") {
		t.Fatalf("transaction has message ids [%s], want [%s]", got, strings.Join(want, ","))
	}
}

func counter(t *testing.T, c prometheus.Metric) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	if m.Counter != nil {
		return m.Counter.GetValue()
	}
	return m.Gauge.GetValue()
}

func TestTransactionsArriveOnceInOrder(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	cols := seedColumns
	cols.Extra = []string{"id", "status", "next_retry_at", "created_at", "no_such_column"}
	r := f.start(f.config(), cols, "")
	r.waitReady()

	f.insertTx("a1")
	f.insertTx("b1", "b2", "b3")
	f.exec("INSERT INTO " + f.table + " (message_id, aggregate_type, aggregate_id, event_type, payload, status, next_retry_at) VALUES " +
		"('c1', 'PAYMENT', '42', 'PAID', '{\"amount\":  1.50, \"items\":[1,2]}', 2, '2024-03-05 06:07:08'), " +
		"('c2', 'PAYMENT', '43', 'PAID', '[]', 1, NULL)")

	tx := r.next()
	expectIDs(t, tx, "a1")
	e := tx.Events[0]
	if e.AggregateType != "ORDER" || e.AggregateID != "agg-a1" || e.EventType != "ORDER_CREATED" || string(e.Payload) != `{"id": "a1"}` {
		t.Errorf("role fields: %+v", e)
	}
	if !strings.HasPrefix(e.Origin, "mariadb-bin.") && !strings.Contains(e.Origin, ":") {
		t.Errorf("origin %q", e.Origin)
	}
	if tx.CommitTime.IsZero() || !e.CommitTime.Equal(tx.CommitTime) || time.Since(tx.CommitTime) > time.Minute {
		t.Errorf("commit time %v / %v", tx.CommitTime, e.CommitTime)
	}
	first := tx

	tx = r.next()
	expectIDs(t, tx, "b1", "b2", "b3")
	if tx.End == first.End {
		t.Errorf("two transactions share End %s", tx.End)
	}

	tx = r.next()
	expectIDs(t, tx, "c1", "c2")
	c1, c2 := tx.Events[0], tx.Events[1]
	if string(c1.Payload) != `{"amount":  1.50, "items":[1,2]}` || string(c2.Payload) != `[]` {
		t.Errorf("payload not byte-exact: %q %q", c1.Payload, c2.Payload)
	}
	if c1.AggregateID != "42" || c1.EventType != "PAID" {
		t.Errorf("c1: %+v", c1)
	}
	col := func(e outboxcdc.Event, name string) outboxcdc.Column {
		c, ok := e.Column(name)
		if !ok {
			t.Fatalf("extra column %s not delivered: %+v", name, e.Extra)
		}
		return c
	}
	if c := col(c1, "status"); string(c.Value) != "2" || c.Null {
		t.Errorf("status %+v", c)
	}
	if c := col(c1, "next_retry_at"); string(c.Value) != "2024-03-05T06:07:08" {
		t.Errorf("next_retry_at %q", c.Value)
	}
	if c := col(c2, "next_retry_at"); !c.Null || c.Value != nil {
		t.Errorf("NULL next_retry_at: %+v", c)
	}
	if c := col(c2, "id"); len(c.Value) == 0 || c.Value[0] < '1' || c.Value[0] > '9' {
		t.Errorf("id %q", c.Value)
	}
	if c := col(c1, "created_at"); len(c.Value) != len("2006-01-02T15:04:05") {
		t.Errorf("created_at %q", c.Value)
	}
	if _, ok := c1.Column("no_such_column"); ok {
		t.Error("a column the table lacks was delivered")
	}
	if got := counter(t, r.m.EventsRead); got != 6 {
		t.Errorf("EventsRead = %v, want 6", got)
	}
}

func TestNothingForRollbackUpdateDeleteOtherTables(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	other := uniqueName("other")
	f.exec("CREATE TABLE " + other + " (id INT PRIMARY KEY, v VARCHAR(10))")
	t.Cleanup(func() { f.db.Exec("DROP TABLE IF EXISTS " + other) })
	r := f.start(f.config(), seedColumns, "")
	r.waitReady()

	f.insertTx("keep1")
	// Rolled back.
	tx, err := f.db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec("INSERT INTO " + f.table + " (message_id, aggregate_type, aggregate_id, event_type, payload) VALUES ('gone', 'X', 'x', 'X', '{}')"); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	// A polling relay's status update and cleanup, and other tables.
	f.exec("UPDATE " + f.table + " SET status = 1 WHERE message_id = 'keep1'")
	f.exec("DELETE FROM " + f.table + " WHERE message_id = 'keep1'")
	f.exec("INSERT INTO " + other + " VALUES (1, 'x'), (2, 'y')")
	f.exec("UPDATE " + other + " SET v = 'z'")
	// A transaction mixing another table and the outbox delivers only the outbox row.
	tx2, err := f.db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	tx2.Exec("INSERT INTO " + other + " VALUES (3, 'w')")
	tx2.Exec("INSERT INTO " + f.table + " (message_id, aggregate_type, aggregate_id, event_type, payload) VALUES ('mixed', 'X', 'x', 'X', '{}')")
	tx2.Exec("DELETE FROM " + other)
	if err := tx2.Commit(); err != nil {
		t.Fatal(err)
	}
	// Rolled back with a non-transactional table in it: the binlog holds
	// BEGIN, the rows of both tables and ROLLBACK; the outbox row must not leak.
	myisam := uniqueName("myisam")
	f.exec("CREATE TABLE " + myisam + " (id INT PRIMARY KEY) ENGINE=MyISAM")
	t.Cleanup(func() { f.db.Exec("DROP TABLE IF EXISTS " + myisam) })
	conn, err := f.db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		"BEGIN",
		"INSERT INTO " + f.table + " (message_id, aggregate_type, aggregate_id, event_type, payload) VALUES ('gone2', 'X', 'x', 'X', '{}')",
		"INSERT INTO " + myisam + " VALUES (1)",
		"ROLLBACK",
	} {
		if _, err := conn.ExecContext(context.Background(), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	conn.Close()
	f.insertTx("keep2")

	expectIDs(t, r.next(), "keep1")
	expectIDs(t, r.next(), "mixed")
	expectIDs(t, r.next(), "keep2")
	if got := counter(t, r.m.SkippedOperations.WithLabelValues("update")); got != 1 {
		t.Errorf("skipped updates = %v, want 1", got)
	}
	if got := counter(t, r.m.SkippedOperations.WithLabelValues("delete")); got != 1 {
		t.Errorf("skipped deletes = %v, want 1", got)
	}
	if got := counter(t, r.m.TransactionsRead); got < 7 {
		t.Errorf("TransactionsRead = %v, want >= 7", got)
	}
}

// TestResume restarts from each Tx.End and gets exactly the transactions
// after it, for both position forms.
func TestResume(t *testing.T) {
	t.Parallel()
	for _, gtid := range []string{GTIDAuto, GTIDOff} {
		t.Run("gtid="+gtid, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			cfg := f.config(func(c *Config) { c.GTID = gtid })
			r := f.start(cfg, seedColumns, "")
			r.waitReady()
			f.insertTx("r1")
			f.insertTx("r2", "r3")
			f.insertTx("r4")
			var txs []outboxcdc.Tx
			for range 3 {
				txs = append(txs, r.next())
			}
			form := "mysql:mariadb-gtid:"
			if gtid == GTIDOff {
				form = "mysql:file:"
			}
			if !strings.HasPrefix(string(txs[0].End), form) {
				t.Fatalf("End %q, want form %s", txs[0].End, form)
			}
			r.stop()
			<-r.done

			r2 := f.start(cfg, seedColumns, txs[0].End)
			expectIDs(t, r2.next(), "r2", "r3")
			expectIDs(t, r2.next(), "r4")
			f.insertTx("r5")
			expectIDs(t, r2.next(), "r5")

			r3 := f.start(cfg, seedColumns, txs[2].End)
			f.insertTx("r6")
			expectIDs(t, r3.next(), "r5")
			expectIDs(t, r3.next(), "r6")
		})
	}
}

func TestStartLatestAndEarliest(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.insertTx("before")

	latest := f.start(f.config(), seedColumns, "")
	latest.waitReady()
	f.insertTx("after")
	expectIDs(t, latest.next(), "after")

	// earliest resolves to the oldest binlog still on the server. Streaming
	// from there reads every binlog the shared server holds, which after a
	// benchmark can be gigabytes: check the resolution always, and stream
	// from it only while the binlogs are small enough to read in the test.
	for _, gtid := range []string{GTIDAuto, GTIDOff} {
		cfg := f.config(func(c *Config) { c.Start = StartEarliest; c.GTID = gtid })
		src, err := New(cfg, "earliest-test", seedColumns, zerolog.Nop(), outboxcdc.NewSourceMetrics(nil), nil)
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		info, err := src.inspect(ctx, f.db)
		if err != nil {
			t.Fatal(err)
		}
		pos, err := src.startPosition(ctx, f.db, info)
		if err != nil {
			t.Fatal(err)
		}
		first, total := binlogFiles(t, f.db)
		switch {
		case info.useGTID(cfg) && info.flavor == "mariadb":
			// The oldest binlog's GTID state: every domain it starts from.
			if !pos.IsMariaDB {
				t.Fatalf("gtid %s: earliest is %s, want a MariaDB GTID position", gtid, pos.Encode())
			}
		case !info.useGTID(cfg):
			if pos.File != first || pos.Offset != 4 {
				t.Fatalf("gtid %s: earliest is %s, want %s:4", gtid, pos.Encode(), first)
			}
		}
		if total > 256<<20 {
			t.Logf("gtid %s: earliest = %s; %d MiB of binlog on the server, not streamed here", gtid, pos.Encode(), total>>20)
			continue
		}
		earliest := f.start(cfg, seedColumns, "")
		expectIDs(t, earliest.next(), "before")
		expectIDs(t, earliest.next(), "after")
	}
}

// binlogFiles returns the oldest binlog file on the server and the total
// size of all of them.
func binlogFiles(t *testing.T, db *sql.DB) (first string, total int64) {
	t.Helper()
	rows, err := db.Query("SHOW BINARY LOGS")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	cols, _ := rows.Columns()
	for rows.Next() {
		var name string
		var size int64
		dest := []any{&name, &size}
		for len(dest) < len(cols) {
			dest = append(dest, new(sql.RawBytes))
		}
		if err := rows.Scan(dest...); err != nil {
			t.Fatal(err)
		}
		if first == "" {
			first = name
		}
		total += size
	}
	return first, total
}

func TestForeignPositionRefused(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	r := f.start(f.config(), seedColumns, "postgres:0/16B3748")
	select {
	case <-r.done:
		if !errors.Is(r.err, outboxcdc.ErrForeignPosition) {
			t.Fatalf("got %v, want ErrForeignPosition", r.err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a foreign position was not refused")
	}
	if r.src.Ready() == nil {
		t.Error("Ready() is nil after a refused start")
	}
}

func TestMissingRoleColumn(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.exec("ALTER TABLE " + f.table + " DROP COLUMN event_type")
	r := f.start(f.config(), seedColumns, "")
	select {
	case <-r.done:
		if !errors.Is(r.err, ErrTable) || !strings.Contains(r.err.Error(), "event_type") {
			t.Fatalf("got %v, want ErrTable naming event_type", r.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a table without a role column was accepted")
	}

	missing := f.start(f.config(func(c *Config) { c.Table = uniqueName("absent") }), seedColumns, "")
	select {
	case <-missing.done:
		if !errors.Is(missing.err, ErrTable) || !strings.Contains(missing.err.Error(), "does not exist") {
			t.Fatalf("got %v, want ErrTable saying the table does not exist", missing.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a missing table was accepted")
	}
}

// TestReconnectAfterKill kills the binlog dump connection while the
// consumer is not reading, so the source holds a delivered-but-unsent
// transaction and more are in flight; after the reconnect every
// transaction arrives exactly once.
func TestReconnectAfterKill(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	r := f.start(f.config(), seedColumns, "")
	r.waitReady()
	f.insertTx("k1")
	expectIDs(t, r.next(), "k1")

	for round := range 2 {
		f.insertTx(fmt.Sprintf("k%d-a", round))
		f.insertTx(fmt.Sprintf("k%d-b", round), fmt.Sprintf("k%d-c", round))
		time.Sleep(100 * time.Millisecond) // let the source read them
		id := r.src.connID.Load()
		if id == 0 {
			t.Fatal("no dump connection id")
		}
		f.exec(fmt.Sprintf("KILL %d", id))
		f.insertTx(fmt.Sprintf("k%d-d", round))
		ack := r.src.Ack
		go ack("mysql:file:ignored:4") // safe from another goroutine, concurrently with Run
		expectIDs(t, r.next(), fmt.Sprintf("k%d-a", round))
		expectIDs(t, r.next(), fmt.Sprintf("k%d-b", round), fmt.Sprintf("k%d-c", round))
		expectIDs(t, r.next(), fmt.Sprintf("k%d-d", round))
	}
	f.insertTx("last")
	expectIDs(t, r.next(), "last")
	if got := counter(t, r.m.Reconnects); got < 2 {
		t.Errorf("Reconnects = %v, want >= 2", got)
	}
	if got := counter(t, r.m.Connected); got != 1 {
		t.Errorf("Connected = %v, want 1", got)
	}
	if err := r.src.Ready(); err != nil {
		t.Errorf("Ready: %v", err)
	}
}

func TestServerIDConflict(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	cfg := f.config(func(c *Config) { c.ServerID = DeriveServerID(uniqueName("conflict")) })
	first := f.start(cfg, seedColumns, "")
	first.waitReady()
	second := f.start(cfg, seedColumns, "")
	select {
	case <-second.done:
		if !errors.Is(second.err, ErrServerIDConflict) {
			t.Fatalf("got %v, want ErrServerIDConflict", second.err)
		}
		if outboxcdc.IsTransient(second.err) {
			t.Error("a server_id conflict is classified transient")
		}
	case <-first.done:
		// MySQL lets the newcomer in and disconnects the older replica.
		if !errors.Is(first.err, ErrServerIDConflict) {
			t.Fatalf("got %v, want ErrServerIDConflict", first.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("two replicas with one server_id both kept streaming")
	}
}

// TestWithoutColumnNamesInBinlog runs on a private server with
// binlog_row_metadata=MINIMAL (a GLOBAL-only setting the shared server
// keeps at FULL): the source maps columns from information_schema and
// follows an ALTER TABLE that adds a column while it is caught up.
func TestWithoutColumnNamesInBinlog(t *testing.T) {
	t.Parallel()
	f := newFixtureOn(t, testenv.PrivateMariaDB(t, testenv.MariaDBOptions{RowMetadata: "MINIMAL"}))
	r := f.start(f.config(), seedColumns, "")
	r.waitReady()
	f.insertTx("m1", "m2")
	tx := r.next()
	expectIDs(t, tx, "m1", "m2")
	if tx.Events[0].AggregateID != "agg-m1" || string(tx.Events[1].Payload) != `{"id": "m2"}` {
		t.Errorf("columns mapped wrongly: %+v", tx.Events)
	}
	f.exec("ALTER TABLE " + f.table + " ADD COLUMN tenant VARCHAR(10) NULL FIRST")
	f.insertTx("m3")
	tx = r.next()
	expectIDs(t, tx, "m3")
	if e := tx.Events[0]; e.AggregateID != "agg-m3" || e.AggregateType != "ORDER" || string(e.Payload) != `{"id": "m3"}` {
		t.Errorf("columns mapped wrongly after ALTER TABLE: %+v", e)
	}
}

// BenchmarkDrainThroughput measures how fast a backlog of outbox rows
// drains through Run (rows/s), with other tables' rows interleaved that
// must be skipped: each iteration reads the same backlog of 200
// transactions of 500 rows from the position before it.
func BenchmarkDrainThroughput(b *testing.B) {
	f := newFixture(b)
	mark := f.start(f.config(), seedColumns, "")
	mark.waitReady()
	f.insertTx("mark")
	from := mark.next().End
	mark.stop()
	<-mark.done

	const txs, perTx = 200, 500
	payload := `{"order_id": 123456, "customer": "someone@example.com", "items": [{"sku": "A-1", "qty": 2}, {"sku": "B-7", "qty": 1}], "total": "99.90"}`
	var q strings.Builder
	for i := range txs {
		q.Reset()
		q.WriteString("INSERT INTO " + f.table + " (message_id, aggregate_type, aggregate_id, event_type, payload) VALUES ")
		for j := range perTx {
			if j > 0 {
				q.WriteByte(',')
			}
			fmt.Fprintf(&q, "('%d-%d', 'ORDER', 'o%d', 'ORDER_CREATED', '%s')", i, j, j%97, payload)
		}
		f.exec(q.String())
	}
	rows := 0
	for b.Loop() {
		r := f.start(f.config(), seedColumns, from)
		for n := 0; n < txs*perTx; {
			n += len(r.next().Events)
		}
		r.stop()
		<-r.done
		rows += txs * perTx
	}
	b.ReportMetric(float64(rows)/b.Elapsed().Seconds(), "rows/s")
}

// TestXA: XA COMMIT ONE PHASE is an ordinary transaction; a two-phase XA
// transaction holding outbox rows is delivered at its XA COMMIT, never at
// XA PREPARE (TestXATwoPhase covers rollbacks and restarts).
func TestXA(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	r := f.start(f.config(), seedColumns, "")
	r.waitReady()
	conn, err := f.db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	run := func(qs ...string) {
		t.Helper()
		for _, q := range qs {
			if _, err := conn.ExecContext(context.Background(), q); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
	}
	ins := func(id string) string {
		return "INSERT INTO " + f.table + " (message_id, aggregate_type, aggregate_id, event_type, payload) VALUES ('" + id + "', 'X', 'x', 'X', '{}')"
	}
	xid := uniqueName("xa")
	run("XA START '"+xid+"1'", ins("xa1"), "XA END '"+xid+"1'", "XA COMMIT '"+xid+"1' ONE PHASE")
	expectIDs(t, r.next(), "xa1")

	run("XA START '"+xid+"2'", ins("xa2"), "XA END '"+xid+"2'", "XA PREPARE '"+xid+"2'")
	t.Cleanup(func() { f.db.Exec("XA ROLLBACK '" + xid + "2'") })
	timeout := time.After(2 * time.Second)
	for prepared := true; prepared; {
		select {
		case <-r.done:
			t.Fatalf("source stopped: %v", r.err)
		case tx := <-r.out:
			if len(tx.Events) > 0 {
				t.Fatalf("delivered %v from a prepared XA transaction", ids(tx))
			}
		case <-timeout:
			prepared = false
		}
	}
	run("XA COMMIT '" + xid + "2'")
	expectIDs(t, r.next(), "xa2")
}
