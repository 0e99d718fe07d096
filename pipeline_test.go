package outboxcdc

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// fakeSource emits txCount transactions of perTx events each; the position
// of transaction i (1-based) is "fake:i". Event message ids are "i.j".
type fakeSource struct {
	txCount, perTx int
	// badMessage, when set, is a message id the test router rejects.
	mu    sync.Mutex
	acked Position
	// failAt makes Run return a permanent error after sending that many txs.
	failAt int
	// stayOpen keeps Run streaming (idle) after the last transaction;
	// otherwise it returns errExhausted.
	stayOpen bool
}

func fakePos(i int) Position { return MakePosition("fake", strconv.Itoa(i)) }

func fakeIndex(t testing.TB, p Position) int {
	if p.IsZero() {
		return 0
	}
	if err := p.CheckKind("fake"); err != nil {
		t.Fatal(err)
	}
	i, err := strconv.Atoi(p.Body())
	if err != nil {
		t.Fatal(err)
	}
	return i
}

func (s *fakeSource) Run(ctx context.Context, from Position, out chan<- Tx) error {
	start := 0
	if !from.IsZero() {
		var err error
		if start, err = strconv.Atoi(from.Body()); err != nil {
			return err
		}
	}
	for i := start + 1; i <= s.txCount; i++ {
		if s.failAt > 0 && i > s.failAt {
			return errors.New("permanent source failure")
		}
		tx := Tx{End: fakePos(i), CommitTime: time.Now()}
		for j := 0; j < s.perTx; j++ {
			tx.Events = append(tx.Events, Event{
				MessageID:   fmt.Sprintf("%d.%d", i, j),
				AggregateID: strconv.Itoa(j % 3),
				Payload:     []byte(`{}`),
				Origin:      string(tx.End),
			})
		}
		select {
		case out <- tx:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if s.stayOpen {
		<-ctx.Done()
		return ctx.Err()
	}
	return errExhausted
}

var errExhausted = errors.New("no more transactions")

func (s *fakeSource) Ack(pos Position) {
	s.mu.Lock()
	s.acked = pos
	s.mu.Unlock()
}

func (s *fakeSource) Ready() error { return nil }

type idRouter struct{ bad string }

func (r idRouter) Route(ev *Event) (Record, error) {
	if ev.MessageID == r.bad {
		return Record{}, &BadRowError{Origin: ev.Origin, MessageID: ev.MessageID, Reason: "test rejects it"}
	}
	return Record{Topic: "t", Key: []byte(ev.AggregateID), Value: ev.Payload, Headers: []Header{{Key: "id", Value: []byte(ev.MessageID)}}}, nil
}

// flakySink acknowledges writes until write number failOn, which writes
// only the first half of its records and then fails.
type flakySink struct {
	mu     sync.Mutex
	writes int
	failOn int
	acked  map[string]int // message id -> times written
	order  []string
}

func (s *flakySink) Write(ctx context.Context, recs []Record) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.writes++
	n := len(recs)
	fail := s.writes == s.failOn
	if fail {
		n /= 2
	}
	for _, r := range recs[:n] {
		id := string(r.Headers[0].Value)
		if v, ok := headerValue(r.Headers, HeaderMessageID); ok {
			id = "dlq:" + v // a dead-letter record
		}
		s.acked[id]++
		s.order = append(s.order, id)
	}
	if fail {
		return errors.New("broker exploded")
	}
	return nil
}
func (s *flakySink) Ready() error { return nil }
func (s *flakySink) Close() error { return nil }

func (s *flakySink) has(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.acked[id] > 0
}

// memCheckpointer checks the flush barrier on every Save: every event of
// every transaction up to the saved position must already be acknowledged.
type memCheckpointer struct {
	t     testing.TB
	pos   Position
	saves int
	sink  func() *flakySink
	perTx int
}

func (c *memCheckpointer) Load(context.Context) (Position, error) { return c.pos, nil }

func (c *memCheckpointer) Save(_ context.Context, pos Position) error {
	if fakeIndex(c.t, pos) < fakeIndex(c.t, c.pos) {
		c.t.Errorf("checkpoint moved backwards: %s -> %s", c.pos, pos)
	}
	for i := fakeIndex(c.t, c.pos) + 1; i <= fakeIndex(c.t, pos); i++ {
		for j := 0; j < c.perTx; j++ {
			if id := fmt.Sprintf("%d.%d", i, j); !c.sink().has(id) {
				c.t.Errorf("checkpoint %s saved before record %s was acknowledged", pos, id)
			}
		}
	}
	c.pos = pos
	c.saves++
	return nil
}

func smallBatches() PipelineConfig {
	cfg := DefaultPipelineConfig()
	cfg.MaxBatchRecords = 7 // several transactions per write, none split
	return cfg
}

// TestPipelineCheckpointNeverPassesUnackedRecord restarts the pipeline after
// a sink failure on the Nth write, many times, and checks that every
// transaction is eventually delivered, the checkpoint never passes an
// unacknowledged record, and duplicates stay within one batch per crash.
func TestPipelineCheckpointNeverPassesUnackedRecord(t *testing.T) {
	const txCount, perTx = 300, 3
	sink := &flakySink{acked: map[string]int{}}
	cp := &memCheckpointer{t: t, perTx: perTx, sink: func() *flakySink { return sink }}
	restarts := 0
	for fakeIndex(t, cp.pos) < txCount {
		if restarts > 100 {
			t.Fatalf("no progress: checkpoint %s after %d restarts", cp.pos, restarts)
		}
		sink.mu.Lock()
		sink.writes, sink.failOn = 0, 1+restarts%5
		sink.mu.Unlock()
		src := &fakeSource{txCount: txCount, perTx: perTx}
		p, err := NewPipeline(smallBatches(), src, idRouter{}, sink, cp, zerolog.Nop(), nil)
		if err != nil {
			t.Fatal(err)
		}
		err = p.Run(context.Background())
		if errors.Is(err, errExhausted) {
			break
		}
		if err == nil || !strings.Contains(err.Error(), "broker exploded") {
			t.Fatalf("run %d: want the sink failure, got %v", restarts, err)
		}
		if !src.acked.IsZero() && src.acked != cp.pos {
			t.Fatalf("source acked %s, checkpoint is %s", src.acked, cp.pos)
		}
		restarts++
	}
	if cp.pos != fakePos(txCount) {
		t.Fatalf("final checkpoint %s, want %s", cp.pos, fakePos(txCount))
	}
	dups := 0
	for i := 1; i <= txCount; i++ {
		for j := 0; j < perTx; j++ {
			n := sink.acked[fmt.Sprintf("%d.%d", i, j)]
			if n == 0 {
				t.Fatalf("record %d.%d lost", i, j)
			}
			dups += n - 1
		}
	}
	// Each crash re-sends at most the half-written batch (< 7 + one tx).
	if max := restarts * (7 + perTx); dups > max {
		t.Fatalf("%d duplicates after %d restarts, want at most %d", dups, restarts, max)
	}
	t.Logf("%d restarts, %d checkpoint saves, %d duplicates", restarts, cp.saves, dups)
}

func TestPipelineBadRowCheckpointsEverythingBefore(t *testing.T) {
	sink := &flakySink{acked: map[string]int{}}
	cp := &memCheckpointer{t: t, perTx: 2, sink: func() *flakySink { return sink }}
	src := &fakeSource{txCount: 50, perTx: 2}
	p, err := NewPipeline(smallBatches(), src, idRouter{bad: "20.1"}, sink, cp, zerolog.Nop(), nil)
	if err != nil {
		t.Fatal(err)
	}
	err = p.Run(context.Background())
	var bad *BadRowError
	if !errors.As(err, &bad) || bad.MessageID != "20.1" || bad.Origin != "fake:20" {
		t.Fatalf("want the bad row error for 20.1 at fake:20, got %v", err)
	}
	if cp.pos != fakePos(19) {
		t.Fatalf("checkpoint %s, want fake:19 (the last transaction before the bad row)", cp.pos)
	}
	if sink.has("20.0") {
		t.Fatal("a record of the bad row's transaction was written")
	}
}

func TestPipelineGracefulStopFlushesAndCheckpoints(t *testing.T) {
	sink := &flakySink{acked: map[string]int{}}
	cp := &memCheckpointer{t: t, perTx: 1, sink: func() *flakySink { return sink }}
	src := &fakeSource{txCount: 40, perTx: 1, stayOpen: true}
	p, err := NewPipeline(smallBatches(), src, idRouter{}, sink, cp, zerolog.Nop(), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	deadline := time.Now().Add(5 * time.Second)
	for !sink.has("40.0") && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("graceful stop returned %v", err)
	}
	if cp.pos != fakePos(40) {
		t.Fatalf("checkpoint %s after graceful stop, want fake:40", cp.pos)
	}
	// A restart sends nothing again.
	before := len(sink.order)
	ctx2, cancel2 := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel2()
	if err := p.Run(ctx2); err != nil {
		t.Fatal(err)
	}
	if len(sink.order) != before {
		t.Fatalf("restart after graceful stop re-sent %d records", len(sink.order)-before)
	}
}

func TestPipelineSourceErrorFlushesReceivedTransactions(t *testing.T) {
	sink := &flakySink{acked: map[string]int{}}
	cp := &memCheckpointer{t: t, perTx: 1, sink: func() *flakySink { return sink }}
	src := &fakeSource{txCount: 40, perTx: 1, failAt: 25}
	p, err := NewPipeline(smallBatches(), src, idRouter{}, sink, cp, zerolog.Nop(), nil)
	if err != nil {
		t.Fatal(err)
	}
	err = p.Run(context.Background())
	if err == nil || err.Error() != "source: permanent source failure" {
		t.Fatalf("want the source error, got %v", err)
	}
	if cp.pos != fakePos(25) {
		t.Fatalf("checkpoint %s, want fake:25", cp.pos)
	}
}

func TestPositionKind(t *testing.T) {
	p := MakePosition("mysql", "file=a.000001;pos=4")
	if p.Kind() != "mysql" || p.Body() != "file=a.000001;pos=4" {
		t.Fatalf("kind %q body %q", p.Kind(), p.Body())
	}
	if err := p.CheckKind("postgres"); !errors.Is(err, ErrForeignPosition) {
		t.Fatalf("foreign kind accepted: %v", err)
	}
	if err := p.CheckKind("mysql"); err != nil {
		t.Fatal(err)
	}
	if Position("garbage").Kind() != "" {
		t.Fatal("a position without a prefix has a kind")
	}
}

// atomicSink stores the position with the records, as a Kafka transaction
// with a progress record would; a failing write makes nothing visible.
type atomicSink struct {
	flakySink
	pos Position
}

func (s *atomicSink) Load(context.Context) (Position, error) { return s.pos, nil }

func (s *atomicSink) WriteAtomic(ctx context.Context, recs []Record, end Position) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.writes++
	if s.writes == s.failOn {
		return errors.New("transaction aborted")
	}
	for _, r := range recs {
		s.acked[string(r.Headers[0].Value)]++
	}
	s.pos = end
	return nil
}

