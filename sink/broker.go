// Package sink is the delivery kit every sink uses, and the stdout sink.
//
// The kit holds what the sinks share: the delivery keys (Config), the
// byte budget of records in flight, the record-size formula, health
// tracking, ErrClosed, and Writer, the delivery loop of the message-broker
// sinks (RabbitMQ, NATS JetStream, Redis Streams, SQS, HTTP): each supplies a Conn
// that publishes records and reports the broker's answer to each; Writer
// turns that into an outboxcdc.Sink whose Write returns nil only when the
// broker acknowledged every record, retries transient failures with
// backoff on a fresh connection, and keeps per-key order across retries.
//
// # Retries and order
//
// A Write is a series of attempts. An attempt hands the records still to
// deliver to one connection, in record order, and waits for an answer to
// each (a publisher confirm, a PubAck, an XADD reply) for at most
// ack_timeout after it was sent: the first answer overdue gives the
// connection up, and every record still unanswered with it (SendWindow).
// A broker answers the records of one connection in the order they were
// sent as far as their order matters, but a record can fail while a
// later one of the same key succeeds (a nack for a full queue, an ack
// lost with the connection). So after an attempt with failures the sink
// sends again, for every key (Record.Key) that saw a failure, the first
// failed record and every later record of that key, acknowledged or not,
// in their original order. A consumer may see a key's records twice (at
// most the records of that key in one Write). The first copies stay in
// commit order, unless the broker refused a record while it stored a
// later one of its key (a nack); the last copies too, unless a copy sent
// on a connection given up reaches the broker after the retry. Sockets
// are closed with a reset (Sockets) to make that rarer; docs/sinks.md
// ("Copies and order") says what holds. A connection that failed is
// dropped; the next attempt dials a new one. Clients' own reconnect and
// retry loops are turned off: this is the one retry layer.
//
// A permanent failure (a record too large, unroutable, refused by the
// broker's rules; bad credentials) ends the Write at once with an *Error
// naming the record, so pipeline.on_error applies.
//
// # Memory
//
// At most max_in_flight records and max_in_flight_bytes of them are
// published and unanswered at a time (the Conn keeps to it); the records
// themselves are the pipeline's batch, held until Write returns.
package sink

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
	"github.com/outbox-cdc/outbox-cdc/retry"
)

// Msg is one record of an attempt and, after Send, the broker's answer.
type Msg struct {
	Rec *outboxcdc.Record
	// Index is the record's position in the slice given to Write.
	Index int
	// Again counts the copies of this record the broker already
	// acknowledged during this Write (it is sent again to restore its
	// key's order). A sink whose broker drops duplicates by id (JetStream)
	// must give such a copy a distinct id, or it would be dropped.
	Again int
	// Err is the outcome, set by Send: nil when the broker acknowledged
	// the record, else an error marked with outboxcdc.Transient or
	// outboxcdc.Permanent (unmarked errors count as permanent).
	Err error
	// Duplicate is set by Send when the broker acknowledged the record as
	// a duplicate of one it already stored.
	Duplicate bool
	acked     bool
}

// Conn is one connection to the broker.
type Conn interface {
	// Send publishes msgs in order, keeping at most max_in_flight records
	// and max_in_flight_bytes unanswered, and sets every msg's Err. It
	// returns once each msg has its outcome (an unanswered one gets the
	// connection's error, or a transient timeout after ack_timeout), or
	// with ctx's error when ctx ends first. Called from one goroutine at a
	// time.
	Send(ctx context.Context, msgs []*Msg) error
	// Err returns why the connection is unusable, or nil while it is
	// usable. Safe to call from any goroutine.
	Err() error
	// Probe checks that the broker answers on this connection, for Ready
	// while no Write proves it. Called from the probe goroutine,
	// concurrently with Send.
	Probe(ctx context.Context) error
	// Close releases the connection. Called once, after the last Send
	// returned.
	Close() error
}

// Dialer connects to the broker. Its errors are classified: transient
// (broker down, unreachable) are retried; permanent ones (credentials,
// a missing exchange or stream) end the Write.
type Dialer func(ctx context.Context) (Conn, error)

