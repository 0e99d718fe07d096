// Package retry is the connector's one backoff and retry helper: capped
// exponential backoff with jitter, reset by the caller when an attempt made
// progress, and a loop that retries only errors classified as transient
// (outboxcdc.IsTransient). Sources, sinks, the HA lock and the outbox
// lifecycle all retry through it, so they share one set of rules:
//
//   - the first wait is Min, each further wait doubles, up to Max;
//   - each wait is spread by up to ±Jitter of itself, so many connectors
//     restarted together do not reconnect in lockstep;
//   - an attempt that made progress (a stream that delivered events, a
//     write that was acknowledged) resets the next wait to Min;
//   - a permanent error ends the loop at once, and so does ctx.
package retry

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
)

// Policy bounds the waits between attempts.
type Policy struct {
	// Min is the first wait; it doubles with each failed attempt.
	Min time.Duration `yaml:"min"`
	// Max caps the wait between attempts.
	Max time.Duration `yaml:"max"`
	// Jitter is the fraction (0..1) by which a wait may be shortened or
	// lengthened at random; 0 waits exactly.
	Jitter float64 `yaml:"-"`
	// Attempts caps the number of attempts Do makes (0: until ctx is done).
	Attempts int `yaml:"-"`
}

// Default is 200ms doubling to 30s, with ±20% jitter.
func Default() Policy {
	return Policy{Min: 200 * time.Millisecond, Max: 30 * time.Second, Jitter: 0.2}
}

// Validate checks the bounds; key prefixes the messages ("source.reconnect").
func (p Policy) Validate(key string) error {
	switch {
	case p.Min <= 0:
		return fmt.Errorf("%s.min must be positive, got %s", key, p.Min)
	case p.Max < p.Min:
		return fmt.Errorf("%s.max (%s) must not be below %s.min (%s)", key, p.Max, key, p.Min)
	case p.Jitter < 0 || p.Jitter >= 1:
		return fmt.Errorf("%s: jitter must be in [0,1), got %v", key, p.Jitter)
	}
	return nil
}

// Backoff hands out the waits of one retry loop. The zero value is not
// usable; make one with New.
type Backoff struct {
	p    Policy
	next time.Duration
	n    int
}

// New starts a backoff at p.Min.
func New(p Policy) *Backoff {
	return &Backoff{p: p, next: p.Min}
}

// Next returns the wait before the next attempt and doubles the one after.
func (b *Backoff) Next() time.Duration {
	d := b.next
	b.next = min(2*b.next, b.p.Max)
	b.n++
	if b.p.Jitter > 0 {
		spread := float64(d) * b.p.Jitter
		d = time.Duration(float64(d) - spread + rand.Float64()*2*spread)
	}
	return d
}

// Reset makes the next wait Min again; call it after an attempt made
// progress.
func (b *Backoff) Reset() {
	b.next = b.p.Min
	b.n = 0
}

// Failures is the number of waits handed out since the last Reset.
func (b *Backoff) Failures() int { return b.n }

// Wait sleeps for Next(), or until ctx is done (returning its error).
func (b *Backoff) Wait(ctx context.Context) error {
	return Sleep(ctx, b.Next())
}

// Sleep waits d or until ctx is done.
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Do calls op until it returns nil, a permanent error (returned as is), or
// ctx is done (ctx's error, joined with the last failure). Before each wait
// it calls notify, if not nil, with the transient error and the wait, so
// the caller can log and count. With p.Attempts > 0 it returns the last
// error after that many attempts.
func Do(ctx context.Context, p Policy, op func(context.Context) error, notify func(err error, wait time.Duration)) error {
	b := New(p)
	for attempt := 1; ; attempt++ {
		err := op(ctx)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%w (last failure: %v)", ctx.Err(), err)
		}
		if !outboxcdc.IsTransient(err) || (p.Attempts > 0 && attempt >= p.Attempts) {
			return err
		}
		wait := b.Next()
		if notify != nil {
			notify(err, wait)
		}
		if serr := Sleep(ctx, wait); serr != nil {
			return fmt.Errorf("%w (last failure: %v)", serr, err)
		}
	}
}