// TestPipelineAtomicSinkExactlyOnce restarts after failed transactions and
// checks that every record is visible exactly once.
func TestPipelineAtomicSinkExactlyOnce(t *testing.T) {
	const txCount, perTx = 200, 2
	sink := &atomicSink{flakySink: flakySink{acked: map[string]int{}}}
	for restarts := 0; ; restarts++ {
		if restarts > 100 {
			t.Fatal("no progress")
		}
		sink.mu.Lock()
		sink.writes, sink.failOn = 0, 2+restarts%4
		sink.mu.Unlock()
		p, err := NewPipeline(smallBatches(), &fakeSource{txCount: txCount, perTx: perTx}, idRouter{}, sink, nil, zerolog.Nop(), nil)
		if err != nil {
			t.Fatal(err)
		}
		err = p.Run(context.Background())
		if errors.Is(err, errExhausted) {
			break
		}
		if err == nil || !strings.Contains(err.Error(), "transaction aborted") {
			t.Fatalf("want the aborted transaction, got %v", err)
		}
	}
	if sink.pos != fakePos(txCount) {
		t.Fatalf("final position %s", sink.pos)
	}
	for i := 1; i <= txCount; i++ {
		for j := 0; j < perTx; j++ {
			if n := sink.acked[fmt.Sprintf("%d.%d", i, j)]; n != 1 {
				t.Fatalf("record %d.%d visible %d times", i, j, n)
			}
		}
	}
	if _, err := NewPipeline(smallBatches(), &fakeSource{}, idRouter{}, &flakySink{}, nil, zerolog.Nop(), nil); err == nil {
		t.Fatal("a plain sink without a checkpoint store was accepted")
	}
}

