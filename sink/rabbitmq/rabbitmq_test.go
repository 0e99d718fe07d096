package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/rs/zerolog"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
	"github.com/outbox-cdc/outbox-cdc/sink"
	"github.com/outbox-cdc/outbox-cdc/test/testenv"
)

// fixture is a fresh exchange (and optionally a queue bound to it) on the
// local RabbitMQ, deleted at test end.
type fixture struct {
	url, exchange, queue string
	ch                   *amqp.Channel
}

func newFixture(t *testing.T, bindingKey string) *fixture {
	t.Helper()
	u := testenv.RabbitMQURL(t)
	c, err := amqp.Dial(u)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	ch, err := c.Channel()
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{url: u, ch: ch, exchange: fmt.Sprintf("test.%s.%d", strings.ToLower(t.Name()), rand.Int64())}
	f.exchange = strings.NewReplacer("/", ".").Replace(f.exchange)
	if err := ch.ExchangeDeclare(f.exchange, "topic", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ch.ExchangeDelete(f.exchange, false, false) })
	if bindingKey != "" {
		q, err := ch.QueueDeclare("", false, false, true, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := ch.QueueBind(q.Name, bindingKey, f.exchange, false, nil); err != nil {
			t.Fatal(err)
		}
		f.queue = q.Name
	}
	return f
}

