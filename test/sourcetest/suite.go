// Package sourcetest is the contract every outboxcdc.Source passes, run
// through the Source interface alone against a real database: the binlog
// source (MySQL/MariaDB) and the wal source (PostgreSQL) run the same
// cases, and a third source runs them by providing an Env.
//
// Each case states one invariant of the Source contract (outbox.go) and
// checks it under the fault it names:
//
//   - order and commit boundaries: one Tx per committed transaction, in
//     commit order, whole, ends strictly increasing;
//   - resume from a checkpoint: a new source started at a Tx's End sends
//     exactly the transactions after it;
//   - reconnect after the server ends the stream: nothing lost, nothing
//     sent twice, the reconnect counted;
//   - UPDATEs and DELETEs of outbox rows are skipped and counted;
//   - a position of another source kind, or one the server no longer has,
//     stops Run with a clear error instead of retrying or skipping;
//   - a consumer that does not read for longer than the read timeout
//     causes no reconnect and loses nothing;
//   - the Events slices the pipeline releases (Tx.Pool) are reused: a
//     drain allocates them for the transactions in flight, not for each
//     one, and no record made from a reused Event changes;
//   - without a checkpoint the resolved start is reported once, before
//     anything is sent (outboxcdc.StartReporter), and resuming from it
//     after an idle stop loses nothing committed while nothing ran.
package sourcetest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/rs/zerolog"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
	"github.com/outbox-cdc/outbox-cdc/router"
)

// Env is one source kind and its own outbox table on a real server, as the
// suite drives it. A fresh Env is made for every case; its methods are
// called from the test goroutine.
type Env interface {
	// Source returns a new, not yet running source that reads the outbox
	// table as connector name (the same name resumes the same server-side
	// state: slot, server_id). short asks for read timeouts of a few
	// seconds at most (ReadTimeout returns it).
	Source(t *testing.T, name string, short bool, m *outboxcdc.SourceMetrics) outboxcdc.Source
	// ReadTimeout is how long the short-timeout source waits for the
	// server before it presumes the connection dead.
	ReadTimeout() time.Duration
	// Commit runs stmts in one transaction and commits it.
	Commit(t *testing.T, stmts ...string)
	// Insert, Update and Delete return a statement inserting the outbox
	// row with message id id, changing it, and deleting it.
	Insert(id string) string
	Update(id string) string
	Delete(id string) string
	// KillStream makes the server end connector name's streaming
	// connection (KILL of the binlog dump thread, pg_terminate_backend of
	// the walsender), and returns once it did.
	KillStream(t *testing.T, name string)
	// GonePosition returns a position of this source's kind that the
	// server cannot stream from for connector name (a purged binlog, a
	// position behind the replication slot), and the sentinel error Run
	// must wrap for it. It may run a source of name first.
	GonePosition(t *testing.T, name string) (outboxcdc.Position, error)
	// Compare orders two positions of this kind (cmp.Compare's sign).
	Compare(a, b outboxcdc.Position) (int, error)
}

// Run runs every case of the contract against fresh Envs from newEnv.
func Run(t *testing.T, newEnv func(t *testing.T) Env) {
	for _, c := range []struct {
		name string
		run  func(*testing.T, Env)
	}{
		{"OrderAndCommitBoundaries", orderAndCommitBoundaries},
		{"ResumeFromCheckpoint", resumeFromCheckpoint},
		{"ReconnectAfterServerKillsStream", reconnectAfterKill},
		{"NonInsertsSkippedAndCounted", nonInsertsSkipped},
		{"ForeignPositionRefused", foreignPosition},
		{"GonePositionRefused", gonePosition},
		{"BlockedConsumerNoChurnNoLoss", blockedConsumer},
		{"ReleasedEventsReusedRecordsUnchanged", releasedEventsReused},
		{"StartReportedBeforeFirstTx", startReported},
	} {
		t.Run(c.name, func(t *testing.T) { c.run(t, newEnv(t)) })
	}
}

// Name returns a connector name unique to this test run.
func Name(prefix string) string { return fmt.Sprintf("%s-%06d", prefix, rand.IntN(1e6)) }

// waitTimeout bounds every wait for the source.
const waitTimeout = 30 * time.Second