type idObserver struct {
	mu   sync.Mutex
	ids  []string
	last Position
}

func (o *idObserver) Checkpointed(_ context.Context, end Position, ids []string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.ids = append(o.ids, ids...)
	o.last = end
}

// TestPipelineObserverSeesEveryCheckpointedRow: however saves are
// coalesced, the observer hears each delivered message id once, in order,
// and only for checkpointed positions.
func TestPipelineObserverSeesEveryCheckpointedRow(t *testing.T) {
	sink := &flakySink{acked: map[string]int{}}
	cp := &memCheckpointer{t: t, perTx: 3, sink: func() *flakySink { return sink }}
	obs := &idObserver{}
	p, err := NewPipeline(smallBatches(), &fakeSource{txCount: 500, perTx: 3}, idRouter{}, sink, cp, zerolog.Nop(), nil)
	if err != nil {
		t.Fatal(err)
	}
	p.Observe(obs)
	if err := p.Run(context.Background()); !errors.Is(err, errExhausted) {
		t.Fatal(err)
	}
	if obs.last != fakePos(500) || cp.pos != fakePos(500) {
		t.Fatalf("observer at %s, checkpoint at %s", obs.last, cp.pos)
	}
	if len(obs.ids) != 1500 {
		t.Fatalf("observer saw %d ids, want 1500", len(obs.ids))
	}
	for i := 0; i < 1500; i++ {
		if want := fmt.Sprintf("%d.%d", i/3+1, i%3); obs.ids[i] != want {
			t.Fatalf("id %d is %s, want %s", i, obs.ids[i], want)
		}
	}
	t.Logf("%d saves for 500 transactions", cp.saves)
}