// consume reads n messages from the fixture's queue.
func (f *fixture) consume(t *testing.T, n int, timeout time.Duration) []amqp.Delivery {
	t.Helper()
	ds, err := f.ch.Consume(f.queue, "", true, true, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	var got []amqp.Delivery
	deadline := time.After(timeout)
	for len(got) < n {
		select {
		case d := <-ds:
			got = append(got, d)
		case <-deadline:
			t.Fatalf("consumed %d of %d messages", len(got), n)
		}
	}
	return got
}

func testConfig(url, exchange string) Config {
	c := DefaultConfig()
	c.URL = url
	c.Exchange = exchange
	c.AckTimeout = 5 * time.Second
	c.DialTimeout = 8 * time.Second
	c.RetryBackoffMin = 50 * time.Millisecond
	c.RetryBackoffMax = 500 * time.Millisecond
	c.ReadyInterval = 200 * time.Millisecond
	c.AppID = "test"
	return c
}

func records(n, keys int) []outboxcdc.Record {
	rs := make([]outboxcdc.Record, n)
	for i := range rs {
		k := fmt.Sprintf("agg-%d", i%keys)
		rs[i] = outboxcdc.Record{
			Topic: "ORDER." + k, Key: []byte(k), Value: []byte(fmt.Sprintf(`{"seq":%d}`, i)),
			Headers:   []outboxcdc.Header{{Key: "id", Value: []byte(fmt.Sprintf("m-%d", i))}, {Key: "nullable", Value: nil}, {Key: "bin", Value: []byte{0xff, 0}}},
			Timestamp: time.Unix(1700000000, 0), MessageID: fmt.Sprintf("m-%d", i), EventType: "ORDER_CREATED",
		}
	}
	return rs
}

func newSink(t *testing.T, cfg Config) *Sink {
	t.Helper()
	s, err := New(cfg, zerolog.New(zerolog.NewTestWriter(t)), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestPublishConfirmedFields: every record arrives with the AMQP
// properties and headers the package documents. (Order and
// acknowledgement: TestContract.)
func TestPublishConfirmedFields(t *testing.T) {
	f := newFixture(t, "#")
	s := newSink(t, testConfig(f.url, f.exchange))
	recs := records(300, 7)
	recs[3].Timestamp = time.Time{} // route.timestamp produce
	began := time.Now().Truncate(time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.Write(ctx, recs); err != nil {
		t.Fatal(err)
	}
	got := f.consume(t, len(recs), 20*time.Second)
	if ts := got[3].Timestamp; ts.Before(began) || ts.After(time.Now()) {
		t.Fatalf("a record without a timestamp has AMQP timestamp %v, want the time of production (after %v)", ts, began)
	}
	d := got[1]
	if d.RoutingKey != "ORDER.agg-1" || string(d.Body) != `{"seq":1}` || d.Type != "ORDER_CREATED" ||
		d.ContentType != "application/json" || d.DeliveryMode != amqp.Persistent || d.AppId != "test" ||
		!d.Timestamp.Equal(time.Unix(1700000000, 0)) {
		t.Fatalf("delivery %+v", d)
	}
	if v, ok := d.Headers["nullable"]; !ok || v != nil {
		t.Fatalf("NULL header = %#v, %v; want a void field", v, ok)
	}
	if v, ok := d.Headers["bin"].([]byte); !ok || string(v) != "\xff\x00" {
		t.Fatalf("binary header = %#v", d.Headers["bin"])
	}
	if d.Headers["id"] != "m-1" || d.Headers[HeaderKey] != "agg-1" {
		t.Fatalf("headers %v", d.Headers)
	}
	if err := s.Ready(); err != nil {
		t.Fatalf("Ready after a write: %v", err)
	}
}

// TestUnroutableIsAnError: a record no queue is bound for comes back as a
// basic.return; Write fails permanently naming it instead of counting it
// delivered.
func TestUnroutableIsAnError(t *testing.T) {
	f := newFixture(t, "ORDER.#")
	s := newSink(t, testConfig(f.url, f.exchange))
	recs := records(50, 5)
	recs[37].Topic = "PAYMENT.agg-2"
	err := s.Write(context.Background(), recs)
	var re outboxcdc.RecordError
	if !errors.As(err, &re) {
		t.Fatalf("Write = %v, want a RecordError", err)
	}
	if i, perm := re.FailedRecord(); i != 37 || !perm || !strings.Contains(err.Error(), "unroutable") {
		t.Fatalf("FailedRecord = %d, %v (%v); want 37, permanent, unroutable", i, perm, err)
	}
}

// TestMissingExchange: a missing exchange is a permanent error naming it,
// not a retry loop.
func TestMissingExchange(t *testing.T) {
	u := testenv.RabbitMQURL(t)
	s := newSink(t, testConfig(u, fmt.Sprintf("missing.%d", rand.Int64())))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err := s.Write(ctx, records(1, 1))
	var be *sink.Error
	if !errors.As(err, &be) || !be.Permanent || be.Index != -1 || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("Write = %v, want a permanent error about the missing exchange", err)
	}
}

// TestBadCredentials: refused credentials are permanent.
func TestBadCredentials(t *testing.T) {
	f := newFixture(t, "")
	cfg := testConfig(f.url, f.exchange)
	cfg.Username, cfg.Password = "guest", "wrong-password"
	s := newSink(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err := s.Write(ctx, records(1, 1))
	var be *sink.Error
	if !errors.As(err, &be) || !be.Permanent || strings.Contains(err.Error(), "wrong-password") {
		t.Fatalf("Write = %v, want a permanent error without the password", err)
	}
}

// managementAnswers reports whether the management API answers on port
// 15672 of the AMQP URL's host.
func managementAnswers(amqpURL string) bool {
	u, err := url.Parse(amqpURL)
	if err != nil {
		return false
	}
	c, err := net.DialTimeout("tcp", net.JoinHostPort(u.Hostname(), "15672"), time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// TestCheck: check passes for an existing exchange and fails, naming the
// remedy, for a missing one (declare off) and for bad credentials.
func TestCheck(t *testing.T) {
	f := newFixture(t, "#")
	ctx := context.Background()
	res := Check(ctx, testConfig(f.url, f.exchange))
	for _, r := range res {
		if !r.OK {
			t.Fatalf("check failed: %+v", res)
		}
	}
	byName := func(res []outboxcdc.CheckResult, name string) outboxcdc.CheckResult {
		for _, r := range res {
			if r.Name == name {
				return r
			}
		}
		t.Fatalf("no %s in %+v", name, res)
		return outboxcdc.CheckResult{}
	}
	// Bindings: seen through the management API when it answers; when it
	// does not, check cannot prove a queue is bound and says so with a
	// warning, not a pass.
	if r := byName(res, "rabbitmq.bindings"); managementAnswers(f.url) {
		if r.Status != outboxcdc.CheckPass {
			t.Fatalf("bindings with the management API: %+v", r)
		}
	} else if r.Status != outboxcdc.CheckWarn || !r.OK || !strings.Contains(r.Detail, "not checked") || r.Fix == "" {
		t.Fatalf("bindings without the management API: %+v, want a warning with a fix", r)
	}
	if r := byName(Check(ctx, testConfig(f.url, f.exchange+".missing")), "rabbitmq.exchange"); r.OK || !strings.Contains(r.Fix, "declare") {
		t.Fatalf("missing exchange: %+v", r)
	}
	cfg := testConfig(f.url, f.exchange)
	cfg.Declare = true
	cfg.Exchange += ".missing"
	if r := byName(Check(ctx, cfg), "rabbitmq.exchange"); !r.OK {
		t.Fatalf("missing exchange with declare: %+v", r)
	}
	cfg = testConfig(f.url, f.exchange)
	cfg.Username, cfg.Password = "guest", "wrong-password"
	if r := byName(Check(ctx, cfg), "rabbitmq.reachable"); r.OK || strings.Contains(r.Detail, "wrong-password") {
		t.Fatalf("bad credentials: %+v", r)
	}
}

// TestConsistentHashExchange: with an x-consistent-hash exchange and the
// aggregate id as routing key, each aggregate's records land in one of
// several queues, in order. scripts/prepare-services.sh enables the
// rabbitmq_consistent_hash_exchange plugin; without it the test skips on a
// laptop and fails in CI.
func TestConsistentHashExchange(t *testing.T) {
	u := testenv.RabbitMQURL(t)
	c, err := amqp.Dial(u)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ch, err := c.Channel()
	if err != nil {
		t.Fatal(err)
	}
	ex := fmt.Sprintf("test.hash.%d", rand.Int64())
	if err := ch.ExchangeDeclare(ex, "x-consistent-hash", false, true, false, false, nil); err != nil {
		testenv.Unavailable(t, "x-consistent-hash exchanges on the RabbitMQ broker (plugin rabbitmq_consistent_hash_exchange): %v", err)
	}
	defer ch.ExchangeDelete(ex, false, false)
	var queues []string
	for i := 0; i < 3; i++ {
		q, err := ch.QueueDeclare("", false, true, true, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := ch.QueueBind(q.Name, "1", ex, false, nil); err != nil {
			t.Fatal(err)
		}
		queues = append(queues, q.Name)
	}
	cfg := testConfig(u, ex)
	cfg.ExchangeType = "x-consistent-hash"
	s := newSink(t, cfg)
	recs := records(600, 20)
	for i := range recs {
		recs[i].Topic = string(recs[i].Key)
	}
	if err := s.Write(context.Background(), recs); err != nil {
		t.Fatal(err)
	}
	where := map[string]string{}
	total := 0
	for _, q := range queues {
		last := map[string]int{}
		for {
			d, ok, err := ch.Get(q, true)
			if err != nil {
				t.Fatal(err)
			}
			if !ok {
				break
			}
			total++
			k := d.Headers[HeaderKey].(string)
			if w, seen := where[k]; seen && w != q {
				t.Fatalf("aggregate %s in two queues", k)
			}
			where[k] = q
			var seq int
			fmt.Sscanf(string(d.Body), `{"seq":%d}`, &seq)
			if p, ok := last[k]; ok && seq < p {
				t.Fatalf("aggregate %s out of order in %s", k, q)
			}
			last[k] = seq
		}
	}
	if total != len(recs) {
		t.Fatalf("%d of %d records in the queues", total, len(recs))
	}
}

// retryClock is a log writer that notes when the Writer first logged a
// failed attempt ("write failed, retrying").
type retryClock struct {
	mu    sync.Mutex
	first time.Time
}

func (r *retryClock) Write(p []byte) (int, error) {
	if strings.Contains(string(p), "write failed, retrying") {
		r.mu.Lock()
		if r.first.IsZero() {
			r.first = time.Now()
		}
		r.mu.Unlock()
	}
	return len(p), nil
}

func (r *retryClock) at() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.first
}

// TestAckTimeoutBoundsTheAttempt: sink.ack_timeout bounds an attempt, not
// each record. Over a path gone silent (no FIN, no RST, heartbeats far
// off), 20 unconfirmed records give the attempt up once the oldest has
// waited ack_timeout, every wait at once, not one ack_timeout after the
// other; so do publishes blocked on a full socket (a frozen path: nothing
// is read, the buffers fill); when the connection itself fails
// (heartbeats missed), every wait ends with it. The records are all
// delivered once the path heals.
func TestAckTimeoutBoundsTheAttempt(t *testing.T) {
	for _, c := range []struct {
		name           string
		ack, heartbeat time.Duration
		within         time.Duration // the first retry after the Write started
		n, size        int           // records, bytes of each value
		freeze         bool
	}{
		// The attempt's deadline: ack_timeout, plus closing the connection.
		{"silent", 2 * time.Second, time.Minute, 2*time.Second + 2*time.Second, 20, 0, false},
		// 12 MiB: more than the sockets on the way hold.
		{"frozen", 2 * time.Second, time.Minute, 2*time.Second + 2*time.Second, 200, 64 << 10, true},
		// The connection fails after 3 missed heartbeats of 1s.
		{"connection lost", time.Minute, time.Second, 3*time.Second + 3*time.Second, 20, 0, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t, "#")
			p := testenv.NewProxy(t, testenv.HostOf(t, f.url))
			cfg := testConfig(testenv.WithHost(t, f.url, p.Addr()), f.exchange)
			cfg.AckTimeout, cfg.Heartbeat = c.ack, c.heartbeat
			cfg.DialTimeout = 3 * time.Second
			cfg.ReadyInterval = time.Hour // no probe: only the Write notices
			clock := &retryClock{}
			s, err := New(cfg, zerolog.New(zerolog.MultiLevelWriter(zerolog.NewTestWriter(t), clock)).With().Timestamp().Logger(), nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			if err := s.Write(context.Background(), records(3, 3)); err != nil {
				t.Fatal(err)
			}
			recs := records(c.n, c.n)
			for i := range recs {
				if c.size > 0 {
					recs[i].Value = []byte(fmt.Sprintf(`{"seq":%d,"pad":"%s"}`, i, strings.Repeat("x", c.size)))
				}
			}
			if c.freeze {
				p.Freeze()
			} else {
				p.Silence()
			}
			start := time.Now()
			done := make(chan error, 1)
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				defer cancel()
				done <- s.Write(ctx, recs)
			}()
			testenv.Eventually(t, time.Minute, "a failed attempt", func() bool { return !clock.at().IsZero() })
			took := clock.at().Sub(start)
			t.Logf("first retry %s after the Write started (ack_timeout %s, heartbeat %s)", took.Round(time.Millisecond), c.ack, c.heartbeat)
			if took > c.within {
				t.Errorf("the first retry came %s after the Write started, want within %s", took.Round(time.Millisecond), c.within)
			}
			p.Heal()
			p.Thaw()
			if err := <-done; err != nil {
				t.Fatalf("Write after heal: %v", err)
			}
			f.consumeAll(t, recs, 30*time.Second)
		})
	}
}

// consumeAll reads the fixture's queue until every record of recs arrived
// (copies and earlier messages aside); the test fails naming the first
// missing one after timeout.
func (f *fixture) consumeAll(t *testing.T, recs []outboxcdc.Record, timeout time.Duration) {
	t.Helper()
	ds, err := f.ch.Consume(f.queue, "", true, true, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	missing := map[string]bool{}
	for _, r := range recs {
		missing[r.MessageID] = true
	}
	deadline := time.After(timeout)
	for len(missing) > 0 {
		select {
		case d := <-ds:
			delete(missing, d.MessageId)
		case <-deadline:
			for _, r := range recs {
				if missing[r.MessageID] {
					t.Fatalf("%s lost (%d of %d missing)", r.MessageID, len(missing), len(recs))
				}
			}
		}
	}
}

// TestAbandonedConnectionSendsNothingLate: publishes on a connection the
// sink gave up (its path partitioned: the kernel holds them to send again)
// must not reach the broker once the path heals, after their retried
// copies and after later rows of their keys. The sink resets such a
// socket (SO_LINGER 0), which discards what it still holds.
func TestAbandonedConnectionSendsNothingLate(t *testing.T) {
	f := newFixture(t, "#")
	p := testenv.NewProxy(t, testenv.HostOf(t, f.url))
	cfg := testConfig(testenv.WithHost(t, f.url, p.Addr()), f.exchange)
	cfg.AckTimeout, cfg.Heartbeat = time.Second, time.Minute
	s := newSink(t, cfg)
	if err := s.Write(context.Background(), records(3, 3)); err != nil {
		t.Fatal(err)
	}
	all := records(300, 10)
	for i := range all {
		all[i].MessageID = fmt.Sprintf("late-%d", i)
	}
	a, b := all[:200], all[200:]
	p.Partition() // the open connection only: the retry's new one passes
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := s.Write(ctx, a); err != nil {
		t.Fatal(err)
	}
	if err := s.Write(ctx, b); err != nil {
		t.Fatal(err)
	}
	p.Heal()
	time.Sleep(3 * time.Second) // what the old connection held arrives by now, if anything
	ds, err := f.ch.Consume(f.queue, "", true, true, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	var got []testenv.Arrival
	for quiet := time.After(2 * time.Second); ; {
		select {
		case d := <-ds:
			got = append(got, testenv.Arrival{ID: d.MessageId, Key: d.Headers[HeaderKey].(string)})
			quiet = time.After(2 * time.Second)
			continue
		case <-quiet:
		}
		break
	}
	rank := map[string]int{}
	for i, r := range all {
		rank[r.MessageID] = i
	}
	o := testenv.OrderOf(got, rank)
	t.Logf("%d messages read: %+v", len(got), o)
	if o.Late > 0 || o.LastOutOfOrder > 0 {
		t.Fatalf("%d messages arrived after a later row of their key (%d keys' last copies out of order): the abandoned connection's publishes reached the broker", o.Late, o.LastOutOfOrder)
	}
}

// TestStreamQueue: a RabbitMQ stream (a queue declared with x-queue-type
// stream, bound to the exchange) as the destination, over AMQP 0.9.1:
// every record is confirmed only once the stream stored it, and a
// consumer reading the stream from its first offset gets each aggregate
// in commit order, every record once.
func TestStreamQueue(t *testing.T) {
	u := testenv.RabbitMQURL(t)
	c, err := amqp.Dial(u)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ch, err := c.Channel()
	if err != nil {
		t.Fatal(err)
	}
	id := rand.Int64()
	ex, q := fmt.Sprintf("test.stream.%d", id), fmt.Sprintf("test.stream.%d", id)
	if err := ch.ExchangeDeclare(ex, "topic", false, true, false, false, nil); err != nil {
		t.Fatal(err)
	}
	defer ch.ExchangeDelete(ex, false, false)
	// A stream is durable, neither exclusive nor auto-deleted: delete it.
	if _, err := ch.QueueDeclare(q, true, false, false, false, amqp.Table{"x-queue-type": "stream"}); err != nil {
		testenv.Unavailable(t, "RabbitMQ streams (x-queue-type stream, RabbitMQ 3.9 or later): %v", err)
	}
	defer ch.QueueDelete(q, false, false, false)
	if err := ch.QueueBind(q, "#", ex, false, nil); err != nil {
		t.Fatal(err)
	}
	s := newSink(t, testConfig(u, ex))
	recs := records(600, 20)
	if err := s.Write(context.Background(), recs); err != nil {
		t.Fatal(err)
	}
	if err := ch.Qos(100, 0, false); err != nil { // a stream consumer needs a prefetch
		t.Fatal(err)
	}
	deliveries, err := ch.Consume(q, "", false, false, false, false, amqp.Table{"x-stream-offset": "first"})
	if err != nil {
		t.Fatal(err)
	}
	last := map[string]int{}
	seen := map[string]bool{}
	timeout := time.After(30 * time.Second)
	for len(seen) < len(recs) {
		select {
		case d := <-deliveries:
			d.Ack(false)
			if seen[d.MessageId] {
				t.Fatalf("%s twice", d.MessageId)
			}
			seen[d.MessageId] = true
			k := d.Headers[HeaderKey].(string)
			var seq int
			fmt.Sscanf(string(d.Body), `{"seq":%d}`, &seq)
			if p, ok := last[k]; ok && seq <= p {
				t.Fatalf("aggregate %s: seq %d after %d", k, seq, p)
			}
			last[k] = seq
		case <-timeout:
			t.Fatalf("%d of %d records read from the stream", len(seen), len(recs))
		}
	}
}
