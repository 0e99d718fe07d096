// Package contract is the in-process contract every sink keeps: Run holds
// one outboxcdc.Sink, built against a real broker, to the promises the
// pipeline relies on, the way Conduit's AcceptanceTest and Redpanda
// Connect's integration.StreamTests hold every connector to one suite.
// (test/sinktest is its process-level sibling: the same promises through
// the outbox-cdc binary, with real sources.)
//
// A sink's test supplies a Factory. For each case the factory makes a
// fresh destination (unique names, removed at test end), a sink writing
// to it through a testenv.Proxy in front of the broker, and a reader that
// reads back, as an independent client, what landed. Run checks:
//
//   - OrderPerKey: every record of several Writes lands once, intact,
//     each key's records in the order they were written.
//   - AckedMeansLanded: a Write whose records were lost on the way (sent
//     into a silent path, then the connection cut) returns nil only once
//     every one of its records is readable; nothing acknowledged is
//     missing. This is what lets the pipeline checkpoint after a nil
//     Write.
//   - BrokerDownThenBack (cut, silence): while the broker is unreachable
//     Write neither returns nor fails (back-pressure, retries), Ready
//     reports the failure; once the path heals Write returns nil, every
//     record landed, each key's last copies in order, Ready is nil again.
//   - TooLarge: a record above the size limit fails the Write at once with
//     the error class the pipeline dead-letters or halts on: a permanent
//     outboxcdc.RecordError naming that record; the sink stays usable and
//     the batch written again with the record replaced (as on_error: dlq
//     does) lands; the refused record never lands.
//   - CloseDuringWrite (blocked, busy): Close while a Write is in flight
//     returns promptly and without panicking; the Write returns nil (all
//     landed) or the sink's closed error: permanent, naming no record (so
//     no row is dead-lettered for it), wrapping Env.ErrClosed; later
//     Writes return it too, Ready fails, nothing lands after Close, a
//     second Close is harmless.
//
// The contract writes records with Topic Env.Topic, keys "agg-0".."agg-6",
// values {"seq":N} and a unique message id in Record.MessageID and in the
// header "id". A factory should configure short timeouts (ack timeout a
// few seconds, retry backoff up to 500ms, ready interval 200ms or less) so
// that every case ends within a minute.
package contract

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
	"github.com/outbox-cdc/outbox-cdc/test/testenv"
)

// Factory makes a fresh sink and destination for one case. It fails t
// (or skips it, through testenv.Unavailable) when it cannot. The sink is
// closed at test end by the factory (t.Cleanup); the contract may close
// it earlier, so Close must be safe to call twice.
type Factory func(t *testing.T, o Options) *Env

// Options are what a case asks of the factory.
type Options struct {
	// MaxMessageBytes, when not zero, asks for a limit above which
	// records are refused: the sink's own max_message_bytes, or the
	// destination's (a stream's max message size) where the broker has
	// one. Records whose Record.Size is below a quarter of it must pass.
	MaxMessageBytes int
}

// Env is one sink under test and its destination.
type Env struct {
	// Sink writes through Proxy to a destination nothing else writes to.
	Sink outboxcdc.Sink
	// Topic is the Record.Topic the contract writes every record to (a
	// topic, routing key, subject or stream key the destination captures).
	Topic string
	// Read returns every message that landed in the destination since the
	// Env was made, as an independent client reads it now, without
	// waiting: each key's messages in the order the broker stores them.
	// For a destination read by consuming (a queue), Read keeps what it
	// consumed and returns it again with what arrived since.
	Read func(t *testing.T) []Message
	// Proxy stands between the sink and the broker; every connection of
	// the sink goes through it.
	Proxy *testenv.Proxy
	// ErrClosed, when set, is what the error of a Write during or after
	// Close wraps (errors.Is).
	ErrClosed error
}

// Message is one message read back.
type Message struct {
	// ID is the record's message id as stored (Record.MessageID or the
	// "id" header), without any suffix the sink adds to a copy.
	ID string
	// Key is the record key, Value the record value as stored.
	Key, Value string
}

// Timing bounds: generous, as other tests share the machine. They bound
// how long a case waits for something that must happen; none is a speed
// the sink must reach.
const (
	writeTimeout = 90 * time.Second // a Write that must succeed
	noticeWithin = 20 * time.Second // Ready failing with the broker gone
	// Close, and the Write it stops: the Kafka sink gives records in
	// flight up to 10s to be answered before it abandons its producer.
	closeWithin = 20 * time.Second
	keys        = 7
)

