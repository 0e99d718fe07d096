package sns

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
	"github.com/outbox-cdc/outbox-cdc/sink/awsmsg"
	"github.com/outbox-cdc/outbox-cdc/sink/broker"
	"github.com/outbox-cdc/outbox-cdc/sink/contract"
	"github.com/outbox-cdc/outbox-cdc/test/testenv"
)

func TestMain(m *testing.M) {
	// The default credentials chain, fed from the environment; no shared
	// files or instance metadata of the machine.
	testenv.AWSTestEnv()
	os.Exit(m.Run())
}

func testConfig(endpoint string) Config {
	c := DefaultConfig()
	c.Region = "us-east-1"
	c.Endpoint = endpoint
	c.RetryBackoffMin = 10 * time.Millisecond
	c.RetryBackoffMax = 200 * time.Millisecond
	c.AckTimeout = 5 * time.Second
	c.DialTimeout = 2 * time.Second
	c.ReadyInterval = 200 * time.Millisecond
	return c
}

func records(topic string, n, keys int) []outboxcdc.Record {
	rs := make([]outboxcdc.Record, n)
	for i := range rs {
		k := fmt.Sprintf("agg-%d", i%keys)
		rs[i] = outboxcdc.Record{
			Topic: topic, Key: []byte(k), Value: []byte(fmt.Sprintf(`{"seq":%d}`, i)),
			Headers:   []outboxcdc.Header{{Key: "event_type", Value: []byte("ORDER_CREATED")}, {Key: "nullable", Value: nil}},
			Timestamp: time.UnixMilli(1700000000123), MessageID: fmt.Sprintf("m-%d", i), EventType: "ORDER_CREATED",
		}
	}
	return rs
}

