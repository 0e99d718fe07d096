package wal

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	outboxcdc "github.com/outbox-cdc/outbox-cdc"
	"github.com/outbox-cdc/outbox-cdc/test/testenv"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/rs/zerolog"
)

// pgEnv is one test's PostgreSQL objects: its own table, slot and
// publication, dropped at the end (a leftover slot pins WAL forever).
type pgEnv struct {
	t     testing.TB
	dsn   string
	db    *pgx.Conn
	name  string // unique suffix
	table string
	slot  string
	pub   string
}

func newPgEnv(t testing.TB) *pgEnv {
	t.Helper()
	dsn := testenv.PostgresDSN(t)
	ctx := context.Background()
	db, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	name := fmt.Sprintf("%s_%d", strings.ToLower(strings.ReplaceAll(t.Name(), "/", "_")), rand.IntN(1e6))
	if len(name) > 40 {
		name = name[len(name)-40:]
	}
	e := &pgEnv{t: t, dsn: dsn, db: db, name: name, table: "ob_" + name, slot: "sl_" + name, pub: "pb_" + name}
	e.exec(`CREATE TABLE ` + e.table + ` (
		id bigserial PRIMARY KEY,
		message_id varchar(64) NOT NULL,
		aggregate_type varchar(64) NOT NULL,
		aggregate_id varchar(64) NOT NULL,
		event_type varchar(64) NOT NULL,
		payload json,
		created_at timestamptz NOT NULL DEFAULT now())`)
	t.Cleanup(func() {
		ctx := context.Background()
		db.Close(ctx)
		db, err := pgx.Connect(ctx, dsn)
		if err != nil {
			t.Errorf("cleanup: %v", err)
			return
		}
		deadline := time.Now().Add(15 * time.Second)
		for {
			var active bool
			var pid int32
			err := db.QueryRow(ctx, `SELECT active, coalesce(active_pid, 0) FROM pg_replication_slots WHERE slot_name = $1`, e.slot).Scan(&active, &pid)
			if errors.Is(err, pgx.ErrNoRows) {
				break
			}
			if err == nil && !active {
				if _, err = db.Exec(ctx, `SELECT pg_drop_replication_slot($1)`, e.slot); err == nil {
					break
				}
			}
			if time.Now().After(deadline) {
				if pid != 0 {
					_, _ = db.Exec(ctx, `SELECT pg_terminate_backend($1)`, pid)
				}
				if time.Now().After(deadline.Add(5 * time.Second)) {
					t.Errorf("could not drop slot %s: %v", e.slot, err)
					break
				}
			}
			time.Sleep(100 * time.Millisecond)
		}
		_, _ = db.Exec(ctx, `DROP PUBLICATION IF EXISTS `+e.pub)
		_, _ = db.Exec(ctx, `DROP TABLE IF EXISTS `+e.table)
		db.Close(ctx)
	})
	return e
}

func (e *pgEnv) exec(sql string, args ...any) {
	e.t.Helper()
	if _, err := e.db.Exec(context.Background(), sql, args...); err != nil {
		e.t.Fatalf("%s: %v", sql, err)
	}
}

