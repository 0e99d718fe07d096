package outboxcdc

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// holdingSink holds its first write until the write's context ends (a
// write in flight when the lock is lost) and counts every write issued.
type holdingSink struct {
	mu        sync.Mutex
	writes    int
	cancelled bool
	holding   chan struct{} // closed when the first write is held
}

func (s *holdingSink) Write(ctx context.Context, recs []Record) error {
	s.mu.Lock()
	s.writes++
	first := s.writes == 1
	s.mu.Unlock()
	if !first {
		return nil
	}
	close(s.holding)
	<-ctx.Done()
	s.mu.Lock()
	s.cancelled = true
	s.mu.Unlock()
	return ctx.Err()
}

func (s *holdingSink) WriteAtomic(ctx context.Context, recs []Record, end Position) error {
	return s.Write(ctx, recs)
}
func (s *holdingSink) Load(context.Context) (Position, error) { return "", nil }
func (s *holdingSink) Ready() error                           { return nil }
func (s *holdingSink) Close() error                           { return nil }

// TestPipelineAbortDrainsNothing: Abort while a write is in flight and
// transactions are read ahead cancels the write and issues no other, in
// both delivery modes; a graceful stop would have written them all.
func TestPipelineAbortDrainsNothing(t *testing.T) {
	for _, mode := range []string{"at-least-once", "exactly-once"} {
		t.Run(mode, func(t *testing.T) {
			sink := &holdingSink{holding: make(chan struct{})}
			var cp Checkpointer = &memCheckpointer{t: t, perTx: 1, sink: func() *flakySink { return &flakySink{acked: map[string]int{}} }}
			if mode == "exactly-once" {
				cp = nil
			}
			p, err := NewPipeline(smallBatches(), &fakeSource{txCount: 200, perTx: 1, stayOpen: true}, idRouter{}, sink, cp, zerolog.Nop(), nil)
			if err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- p.Run(context.Background()) }()
			select {
			case <-sink.holding:
			case <-time.After(10 * time.Second):
				t.Fatal("no write")
			}
			time.Sleep(100 * time.Millisecond) // let the queue fill behind the held write
			cause := errors.New("the HA lock was lost")
			p.Abort(cause)
			select {
			case err = <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("Run did not return after Abort")
			}
			if !errors.Is(err, ErrAborted) || !errors.Is(err, cause) {
				t.Fatalf("Run returned %v, want ErrAborted and the cause", err)
			}
			sink.mu.Lock()
			defer sink.mu.Unlock()
			if !sink.cancelled {
				t.Fatal("the write in flight was not cancelled")
			}
			if sink.writes != 1 {
				t.Fatalf("%d writes issued after the abort (read-ahead drained into the sink)", sink.writes-1)
			}
		})
	}
}

// TestPipelineFenceRefusesTheWrite: once the fence refuses, that write and
// every later one are not issued, and Run returns the fence's error
// without checkpointing anything beyond what was written.
func TestPipelineFenceRefusesTheWrite(t *testing.T) {
	for _, mode := range []string{"at-least-once", "exactly-once"} {
		t.Run(mode, func(t *testing.T) {
			sink := &atomicSink{flakySink: flakySink{acked: map[string]int{}}}
			var cp Checkpointer = &memCheckpointer{t: t, perTx: 1, sink: func() *flakySink { return &sink.flakySink }}
			if mode == "exactly-once" {
				cp = nil
			}
			p, err := NewPipeline(smallBatches(), &fakeSource{txCount: 200, perTx: 1, stayOpen: true}, idRouter{}, sink, cp, zerolog.Nop(), nil)
			if err != nil {
				t.Fatal(err)
			}
			expired := errors.New("lease expired")
			var mu sync.Mutex
			allowed := 3
			p.SetFence(func() error {
				mu.Lock()
				defer mu.Unlock()
				if allowed == 0 {
					return expired
				}
				allowed--
				return nil
			})
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			err = p.Run(ctx)
			if !errors.Is(err, expired) || !errors.Is(err, ErrAborted) {
				t.Fatalf("Run returned %v, want the fence's error", err)
			}
			sink.mu.Lock()
			defer sink.mu.Unlock()
			if sink.writes != 3 {
				t.Fatalf("%d writes issued, want the 3 the fence let through", sink.writes)
			}
		})
	}
}
