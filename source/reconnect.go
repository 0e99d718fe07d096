package source

import (
	"context"
	"fmt"
	"time"

	"github.com/rs/zerolog"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
	"github.com/outbox-cdc/outbox-cdc/backfill"
	"github.com/outbox-cdc/outbox-cdc/retry"
)

// StableStream is how long a session must have lasted, from its connect to
// its loss, for the backoff to start again from source.reconnect.min. A
// stream that dies at once (a server that accepts the replication request
// and then fails it, a slot taken by another reader, a session killed as it
// starts) keeps doubling the wait instead of retrying every min for ever.
const StableStream = 10 * time.Second

// Reconnector is the one reconnect rule of a source's Run: the backoff
// between sessions, when it starts again from min (after a session that
// streamed for StableStream), and where a failure is counted. A session
// that fails before any stream was up in this Run is a failure to connect
// (outbox_cdc_source_connect_failures_total, the source is Connecting, a
// warning "cannot connect to the <Server> server; retrying"); once a
// stream was up, every transient failure is a reconnection, counted in
// outbox_cdc_source_reconnects_total when it is seen, before the wait, so a
// reader of the metric right after the stream broke sees it.
//
// It is used from Run's goroutine only.
type Reconnector struct {
	// Server names the server kind in messages ("PostgreSQL").
	Server string
	// Prefix starts the readiness error ("postgres source: ").
	Prefix   string
	Address  func() string // the server's host:port, for messages
	SetReady func(error)
	Log      *zerolog.Logger
	Metrics  *outboxcdc.SourceMetrics
	Progress *outboxcdc.ProgressMetrics

	backoff  *retry.Backoff
	streamed bool // a stream was up in this Run
	failures int  // failed connects before the first stream
}

// Start arms the backoff; call it once before the first session.
func (r *Reconnector) Start(b Backoff) { r.backoff = retry.New(b.Policy()) }

// Lost reports whether a stream was up in this Run: the next session is
// a reconnection.
func (r *Reconnector) Lost() bool { return r.streamed }

// Failed records a session that began at began and ended with a transient
// error; streamed says its stream was up. It returns the wait before the
// next session and whether no stream was ever up (never: the caller has
// the failure to connect reported with ConnectFailed; otherwise the
// reconnection is already counted).
func (r *Reconnector) Failed(began time.Time, streamed bool) (wait time.Duration, never bool) {
	r.streamed = r.streamed || streamed
	if streamed && time.Since(began) >= StableStream {
		r.backoff.Reset()
	}
	wait = r.backoff.Next()
	if !r.streamed {
		return wait, true
	}
	r.Metrics.Reconnects.Inc()
	return wait, false
}

// ConnectFailed reports a failed connect before any stream: counted, the
// source Connecting with the cause, one warning; where adds the start or
// resume position to it.
func (r *Reconnector) ConnectFailed(err error, wait time.Duration, where func(*zerolog.Event) *zerolog.Event) {
	r.failures++
	r.Progress.ConnectFailures.Inc()
	addr := r.Address()
	r.SetReady(outboxcdc.Connecting(fmt.Errorf("%scannot connect to the %s server at %s (attempt %d): %w", r.Prefix, r.Server, addr, r.failures, err)))
	ev := r.Log.Warn().Err(err).Str("address", addr).Int("attempt", r.failures).Dur("backoff", wait)
	if where != nil {
		ev = where(ev)
	}
	ev.Msg("cannot connect to the " + r.Server + " server; retrying")
}

// BackfillRetrying is backfill.Loop's Retrying for a source: a failure
// before the first snapshot opened (opened) is a failure to connect, as
// in Run; a later one interrupts the backfill, which resumes after the
// last batch sent. Its attempts are counted apart from Run's.
func (r Reconnector) BackfillRetrying(opened func() bool, start string) func(err error, wait time.Duration) {
	r.failures = 0
	return func(err error, wait time.Duration) {
		if !opened() {
			r.ConnectFailed(err, wait, func(ev *zerolog.Event) *zerolog.Event { return ev.Str("start", start) })
			return
		}
		r.SetReady(fmt.Errorf("%spending backfill: %w", r.Prefix, err))
		r.Log.Warn().Err(err).Dur("backoff", wait).Msg("pending backfill interrupted; resuming after the last batch sent")
	}
}

// Backfill is the pending backfill (source.start: pending) of a source
// with settings c, as every source runs it: retried with c.Reconnect, its
// failures reported by BackfillRetrying, its rows counted as read. check
// reads a stream position of the source; open and started are the
// source's backfill.Loop Open and Started.
func (r Reconnector) Backfill(kind string, c Common, every time.Duration, check func(outboxcdc.Position) error,
	open func(ctx context.Context, st **backfill.State) (backfill.Snapshot, error),
	started func(ctx context.Context, start outboxcdc.Position) error) *backfill.Loop {
	l := &backfill.Loop{
		Kind:        kind,
		Start:       c.Start,
		Batch:       c.Pending.Batch,
		Retry:       c.Reconnect.Policy(),
		CheckStream: check,
		Open:        open,
		Started:     started,
		Sent:        func(rows []backfill.Row) { r.Metrics.EventsRead.Add(float64(len(rows))) },
		Log:         r.Log,
		Every:       every,
		Metrics:     r.Progress,
		LagSeconds:  r.Metrics.LagSeconds,
	}
	l.Retrying = r.BackfillRetrying(l.Opened, c.Start)
	return l
}
