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

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// fragSource emits txCount transactions; transaction i has size(i) events
// and is sent in fragments of at most frag events (Tx.More on all but the
// last, End only on the last). With hangAt set it sends the fragments of
// that transaction but its last, then waits for ctx: a transaction whose
// end never arrives in this run.
type fragSource struct {
	txCount int
	size    func(i int) int
	frag    int
	payload int // payload bytes per event
	hangAt  int

	mu   sync.Mutex
	sent int64 // payload bytes sent so far
	ack  Position
}

func (s *fragSource) Run(ctx context.Context, from Position, out chan<- Tx) error {
	start := 0
	if !from.IsZero() {
		start, _ = strconv.Atoi(from.Body())
	}
	payload := []byte(`{"p":"` + strings.Repeat("x", max(0, s.payload-8)) + `"}`)
	for i := start + 1; i <= s.txCount; i++ {
		n := s.size(i)
		for j := 0; j < n || j == 0; {
			tx := Tx{CommitTime: time.Now()}
			for ; j < n && len(tx.Events) < s.frag; j++ {
				tx.Events = append(tx.Events, Event{
					MessageID:   fmt.Sprintf("%d.%d", i, j),
					AggregateID: strconv.Itoa(j % 5),
					Payload:     payload,
					Origin:      fmt.Sprintf("fake:%d row %d", i, j),
				})
			}
			last := j >= n
			if last && i == s.hangAt {
				<-ctx.Done()
				return ctx.Err()
			}
			if last {
				tx.End = fakePos(i)
			} else {
				tx.More = true
			}
			select {
			case out <- tx:
			case <-ctx.Done():
				return ctx.Err()
			}
			s.mu.Lock()
			s.sent += int64(len(tx.Events) * len(payload))
			s.mu.Unlock()
			if last {
				break
			}
		}
	}
	<-ctx.Done()
	return ctx.Err()
}

func (s *fragSource) Ack(pos Position) {
	s.mu.Lock()
	s.ack = pos
	s.mu.Unlock()
}
func (s *fragSource) Ready() error { return nil }

func (s *fragSource) sentBytes() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sent
}

// fragSizes: every 7th transaction is large (35 events, several fragments
// of frag 8), the others hold 2 events; every 10th holds none.
func fragSizes(i int) int {
	switch {
	case i%7 == 3:
		return 35
	case i%10 == 0:
		return 0
	}
	return 2
}

// fragCheckpointer checks every save: the position is a transaction end
// the source sent, never moves back, and every record of every
// transaction up to it was acknowledged.
type fragCheckpointer struct {
	t     *testing.T
	mu    sync.Mutex
	pos   Position
	saves int
	size  func(int) int
	acked func(id string) bool
}

func (c *fragCheckpointer) Load(context.Context) (Position, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.pos, nil
}

func (c *fragCheckpointer) Save(_ context.Context, pos Position) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if pos.IsZero() || pos.Kind() != "fake" {
		c.t.Errorf("checkpoint saved at %q, which is no transaction end", pos)
		return nil
	}
	if fakeIndex(c.t, pos) < fakeIndex(c.t, c.pos) {
		c.t.Errorf("checkpoint moved backwards: %s -> %s", c.pos, pos)
	}
	for i := fakeIndex(c.t, c.pos) + 1; i <= fakeIndex(c.t, pos); i++ {
		for j := 0; j < c.size(i); j++ {
			if id := fmt.Sprintf("%d.%d", i, j); !c.acked(id) {
				c.t.Errorf("checkpoint %s saved before record %s of its transaction was acknowledged", pos, id)
			}
		}
	}
	c.pos = pos
	c.saves++
	return nil
}

func (c *fragCheckpointer) at() Position {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.pos
}

func fragBatches() PipelineConfig {
	cfg := DefaultPipelineConfig()
	cfg.MaxBatchRecords = 12 // large transactions span several writes
	cfg.CheckpointInterval = 0
	return cfg
}

