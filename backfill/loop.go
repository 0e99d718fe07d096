package backfill

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
	"github.com/outbox-cdc/outbox-cdc/retry"
)

// Snapshot is one attempt's consistent view of the outbox table, opened by
// a source (Loop.Open). Its methods are called from the source's Run
// goroutine, one at a time.
type Snapshot interface {
	// Read returns the rows that match the pending WHERE with key in
	// (st.Last, st.High], in key order, at most limit of them.
	Read(ctx context.Context, st State, limit int) ([]Row, error)
	// Finish is called once the last batch (shorter than the limit) was
	// handed on; total counts the rows of this attempt.
	Finish(ctx context.Context, st State, total int) error
	// Close releases the snapshot; called after every attempt.
	Close()
	// Count returns how many rows Read will return from st on, in all
	// (for progress: called once per attempt, before the first Read).
	Count(ctx context.Context, st State) (int64, error)
}

// Loop is the backfill both sources run before streaming: it decides
// whether the run starts with one, publishes the pending rows batch by
// batch as synthetic transactions, and retries transient failures from the
// last batch sent. What is database specific (the snapshot and the stream
// position consistent with it) is the source's Open.
type Loop struct {
	Kind  string // the source's position kind
	Start string // source.start
	Batch int    // source.pending.batch
	Retry retry.Policy
	// CheckStream refuses the stream position of a pending checkpoint that
	// the source cannot stream from.
	CheckStream func(outboxcdc.Position) error
	// Open opens a snapshot. *st is nil on a first backfill: Open then
	// takes the stream position consistent with the snapshot and the
	// highest pending key, and sets *st.
	Open func(ctx context.Context, st **State) (Snapshot, error)
	// Started, when set, is called on a first backfill once Open has set
	// the state, before the first row is read: with the state's position
	// (no row published yet, the highest pending key, the stream
	// position), which it makes durable (the source's
	// outboxcdc.StartReporter), so that a crash before the first batch is
	// checkpointed resumes this backfill instead of starting another one
	// with a later stream position. An error ends Run with it.
	Started func(ctx context.Context, start outboxcdc.Position) error
	// Sent, when set, is called after each batch was handed on.
	Sent func(rows []Row)
	// Retrying, when set, is called with each transient failure and the
	// wait before the next attempt.
	Retrying func(err error, wait time.Duration)

	// Progress: progress lines on Log at most once per Every (0:
	// outboxcdc.DefaultProgressInterval), the rows published and expected
	// on Metrics, and the source's lag (LagSeconds: at least the age of
	// the snapshot, which everything committed since waits behind) after
	// every batch. Each may be nil.
	Log        *zerolog.Logger
	Every      time.Duration
	Metrics    *outboxcdc.ProgressMetrics
	LagSeconds prometheus.Gauge

	published int64        // rows handed on in this Run
	snapAt    time.Time    // when the first snapshot of this Run was opened
	snapNanos atomic.Int64 // snapAt for the lag ticker
	lastLine  time.Time
	lastRows  int64
}

// Run publishes the pending rows when the run starts with a backfill: from
// a checkpoint in the pending form, or from no checkpoint when source.start
// is pending. It returns the position streaming starts from: from itself
// when there is no backfill, else the stream position of the backfill's
// snapshot. It returns ctx.Err() when ctx is done, and a permanent error
// (outboxcdc.IsTransient false) as it is.
func (l *Loop) Run(ctx context.Context, from outboxcdc.Position, out chan<- outboxcdc.Tx) (outboxcdc.Position, error) {
	var st *State
	switch {
	case IsPending(from):
		v, err := Parse(from, l.Kind)
		if err != nil {
			return "", outboxcdc.Permanent(err, "")
		}
		if err := l.CheckStream(v.StreamPosition(l.Kind)); err != nil {
			return "", outboxcdc.Permanent(fmt.Errorf("pending checkpoint: %w", err), "")
		}
		st = &v
	case from.IsZero() && l.Start == StartPending:
	default:
		return from, nil
	}
	if l.LagSeconds != nil {
		// The lag grows while a batch waits for the sink, too.
		tctx, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); l.tickLag(tctx) }()
		defer func() { stop(); <-done }() // no late Set after the stream's first
	}
	err := retry.Do(ctx, l.Retry, func(ctx context.Context) error { return l.attempt(ctx, &st, out) }, l.Retrying)
	if ctx.Err() != nil {
		return "", ctx.Err()
	}
	if err != nil {
		return "", err
	}
	return st.StreamPosition(l.Kind), nil
}

