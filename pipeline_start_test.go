package outboxcdc

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// quietServer is a source database the test commits transactions to, one
// outbox row each; transaction i ends at fakePos(i) and holds message id
// "i".
type quietServer struct {
	mu   sync.Mutex
	txs  int
	grew chan struct{} // closed and replaced by every commit
}

func newQuietServer(committed int) *quietServer {
	return &quietServer{txs: committed, grew: make(chan struct{})}
}

func (s *quietServer) commit(n int) {
	s.mu.Lock()
	s.txs += n
	close(s.grew)
	s.grew = make(chan struct{})
	s.mu.Unlock()
}

func (s *quietServer) latest() (int, chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.txs, s.grew
}

// latestSource streams a quietServer as the binlog source does with
// source.start: latest: without a checkpoint it starts after the server's
// last transaction, reports that start (StartReporter) and then sends
// every later transaction as it commits. durable says what the store
// holds; firstSend records what it held when the pipeline took the
// source's first Tx (sampled just before that Tx is offered).
type latestSource struct {
	srv       *quietServer
	report    func(context.Context, Position) error
	durable   func() Position
	started   chan Position // the start of each Run, once resolved
	firstSend atomic.Pointer[Position]
}

func (s *latestSource) ReportStart(report func(context.Context, Position) error) { s.report = report }