type failingCheckpointer struct{ memCheckpointer }

func (c *failingCheckpointer) Save(context.Context, Position) error {
	return errors.New("disk full")
}

// TestPipelineSaveFailureStopsIdlePipeline: a failed save stops the
// pipeline even when no further batch arrives.
func TestPipelineSaveFailureStopsIdlePipeline(t *testing.T) {
	sink := &flakySink{acked: map[string]int{}}
	cp := &failingCheckpointer{memCheckpointer{t: t}}
	src := &fakeSource{txCount: 1, perTx: 1, stayOpen: true}
	p, err := NewPipeline(smallBatches(), src, idRouter{}, sink, cp, zerolog.Nop(), nil)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- p.Run(context.Background()) }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "disk full") || !strings.Contains(err.Error(), "stopping before acknowledging anything further") {
			t.Fatalf("want the save error, got %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("an idle pipeline kept running after its checkpoint save failed")
	}
	if !src.acked.IsZero() {
		t.Fatalf("source acked %s although the save failed", src.acked)
	}
}

// warningRouter routes as idRouter and marks every record with a warning,
// as the router does for a JSON payload it sends as text.
type warningRouter struct{ idRouter }

func (r warningRouter) Route(ev *Event) (Record, error) {
	rec, err := r.idRouter.Route(ev)
	rec.Warning = "JSON expansion failed (test): the payload is sent as text, as Debezium does"
	return rec, err
}

// TestPipelineRouteWarningRateLimited: rows the route sent otherwise than
// configured are delivered and logged, one warning for a burst (not one
// per row), naming the first row.
func TestPipelineRouteWarningRateLimited(t *testing.T) {
	sink := &flakySink{acked: map[string]int{}}
	cp := &memCheckpointer{t: t, perTx: 1, sink: func() *flakySink { return sink }}
	src := &fakeSource{txCount: 50, perTx: 1, stayOpen: true}
	var logs lockedBuf
	p, err := NewPipeline(smallBatches(), src, warningRouter{}, sink, cp, zerolog.New(&logs), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	deadline := time.Now().Add(5 * time.Second)
	for !sink.has("50.0") && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if len(sink.order) != 50 {
		t.Fatalf("%d records delivered, want 50", len(sink.order))
	}
	if n := logs.count(`"level":"warn"`); n != 1 || logs.count(`"message_id":"1.0"`) != 1 || logs.count("JSON expansion failed") != 1 {
		t.Fatalf("%d warnings for 50 rows, want one naming the first:\n%s", n, logs.b.String())
	}
}