// attempt publishes the rows after (*st).Last in one snapshot.
func (l *Loop) attempt(ctx context.Context, st **State, out chan<- outboxcdc.Tx) error {
	first := *st == nil
	snap, err := l.Open(ctx, st)
	if err != nil {
		return err
	}
	defer snap.Close()
	if l.snapAt.IsZero() {
		l.snapAt = time.Now()
		l.snapNanos.Store(l.snapAt.UnixNano())
		l.lastLine, l.lastRows = l.snapAt, 0
	}
	remaining, err := snap.Count(ctx, **st)
	if err != nil {
		return err
	}
	if l.Metrics != nil {
		l.Metrics.BackfillPublished.Set(float64(l.published))
		l.Metrics.BackfillExpected.Set(float64(l.published + remaining))
	}
	expected := l.published + remaining
	if first && l.Started != nil {
		if err := l.Started(ctx, (**st).Encode(l.Kind)); err != nil {
			*st = nil // a retry starts afresh, and reports again
			return err
		}
	}
	total := 0
	for {
		rows, err := snap.Read(ctx, **st, l.Batch)
		if err != nil {
			return err
		}
		done := len(rows) < l.Batch
		select {
		case out <- Tx(l.Kind, **st, rows, done):
		case <-ctx.Done():
			return ctx.Err()
		}
		if len(rows) > 0 {
			(*st).Last = rows[len(rows)-1].Key
		}
		total += len(rows)
		if l.Sent != nil {
			l.Sent(rows)
		}
		l.progress(**st, int64(len(rows)), expected)
		if done {
			return snap.Finish(ctx, **st, total)
		}
	}
}

// Opened reports whether a snapshot was opened in this Run: before, a
// failure is a failure to connect, not an interruption.
func (l *Loop) Opened() bool { return !l.snapAt.IsZero() }

// tickLag sets the lag to the snapshot's age every second until ctx is
// done.
func (l *Loop) tickLag(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			if at := l.snapNanos.Load(); at != 0 {
				l.LagSeconds.Set(now.Sub(time.Unix(0, at)).Seconds())
			}
		}
	}
}

// progress records a batch of n rows handed on: the metrics, the lag, and
// a progress line when Every has passed since the last one.
func (l *Loop) progress(st State, n, expected int64) {
	l.published += n
	now := time.Now()
	if l.Metrics != nil {
		l.Metrics.BackfillPublished.Set(float64(l.published))
	}
	if l.LagSeconds != nil {
		l.LagSeconds.Set(now.Sub(l.snapAt).Seconds())
	}
	every := l.Every
	if every <= 0 {
		every = outboxcdc.DefaultProgressInterval
	}
	if l.Log == nil || now.Sub(l.lastLine) < every {
		return
	}
	dt := now.Sub(l.lastLine).Seconds()
	rate := float64(l.published-l.lastRows) / dt
	ev := l.Log.Info().Int64("rows_published", l.published).Int64("rows_expected", expected).
		Float64("rows_per_second", float64(int64(rate*10+0.5))/10).
		Int64("last_key", st.Last).Int64("high_key", st.High).Str("stream_position", st.Stream).
		Float64("behind_seconds", float64(int64(now.Sub(l.snapAt).Seconds()*10+0.5))/10)
	if left := expected - l.published; left > 0 && rate > 0 {
		ev = ev.Float64("eta_seconds", float64(int64(float64(left)/rate*10+0.5))/10)
	}
	ev.Msg("pending backfill: progress")
	l.lastLine, l.lastRows = now, l.published
}
