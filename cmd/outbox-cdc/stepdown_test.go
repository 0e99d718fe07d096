package main

import (
	"context"
	"errors"
	"testing"
	"time"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
	"github.com/outbox-cdc/outbox-cdc/sink/kafka"
)

// blockingSink fails its writes, or blocks them until release is closed.
type blockingSink struct {
	fail    bool
	release chan struct{}
}

func (s *blockingSink) Write(ctx context.Context, _ []outboxcdc.Record) error {
	if s.fail {
		return errors.New("broker down")
	}
	select {
	case <-s.release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
func (s *blockingSink) Ready() error { return nil }
func (s *blockingSink) Close() error { return nil }

// TestSinkWatchStalledFor: the watch counts from the oldest write not yet
// delivered, across failed attempts (the pipeline retries them), and
// resets on a delivery; an idle sink is never stalled.
func TestSinkWatchStalledFor(t *testing.T) {
	w := &sinkWatch{}
	inner := &blockingSink{fail: true, release: make(chan struct{})}
	s := w.watch(inner)
	if w.stalledFor() != 0 {
		t.Fatal("idle sink stalled")
	}
	if err := s.Write(context.Background(), nil); err == nil {
		t.Fatal("want the failure")
	}
	time.Sleep(30 * time.Millisecond)
	if got := w.stalledFor(); got < 30*time.Millisecond {
		t.Fatalf("after a failed write: stalled %s", got)
	}
	inner.fail = false
	done := make(chan error)
	go func() { done <- s.Write(context.Background(), nil) }()
	time.Sleep(20 * time.Millisecond)
	if got := w.stalledFor(); got < 50*time.Millisecond {
		t.Fatalf("a retry must not restart the count: stalled %s", got)
	}
	close(inner.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := w.stalledFor(); got != 0 {
		t.Fatalf("after a delivery: stalled %s", got)
	}
}

// TestSinkWatchKeepsAtomic: an exactly-once sink stays an AtomicSink
// through the watch (the pipeline stores positions with it).
func TestSinkWatchKeepsAtomic(t *testing.T) {
	var a outboxcdc.AtomicSink = (*kafka.Transactional)(nil)
	if _, ok := (&sinkWatch{}).watch(a).(outboxcdc.AtomicSink); !ok {
		t.Fatal("the watch hid AtomicSink")
	}
	if _, ok := (&sinkWatch{}).watch(&blockingSink{}).(outboxcdc.AtomicSink); ok {
		t.Fatal("a plain sink became atomic")
	}
}