// Error is a record, or the connection, the sink could not deliver to.
// Write returns it for the first permanent failure.
type Error struct {
	// Sink names the broker: rabbitmq, nats, redis.
	Sink string
	// Index is the record's position in the slice given to Write; -1
	// when the failure concerns no single record (the connection).
	Index int
	// Dest is the record's destination (Record.Topic).
	Dest      string
	Err       error
	Permanent bool
}

func (e *Error) Error() string {
	kind := "retryable"
	if e.Permanent {
		kind = "permanent"
	}
	if e.Index < 0 {
		return fmt.Sprintf("%s: %s error: %v", e.Sink, kind, e.Err)
	}
	return fmt.Sprintf("%s: %s error publishing record %d to %q: %v", e.Sink, kind, e.Index, e.Dest, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// FailedRecord implements outboxcdc.RecordError.
func (e *Error) FailedRecord() (int, bool) { return e.Index, e.Permanent }

var _ outboxcdc.RecordError = (*Error)(nil)

// NoRecord marks a failure that concerns the connection rather than the
// record it was reported for (a channel closed by the broker fails every
// record in flight on it): a permanent one then ends the Write naming no
// record, so no row is blamed (or dead-lettered) for it.
func NoRecord(err error) error { return &noRecord{err} }

type noRecord struct{ err error }

func (e *noRecord) Error() string { return e.err.Error() }
func (e *noRecord) Unwrap() error { return e.err }

// RetryAfter marks a transient err with the wait the broker asked for
// before the next attempt (an HTTP Retry-After): the Write waits at least
// that long, longer when its own backoff is longer.
func RetryAfter(err error, d time.Duration) error { return &retryAfter{err, d} }

type retryAfter struct {
	err error
	d   time.Duration
}

func (e *retryAfter) Error() string { return e.err.Error() }
func (e *retryAfter) Unwrap() error { return e.err }

// askedWait is the longest wait the failed msgs asked for (RetryAfter).
func askedWait(msgs []*Msg) time.Duration {
	var d time.Duration
	for _, m := range msgs {
		var ra *retryAfter
		if m.Err != nil && errors.As(m.Err, &ra) && ra.d > d {
			d = ra.d
		}
	}
	return d
}

// GaveUp is the error a Write returns when its context ends while left of
// its total records are still unacknowledged after attempts: it names the
// sink and the last failure, and wraps ctxErr.
func GaveUp(sink string, left, total, attempts int, last, ctxErr error) error {
	return fmt.Errorf("%s: %d of %d records not acknowledged after %d attempts (last failure: %v): %w",
		sink, left, total, attempts, last, ctxErr)
}

// ErrClosed is the cause of the permanent error Write returns after Close.
var ErrClosed = errors.New("sink is closed")

// Writer is an outboxcdc.Sink over a Dialer.
type Writer struct {
	sink string
	cfg  Config
	dial Dialer
	log  zerolog.Logger
	m    *outboxcdc.SinkMetrics

	writing sync.Mutex // held by Write, so Close can wait for it

	mu     sync.Mutex
	conn   Conn
	closed bool

	health *Health

	stop      chan struct{}
	probeDone chan struct{}
}

// New returns a Writer for the broker named sink (rabbitmq, nats, redis).
// It does not connect at once: a probe goroutine does in the background
// and Ready says when it has, so starting while the broker is down is not
// an error. Metrics are registered on reg (nil registers none).
func New(sink string, cfg Config, dial Dialer, log zerolog.Logger, reg prometheus.Registerer) (*Writer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	w := &Writer{
		sink: sink, cfg: cfg, dial: dial,
		log:       log,
		m:         outboxcdc.NewSinkMetrics(reg),
		stop:      make(chan struct{}),
		probeDone: make(chan struct{}),
	}
	w.health = NewHealth(sink, sink+": not connected yet", sink+" reachable", w.m, log)
	go w.probeLoop()
	return w, nil
}

// Write publishes records and returns nil once the broker acknowledged
// every one. See the package documentation for retries and order. It
// returns a permanent *Error, or ctx's error (naming the last failure)
// when ctx ends first.
func (w *Writer) Write(ctx context.Context, records []outboxcdc.Record) error {
	if len(records) == 0 {
		return nil
	}
	w.writing.Lock()
	defer w.writing.Unlock()
	start := time.Now()
	msgs := make([]Msg, len(records))
	todo := make([]*Msg, len(records))
	for i := range records {
		r := &records[i]
		msgs[i] = Msg{Rec: r, Index: i}
		todo[i] = &msgs[i]
		n := r.Size()
		if n > w.cfg.MaxMessageBytes {
			w.m.Permanent.Inc()
			return &Error{Sink: w.sink, Index: i, Dest: r.Topic, Permanent: true, Err: outboxcdc.Permanent(
				fmt.Errorf("record of %d bytes is larger than sink.max_message_bytes (%d)", n, w.cfg.MaxMessageBytes),
				"raise sink.max_message_bytes if the broker takes it, or keep such payloads out of the outbox")}
		}
	}
	bytes := PayloadBytes(records)
	// Close interrupts a Write (its Send waits for answers otherwise).
	parent := ctx
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-w.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	b := retry.New(w.cfg.policy())
	var lastErr error
	var warns outboxcdc.LogThrottle
	for n := 1; ; n++ {
		if err := w.attempt(ctx, todo); err != nil {
			if w.stopped() {
				return w.closedErr()
			}
			if parent.Err() != nil && lastErr != nil {
				return GaveUp(w.sink, len(todo), len(records), n, lastErr, ctx.Err())
			}
			return err
		}
		next, first, failures := resendSet(todo)
		if first == nil {
			for _, m := range todo {
				if m.Duplicate {
					w.m.Duplicates.Inc()
				}
			}
			w.m.Bytes.Add(bytes)
			w.m.WriteSeconds.Observe(time.Since(start).Seconds())
			w.health.Reached()
			if n > 1 {
				w.log.Info().Int("records", len(records)).Int("attempts", n).Dur("took", time.Since(start)).
					Msg("write succeeded after retries")
			}
			return nil
		}
		if !outboxcdc.IsTransient(first.Err) {
			w.m.Permanent.Inc()
			e := &Error{Sink: w.sink, Index: first.Index, Dest: first.Rec.Topic, Err: first.Err, Permanent: true}
			var nr *noRecord
			if errors.As(first.Err, &nr) {
				e.Index, e.Dest = -1, ""
			}
			w.log.Debug().Err(e).Msg("the broker refused a record permanently") // the pipeline reports it (on_error)
			return e
		}
		w.m.Retryable.Add(float64(failures))
		lastErr = &Error{Sink: w.sink, Index: first.Index, Dest: first.Rec.Topic, Err: first.Err}
		w.health.Failed(lastErr)
		wait := b.Next()
		if asked := askedWait(next); asked > wait {
			wait = asked
		}
		// One warning when a Write starts failing, then one per
		// WarnInterval while it keeps failing; every attempt at debug.
		warns.Event(&w.log).Err(lastErr).Int("attempt", n).Int("resend", len(next)).Int("records", len(records)).
			Dur("failing_for", time.Since(start).Round(time.Millisecond)).Dur("backoff", wait).
			Msg("write failed, retrying; nothing is checkpointed until it succeeds")
		todo = next
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			if w.stopped() {
				return w.closedErr()
			}
			return GaveUp(w.sink, len(todo), len(records), n, lastErr, ctx.Err())
		}
	}
}

// attempt sends todo over the current connection (dialing one if needed)
// and leaves every msg with its outcome. It returns an error only to end
// the Write: ctx done, the sink closed, a permanent dial failure.
func (w *Writer) attempt(ctx context.Context, todo []*Msg) error {
	for _, m := range todo {
		if m.Err == nil && m.acked {
			m.Again++
		}
		m.Err, m.acked, m.Duplicate = nil, false, false
	}
	c, err := w.connect(ctx)
	if err != nil {
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.Is(err, ErrClosed):
			return w.closedErr()
		case !outboxcdc.IsTransient(err):
			w.m.Permanent.Inc()
			e := &Error{Sink: w.sink, Index: -1, Err: err, Permanent: true}
			w.log.Debug().Err(e).Msg("cannot connect") // returned: the connector logs it once
			return e
		}
		for _, m := range todo {
			m.Err = err
		}
		return nil
	}
	if err := c.Send(ctx, todo); err != nil {
		w.retire(c)
		return err
	}
	for _, m := range todo {
		m.acked = m.Err == nil
	}
	if c.Err() != nil {
		w.retire(c)
	}
	return nil
}