// running is a source whose Run works in its own goroutine, as the
// pipeline's reader does, into an unbuffered channel.
type running struct {
	t    *testing.T
	src  outboxcdc.Source
	m    *outboxcdc.SourceMetrics
	out  chan outboxcdc.Tx
	done chan struct{}
	err  error
	stop context.CancelFunc
	got  atomic.Int64 // Txs received from out
}

func start(t *testing.T, env Env, name string, short bool, from outboxcdc.Position) *running {
	t.Helper()
	return startWith(t, env, name, short, from, nil)
}

// startWith is start with before called on the source (and the running
// it will be) before Run.
func startWith(t *testing.T, env Env, name string, short bool, from outboxcdc.Position, before func(outboxcdc.Source, *running)) *running {
	t.Helper()
	m := outboxcdc.NewSourceMetrics(nil)
	r := &running{t: t, src: env.Source(t, name, short, m), m: m, out: make(chan outboxcdc.Tx), done: make(chan struct{})}
	if before != nil {
		before(r.src, r)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.stop = cancel
	go func() {
		defer close(r.done)
		r.err = r.src.Run(ctx, from, r.out)
	}()
	t.Cleanup(r.close)
	return r
}

// close stops Run and waits for it to return.
func (r *running) close() {
	r.stop()
	select {
	case <-r.done:
	case <-time.After(waitTimeout):
		r.t.Errorf("Run did not return within %s of its context's end", waitTimeout)
	}
}

// waitReady waits until the source streams, so that what is committed
// next is after its start.
func (r *running) waitReady() {
	r.t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for r.src.Ready() != nil {
		select {
		case <-r.done:
			r.t.Fatalf("Run returned before it was ready: %v", r.err)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("source not ready after %s: %v", waitTimeout, r.src.Ready())
		}
	}
}

// next returns the next Tx that carries events (transactions that touched
// no outbox row may come as empty Txs), acknowledging each as the
// pipeline would once it is checkpointed.
func (r *running) next() outboxcdc.Tx {
	r.t.Helper()
	timer := time.NewTimer(waitTimeout)
	defer timer.Stop()
	for {
		select {
		case tx := <-r.out:
			r.got.Add(1)
			if !tx.End.IsZero() {
				r.src.Ack(tx.End)
			}
			if len(tx.Events) > 0 {
				return tx
			}
		case <-r.done:
			r.t.Fatalf("Run returned while a transaction was awaited: %v", r.err)
		case <-timer.C:
			r.t.Fatalf("no transaction within %s", waitTimeout)
		}
	}
}

// quiet checks that no Tx with events arrives for d.
func (r *running) quiet(d time.Duration) {
	r.t.Helper()
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		select {
		case tx := <-r.out:
			r.got.Add(1)
			if len(tx.Events) > 0 {
				r.t.Fatalf("unexpected transaction %v", ids(tx))
			}
		case <-r.done:
			r.t.Fatalf("Run returned: %v", r.err)
		case <-timer.C:
			return
		}
	}
}

// runErr waits for Run to return on its own and returns its error.
func (r *running) runErr() error {
	r.t.Helper()
	timer := time.NewTimer(waitTimeout)
	defer timer.Stop()
	for {
		select {
		case tx := <-r.out:
			if len(tx.Events) > 0 {
				r.t.Fatalf("a transaction %v was sent from a position that must be refused", ids(tx))
			}
		case <-r.done:
			return r.err
		case <-timer.C:
			r.t.Fatalf("Run did not return within %s (retrying forever?); Ready says %v", waitTimeout, r.src.Ready())
		}
	}
}

func ids(tx outboxcdc.Tx) []string {
	out := make([]string, len(tx.Events))
	for i, e := range tx.Events {
		out[i] = e.MessageID
	}
	return out
}

// expect receives one Tx and checks it holds exactly want, whole.
func (r *running) expect(want ...string) outboxcdc.Tx {
	r.t.Helper()
	tx := r.next()
	if got := ids(tx); !slices.Equal(got, want) {
		r.t.Fatalf("transaction %v, want %v", got, want)
	}
	if tx.More || tx.End.IsZero() {
		r.t.Fatalf("transaction %v: More %v, End %q; want one whole Tx with an end", want, tx.More, tx.End)
	}
	return tx
}

func uniq(prefix string) string { return fmt.Sprintf("%s-%d", prefix, rand.IntN(1e9)) }