// Run runs every case of the contract against the sinks factory makes.
func Run(t *testing.T, factory Factory) {
	t.Run("OrderPerKey", func(t *testing.T) { testOrder(t, factory) })
	t.Run("AckedMeansLanded", func(t *testing.T) { testAcked(t, factory) })
	t.Run("BrokerDownThenBack", func(t *testing.T) {
		t.Run("cut", func(t *testing.T) { testDown(t, factory, true) })
		t.Run("silence", func(t *testing.T) { testDown(t, factory, false) })
	})
	t.Run("TooLarge", func(t *testing.T) { testTooLarge(t, factory) })
	t.Run("CloseDuringWrite", func(t *testing.T) {
		t.Run("blocked", func(t *testing.T) { testClose(t, factory, true) })
		t.Run("busy", func(t *testing.T) { testClose(t, factory, false) })
	})
}

// gen makes the contract's records, numbering them on from where the
// last batch ended, so every id of a case is unique.
type gen struct {
	topic string
	next  int
	all   []outboxcdc.Record
	rank  map[string]int
}

func newGen(e *Env) *gen { return &gen{topic: e.Topic, rank: map[string]int{}} }

func (g *gen) batch(n int) []outboxcdc.Record {
	rs := make([]outboxcdc.Record, n)
	for i := range rs {
		seq := g.next
		g.next++
		id := fmt.Sprintf("c-%d", seq)
		rs[i] = outboxcdc.Record{
			Topic: g.topic, Key: []byte(fmt.Sprintf("agg-%d", seq%keys)),
			Value:     []byte(fmt.Sprintf(`{"seq":%d}`, seq)),
			Headers:   []outboxcdc.Header{{Key: "id", Value: []byte(id)}},
			Timestamp: time.UnixMilli(1700000000123), MessageID: id, EventType: "CONTRACT",
		}
		g.rank[id] = seq
	}
	g.all = append(g.all, rs...)
	return rs
}

// byID indexes msgs by ID (the last copy of each).
func byID(msgs []Message) map[string]Message {
	m := make(map[string]Message, len(msgs))
	for _, x := range msgs {
		m[x.ID] = x
	}
	return m
}

// order judges msgs against g's records.
func (g *gen) order(msgs []Message) testenv.Order {
	as := make([]testenv.Arrival, len(msgs))
	for i, m := range msgs {
		as[i] = testenv.Arrival{ID: m.ID, Key: m.Key}
	}
	return testenv.OrderOf(as, g.rank)
}

// landed fails t unless every record of recs is in got, intact.
func landed(t *testing.T, what string, recs []outboxcdc.Record, got map[string]Message) {
	t.Helper()
	missing := 0
	first := ""
	for _, r := range recs {
		m, ok := got[r.MessageID]
		switch {
		case !ok:
			if missing == 0 {
				first = r.MessageID
			}
			missing++
		case m.Key != string(r.Key) || m.Value != string(r.Value):
			t.Fatalf("%s: %s landed as key %q value %q, want key %q value %q", what, r.MessageID, m.Key, m.Value, r.Key, r.Value)
		}
	}
	if missing > 0 {
		t.Fatalf("%s: %d of %d records missing on read-back (first: %s)", what, missing, len(recs), first)
	}
}

func write(t *testing.T, s outboxcdc.Sink, recs []outboxcdc.Record) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), writeTimeout)
	defer cancel()
	if err := s.Write(ctx, recs); err != nil {
		t.Fatalf("Write of %d records: %v", len(recs), err)
	}
}

// testOrder: several Writes of varied sizes; every record lands once,
// intact, each key in order.
func testOrder(t *testing.T, factory Factory) {
	e := factory(t, Options{})
	g := newGen(e)
	for _, n := range []int{1, 700, 7, 1200, 90} {
		write(t, e.Sink, g.batch(n))
	}
	got := e.Read(t)
	landed(t, "after the Writes", g.all, byID(got))
	o := g.order(got)
	t.Logf("%d records written, %d read: %+v", len(g.all), len(got), o)
	if len(got) != len(g.all) || o.Copies > 0 {
		t.Fatalf("%d messages read for %d records (%d copies) without any failure", len(got), len(g.all), o.Copies)
	}
	if o.Late > 0 || o.FirstOutOfOrder > 0 {
		t.Fatalf("order per key broken: %d messages after a later one of their key, %d keys out of order", o.Late, o.FirstOutOfOrder)
	}
	if err := e.Sink.Ready(); err != nil {
		t.Fatalf("Ready after successful Writes: %v", err)
	}
}