// resendSet returns, after an attempt in which every msg got its outcome,
// the msgs to send again: per key, the first failed msg and every later
// msg of that key. first is the first failed msg (nil when every one was
// acknowledged); a permanent failure comes before transient ones.
func resendSet(todo []*Msg) (next []*Msg, first *Msg, failures int) {
	var from map[string]int
	for _, m := range todo {
		if m.Err == nil {
			continue
		}
		failures++
		if first == nil || !outboxcdc.IsTransient(m.Err) && outboxcdc.IsTransient(first.Err) {
			first = m
		}
		if from == nil {
			from = map[string]int{}
		}
		if _, ok := from[string(m.Rec.Key)]; !ok {
			from[string(m.Rec.Key)] = m.Index
		}
	}
	if first == nil {
		return nil, nil, 0
	}
	for _, m := range todo {
		if i, ok := from[string(m.Rec.Key)]; m.Err != nil || ok && m.Index > i {
			next = append(next, m)
		}
	}
	return next, first, failures
}

// connect returns the current connection, dialing one if there is none.
func (w *Writer) connect(ctx context.Context) (Conn, error) {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return nil, ErrClosed
	}
	if w.conn != nil {
		c := w.conn
		w.mu.Unlock()
		return c, nil
	}
	w.mu.Unlock()
	dctx, cancel := context.WithTimeout(ctx, w.cfg.DialTimeout)
	defer cancel()
	c, err := w.dial(dctx)
	if err != nil {
		if ctx.Err() == nil && dctx.Err() != nil && !outboxcdc.IsClassified(err) {
			err = outboxcdc.Transient(fmt.Errorf("no connection within sink.dial_timeout (%s): %w", w.cfg.DialTimeout, err))
		}
		w.health.Failed(err)
		return nil, err
	}
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		c.Close()
		return nil, ErrClosed
	}
	if cur := w.conn; cur != nil { // the probe dialed meanwhile
		w.mu.Unlock()
		c.Close() // not under w.mu: a close may wait for the broker
		return cur, nil
	}
	w.conn = c
	w.mu.Unlock()
	w.health.Reached()
	return c, nil
}