// insertTx inserts one transaction of rows with the given message ids.
func (e *pgEnv) insertTx(ids ...string) {
	e.t.Helper()
	ctx := context.Background()
	tx, err := e.db.Begin(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	for _, id := range ids {
		_, err := tx.Exec(ctx, `INSERT INTO `+e.table+` (message_id, aggregate_type, aggregate_id, event_type, payload)
			VALUES ($1::text, 'ORDER', 'agg-'||$1::text, 'CREATED', json_build_object('id', $1::text)::json)`, id)
		if err != nil {
			e.t.Fatal(err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		e.t.Fatal(err)
	}
}

func (e *pgEnv) confirmedFlush() pglogrepl.LSN {
	e.t.Helper()
	var s string
	err := e.db.QueryRow(context.Background(), `SELECT coalesce(confirmed_flush_lsn::text, '0/0') FROM pg_replication_slots WHERE slot_name = $1`, e.slot).Scan(&s)
	if err != nil {
		e.t.Fatalf("confirmed_flush_lsn: %v", err)
	}
	l, _ := pglogrepl.ParseLSN(s)
	return l
}

func (e *pgEnv) slotExists() bool {
	var n int
	if err := e.db.QueryRow(context.Background(), `SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1`, e.slot).Scan(&n); err != nil {
		e.t.Fatal(err)
	}
	return n > 0
}

func (e *pgEnv) activePID() int32 {
	var pid int32
	_ = e.db.QueryRow(context.Background(), `SELECT coalesce(active_pid, 0) FROM pg_replication_slots WHERE slot_name = $1`, e.slot).Scan(&pid)
	return pid
}

var seedCols = outboxcdc.Columns{
	MessageID: "message_id", AggregateType: "aggregate_type", AggregateID: "aggregate_id",
	EventType: "event_type", Payload: "payload",
}

func (e *pgEnv) config() Config {
	c := DefaultConfig()
	c.DSN = e.dsn
	c.Table = e.table
	c.Slot = e.slot
	c.Publication = e.pub
	c.StatusInterval = 200 * time.Millisecond
	c.Reconnect = BackoffConfig{Min: 50 * time.Millisecond, Max: 500 * time.Millisecond}
	c.LagInterval = 500 * time.Millisecond
	return c
}

func (e *pgEnv) source(cfg Config, cols outboxcdc.Columns) (*Source, *outboxcdc.SourceMetrics) {
	e.t.Helper()
	m := outboxcdc.NewSourceMetrics(nil)
	log := zerolog.New(zerolog.NewTestWriter(e.t)).Level(zerolog.InfoLevel)
	s, err := New(cfg, "test", cols, log, m, prometheus.NewRegistry())
	if err != nil {
		e.t.Fatal(err)
	}
	return s, m
}

// running is one Run in the background.
type running struct {
	t      testing.TB
	src    *Source
	out    chan outboxcdc.Tx
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
	err    error
}

func start(t testing.TB, src *Source, from outboxcdc.Position, outCap int) *running {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{t: t, src: src, out: make(chan outboxcdc.Tx, outCap), cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- src.Run(ctx, from, r.out) }()
	t.Cleanup(func() { r.stop() })
	return r
}

// stop cancels Run and waits for it.
func (r *running) stop() error {
	r.once.Do(func() {
		r.cancel()
		select {
		case r.err = <-r.done:
		case <-time.After(10 * time.Second):
			r.t.Errorf("Run did not return after cancel")
		}
	})
	return r.err
}

func (r *running) waitReady() {
	r.t.Helper()
	// Generous: creating a slot waits for every transaction open on the
	// (shared) server at that moment to end.
	deadline := time.Now().Add(60 * time.Second)
	for r.src.Ready() != nil {
		select {
		case err := <-r.done:
			r.t.Fatalf("Run returned before streaming: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("not ready: %v", r.src.Ready())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// next returns the next Tx that has events (empty ones only move the
// checkpoint), failing after timeout.
func (r *running) next(timeout time.Duration) outboxcdc.Tx {
	r.t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case tx := <-r.out:
			if len(tx.Events) > 0 {
				return tx
			}
		case err := <-r.done:
			// Run may end (a permanent error) right after it queued the
			// transactions before it: those still count, and stop must
			// not wait again for the end already seen.
			r.done <- err
			select {
			case tx := <-r.out:
				if len(tx.Events) > 0 {
					return tx
				}
				continue
			default:
			}
			r.t.Fatalf("Run returned: %v", err)
		case <-deadline:
			r.t.Fatalf("no transaction within %s", timeout)
		}
	}
}

// none asserts no transaction with events arrives for d.
func (r *running) none(d time.Duration) {
	r.t.Helper()
	deadline := time.After(d)
	for {
		select {
		case tx := <-r.out:
			if len(tx.Events) > 0 {
				r.t.Fatalf("unexpected transaction: %s", ids(tx))
			}
		case <-deadline:
			return
		}
	}
}

func ids(tx outboxcdc.Tx) string {
	s := make([]string, len(tx.Events))
	for i, e := range tx.Events {
		s[i] = e.MessageID
	}
	return strings.Join(s, ",")
}

func counter(c interface{ Write(*dto.Metric) error }) float64 {
	var m dto.Metric
	_ = c.Write(&m)
	if m.Counter != nil {
		return m.Counter.GetValue()
	}
	return m.Gauge.GetValue()
}

func lsnOf(t *testing.T, p outboxcdc.Position) pglogrepl.LSN {
	t.Helper()
	l, err := ParsePosition(p)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestInsertsArriveOnceInOrder(t *testing.T) {
	e := newPgEnv(t)
	src, m := e.source(e.config(), seedCols)
	r := start(t, src, "", 16)
	r.waitReady()

	e.insertTx("a1")
	e.insertTx("b1", "b2", "b3")
	// Rolled back: never decoded.
	tx, _ := e.db.Begin(context.Background())
	_, _ = tx.Exec(context.Background(), `INSERT INTO `+e.table+` (message_id, aggregate_type, aggregate_id, event_type) VALUES ('rb','X','X','X')`)
	_ = tx.Rollback(context.Background())
	// UPDATE/DELETE: not published (publish = 'insert').
	e.exec(`UPDATE ` + e.table + ` SET event_type = 'CHANGED' WHERE message_id = 'a1'`)
	e.exec(`DELETE FROM ` + e.table + ` WHERE message_id = 'b2'`)
	e.insertTx("c1")

	var last pglogrepl.LSN
	for _, want := range []string{"a1", "b1,b2,b3", "c1"} {
		tx := r.next(10 * time.Second)
		if got := ids(tx); got != want {
			t.Fatalf("got tx %s, want %s", got, want)
		}
		end := lsnOf(t, tx.End)
		if end <= last {
			t.Fatalf("End %s not after %s", end, last)
		}
		last = end
		if tx.CommitTime.IsZero() || time.Since(tx.CommitTime) > time.Minute {
			t.Errorf("commit time %v", tx.CommitTime)
		}
		for _, ev := range tx.Events {
			if ev.AggregateType != "ORDER" || ev.AggregateID != "agg-"+ev.MessageID || ev.EventType != "CREATED" {
				t.Errorf("fields: %+v", ev)
			}
			if string(ev.Payload) != `{"id" : "`+ev.MessageID+`"}` {
				t.Errorf("payload %q", ev.Payload)
			}
			if !strings.HasPrefix(ev.Origin, "LSN ") || ev.Origin == "LSN 0/0" || !ev.CommitTime.Equal(tx.CommitTime) {
				t.Errorf("origin %q commit %v", ev.Origin, ev.CommitTime)
			}
		}
		src.Ack(tx.End)
	}
	r.none(500 * time.Millisecond)
	if got := counter(m.EventsRead); got != 5 {
		t.Errorf("events read %v, want 5", got)
	}
	if src.Ready() != nil || counter(m.Connected) != 1 {
		t.Errorf("ready %v connected %v", src.Ready(), counter(m.Connected))
	}
	if err := r.stop(); !errors.Is(err, context.Canceled) {
		t.Errorf("Run after cancel: %v", err)
	}
}

// A publication that also publishes UPDATE/DELETE/TRUNCATE: they are counted
// and skipped.
func TestNonInsertsCountedAndSkipped(t *testing.T) {
	e := newPgEnv(t)
	e.exec(`CREATE PUBLICATION ` + e.pub + ` FOR TABLE ` + e.table)
	src, m := e.source(e.config(), seedCols)
	r := start(t, src, "", 16)
	r.waitReady()
	e.insertTx("x1")
	e.exec(`UPDATE ` + e.table + ` SET event_type = 'CHANGED'`)
	e.exec(`DELETE FROM ` + e.table)
	e.exec(`TRUNCATE ` + e.table)
	e.insertTx("x2")
	if got := ids(r.next(10 * time.Second)); got != "x1" {
		t.Fatalf("got %s", got)
	}
	if got := ids(r.next(10 * time.Second)); got != "x2" {
		t.Fatalf("got %s", got)
	}
	for _, op := range []string{"update", "delete", "truncate"} {
		if got := counter(m.SkippedOperations.WithLabelValues(op)); got != 1 {
			t.Errorf("skipped %s = %v, want 1", op, got)
		}
	}
}

func TestResumeFromCheckpoint(t *testing.T) {
	e := newPgEnv(t)
	src, _ := e.source(e.config(), seedCols)
	r := start(t, src, "", 16)
	r.waitReady()
	for i := 1; i <= 5; i++ {
		e.insertTx(fmt.Sprintf("r%d", i))
	}
	var ends []outboxcdc.Position
	for i := 1; i <= 5; i++ {
		tx := r.next(10 * time.Second)
		if got := ids(tx); got != fmt.Sprintf("r%d", i) {
			t.Fatalf("got %s", got)
		}
		ends = append(ends, tx.End)
	}
	src.Ack(ends[0]) // the slot is confirmed only to r1; the checkpoint is r2
	time.Sleep(400 * time.Millisecond)
	if err := r.stop(); !errors.Is(err, context.Canceled) {
		t.Fatalf("stop: %v", err)
	}
	if cf := e.confirmedFlush(); cf != lsnOf(t, ends[0]) {
		t.Errorf("confirmed_flush_lsn %s, want the Acked %s", cf, ends[0])
	}

	// Restart from r2's end at once: the old walsender may still hold the
	// slot, which the source retries.
	src2, _ := e.source(e.config(), seedCols)
	r2 := start(t, src2, ends[1], 16)
	for i := 3; i <= 5; i++ {
		if got := ids(r2.next(15 * time.Second)); got != fmt.Sprintf("r%d", i) {
			t.Fatalf("after restart got %s, want r%d", got, i)
		}
	}
	e.insertTx("r6")
	if got := ids(r2.next(10 * time.Second)); got != "r6" {
		t.Fatalf("got %s, want r6", got)
	}
	r2.none(300 * time.Millisecond)
}

// The consumer of out blocks: confirmed_flush_lsn must stay at the last Ack
// although the source has received much more, and must not jump to the WAL
// end while transactions are in flight.
func TestConfirmedFlushNeverPassesAck(t *testing.T) {
	e := newPgEnv(t)
	cfg := e.config()
	cfg.BufferBytes = 1 // pause reading after each transaction
	src, _ := e.source(cfg, seedCols)
	r := start(t, src, "", 0)
	r.waitReady()
	for i := 0; i < 20; i++ {
		e.insertTx(fmt.Sprintf("f%d", i))
	}
	first := r.next(10 * time.Second)
	second := r.next(10 * time.Second)
	src.Ack(first.End)
	ack := lsnOf(t, first.End)
	reached := false
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end); {
		cf := e.confirmedFlush()
		if cf > ack {
			t.Fatalf("confirmed_flush_lsn %s passed the Acked %s while the consumer is blocked", cf, ack)
		}
		reached = reached || cf == ack
		time.Sleep(50 * time.Millisecond)
	}
	if !reached {
		t.Errorf("confirmed_flush_lsn never reached the Acked %s", ack)
	}
	// Drain; Ack the last; the slot follows.
	src.Ack(second.End)
	var lastEnd outboxcdc.Position
	for i := 2; i < 20; i++ {
		tx := r.next(10 * time.Second)
		if got := ids(tx); got != fmt.Sprintf("f%d", i) {
			t.Fatalf("got %s want f%d", got, i)
		}
		lastEnd = tx.End
	}
	src.Ack(lastEnd)
	testenv.Eventually(t, 5*time.Second, "slot confirmed the last Ack", func() bool { return e.confirmedFlush() >= lsnOf(t, lastEnd) })
}

// A consumer blocked far longer than wal_sender_timeout: the walsender must
// not time us out (same backend pid, no reconnect), and nothing is lost.
func TestKeepaliveSurvivesBlockedConsumer(t *testing.T) {
	e := newPgEnv(t)
	cfg := e.config()
	cfg.BufferBytes = 1
	cfg.StatusInterval = 500 * time.Millisecond
	cfg.WalSenderTimeout = 2 * time.Second // set on the replication connection only
	src, m := e.source(cfg, seedCols)
	r := start(t, src, "", 0)
	r.waitReady()
	pid := e.activePID()
	for i := 0; i < 30; i++ {
		e.insertTx(fmt.Sprintf("k%d", i))
	}
	if got := ids(r.next(10 * time.Second)); got != "k0" {
		t.Fatalf("got %s", got)
	}
	time.Sleep(6 * time.Second) // 3x wal_sender_timeout with the consumer blocked
	if got := e.activePID(); got != pid || pid == 0 {
		t.Fatalf("walsender pid %d -> %d: the stream was dropped", pid, got)
	}
	if n := counter(m.Reconnects); n != 0 {
		t.Fatalf("%v reconnects", n)
	}
	for i := 1; i < 30; i++ {
		if got := ids(r.next(10 * time.Second)); got != fmt.Sprintf("k%d", i) {
			t.Fatalf("got %s want k%d", got, i)
		}
	}
	if src.Ready() != nil {
		t.Errorf("not ready: %v", src.Ready())
	}
}

func TestAlterTableMidStream(t *testing.T) {
	e := newPgEnv(t)
	cols := seedCols
	cols.Extra = []string{"tenant", "created_at", "blob"}
	src, _ := e.source(e.config(), cols)
	r := start(t, src, "", 16)
	r.waitReady()
	e.insertTx("t1")
	e.exec(`ALTER TABLE ` + e.table + ` ADD COLUMN tenant text, ADD COLUMN blob bytea`)
	e.exec(`INSERT INTO ` + e.table + ` (message_id, aggregate_type, aggregate_id, event_type, payload, tenant, blob)
		VALUES ('t2', 'ORDER', '1', 'CREATED', '{}', 'acme', '\x00ff10'::bytea)`)
	tx1 := r.next(10 * time.Second)
	ev := tx1.Events[0]
	if _, ok := ev.Column("tenant"); ok {
		t.Error("tenant before it existed")
	}
	if c, ok := ev.Column("created_at"); !ok || !strings.HasSuffix(string(c.Value), "+00") {
		t.Errorf("created_at %q (want UTC ISO text)", c.Value)
	}
	ev = r.next(10 * time.Second).Events[0]
	if c, ok := ev.Column("tenant"); !ok || string(c.Value) != "acme" {
		t.Errorf("tenant %+v", c)
	}
	if c, ok := ev.Column("blob"); !ok || string(c.Value) != "\x00\xff\x10" {
		t.Errorf("blob %q", c.Value)
	}
	// Dropping an extra column keeps working.
	e.exec(`ALTER TABLE ` + e.table + ` DROP COLUMN tenant`)
	e.insertTx("t3")
	ev = r.next(10 * time.Second).Events[0]
	if _, ok := ev.Column("tenant"); ok || ev.MessageID != "t3" {
		t.Errorf("after drop: %+v", ev)
	}
}

func TestDroppedRoleColumnStops(t *testing.T) {
	e := newPgEnv(t)
	src, _ := e.source(e.config(), seedCols)
	r := start(t, src, "", 16)
	r.waitReady()
	e.insertTx("d1")
	e.exec(`ALTER TABLE ` + e.table + ` DROP COLUMN event_type`)
	e.exec(`INSERT INTO ` + e.table + ` (message_id, aggregate_type, aggregate_id) VALUES ('d2', 'O', '1')`)
	if got := ids(r.next(10 * time.Second)); got != "d1" {
		t.Fatalf("got %s", got)
	}
	select {
	case err := <-r.done:
		if !errors.Is(err, ErrTableLayout) || outboxcdc.IsTransient(err) {
			t.Fatalf("want a permanent ErrTableLayout for the dropped column, got %v", err)
		}
		t.Logf("error: %v", err)
		r.once.Do(func() {})
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not stop")
	}
}

func TestLogicalMessages(t *testing.T) {
	e := newPgEnv(t)
	cfg := e.config()
	prefix := "outbox_" + e.name
	cfg.Messages.Prefix = prefix
	cfg.Heartbeat.Interval = 100 * time.Millisecond // heartbeats arrive too; ignored
	cols := seedCols
	cols.Extra = []string{"tenant"}
	src, m := e.source(cfg, cols)
	r := start(t, src, "", 16)
	r.waitReady()
	ctx := context.Background()
	emit := func(tx pgx.Tx, transactional bool, body string) {
		if _, err := tx.Exec(ctx, `SELECT pg_logical_emit_message($1, $2, $3)`, transactional, prefix, body); err != nil {
			t.Fatal(err)
		}
	}
	// Committed: a row and two messages, in statement order.
	tx, _ := e.db.Begin(ctx)
	emit(tx, true, `{"message_id":"m1","aggregate_type":"ORDER","aggregate_id":"7","event_type":"CREATED","payload":{"n":1},"tenant":"acme"}`)
	if _, err := tx.Exec(ctx, `INSERT INTO `+e.table+` (message_id, aggregate_type, aggregate_id, event_type, payload) VALUES ('row1','ORDER','7','PAID','{}')`); err != nil {
		t.Fatal(err)
	}
	emit(tx, true, `{"message_id":"m2","aggregate_type":"ORDER","aggregate_id":"7","event_type":"SHIPPED","payload":"plain"}`)
	if _, err := tx.Exec(ctx, `SELECT pg_logical_emit_message(true, 'other-prefix', 'ignored')`); err != nil {
		t.Fatal(err)
	}
	_ = tx.Commit(ctx)
	// Rolled back: nothing.
	tx, _ = e.db.Begin(ctx)
	emit(tx, true, `{"message_id":"rb"}`)
	_ = tx.Rollback(ctx)
	// Non-transactional: skipped and counted.
	e.exec(`SELECT pg_logical_emit_message(false, $1, '{"message_id":"nt"}')`, prefix)
	tx, _ = e.db.Begin(ctx)
	emit(tx, true, `{"message_id":"m3","aggregate_type":"ORDER","aggregate_id":"8","event_type":"CREATED"}`)
	_ = tx.Commit(ctx)

	got := r.next(10 * time.Second)
	if ids(got) != "m1,row1,m2" {
		t.Fatalf("got %s", ids(got))
	}
	m1 := got.Events[0]
	if m1.AggregateID != "7" || m1.EventType != "CREATED" || string(m1.Payload) != `{"n":1}` || !strings.Contains(m1.Origin, "logical message") {
		t.Errorf("m1 %+v", m1)
	}
	if c, ok := m1.Column("tenant"); !ok || string(c.Value) != "acme" {
		t.Errorf("tenant %+v", c)
	}
	if string(got.Events[2].Payload) != `"plain"` {
		t.Errorf("m2 payload %q", got.Events[2].Payload)
	}
	if ids(r.next(10*time.Second)) != "m3" {
		t.Fatal("m3 missing")
	}
	if n := counter(m.SkippedOperations.WithLabelValues("nontransactional_message")); n != 1 {
		t.Errorf("nontransactional skipped %v", n)
	}
	r.none(300 * time.Millisecond)
}

// Table-less: no table, only messages; the publication is created empty.
func TestMessagesOnlyNoTable(t *testing.T) {
	e := newPgEnv(t)
	cfg := e.config()
	cfg.Table = ""
	prefix := "outbox_" + e.name
	cfg.Messages.Prefix = prefix
	src, _ := e.source(cfg, seedCols)
	r := start(t, src, "", 16)
	r.waitReady()
	e.insertTx("ignored") // the table is not the outbox here
	e.exec(`SELECT pg_logical_emit_message(true, $1, '{"message_id":"only","aggregate_id":"1","payload":[1,2]}')`, prefix)
	ev := r.next(10 * time.Second).Events[0]
	if ev.MessageID != "only" || string(ev.Payload) != "[1,2]" {
		t.Fatalf("%+v", ev)
	}
}

func TestDroppedSlotWithCheckpointIsFatal(t *testing.T) {
	e := newPgEnv(t)
	src, _ := e.source(e.config(), seedCols)
	r := start(t, src, "", 16)
	r.waitReady()
	e.insertTx("s1")
	tx := r.next(10 * time.Second)
	_ = r.stop()
	testenv.Eventually(t, 10*time.Second, "slot released", func() bool { return e.activePID() == 0 })
	e.exec(`SELECT pg_drop_replication_slot($1)`, e.slot)

	src2, _ := e.source(e.config(), seedCols) // create: true
	r2 := start(t, src2, tx.End, 16)
	select {
	case err := <-r2.done:
		r2.once.Do(func() {})
		if !errors.Is(err, ErrSlot) || !isPermanent(err) {
			t.Fatalf("want a permanent ErrSlot for the dropped slot, got %v", err)
		}
		t.Logf("error: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not stop")
	}
	if e.slotExists() {
		t.Fatal("the slot was recreated")
	}
}

func TestPublicationWithoutTableIsFatal(t *testing.T) {
	e := newPgEnv(t)
	other := "ot_" + e.name
	e.exec(`CREATE TABLE ` + other + ` (id int PRIMARY KEY)`)
	t.Cleanup(func() { _, _ = e.db.Exec(context.Background(), `DROP TABLE IF EXISTS `+other) })
	e.exec(`CREATE PUBLICATION ` + e.pub + ` FOR TABLE ` + other)
	src, _ := e.source(e.config(), seedCols)
	r := start(t, src, "", 16)
	select {
	case err := <-r.done:
		r.once.Do(func() {})
		if !errors.Is(err, ErrPublication) || !isPermanent(err) {
			t.Fatalf("want a permanent ErrPublication, got %v", err)
		}
		t.Logf("error: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not stop")
	}
}

func TestCreateFalseOnlyVerifies(t *testing.T) {
	e := newPgEnv(t)
	cfg := e.config()
	cfg.Create = false
	src, _ := e.source(cfg, seedCols)
	r := start(t, src, "", 16)
	select {
	case err := <-r.done:
		r.once.Do(func() {})
		if !errors.Is(err, ErrSlot) && !errors.Is(err, ErrPublication) || !isPermanent(err) {
			t.Fatalf("want a permanent ErrSlot or ErrPublication, got %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not stop")
	}
	if e.slotExists() {
		t.Fatal("slot created with create: false")
	}
}

// With everything Acked and the outbox idle, WAL written elsewhere must not
// stay pinned: the slot follows the server's WAL end, through empty
// transactions that the pipeline checkpoints and Acks like any other (so
// the slot is never ahead of the checkpoint).
func TestIdleAdvance(t *testing.T) {
	e := newPgEnv(t)
	other := "ot_" + e.name
	e.exec(`CREATE TABLE ` + other + ` (id int)`)
	t.Cleanup(func() { _, _ = e.db.Exec(context.Background(), `DROP TABLE IF EXISTS `+other) })
	src, _ := e.source(e.config(), seedCols)
	r := start(t, src, "", 16)
	r.waitReady()
	e.insertTx("i1")
	tx := r.next(10 * time.Second)
	src.Ack(tx.End)
	testenv.Eventually(t, 5*time.Second, "slot confirmed i1", func() bool { return e.confirmedFlush() >= lsnOf(t, tx.End) })
	for i := 0; i < 5; i++ {
		e.exec(`INSERT INTO ` + other + ` SELECT generate_series(1, 100)`)
	}
	var target string
	if err := e.db.QueryRow(context.Background(), `SELECT pg_current_wal_lsn()::text`).Scan(&target); err != nil {
		t.Fatal(err)
	}
	want, _ := pglogrepl.ParseLSN(target)
	// The idle advance comes as empty transactions through the pipeline:
	// until they are Acked (checkpointed), the slot stays at the last Ack.
	var idle []outboxcdc.Tx
	testenv.Eventually(t, 15*time.Second, "an empty transaction ending at the WAL end "+target, func() bool {
		for {
			select {
			case tx := <-r.out:
				if len(tx.Events) > 0 || tx.More {
					t.Fatalf("unexpected transaction %s", ids(tx))
				}
				idle = append(idle, tx)
			default:
				return len(idle) > 0 && lsnOf(t, idle[len(idle)-1].End) >= want
			}
		}
	})
	time.Sleep(time.Second) // several status updates
	if cf := e.confirmedFlush(); cf != lsnOf(t, tx.End) {
		t.Fatalf("confirmed_flush_lsn %s moved past the last Ack %s before the idle advance was checkpointed", cf, tx.End)
	}
	for _, tx := range idle {
		src.Ack(tx.End)
	}
	testenv.Eventually(t, 15*time.Second, "confirmed_flush_lsn reaches the WAL end "+target, func() bool {
		for {
			select {
			case tx := <-r.out:
				src.Ack(tx.End)
			default:
				return e.confirmedFlush() >= want
			}
		}
	})
	// And the stream is still right afterwards.
	e.insertTx("i2")
	if got := ids(r.next(10 * time.Second)); got != "i2" {
		t.Fatalf("got %s", got)
	}
}

// The connection is killed mid-stream (pg_terminate_backend on the
// walsender): the source reconnects and nothing is lost or duplicated.
func TestReconnectAfterKilledWalsender(t *testing.T) {
	e := newPgEnv(t)
	src, m := e.source(e.config(), seedCols)
	r := start(t, src, "", 64)
	r.waitReady()
	e.insertTx("w1")
	if got := ids(r.next(10 * time.Second)); got != "w1" {
		t.Fatalf("got %s", got)
	}
	e.exec(`SELECT pg_terminate_backend($1)`, e.activePID())
	e.insertTx("w2")
	e.insertTx("w3")
	for _, want := range []string{"w2", "w3"} {
		if got := ids(r.next(15 * time.Second)); got != want {
			t.Fatalf("got %s want %s", got, want)
		}
	}
	r.none(300 * time.Millisecond)
	if counter(m.Reconnects) < 1 {
		t.Error("no reconnect counted")
	}
}

// BenchmarkDrainRate measures how fast a backlog drains through Run
// (decoding, queue, channel) in rows/s: each iteration starts from the
// slot's confirmed position, which nothing acknowledges, and reads the same
// 100 transactions of 1000 rows.
func BenchmarkDrainRate(b *testing.B) {
	e := newPgEnv(b)
	src, _ := e.source(e.config(), seedCols)
	r := start(b, src, "", 1024)
	r.waitReady() // creates the slot
	_ = r.stop()
	const txs, per = 100, 1000
	for i := 0; i < txs; i++ {
		e.exec(`INSERT INTO `+e.table+` (message_id, aggregate_type, aggregate_id, event_type, payload)
			SELECT 'id-'||$1::int||'-'||g, 'ORDER', 'order-'||g, 'ORDER_CREATED',
			json_build_object('order_id', g, 'customer', 'c-42', 'total', 99.95)
			FROM generate_series(1, $2::int) g`, i, per)
	}
	rows := 0
	for b.Loop() {
		b.StopTimer()
		testenv.Eventually(b, 10*time.Second, "slot released", func() bool { return e.activePID() == 0 })
		src, _ := e.source(e.config(), seedCols)
		r := start(b, src, "", 1024)
		b.StartTimer()
		for n := 0; n < txs*per; {
			n += len(r.next(30 * time.Second).Events)
		}
		_ = r.stop()
		rows += txs * per
	}
	b.ReportMetric(float64(rows)/b.Elapsed().Seconds(), "rows/s")
}

// A second instance on the same slot waits (retrying, not failing) until the
// first releases it.
func TestSlotActiveRetries(t *testing.T) {
	e := newPgEnv(t)
	a, _ := e.source(e.config(), seedCols)
	ra := start(t, a, "", 16)
	ra.waitReady()
	pidA := e.activePID()
	b, _ := e.source(e.config(), seedCols)
	rb := start(t, b, "", 16)
	time.Sleep(time.Second)
	select {
	case err := <-rb.done:
		t.Fatalf("second instance stopped: %v", err)
	default:
	}
	if b.Ready() == nil || !strings.Contains(b.Ready().Error(), "active") {
		t.Fatalf("second instance ready state: %v", b.Ready())
	}
	_ = ra.stop()
	rb.waitReady()
	if pid := e.activePID(); pid == pidA || pid == 0 {
		t.Fatalf("slot holder %d (first was %d)", pid, pidA)
	}
	e.insertTx("after")
	if got := ids(rb.next(10 * time.Second)); got != "after" {
		t.Fatalf("got %s", got)
	}
}

func TestSlotWithOtherPluginIsFatal(t *testing.T) {
	e := newPgEnv(t)
	if _, err := e.db.Exec(context.Background(), `SELECT pg_create_logical_replication_slot($1, 'test_decoding')`, e.slot); err != nil {
		t.Skipf("test_decoding unavailable: %v", err)
	}
	src, _ := e.source(e.config(), seedCols)
	r := start(t, src, "", 16)
	select {
	case err := <-r.done:
		r.once.Do(func() {})
		if !errors.Is(err, ErrSlot) || !isPermanent(err) {
			t.Fatalf("want a permanent ErrSlot for the test_decoding slot, got %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not stop")
	}
}

// The slot lag gauge is measured when the source starts, not only after
// the first lag_interval: a connector resuming far behind shows how far
// from the start (it read 0 for the whole first interval before).
func TestSlotLagMeasuredAtStart(t *testing.T) {
	e := newPgEnv(t)
	cfg := e.config()
	cfg.LagInterval = time.Hour
	src, _ := e.source(cfg, seedCols)
	r := start(t, src, "", 16)
	r.waitReady()
	e.insertTx("l1")
	tx := r.next(10 * time.Second)
	src.Ack(tx.End)
	testenv.Eventually(t, 5*time.Second, "slot confirmed l1", func() bool { return e.confirmedFlush() >= lsnOf(t, tx.End) })
	if err := r.stop(); !errors.Is(err, context.Canceled) {
		t.Fatalf("stop: %v", err)
	}
	// WAL the slot has not confirmed: the backlog a restart catches up on.
	for i := 0; i < 20; i++ {
		e.insertTx(fmt.Sprintf("b%d", i))
	}
	src2, _ := e.source(cfg, seedCols)
	r2 := start(t, src2, tx.End, 64)
	testenv.Eventually(t, 20*time.Second, "outbox_cdc_postgres_slot_lag_bytes above 0 with lag_interval 1h", func() bool {
		return counter(src2.lagBytes) > 0
	})
	r2.stop()
}
