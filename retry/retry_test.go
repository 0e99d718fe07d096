package retry

import (
	"context"
	"errors"
	"testing"
	"time"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
)

func TestBackoffDoublesCapsAndResets(t *testing.T) {
	b := New(Policy{Min: 10 * time.Millisecond, Max: 50 * time.Millisecond})
	var got []time.Duration
	for range 5 {
		got = append(got, b.Next())
	}
	want := []time.Duration{10, 20, 40, 50, 50}
	for i := range want {
		if got[i] != want[i]*time.Millisecond {
			t.Fatalf("waits %v, want %v ms", got, want)
		}
	}
	b.Reset()
	if d := b.Next(); d != 10*time.Millisecond {
		t.Fatalf("after Reset: %s, want 10ms", d)
	}
}

func TestBackoffJitterStaysWithinSpread(t *testing.T) {
	b := New(Policy{Min: 100 * time.Millisecond, Max: 100 * time.Millisecond, Jitter: 0.2})
	for range 200 {
		if d := b.Next(); d < 80*time.Millisecond || d > 120*time.Millisecond {
			t.Fatalf("wait %s outside 100ms ±20%%", d)
		}
	}
}

func TestDoRetriesOnlyTransient(t *testing.T) {
	p := Policy{Min: time.Millisecond, Max: time.Millisecond}
	calls := 0
	err := Do(context.Background(), p, func(context.Context) error {
		calls++
		if calls < 3 {
			return outboxcdc.Transient(errors.New("connection refused"))
		}
		return nil
	}, nil)
	if err != nil || calls != 3 {
		t.Fatalf("transient twice then success: err %v after %d calls", err, calls)
	}

	calls = 0
	perm := outboxcdc.Permanent(errors.New("access denied"), "grant SELECT")
	err = Do(context.Background(), p, func(context.Context) error { calls++; return perm }, nil)
	if !errors.Is(err, perm) || calls != 1 {
		t.Fatalf("permanent: err %v after %d calls, want it at once", err, calls)
	}

	calls = 0
	p.Attempts = 4
	err = Do(context.Background(), p, func(context.Context) error {
		calls++
		return outboxcdc.Transient(errors.New("timeout"))
	}, nil)
	if err == nil || calls != 4 {
		t.Fatalf("attempts cap: err %v after %d calls, want an error after 4", err, calls)
	}
}

func TestDoStopsOnContext(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	err := Do(ctx, Policy{Min: time.Millisecond, Max: 5 * time.Millisecond}, func(context.Context) error {
		return outboxcdc.Transient(errors.New("down"))
	}, nil)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("want the context's error, got %v", err)
	}
}