// TestPipelineFragmentedCheckpointNeverInsideTransaction: with transactions
// that arrive in fragments and span several writes, a sink failing on the
// Nth write, and restarts from the checkpoint, every record is delivered,
// the checkpoint is only ever a transaction end whose records (all
// fragments) were acknowledged, and the observer hears every message id of
// the checkpointed transactions exactly once.
func TestPipelineFragmentedCheckpointNeverInsideTransaction(t *testing.T) {
	const txCount = 120
	sink := &flakySink{acked: map[string]int{}}
	cp := &fragCheckpointer{t: t, size: fragSizes, acked: sink.has}
	obs := &idObserver{}
	for restarts := 0; fakeIndex(t, cp.at()) < txCount; restarts++ {
		if restarts > 200 {
			t.Fatalf("no progress: checkpoint %s after %d restarts", cp.at(), restarts)
		}
		sink.mu.Lock()
		sink.writes, sink.failOn = 0, 2+restarts%6
		sink.mu.Unlock()
		src := &fragSource{txCount: txCount, size: fragSizes, frag: 8, payload: 16}
		p, err := NewPipeline(fragBatches(), src, idRouter{}, sink, cp, zerolog.Nop(), nil)
		if err != nil {
			t.Fatal(err)
		}
		p.Observe(obs)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- p.Run(ctx) }()
		var runErr error
		deadline := time.After(20 * time.Second)
	wait:
		for {
			select {
			case runErr = <-done:
				break wait
			case <-time.After(5 * time.Millisecond):
				if cp.at() == fakePos(txCount) {
					cancel()
					runErr = <-done
					break wait
				}
			case <-deadline:
				t.Fatalf("run %d stalled at checkpoint %s", restarts, cp.at())
			}
		}
		cancel()
		if cp.at() != fakePos(txCount) && (runErr == nil || !strings.Contains(runErr.Error(), "broker exploded")) {
			t.Fatalf("run %d: want the sink failure, got %v", restarts, runErr)
		}
	}
	for i := 1; i <= txCount; i++ {
		for j := 0; j < fragSizes(i); j++ {
			if !sink.has(fmt.Sprintf("%d.%d", i, j)) {
				t.Fatalf("record %d.%d lost", i, j)
			}
		}
	}
	// The observer hears each id of a checkpointed transaction once, in
	// order, however the transaction was split into writes.
	obs.mu.Lock()
	defer obs.mu.Unlock()
	seen := map[string]int{}
	for _, id := range obs.ids {
		seen[id]++
	}
	for i := 1; i <= txCount; i++ {
		for j := 0; j < fragSizes(i); j++ {
			if id := fmt.Sprintf("%d.%d", i, j); seen[id] == 0 {
				t.Fatalf("the observer never heard %s, although its transaction was checkpointed", id)
			}
		}
	}
	t.Logf("%d checkpoint saves, %d ids observed", cp.saves, len(obs.ids))
}

// openAtomicSink is an AtomicSink with open writes, as the transactional
// Kafka sink: records of zero-end calls become visible with the next call
// that has an end. failOn makes that call fail, aborting the open write.
// It also checks the pipeline's side of the contract: a call with an end
// must complete the transaction its first records continue, and a zero-end
// call must not hold whole transactions (they would wait for a later end).
type openAtomicSink struct {
	t       *testing.T
	mu      sync.Mutex
	writes  int
	failOn  int
	reject  string // message id whose record the sink rejects permanently
	open    []string
	visible map[string]int
	pos     Position
}

func (s *openAtomicSink) Load(context.Context) (Position, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.open = nil
	return s.pos, nil
}

func (s *openAtomicSink) WriteAtomic(_ context.Context, recs []Record, end Position) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.writes++
	hadOpen := len(s.open) > 0
	fail := func(err error) error {
		s.open = nil
		if hadOpen {
			return fmt.Errorf("%w: %w", ErrOpenWriteAborted, err)
		}
		return err
	}
	if s.writes == s.failOn {
		return fail(errors.New("transaction aborted"))
	}
	for i := range recs {
		id := string(recs[i].Headers[0].Value)
		if id == s.reject && recs[i].Topic != "dlq" {
			return fail(&recordErr{i, "record " + id + " rejected: INVALID_TIMESTAMP"})
		}
	}
	if end.IsZero() && len(recs) > 0 {
		first, last := txOf(recs[0]), txOf(recs[len(recs)-1])
		if first != last {
			s.t.Errorf("an open write (no end) holds records of transactions %d to %d: a whole transaction waits for a later end", first, last)
		}
	}
	for _, r := range recs {
		s.open = append(s.open, string(r.Headers[0].Value))
	}
	if end.IsZero() {
		return nil
	}
	for _, id := range s.open {
		s.visible[id]++
	}
	s.open, s.pos = nil, end
	return nil
}