// One Tx per committed transaction with outbox rows, in commit order, with
// its rows in statement order, whole; the ends increase.
func orderAndCommitBoundaries(t *testing.T, env Env) {
	r := start(t, env, Name("order"), false, "")
	r.waitReady()
	txs := [][]string{{uniq("a")}, {uniq("b1"), uniq("b2"), uniq("b3")}, {uniq("c1"), uniq("c2")}, {uniq("d")}}
	for i, ids := range txs {
		var stmts []string
		for _, id := range ids {
			stmts = append(stmts, env.Insert(id))
		}
		env.Commit(t, stmts...)
		if i == 1 {
			// A transaction that touches the outbox without inserting.
			env.Commit(t, env.Update(ids[0]))
		}
	}
	var prev outboxcdc.Position
	for _, want := range txs {
		tx := r.expect(want...)
		if tx.CommitTime.IsZero() {
			t.Errorf("transaction %v has no commit time", want)
		}
		if prev != "" {
			if c, err := env.Compare(prev, tx.End); err != nil || c >= 0 {
				t.Fatalf("end %s does not follow %s (%d, %v)", tx.End, prev, c, err)
			}
		}
		prev = tx.End
	}
}

// A source started at a Tx's End sends exactly the transactions after it,
// including one the previous run had sent but that was not checkpointed.
func resumeFromCheckpoint(t *testing.T, env Env) {
	name := Name("resume")
	first := start(t, env, name, false, "")
	first.waitReady()
	r1, r2, r3 := uniq("r1"), uniq("r2"), uniq("r3")
	env.Commit(t, env.Insert(r1))
	env.Commit(t, env.Insert(r2))
	checkpoint := first.expect(r1).End
	first.expect(r2)
	first.close()
	env.Commit(t, env.Insert(r3))

	second := start(t, env, name, false, checkpoint)
	second.expect(r2)
	second.expect(r3)
	second.quiet(time.Second)
}

// A source without a checkpoint reports the position it resolved its
// start to (outboxcdc.StartReporter), once, before it sends anything or
// streams; a source started from that position after the first one was
// stopped idle sends every transaction committed in between. Without the
// report a restart resolves the start again, and with start: latest
// skips them.
func startReported(t *testing.T, env Env) {
	name := Name("start")
	var mu sync.Mutex
	var reports []outboxcdc.Position
	hook := func(src outboxcdc.Source, r *running) {
		sr, ok := src.(outboxcdc.StartReporter)
		if !ok {
			t.Fatalf("%T does not report its resolved start (outboxcdc.StartReporter)", src)
		}
		sr.ReportStart(func(_ context.Context, p outboxcdc.Position) error {
			if n := r.got.Load(); n > 0 {
				t.Errorf("start %s reported after %d Txs were sent", p, n)
			}
			mu.Lock()
			reports = append(reports, p)
			mu.Unlock()
			return nil
		})
	}
	first := startWith(t, env, name, false, "", hook)
	first.waitReady()
	first.quiet(200 * time.Millisecond)
	first.close()
	mu.Lock()
	got := slices.Clone(reports)
	mu.Unlock()
	if len(got) != 1 || got[0].IsZero() {
		t.Fatalf("reports %v, want one start position before streaming", got)
	}
	s1, s2 := uniq("s1"), uniq("s2")
	env.Commit(t, env.Insert(s1)) // while nothing runs
	env.Commit(t, env.Insert(s2))

	second := startWith(t, env, name, false, got[0], hook)
	second.expect(s1)
	second.expect(s2)
	second.quiet(time.Second)
	mu.Lock()
	defer mu.Unlock()
	if len(reports) != 1 {
		t.Fatalf("a source started from a checkpoint reported a start: %v", reports[1:])
	}
}

// After the server ends the streaming connection the source reconnects by
// itself and resumes after the last Tx it sent: nothing lost, nothing sent
// twice, the reconnect counted.
func reconnectAfterKill(t *testing.T, env Env) {
	name := Name("kill")
	r := start(t, env, name, false, "")
	r.waitReady()
	k1, k2, k3 := uniq("k1"), uniq("k2"), uniq("k3")
	env.Commit(t, env.Insert(k1))
	r.expect(k1)
	env.KillStream(t, name)
	env.Commit(t, env.Insert(k2))
	env.Commit(t, env.Insert(k3))
	r.expect(k2)
	r.expect(k3)
	if n := value(r.m.Reconnects); n < 1 {
		t.Fatalf("reconnects counted: %v, want at least 1", n)
	}
	r.quiet(time.Second)
}