func testSink(t *testing.T, cfg Config) *Sink {
	t.Helper()
	s, err := New(cfg, zerolog.New(zerolog.NewTestWriter(t)), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func seqOf(body string) int {
	var seq int
	fmt.Sscanf(body, `{"seq":%d}`, &seq)
	return seq
}

// TestFIFOOrderPerGroup: every record published to a FIFO topic reaches
// its FIFO queue subscription once, each aggregate in commit order, with
// MessageGroupId = the aggregate id, MessageDeduplicationId = the message
// id, and its message id, key and headers as attributes, in batches of at
// most ten. The topic is named by name (its ARN completed with the
// account STS names), by ARN, and with sink.topic_owner.
func TestFIFOOrderPerGroup(t *testing.T) {
	for _, how := range []string{"name", "arn", "topic_owner"} {
		t.Run(how, func(t *testing.T) {
			e := testenv.Fauxqs(t)
			arn := e.Topic(t, "orders.fifo", false, "orders-sub.fifo")
			cfg := testConfig(e.Endpoint)
			topic := "orders.fifo"
			switch how {
			case "arn":
				topic = arn
			case "topic_owner":
				cfg.TopicOwner = testenv.FauxqsAccount
			}
			s := testSink(t, cfg)
			recs := records(topic, 500, 7)
			recs[3].Value = nil // a tombstone
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			if err := s.Write(ctx, recs); err != nil {
				t.Fatal(err)
			}
			got := e.Drain(t, "orders-sub.fifo")
			if len(got) != len(recs) {
				t.Fatalf("%d messages for %d records", len(got), len(recs))
			}
			last := map[string]int{}
			for _, m := range got {
				k := m.Attrs[AttrKey]
				seq := seqOf(m.Body)
				if m.Attrs[AttrBody] == "null" {
					if m.Body != "null" || m.Attrs[AttrMessageID] != "m-3" {
						t.Fatalf("tombstone: %+v", m)
					}
					seq = 3
				}
				if p, ok := last[k]; ok && seq <= p {
					t.Fatalf("aggregate %s: seq %d after %d", k, seq, p)
				}
				last[k] = seq
				id := fmt.Sprintf("m-%d", seq)
				if m.Attrs["event_type"] != "ORDER_CREATED" || m.Attrs[AttrMessageID] != id || m.Group != k || m.DedupID != id {
					t.Fatalf("message %+v", m)
				}
				if _, ok := m.Attrs["nullable"]; ok {
					t.Fatalf("a NULL header became an attribute: %+v", m.Attrs)
				}
			}
			batches := e.Batches()
			for _, n := range batches {
				if n > awsmsg.MaxBatch {
					t.Fatalf("a batch of %d entries", n)
				}
			}
			if len(batches) != 50 {
				t.Fatalf("%d batches for 500 records", len(batches))
			}
		})
	}
}

// TestPartialBatchFailure: an entry that fails in a batch is published
// again, alone with what its aggregate needs to stay in order; the
// batch's other entries are not published twice, and the later records
// of its aggregate are held back until it is delivered.
func TestPartialBatchFailure(t *testing.T) {
	e := testenv.Fauxqs(t)
	e.Topic(t, "orders.fifo", false, "q.fifo")
	s := testSink(t, testConfig(e.Endpoint))
	recs := records("orders.fifo", 100, 5) // agg-2 is m-2, m-7, m-12, ...
	e.FailOnce("m-12", "InternalError")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := s.Write(ctx, recs); err != nil {
		t.Fatal(err)
	}
	got := e.Drain(t, "q.fifo")
	count := map[string]int{}
	var agg2 []int
	for _, m := range got {
		count[m.Attrs[AttrMessageID]]++
		if m.Attrs[AttrKey] == "agg-2" {
			agg2 = append(agg2, seqOf(m.Body))
		}
	}
	for i, r := range recs {
		want := 1
		if r.MessageID == "m-17" { // accepted in the failed entry's batch, after it: sent again after it
			want = 2
		}
		if count[r.MessageID] != want {
			t.Fatalf("record %d (%s, %s): %d copies, want %d", i, r.MessageID, r.Key, count[r.MessageID], want)
		}
	}
	want := []int{2, 7, 17, 12, 17}
	for s := 22; s < 100; s += 5 {
		want = append(want, s)
	}
	if fmt.Sprint(agg2) != fmt.Sprint(want) {
		t.Fatalf("agg-2 order %v, want %v", agg2, want)
	}
}

// TestStandardTopic: a standard topic gets no FIFO ids and delivers
// every record; without raw message delivery the subscription gets SNS's
// JSON envelope, whose Message is the body and whose MessageAttributes
// carry the attributes.
func TestStandardTopic(t *testing.T) {
	e := testenv.Fauxqs(t)
	e.Topic(t, "plain", true, "plain-q")
	s := testSink(t, testConfig(e.Endpoint))
	if err := s.Write(context.Background(), records("plain", 20, 3)); err != nil {
		t.Fatal(err)
	}
	got := e.Drain(t, "plain-q")
	if len(got) != 20 {
		t.Fatalf("%d of 20 on the standard topic's queue", len(got))
	}
	seen := map[int]bool{}
	for _, m := range got {
		var env struct {
			Type, Message     string
			MessageAttributes map[string]struct{ Type, Value string }
		}
		if err := json.Unmarshal([]byte(m.Body), &env); err != nil || env.Type != "Notification" {
			t.Fatalf("envelope %q: %v", m.Body, err)
		}
		seq := seqOf(env.Message)
		seen[seq] = true
		if env.MessageAttributes[AttrMessageID].Value != fmt.Sprintf("m-%d", seq) || m.Group != "" {
			t.Fatalf("envelope %+v group %q", env, m.Group)
		}
	}
	if len(seen) != 20 {
		t.Fatalf("%d distinct of 20", len(seen))
	}
}

// TestTooLarge: a record above max_message_bytes (SNS's 256 KiB at most)
// is refused before it is sent, as a permanent error naming it; also a
// payload that is not text with body_encoding text; base64 takes it.
func TestTooLarge(t *testing.T) {
	e := testenv.Fauxqs(t)
	e.Topic(t, "q.fifo", false, "q.fifo")
	cfg := testConfig(e.Endpoint)
	cfg.MaxMessageBytes = 4096
	s := testSink(t, cfg)
	recs := records("q.fifo", 3, 3)
	recs[1].Value = []byte(strings.Repeat("x", 5000))
	err := s.Write(context.Background(), recs)
	var be *broker.Error
	if !errors.As(err, &be) || !be.Permanent || be.Index != 1 {
		t.Fatalf("too large: %v", err)
	}
	recs = records("q.fifo", 3, 3)
	recs[2].Value = []byte{0xff, 0x00, 0x01}
	err = s.Write(context.Background(), recs)
	if !errors.As(err, &be) || !be.Permanent || be.Index != 2 || !strings.Contains(outboxcdc.Hint(err), "base64") {
		t.Fatalf("binary payload: %v (hint %q)", err, outboxcdc.Hint(err))
	}
	cfg.BodyEncoding = awsmsg.BodyBase64
	s2 := testSink(t, cfg)
	if err := s2.Write(context.Background(), recs); err != nil {
		t.Fatal(err)
	}
	cfg.MaxMessageBytes = Limit + 1
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "max_message_bytes") {
		t.Fatalf("max_message_bytes above SNS's limit: %v", err)
	}
}

// TestCheck: check resolves the credentials, asks SNS (fails when it does
// not answer, also for templated topics alone), finds an existing topic and
// says it is FIFO and how many subscriptions it has, and fails for a
// missing one with the remedy; a template is passed over; a write to a
// missing topic is a permanent error naming the row.
func TestCheck(t *testing.T) {
	e := testenv.Fauxqs(t)
	e.Topic(t, "c.fifo", false, "c.fifo")
	e.Topic(t, "lonely", false)
	cfg := testConfig(e.Endpoint)
	res := Check(context.Background(), cfg, "c.fifo", "missing", "{aggregate_type}", "lonely")
	if len(res) != 6 || !res[0].OK || !res[1].OK || !res[2].OK || !strings.Contains(res[2].Detail, "FIFO") ||
		res[3].OK || !strings.Contains(res[3].Fix, "create the topic") || !res[4].OK ||
		!res[5].OK || !strings.Contains(res[5].Detail, "reaches no one") {
		t.Fatalf("%+v", res)
	}
	// Templated topics alone still ask SNS (the HA standby's proof).
	dead := cfg
	dead.Endpoint = "http://" + testenv.FreeAddr(t)
	dead.DialTimeout = time.Second
	if res := Check(context.Background(), dead, "{aggregate_type}"); len(res) != 2 || res[1].OK || res[1].Name != "sns.reachable" {
		t.Fatalf("check with SNS unreachable: %+v", res)
	}
	s := testSink(t, cfg)
	recs := records("c.fifo", 3, 3)
	recs[1].Topic = "missing"
	err := s.Write(context.Background(), recs)
	var be *broker.Error
	if !errors.As(err, &be) || !be.Permanent || be.Index != 1 {
		t.Fatalf("missing topic: %v", err)
	}
}

// TestDestination: route.topic names a topic or its ARN.
func TestDestination(t *testing.T) {
	for s, ok := range map[string]bool{
		"orders.fifo": true, "orders": true, "arn:aws:sns:eu-west-1:123456789012:orders.fifo": true,
		"orders.x": false, "a:b": false, "arn:aws:sqs:eu-west-1:123456789012:q": false, "arn:aws:sns:eu-west-1:12:q": false,
		strings.Repeat("a", 257): false,
	} {
		if got := checkTopic(s) == ""; got != ok {
			t.Errorf("%q: legal %v, want %v (%s)", s, got, ok, checkTopic(s))
		}
	}
}

// TestContract: the sink keeps the in-process sink contract (order per
// key, acknowledged means stored, SNS down then back, too large, Close
// during a Write) on the fauxqs emulator, a FIFO topic per case whose FIFO
// queue subscription is read back (receive, then delete), and kept.
func TestContract(t *testing.T) {
	contract.Run(t, func(t *testing.T, o contract.Options) *contract.Env {
		e := testenv.Fauxqs(t)
		e.Topic(t, "contract.fifo", false, "contract-q.fifo")
		p := testenv.NewProxy(t, testenv.HostOf(t, e.Endpoint))
		cfg := testConfig(testenv.WithHost(t, e.Endpoint, p.Addr()))
		cfg.AckTimeout = 3 * time.Second
		if o.MaxMessageBytes > 0 {
			cfg.MaxMessageBytes = o.MaxMessageBytes
		}
		var read []contract.Message
		return &contract.Env{
			Sink: testSink(t, cfg), Topic: "contract.fifo", Proxy: p, ErrClosed: broker.ErrClosed,
			Read: func(t *testing.T) []contract.Message {
				for _, m := range e.Drain(t, "contract-q.fifo") {
					read = append(read, contract.Message{ID: m.Attrs[AttrMessageID], Key: m.Attrs[AttrKey], Value: m.Body})
				}
				return append([]contract.Message(nil), read...)
			},
		}
	})
}