func txOf(r Record) int {
	id := string(r.Headers[0].Value)
	if v, ok := headerValue(r.Headers, HeaderMessageID); ok {
		id = v
	}
	i, _ := strconv.Atoi(strings.SplitN(id, ".", 2)[0])
	return i
}

func (s *openAtomicSink) Write(ctx context.Context, recs []Record) error {
	return s.WriteAtomic(ctx, recs, "")
}
func (s *openAtomicSink) Ready() error { return nil }
func (s *openAtomicSink) Close() error { return nil }

// TestPipelineFragmentedExactlyOnce: fragmented transactions go to an
// AtomicSink as open writes; with the Nth write failing (and aborting
// what is open) and restarts from the stored position, every record
// becomes visible exactly once.
func TestPipelineFragmentedExactlyOnce(t *testing.T) {
	const txCount = 100
	sink := &openAtomicSink{t: t, visible: map[string]int{}}
	for restarts := 0; ; restarts++ {
		if restarts > 200 {
			t.Fatal("no progress")
		}
		sink.mu.Lock()
		sink.writes, sink.failOn = 0, 3+restarts%5
		pos := sink.pos
		sink.mu.Unlock()
		if pos == fakePos(txCount) {
			break
		}
		src := &fragSource{txCount: txCount, size: fragSizes, frag: 8, payload: 16}
		p, err := NewPipeline(fragBatches(), src, idRouter{}, sink, nil, zerolog.Nop(), nil)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		go func() {
			for ctx.Err() == nil {
				time.Sleep(5 * time.Millisecond)
				sink.mu.Lock()
				end := sink.pos == fakePos(txCount)
				sink.mu.Unlock()
				if end {
					cancel()
				}
			}
		}()
		err = p.Run(ctx)
		cancel()
		if err != nil && !strings.Contains(err.Error(), "transaction aborted") {
			t.Fatalf("run %d: %v", restarts, err)
		}
	}
	for i := 1; i <= txCount; i++ {
		for j := 0; j < fragSizes(i); j++ {
			if n := sink.visible[fmt.Sprintf("%d.%d", i, j)]; n != 1 {
				t.Fatalf("record %d.%d visible %d times", i, j, n)
			}
		}
	}
}

// TestPipelineFragmentedStopDoesNotWaitForTransactionEnd: SIGTERM while a
// large transaction's fragments are still arriving (its end never comes)
// stops promptly, checkpoints the whole transactions before it, and does
// not checkpoint inside it.
func TestPipelineFragmentedStopDoesNotWaitForTransactionEnd(t *testing.T) {
	for _, mode := range []string{"at-least-once", "exactly-once"} {
		t.Run(mode, func(t *testing.T) {
			size := func(i int) int {
				if i == 6 {
					return 100
				}
				return 2
			}
			src := &fragSource{txCount: 10, size: size, frag: 8, payload: 16, hangAt: 6}
			var p *Pipeline
			var err error
			var at func() Position
			var hasFrag func() bool
			if mode == "at-least-once" {
				sink := &flakySink{acked: map[string]int{}}
				cp := &fragCheckpointer{t: t, size: size, acked: sink.has}
				p, err = NewPipeline(fragBatches(), src, idRouter{}, sink, cp, zerolog.Nop(), nil)
				at, hasFrag = cp.at, func() bool { return sink.has("6.90") }
			} else {
				sink := &openAtomicSink{t: t, visible: map[string]int{}}
				p, err = NewPipeline(fragBatches(), src, idRouter{}, sink, nil, zerolog.Nop(), nil)
				at = func() Position { sink.mu.Lock(); defer sink.mu.Unlock(); return sink.pos }
				hasFrag = func() bool {
					sink.mu.Lock()
					defer sink.mu.Unlock()
					for _, id := range sink.open {
						if id == "6.80" {
							return true
						}
					}
					return false
				}
			}
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- p.Run(ctx) }()
			deadline := time.Now().Add(10 * time.Second)
			for !hasFrag() && time.Now().Before(deadline) {
				time.Sleep(time.Millisecond)
			}
			if !hasFrag() {
				t.Fatalf("the fragments of transaction 6 were not written before its end arrived (checkpoint %s)", at())
			}
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("graceful stop: %v", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the stop waited for a transaction whose end never comes")
			}
			if got := at(); got != fakePos(5) {
				t.Fatalf("checkpoint %s after the stop, want fake:5 (the last whole transaction, never a point inside 6)", got)
			}
		})
	}
}