// UPDATEs and DELETEs of outbox rows produce no events; each is counted
// by operation in SkippedOperations.
func nonInsertsSkipped(t *testing.T, env Env) {
	r := start(t, env, Name("skip"), false, "")
	r.waitReady()
	n1, n2 := uniq("n1"), uniq("n2")
	env.Commit(t, env.Insert(n1))
	r.expect(n1)
	env.Commit(t, env.Update(n1))
	env.Commit(t, env.Delete(n1))
	env.Commit(t, env.Insert(n2))
	r.expect(n2)
	for _, op := range []string{"update", "delete"} {
		if n := value(r.m.SkippedOperations.WithLabelValues(op)); n != 1 {
			t.Errorf("skipped %s operations counted: %v, want 1", op, n)
		}
	}
}

// A checkpoint written by another kind of source stops Run at once with
// outboxcdc.ErrForeignPosition, sending nothing.
func foreignPosition(t *testing.T, env Env) {
	r := start(t, env, Name("foreign"), false, outboxcdc.MakePosition("sqlserver", "lsn:00000027:000001f8:0003"))
	err := r.runErr()
	if !errors.Is(err, outboxcdc.ErrForeignPosition) {
		t.Fatalf("Run from a foreign position: %v, want ErrForeignPosition", err)
	}
	if outboxcdc.IsTransient(err) {
		t.Fatalf("a foreign position is classified transient: %v", err)
	}
}

// A position the server cannot stream from (purged, behind the slot) stops
// Run with the source's sentinel error, rather than skipping to what the
// server has.
func gonePosition(t *testing.T, env Env) {
	name := Name("gone")
	pos, want := env.GonePosition(t, name)
	r := start(t, env, name, false, pos)
	err := r.runErr()
	if !errors.Is(err, want) {
		t.Fatalf("Run from %s: %v, want %v", pos, err, want)
	}
	if outboxcdc.IsTransient(err) {
		t.Fatalf("a gone position is classified transient: %v", err)
	}
	t.Logf("Run from %s: %v", pos, err)
}

// A consumer that does not read for three read timeouts (a sink blocked on
// its broker) causes no reconnect: the source keeps its connection alive
// while it waits, and what it read is delivered once, followed by what was
// committed later.
func blockedConsumer(t *testing.T, env Env) {
	r := start(t, env, Name("blocked"), true, "")
	r.waitReady()
	b1, b2, b3 := uniq("b1"), uniq("b2"), uniq("b3")
	env.Commit(t, env.Insert(b1))
	env.Commit(t, env.Insert(b2))
	time.Sleep(3 * env.ReadTimeout()) // nothing reads r.out meanwhile
	r.expect(b1)
	r.expect(b2)
	env.Commit(t, env.Insert(b3))
	r.expect(b3)
	if n := value(r.m.Reconnects); n != 0 {
		t.Fatalf("reconnects while the consumer was blocked: %v, want 0", n)
	}
	if err := r.src.Ready(); err != nil {
		t.Fatalf("not ready after the consumer resumed: %v", err)
	}
}

// value reads a counter.
func value(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		return -1
	}
	return m.GetCounter().GetValue()
}