// testAcked: Writes whose records go into a silent path until the
// connection is cut (the broker got none of them); each Write must
// notice, send again, and return nil only with every record on the
// broker at that moment.
func testAcked(t *testing.T, factory Factory) {
	e := factory(t, Options{})
	g := newGen(e)
	write(t, e.Sink, g.batch(5))
	var acked []outboxcdc.Record
	for i := 0; i < 5; i++ {
		recs := g.batch(300)
		before := e.Proxy.Dropped()
		e.Proxy.Silence()
		done := make(chan error, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), writeTimeout)
			defer cancel()
			done <- e.Sink.Write(ctx, recs)
		}()
		// The records went out and were dropped: then every connection
		// is closed and the path heals, as a broker restart looks.
		testenv.Eventually(t, noticeWithin, "the Write's records sent into the silent path",
			func() bool { return e.Proxy.Dropped()-before >= 8<<10 })
		e.Proxy.Cut()
		e.Proxy.Heal()
		if err := <-done; err != nil {
			t.Fatalf("Write %d after the path healed: %v", i, err)
		}
		landed(t, fmt.Sprintf("right after Write %d returned nil", i), recs, byID(e.Read(t)))
		acked = append(acked, recs...)
	}
	landed(t, "at the end", acked, byID(e.Read(t)))
}

// testDown: the path to the broker is cut (connections closed, new ones
// unanswered) or silent (nothing delivered, nothing closed) while a Write
// runs; it must wait, Ready must fail, and after the heal everything
// lands with each key's last copies in order.
func testDown(t *testing.T, factory Factory, cut bool) {
	e := factory(t, Options{})
	g := newGen(e)
	write(t, e.Sink, g.batch(10))
	recs := g.batch(2000)
	e.Proxy.Silence()
	if cut {
		e.Proxy.Cut()
	}
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), writeTimeout)
		defer cancel()
		done <- e.Sink.Write(ctx, recs)
	}()
	testenv.Eventually(t, noticeWithin, "Ready failing with the broker unreachable", func() bool { return e.Sink.Ready() != nil })
	time.Sleep(2 * time.Second) // a few retries while down
	select {
	case err := <-done:
		e.Proxy.Heal()
		t.Fatalf("Write returned while the broker was unreachable: %v (want it to wait and retry)", err)
	default:
	}
	e.Proxy.Heal()
	healed := time.Now()
	if err := <-done; err != nil {
		t.Fatalf("Write after the path healed: %v", err)
	}
	t.Logf("Write returned %s after the heal", time.Since(healed).Round(time.Millisecond))
	got := e.Read(t)
	landed(t, "after the heal", g.all, byID(got))
	o := g.order(got)
	t.Logf("%d records written, %d read: %+v", len(g.all), len(got), o)
	if o.LastOutOfOrder > 0 {
		t.Fatalf("%d keys' last copies out of order after the retries", o.LastOutOfOrder)
	}
	lastOf := map[string]Message{}
	for _, m := range got {
		lastOf[m.Key] = m
	}
	for k, m := range lastOf {
		if r := g.rank[m.ID]; r < g.next-keys {
			t.Fatalf("key %s ends with %s (seq %d), not with its last record", k, m.ID, r)
		}
	}
	testenv.Eventually(t, noticeWithin, "Ready again after the heal", func() bool { return e.Sink.Ready() == nil })
}