func (s *latestSource) Run(ctx context.Context, from Position, out chan<- Tx) error {
	next := 1
	if from.IsZero() {
		last, _ := s.srv.latest()
		if s.report != nil {
			if err := s.report(ctx, fakePos(last)); err != nil {
				return err
			}
		}
		next = last + 1
		s.started <- fakePos(last)
	} else {
		i, err := strconv.Atoi(from.Body())
		if err != nil {
			return err
		}
		next = i + 1
		s.started <- from
	}
	for ; ; next++ {
		for {
			n, grew := s.srv.latest()
			if n >= next {
				break
			}
			select {
			case <-grew:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		tx := Tx{End: fakePos(next), CommitTime: time.Now(),
			Events: []Event{{MessageID: strconv.Itoa(next), AggregateID: "a", Payload: []byte(`{}`), Origin: string(fakePos(next))}}}
		// What the store holds is sampled before the Tx is offered: once
		// the send returns, the pipeline may already have written and
		// committed it, and a later sample would see its own end. Nothing
		// can move the store between this sample and the pipeline taking
		// the Tx (the start was saved synchronously in report, and no Tx
		// is in the pipeline yet), so the sample is what the store held
		// when the first Tx was read.
		var held Position
		first := s.firstSend.Load() == nil
		if first {
			held = s.durable()
		}
		select {
		case out <- tx:
			if first {
				s.firstSend.Store(&held)
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (s *latestSource) Ack(Position) {}
func (s *latestSource) Ready() error { return nil }

// runUntil runs p until cond holds (or, with a nil cond, until the source
// has resolved its start), then stops it gracefully, and returns Run's
// error. A Run that ends by itself returns at once.
func runUntil(t *testing.T, p *Pipeline, src *latestSource, cond func() bool) error {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	select {
	case <-src.started:
	case err := <-done:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("the source did not start")
	}
	deadline := time.Now().Add(10 * time.Second)
	for cond != nil && !cond() {
		select {
		case err := <-done:
			return err
		case <-time.After(5 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("condition not reached")
		}
	}
	cancel()
	return <-done
}

func deref(p *Position) Position {
	if p == nil {
		return ""
	}
	return *p
}

// deliveredExactly checks that the sink holds message ids from..to, each
// once, and nothing else.
func deliveredExactly(t *testing.T, s *flakySink, from, to int) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := from; i <= to; i++ {
		if n := s.acked[strconv.Itoa(i)]; n != 1 {
			t.Errorf("row %d delivered %d times, want once", i, n)
		}
	}
	for id, n := range s.acked {
		if i, _ := strconv.Atoi(id); n > 0 && (i < from || i > to) {
			t.Errorf("row %s delivered, but it committed before the connector's first start", id)
		}
	}
}

// TestPipelineStartDurableBeforeFirstTx: a connector without a checkpoint
// saves the position its source resolved source.start to before it reads
// the first Tx, so a restart resumes there instead of resolving the start
// again and skipping what committed in between. Three ways a first run
// ends before any transaction is checkpointed: stopped while the source is
// idle (at-least-once and exactly-once), and a permanent failure of the
// first write. Before the fix every row committed after the first start
// was lost in each (the restart started at the newer "latest").
func TestPipelineStartDurableBeforeFirstTx(t *testing.T) {
	t.Run("idle-stop", func(t *testing.T) {
		srv := newQuietServer(5) // rows before the connector's first start
		store := &witnessStore{}
		sink := &flakySink{acked: map[string]int{}}
		src := &latestSource{srv: srv, durable: store.at, started: make(chan Position, 2)}
		p, err := NewPipeline(DefaultPipelineConfig(), src, idRouter{}, sink, store, zerolog.Nop(), nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := runUntil(t, p, src, nil); err != nil {
			t.Fatalf("first run: %v", err)
		}
		if got := store.at(); got != fakePos(5) {
			t.Fatalf("after an idle first run the store holds %q, want the resolved start %s", got, fakePos(5))
		}
		srv.commit(10) // while the connector is down
		p, _ = NewPipeline(DefaultPipelineConfig(), src, idRouter{}, sink, store, zerolog.Nop(), nil)
		if err := runUntil(t, p, src, func() bool { return store.at() == fakePos(15) }); err != nil {
			t.Fatalf("restart: %v", err)
		}
		deliveredExactly(t, sink, 6, 15)
	})

	t.Run("first-write-fails", func(t *testing.T) {
		srv := newQuietServer(3)
		store := &witnessStore{}
		bad := &flakySink{acked: map[string]int{}, failOn: 1} // the first write fails permanently
		src := &latestSource{srv: srv, durable: store.at, started: make(chan Position, 2)}
		p, _ := NewPipeline(DefaultPipelineConfig(), src, idRouter{}, bad, store, zerolog.Nop(), nil)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		done := make(chan error, 1)
		go func() { done <- p.Run(ctx) }()
		<-src.started
		srv.commit(1)
		if err := <-done; err == nil || !strings.Contains(err.Error(), "broker exploded") || bad.writes != 1 {
			t.Fatalf("first run: %v after %d writes; want the sink's failure", err, bad.writes)
		}
		if at := src.firstSend.Load(); at == nil || *at != fakePos(3) {
			t.Fatalf("the first Tx was read while the store held %q, want the start %s", deref(at), fakePos(3))
		}
		srv.commit(10) // the operator fixes the sink meanwhile
		good := &flakySink{acked: map[string]int{}}
		p, _ = NewPipeline(DefaultPipelineConfig(), src, idRouter{}, good, store, zerolog.Nop(), nil)
		if err := runUntil(t, p, src, func() bool { return store.at() == fakePos(14) }); err != nil {
			t.Fatalf("restart: %v", err)
		}
		deliveredExactly(t, good, 4, 14)
	})

	t.Run("exactly-once", func(t *testing.T) {
		srv := newQuietServer(7)
		sink := &atomicSink{flakySink: flakySink{acked: map[string]int{}}}
		committed := func() Position {
			sink.mu.Lock()
			defer sink.mu.Unlock()
			return sink.pos
		}
		witness := &witnessStore{}
		src := &latestSource{srv: srv, durable: committed, started: make(chan Position, 2)}
		p, _ := NewPipeline(DefaultPipelineConfig(), src, idRouter{}, sink, nil, zerolog.Nop(), nil)
		p.Witness(witness, false)
		if err := runUntil(t, p, src, nil); err != nil {
			t.Fatalf("first run: %v", err)
		}
		if committed() != fakePos(7) || witness.at() != fakePos(7) {
			t.Fatalf("after an idle first run the progress is %q and the witness %q, want the resolved start %s", committed(), witness.at(), fakePos(7))
		}
		srv.commit(10)
		p, _ = NewPipeline(DefaultPipelineConfig(), src, idRouter{}, sink, nil, zerolog.Nop(), nil)
		p.Witness(witness, false)
		if err := runUntil(t, p, src, func() bool { return committed() == fakePos(17) }); err != nil {
			t.Fatalf("restart: %v", err)
		}
		deliveredExactly(t, &sink.flakySink, 8, 17)
		if at := src.firstSend.Load(); at == nil || *at != fakePos(7) {
			t.Fatalf("the first Tx was read while the progress held %q, want the start %s", deref(at), fakePos(7))
		}
	})
}

// TestPipelineStartSaveFailureReadsNothing: when the start cannot be
// saved, the source sends nothing and Run returns the store's error.
func TestPipelineStartSaveFailureReadsNothing(t *testing.T) {
	srv := newQuietServer(2)
	store := &failingCheckpointer{memCheckpointer{t: t}}
	sink := &flakySink{acked: map[string]int{}}
	src := &latestSource{srv: srv, durable: func() Position { return "" }, started: make(chan Position, 1)}
	srv.commit(3)
	p, _ := NewPipeline(DefaultPipelineConfig(), src, idRouter{}, sink, store, zerolog.Nop(), nil)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := p.Run(ctx)
	if ctx.Err() != nil {
		t.Fatal("Run kept streaming although the start position could not be saved")
	}
	if err == nil || !strings.Contains(err.Error(), "disk full") || !strings.Contains(err.Error(), "start position") {
		t.Fatalf("Run = %v; want the store's error", err)
	}
	if src.firstSend.Load() != nil || len(sink.acked) != 0 {
		t.Fatal("the source sent a transaction although its start was not saved")
	}
}