// The pipeline releases a Tx's Events once its records are written, and
// the source fills the slice again (Tx.Pool): draining transactions of
// many sizes allocates Events for the transactions in flight only, and
// every record, written before its Events were reused, still carries its
// own row at the end.
func releasedEventsReused(t *testing.T, env Env) {
	src := &poolSpy{Source: env.Source(t, Name("reuse"), false, outboxcdc.NewSourceMetrics(nil))}
	rt, err := router.New(router.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	sink := &keepSink{}
	cfg := outboxcdc.DefaultPipelineConfig()
	// Little in flight, so that most transactions come after a release.
	cfg.MaxBatchRecords, cfg.QueueTransactions, cfg.QueueBytes = 64, 1, 64<<10
	p, err := outboxcdc.NewPipeline(cfg, src, rt, sink, &memCheckpoint{}, zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel), nil)
	if err != nil {
		t.Fatal(err)
	}
	obs := &keepIDs{}
	p.Observe(obs)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	deadline := time.Now().Add(waitTimeout)
	for src.Ready() != nil {
		if time.Now().After(deadline) {
			t.Fatalf("source not ready after %s: %v", waitTimeout, src.Ready())
		}
		select {
		case err := <-done:
			t.Fatalf("pipeline stopped before the source was ready: %v", err)
		case <-time.After(20 * time.Millisecond):
		}
	}

	var want []string
	for i := 0; i < 150; i++ {
		n := 1 + (i*7)%40 // 1 to 40 rows, never the same size twice in a row
		stmts := make([]string, n)
		for j := range stmts {
			id := uniq(fmt.Sprintf("e%d.%d", i, j))
			want = append(want, id)
			stmts[j] = env.Insert(id)
		}
		env.Commit(t, stmts...)
	}
	deadline = time.Now().Add(2 * waitTimeout)
	for sink.len() < len(want) {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d records written after %s", sink.len(), len(want), 2*waitTimeout)
		}
		select {
		case err := <-done:
			t.Fatalf("pipeline stopped: %v", err)
		case <-time.After(20 * time.Millisecond):
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("graceful stop: %v", err)
	}

	sink.mu.Lock()
	defer sink.mu.Unlock()
	if len(sink.recs) != len(want) {
		t.Fatalf("%d records written, want %d", len(sink.recs), len(want))
	}
	for i, id := range want {
		r := &sink.recs[i]
		got := map[string]string{"key": string(r.Key), "value": string(r.Value)}
		for _, h := range r.Headers {
			got[h.Key] = string(h.Value)
		}
		exp := map[string]string{"key": "agg-" + id, "value": `{"id": "` + id + `"}`, "id": id, "aggregate_type": "ORDER", "event_type": "ORDER_CREATED"}
		for k, v := range exp {
			if got[k] != v {
				t.Fatalf("record %d: %s is %q, want %q", i, k, got[k], v)
			}
		}
		if r.MessageID != id {
			t.Fatalf("record %d: MessageID %q, want %q", i, r.MessageID, id)
		}
	}
	if ids := obs.all(); !slices.Equal(ids, want) {
		t.Fatalf("the checkpoint observer heard %d message ids, want %d in commit order", len(ids), len(want))
	}
	pool := src.pool.Load()
	if pool == nil {
		t.Fatal("no Tx carried a Pool: the source does not reuse Events slices")
	}
	events, reused := pool.Allocated()
	t.Logf("%d rows in 150 transactions: %d Events allocated, %d slices reused", len(want), events, reused)
	if events > int64(len(want)/2) {
		t.Fatalf("%d Events allocated for %d rows: released Events slices are not reused", events, len(want))
	}
}

// poolSpy notes the Pool of the Txs its source sends.
type poolSpy struct {
	outboxcdc.Source
	pool atomic.Pointer[outboxcdc.EventPool]
}

func (s *poolSpy) Run(ctx context.Context, from outboxcdc.Position, out chan<- outboxcdc.Tx) error {
	in := make(chan outboxcdc.Tx)
	errc := make(chan error, 1)
	go func() { errc <- s.Source.Run(ctx, from, in) }()
	for {
		select {
		case tx := <-in:
			if tx.Pool != nil {
				s.pool.Store(tx.Pool)
			}
			select {
			case out <- tx:
				continue
			case <-ctx.Done():
			}
			for {
				select {
				case <-in:
				case err := <-errc:
					return err
				}
			}
		case err := <-errc:
			return err
		}
	}
}

// keepSink keeps every record it is given as it is (sharing its memory).
type keepSink struct {
	mu   sync.Mutex
	recs []outboxcdc.Record
}

func (s *keepSink) Write(_ context.Context, recs []outboxcdc.Record) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.recs = append(s.recs, recs...)
	return nil
}
func (s *keepSink) Ready() error { return nil }
func (s *keepSink) Close() error { return nil }
func (s *keepSink) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.recs)
}

type memCheckpoint struct {
	mu  sync.Mutex
	pos outboxcdc.Position
}

func (c *memCheckpoint) Load(context.Context) (outboxcdc.Position, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.pos, nil
}
func (c *memCheckpoint) Save(_ context.Context, pos outboxcdc.Position) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pos = pos
	return nil
}

// keepIDs is a checkpoint observer keeping the message ids it hears.
type keepIDs struct {
	mu  sync.Mutex
	ids []string
}

func (o *keepIDs) Checkpointed(_ context.Context, _ outboxcdc.Position, ids []string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.ids = append(o.ids, ids...)
}
func (o *keepIDs) all() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.ids)
}