// TestPipelineFragmentedBadRow: a row the route rejects in the 5th fragment
// of a transaction. With halt the pipeline stops naming it, with every
// transaction before it checkpointed and the checkpoint never inside its
// transaction; with dlq it is dead-lettered and everything else delivered.
func TestPipelineFragmentedBadRow(t *testing.T) {
	size := func(i int) int {
		if i == 9 {
			return 60 // fragments of 8: row 9.35 is in the 5th
		}
		return 2
	}
	t.Run("halt", func(t *testing.T) {
		sink := &flakySink{acked: map[string]int{}}
		cp := &fragCheckpointer{t: t, size: size, acked: sink.has}
		src := &fragSource{txCount: 20, size: size, frag: 8, payload: 16}
		p, err := NewPipeline(fragBatches(), src, idRouter{bad: "9.35"}, sink, cp, zerolog.Nop(), nil)
		if err != nil {
			t.Fatal(err)
		}
		err = p.Run(context.Background())
		var bad *BadRowError
		if !errors.As(err, &bad) || bad.MessageID != "9.35" {
			t.Fatalf("want the bad row 9.35, got %v", err)
		}
		if cp.at() != fakePos(8) {
			t.Fatalf("checkpoint %s, want fake:8 (every transaction before the bad row's, nothing inside it)", cp.at())
		}
		if sink.has("9.35") || sink.has("10.0") {
			t.Fatal("the bad row, or a transaction after it, was written")
		}
	})
	t.Run("dlq", func(t *testing.T) {
		for _, mode := range []string{"at-least-once", "exactly-once"} {
			t.Run(mode, func(t *testing.T) {
				cfg := fragBatches()
				cfg.OnError, cfg.DLQTopic = OnErrorDLQ, "dlq"
				src := &fragSource{txCount: 20, size: size, frag: 8, payload: 16}
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				var delivered func(id string) bool
				var p *Pipeline
				var err error
				var at func() Position
				if mode == "at-least-once" {
					sink := &flakySink{acked: map[string]int{}}
					delivered = func(id string) bool { return sink.has(id) || sink.has("dlq:"+id) }
					cp := &fragCheckpointer{t: t, size: size, acked: delivered}
					p, err = NewPipeline(cfg, src, idRouter{bad: "9.35"}, sink, cp, zerolog.Nop(), nil)
					at = cp.at
				} else {
					sink := &openAtomicSink{t: t, visible: map[string]int{}}
					p, err = NewPipeline(cfg, src, idRouter{bad: "9.35"}, sink, nil, zerolog.Nop(), nil)
					delivered = func(id string) bool { sink.mu.Lock(); defer sink.mu.Unlock(); return sink.visible[id] > 0 }
					at = func() Position { sink.mu.Lock(); defer sink.mu.Unlock(); return sink.pos }
				}
				if err != nil {
					t.Fatal(err)
				}
				done := make(chan error, 1)
				go func() { done <- p.Run(ctx) }()
				deadline := time.Now().Add(10 * time.Second)
				for at() != fakePos(20) && time.Now().Before(deadline) {
					time.Sleep(2 * time.Millisecond)
				}
				cancel()
				if err := <-done; err != nil {
					t.Fatal(err)
				}
				if at() != fakePos(20) {
					t.Fatalf("checkpoint %s, want fake:20", at())
				}
				for i := 1; i <= 20; i++ {
					for j := 0; j < size(i); j++ {
						if id := fmt.Sprintf("%d.%d", i, j); id != "9.35" && !delivered(id) {
							t.Fatalf("row %s lost", id)
						}
					}
				}
			})
		}
	})
}