// testTooLarge: one record of a batch is above the limit.
func testTooLarge(t *testing.T, factory Factory) {
	const limit, big = 4096, 3
	e := factory(t, Options{MaxMessageBytes: limit})
	g := newGen(e)
	recs := g.batch(10)
	huge := recs[big]
	huge.Value = []byte(fmt.Sprintf(`{"seq":%d,"pad":"%0*d"}`, g.rank[huge.MessageID], 2*limit, 0))
	recs[big] = huge
	ctx, cancel := context.WithTimeout(context.Background(), writeTimeout)
	defer cancel()
	err := e.Sink.Write(ctx, recs)
	var re outboxcdc.RecordError
	switch {
	case err == nil:
		t.Fatalf("a record of %d bytes was accepted with a limit of %d", huge.Size(), limit)
	case ctx.Err() != nil:
		t.Fatalf("Write retried the too-large record until the deadline: %v", err)
	case outboxcdc.IsTransient(err):
		t.Fatalf("too-large error is marked transient, but sending it again cannot succeed: %v", err)
	case !errors.As(err, &re):
		t.Fatalf("too-large error %v (%T) is no outboxcdc.RecordError: the pipeline cannot name or dead-letter the row", err, err)
	}
	if i, perm := re.FailedRecord(); i != big || !perm {
		t.Fatalf("FailedRecord() = %d, %v; want %d, true (%v)", i, perm, big, err)
	}
	t.Logf("too large: %v", err)
	// What on_error: dlq does: the record replaced, the batch again.
	recs[big] = g.batch(1)[0]
	recs[big].Key = huge.Key
	write(t, e.Sink, recs)
	got := byID(e.Read(t))
	landed(t, "the batch written again", recs, got)
	if _, ok := got[huge.MessageID]; ok {
		t.Fatalf("the refused record %s landed", huge.MessageID)
	}
}

// testClose: Close while a Write is in flight, on a silent path (blocked)
// or a healthy one (busy).
func testClose(t *testing.T, factory Factory, blocked bool) {
	e := factory(t, Options{})
	g := newGen(e)
	write(t, e.Sink, g.batch(5))
	recs := g.batch(5000)
	if blocked {
		e.Proxy.Silence()
	}
	done := make(chan error, 1)
	started := make(chan struct{})
	go func() {
		close(started)
		done <- e.Sink.Write(context.Background(), recs)
	}()
	<-started
	// Inside an attempt: waiting for answers (blocked), or sending and
	// getting them (busy). Should the Write end first, the case still
	// holds it to what a nil Write promises.
	time.Sleep(100 * time.Millisecond)
	closed := make(chan error, 1)
	go func() { closed <- e.Sink.Close() }()
	select {
	case cerr := <-closed:
		if cerr != nil {
			t.Logf("Close: %v", cerr)
		}
	case <-time.After(closeWithin):
		e.Proxy.Heal()
		t.Fatalf("Close did not return within %s while a Write was in flight", closeWithin)
	}
	var err error
	select {
	case err = <-done:
	case <-time.After(closeWithin):
		e.Proxy.Heal()
		t.Fatalf("the Write in flight did not return within %s of Close", closeWithin)
	}
	switch {
	case err == nil && blocked:
		t.Fatal("a Write on a silent path returned nil across Close")
	case err == nil:
		t.Log("the Write finished before Close stopped it")
		landed(t, "a Write that returned nil", recs, byID(e.Read(t)))
	default:
		closedErr(t, e, err, "the Write in flight")
	}
	e.Proxy.Heal() // some readers go through the proxy
	after := len(e.Read(t))
	ctx, cancel := context.WithTimeout(context.Background(), closeWithin)
	defer cancel()
	err = e.Sink.Write(ctx, g.batch(3))
	if err == nil {
		t.Fatal("Write after Close returned nil")
	}
	if ctx.Err() != nil {
		t.Fatalf("Write after Close waited for its deadline: %v", err)
	}
	closedErr(t, e, err, "a Write after Close")
	if e.Sink.Ready() == nil {
		t.Fatal("Ready() is nil after Close")
	}
	if err := e.Sink.Close(); err != nil {
		t.Logf("second Close: %v", err)
	}
	time.Sleep(time.Second) // anything still on its way lands by now
	if n := len(e.Read(t)); n != after {
		t.Fatalf("%d messages landed after Close returned", n-after)
	}
}

// closedErr fails t unless err is the sink's closed error.
func closedErr(t *testing.T, e *Env, err error, what string) {
	t.Helper()
	var re outboxcdc.RecordError
	switch {
	case outboxcdc.IsTransient(err):
		t.Fatalf("%s: %v is transient; a closed sink is not worth retrying", what, err)
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
		t.Fatalf("%s: %v is a context error, want the sink's closed error", what, err)
	case e.ErrClosed != nil && !errors.Is(err, e.ErrClosed):
		t.Fatalf("%s: %v does not wrap %v", what, err, e.ErrClosed)
	case errors.As(err, &re):
		if i, _ := re.FailedRecord(); i >= 0 {
			t.Fatalf("%s: %v names record %d; a closed sink must name no record (the pipeline would dead-letter it)", what, err, i)
		}
	}
}