// retire drops c (if it is current) and closes it.
func (w *Writer) retire(c Conn) {
	w.mu.Lock()
	if w.conn == c {
		w.conn = nil
	}
	w.mu.Unlock()
	if err := c.Err(); err != nil {
		w.health.Failed(err)
	}
	c.Close()
}

func (w *Writer) stopped() bool {
	select {
	case <-w.stop:
		return true
	default:
		return false
	}
}

func (w *Writer) closedErr() error {
	return &Error{Sink: w.sink, Index: -1, Err: ErrClosed, Permanent: true}
}

// Ready returns nil while the broker answers.
func (w *Writer) Ready() error { return w.health.Ready() }

// Close stops the sink: a Write in progress returns a permanent error,
// then the connection is closed.
func (w *Writer) Close() error {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return nil
	}
	w.closed = true
	w.mu.Unlock()
	close(w.stop)
	<-w.probeDone
	w.writing.Lock()
	defer w.writing.Unlock()
	w.mu.Lock()
	c := w.conn
	w.conn = nil
	w.mu.Unlock()
	if c != nil {
		c.Close()
	}
	w.health.Closed(ErrClosed)
	w.log.Info().Msg(w.sink + " sink closed")
	return nil
}

// probeLoop keeps Ready current while no Write proves the connection: it
// connects early (so the first Write does not wait for it) and, when the
// broker did not answer for ready_interval, asks it.
func (w *Writer) probeLoop() {
	defer close(w.probeDone)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-w.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	t := time.NewTicker(w.cfg.ReadyInterval)
	defer t.Stop()
	for {
		w.probe(ctx)
		select {
		case <-w.stop:
			return
		case <-t.C:
		}
	}
}

func (w *Writer) probe(ctx context.Context) {
	if w.health.AnsweredWithin(w.cfg.ReadyInterval) {
		return
	}
	c, err := w.connect(ctx)
	if err != nil {
		return // connect recorded the failure
	}
	if w.health.AnsweredWithin(w.cfg.ReadyInterval) {
		return // just connected
	}
	pctx, pcancel := context.WithTimeout(ctx, w.cfg.DialTimeout)
	err = c.Probe(pctx)
	pcancel()
	if ctx.Err() != nil {
		return
	}
	w.health.Probed(err, w.cfg.ReadyInterval)
}