// TestPipelineFragmentedRejectedInsideOpenWrite: in exactly-once mode a
// record the sink rejects inside a transaction larger than one batch
// aborts the open write; the pipeline stops naming the row, even with
// on_error dlq (the rows before it in its transaction are gone from the
// aborted write), and nothing of that transaction becomes visible.
func TestPipelineFragmentedRejectedInsideOpenWrite(t *testing.T) {
	size := func(i int) int {
		if i == 4 {
			return 60
		}
		return 2
	}
	for _, policy := range []string{OnErrorHalt, OnErrorDLQ} {
		t.Run(policy, func(t *testing.T) {
			cfg := fragBatches()
			cfg.OnError, cfg.DLQTopic = policy, "dlq"
			sink := &openAtomicSink{t: t, visible: map[string]int{}, reject: "4.50"}
			src := &fragSource{txCount: 10, size: size, frag: 8, payload: 16}
			p, err := NewPipeline(cfg, src, idRouter{}, sink, nil, zerolog.Nop(), nil)
			if err != nil {
				t.Fatal(err)
			}
			err = p.Run(context.Background())
			if err == nil || !strings.Contains(err.Error(), "message id 4.50") || !errors.Is(err, ErrOpenWriteAborted) {
				t.Fatalf("want a stop naming row 4.50 after the open write was aborted, got %v", err)
			}
			if sink.pos != fakePos(3) {
				t.Fatalf("stored position %s, want fake:3", sink.pos)
			}
			for id := range sink.visible {
				if strings.HasPrefix(id, "4.") {
					t.Fatalf("row %s of the aborted transaction became visible", id)
				}
			}
		})
	}
}

// blockingSink acknowledges nothing until released: the pipeline must stop
// reading ahead.
type blockingSink struct{ release chan struct{} }

func (s *blockingSink) Write(ctx context.Context, _ []Record) error {
	select {
	case <-s.release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
func (s *blockingSink) Ready() error { return nil }
func (s *blockingSink) Close() error { return nil }

// TestPipelineFragmentedMemoryBound: while the sink does not answer, a
// source sending one huge transaction in fragments (1 KiB rows, fragments
// of MaxFragmentEvents rows) gets only a bounded amount ahead of the sink:
// at most the documented bound, 3 × (MaxBatchBytes + F) + QueueBytes + F,
// whatever the transaction's size (here 200 MiB).
func TestPipelineFragmentedMemoryBound(t *testing.T) {
	const rows, payload = 200_000, 1024
	src := &fragSource{txCount: 1, size: func(int) int { return rows }, frag: MaxFragmentEvents, payload: payload}
	sink := &blockingSink{release: make(chan struct{})}
	cp := &fragCheckpointer{t: t, size: func(int) int { return rows }, acked: func(string) bool { return true }}
	cfg := DefaultPipelineConfig()
	reg := prometheus.NewRegistry()
	p, err := NewPipeline(cfg, src, idRouter{}, sink, cp, zerolog.Nop(), reg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	// Wait until the source stops getting ahead.
	var last int64 = -1
	for stable := 0; stable < 20; {
		time.Sleep(25 * time.Millisecond)
		if n := src.sentBytes(); n == last {
			stable++
		} else {
			last, stable = n, 0
		}
	}
	frag := int64(MaxFragmentEvents * payload)
	bound := 3*(int64(cfg.MaxBatchBytes)+frag) + int64(cfg.QueueBytes) + frag
	t.Logf("source got %d MiB ahead of a sink that does not answer (bound %d MiB, transaction %d MiB)",
		last>>20, bound>>20, int64(rows*payload)>>20)
	if last > bound {
		t.Fatalf("the source got %d bytes ahead of the sink, more than the bound of %d", last, bound)
	}
	cancel()
	close(sink.release)
	<-done
}
