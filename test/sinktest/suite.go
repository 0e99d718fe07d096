// Package sinktest is the contract every sink keeps, run through the
// outbox-cdc binary against the real local databases and brokers, the way
// Conduit's acceptance tests hold every connector to one contract. A sink
// supplies a Target: how the connector reaches a fresh destination, how
// an independent client reads back what arrived, how to make the broker
// unavailable, and how to set a too-small size limit. Run holds it to:
//
//   - per-aggregate order, from both sources (MariaDB, PostgreSQL);
//   - a dedupe id (the row's message id) on every message;
//   - nothing lost across kill -9 of the connector;
//   - no duplicate after a graceful stop;
//   - broker down, then back: back-pressure, not ready, nothing lost;
//   - a too-large record: pipeline.on_error dlq sends it to the dead-letter
//     destination on the same broker, the rows after it are delivered;
//   - bounded memory while the broker is stalled.
package sinktest

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"testing"
	"time"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
	"github.com/outbox-cdc/outbox-cdc/test/testenv"
)

// Target is one sink under test.
type Target interface {
	// Prepare makes a fresh destination for one test (unique names,
	// removed at test end) and returns how the connector writes to it.
	Prepare(t *testing.T, o Options) *Setup
}

// Options are what a test asks of Prepare.
type Options struct {
	// MaxMessageBytes, when set, is a size limit records above which the
	// broker side refuses (the broker's own limit where it has one per
	// destination, else the sink's max_message_bytes).
	MaxMessageBytes int
	// Outage asks for a way to make the broker unavailable.
	Outage bool
}

// Setup is a prepared destination.
type Setup struct {
	// Sink is the sink: section's lines (indented two spaces), Topic the
	// route.topic, DLQTopic the pipeline.dlq_topic.
	Sink, Topic, DLQTopic string
	// Read returns everything an independent consumer read so far, waiting
	// up to timeout for at least n messages.
	Read func(t *testing.T, n int, timeout time.Duration) []Message
	// Down makes the broker unreachable for the connector (no answers),
	// Up reachable again (set when Options.Outage).
	Down, Up func(t *testing.T)
	// BrokerDedupes says no record arrives twice even after kill -9: the
	// broker drops a record sent again with the same dedupe id
	// (JetStream's duplicate window), or the sink is exactly-once.
	BrokerDedupes bool
	// Delivery is the connector's delivery: key (empty: at-least-once).
	Delivery string
}

// Message is one message read back.
type Message struct {
	// Stream is what order holds within, together with Key: the topic,
	// queue, subject or stream key.
	Stream, Key string
	// DedupeID is the broker's dedupe property (AMQP message_id,
	// Nats-Msg-Id, the message_id field; Kafka: the id header).
	DedupeID string
	Value    string
	Headers  map[string]string
}

// Run runs the contract against target.
func Run(t *testing.T, target Target) {
	t.Run("Delivery", func(t *testing.T) {
		for _, kind := range []string{"mysql", "postgres"} {
			t.Run(kind, func(t *testing.T) { testDelivery(t, target, kind) })
		}
	})
	t.Run("KillNineLosesNothing", func(t *testing.T) { testKillNine(t, target) })
	t.Run("GracefulStopNoDuplicates", func(t *testing.T) { testGracefulStop(t, target) })
	t.Run("BrokerDownThenBack", func(t *testing.T) { testBrokerDown(t, target, false) })
	t.Run("BoundedMemoryWhileStalled", func(t *testing.T) { testBrokerDown(t, target, true) })
	t.Run("TooLargeToDeadLetter", func(t *testing.T) { testTooLarge(t, target) })
	t.Run("Check", func(t *testing.T) { testCheck(t, target) })
}

// testCheck: `outbox-cdc check` passes against a prepared destination and
// reports at least one check of the sink's own.
func testCheck(t *testing.T, target Target) {
	name := objectName(t)
	src := newSource(t, "mysql", name)
	s := target.Prepare(t, Options{})
	out, err := testenv.Command(t, "check", "--config", config(t, name, src, s, "")).CombinedOutput()
	if err != nil {
		t.Fatalf("check: %v\n%s", err, out)
	}
	sinkType := strings.TrimSpace(strings.TrimPrefix(strings.SplitN(strings.TrimSpace(s.Sink), "\n", 2)[0], "type:"))
	if !strings.Contains(string(out), "PASS  "+sinkType+".") {
		t.Fatalf("check output has no %s check:\n%s", sinkType, out)
	}
	t.Logf("check:\n%s", out)
}

// objectName is a unique database, schema and connector name.
func objectName(t *testing.T) string { return testenv.UniqueName(t, "st") }

// config writes the connector's configuration.
func config(t *testing.T, name string, src *source, s *Setup, pipeline string) string {
	delivery := ""
	if s.Delivery != "" {
		delivery = "delivery: " + s.Delivery + "\n"
	}
	return writeConfig(t, fmt.Sprintf(`%sname: %s
source:
%sroute:
  preset: seed
  topic: %q
sink:
%scheckpoint:
  type: file
  path: %q
pipeline:
  dlq_topic: %q
%s`, delivery, name, src.yaml, s.Topic, s.Sink, t.TempDir()+"/checkpoint", s.DLQTopic, pipeline))
}

// check asserts that every id in want arrived (exactly once when exact),
// nothing else did, every message carries its dedupe id, and per stream
// and key the first copies keep commit order.
func check(t *testing.T, got []Message, want []string, exact bool) {
	t.Helper()
	order := map[string]int{}
	for i, id := range want {
		order[id] = i
	}
	seen := map[string]int{}
	last := map[string]int{}
	dups := 0
	for _, m := range got {
		id := m.Headers["id"]
		idx, ok := order[id]
		if !ok {
			t.Fatalf("unexpected message %+v", m)
		}
		if dedupe, _, _ := strings.Cut(m.DedupeID, "~"); dedupe != id {
			t.Fatalf("message %s carries dedupe id %q, want the message id", id, m.DedupeID)
		}
		seen[id]++
		if seen[id] > 1 {
			dups++
			continue
		}
		stream := m.Stream + "/" + m.Key
		if prev, ok := last[stream]; ok && idx < prev {
			t.Fatalf("aggregate %s out of order in %s: %s (commit #%d) after commit #%d", m.Key, m.Stream, id, idx, prev)
		}
		last[stream] = idx
	}
	var missing []string
	for _, id := range want {
		if seen[id] == 0 {
			missing = append(missing, id)
		}
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		t.Fatalf("%d of %d committed rows never arrived, e.g. %v", len(missing), len(want), missing[:min(5, len(missing))])
	}
	if exact && dups > 0 {
		t.Fatalf("%d duplicate messages", dups)
	}
	t.Logf("%d rows committed, %d messages read, %d duplicates", len(want), len(got), dups)
}

// readAll reads until want arrived, then a little longer for stragglers
// (duplicates).
func readAll(t *testing.T, s *Setup, n int, timeout time.Duration) []Message {
	s.Read(t, n, timeout)
	time.Sleep(500 * time.Millisecond) // a deliberate window for duplicates to show up
	return s.Read(t, 0, time.Second)
}

// testDelivery: rows of several transactions and aggregates arrive once,
// in order per aggregate, with the route's headers, the payload, the
// aggregate id as key and the message id as dedupe id.
func testDelivery(t *testing.T, target Target, kind string) {
	name := objectName(t)
	src := newSource(t, kind, name)
	s := target.Prepare(t, Options{})
	c := testenv.Start(t, config(t, name, src, s, ""))
	var want []string
	for i := 0; i < 40; i++ {
		rows := make([]Row, 1+i%4)
		for j := range rows {
			id := fmt.Sprintf("d-%d-%d", i, j)
			rows[j] = Row{id, []string{"ORDER", "PAYMENT"}[(i+j)%2], fmt.Sprintf("A-%d", (i*3+j)%5), "CREATED", fmt.Sprintf(`{"n": %d}`, len(want))}
			want = append(want, id)
		}
		src.insertTx(t, rows)
	}
	got := readAll(t, s, len(want), 30*time.Second)
	check(t, got, want, true)
	for _, m := range got {
		if m.Headers["id"] == "d-1-1" {
			if m.Key != "A-4" || m.Headers["event_type"] != "CREATED" || m.Headers["aggregate_type"] != "ORDER" || !strings.HasPrefix(m.Value, `{"n": 2`) {
				t.Fatalf("message for d-1-1: %+v", m)
			}
		}
	}
	if err := c.Stop(15 * time.Second); err != nil {
		t.Fatalf("SIGTERM exit: %v", err)
	}
}

// testKillNine kills the connector with SIGKILL three times while rows are
// committed; after restarts from the checkpoint every row arrives, first
// copies in order per aggregate (duplicates allowed unless the broker
// dedupes).
func testKillNine(t *testing.T, target Target) {
	name := objectName(t)
	src := newSource(t, "mysql", name)
	s := target.Prepare(t, Options{})
	cfg := config(t, name, src, s, "")
	c := testenv.Start(t, cfg)
	w := startWriter(t, src, "k9", 300, 2*time.Millisecond, 0)
	for i := 0; i < 3; i++ {
		time.Sleep(time.Duration(150+rand.IntN(200)) * time.Millisecond)
		c.Kill()
		time.Sleep(100 * time.Millisecond) // rows committed while it is down
		c = testenv.Start(t, cfg)
	}
	want := w.wait()
	got := readAll(t, s, len(want), 60*time.Second)
	check(t, got, want, s.BrokerDedupes)
	if err := c.Stop(15 * time.Second); err != nil {
		t.Fatalf("SIGTERM exit: %v", err)
	}
}

// testGracefulStop stops the connector with SIGTERM twice under load; it
// exits 0 each time and nothing arrives twice.
func testGracefulStop(t *testing.T, target Target) {
	name := objectName(t)
	src := newSource(t, "mysql", name)
	s := target.Prepare(t, Options{})
	cfg := config(t, name, src, s, "")
	c := testenv.Start(t, cfg)
	w := startWriter(t, src, "gs", 250, time.Millisecond, 0)
	for i := 0; i < 2; i++ {
		time.Sleep(200 * time.Millisecond)
		if err := c.Stop(20 * time.Second); err != nil {
			t.Fatalf("SIGTERM exit: %v", err)
		}
		c = testenv.Start(t, cfg)
	}
	want := w.wait()
	got := readAll(t, s, len(want), 60*time.Second)
	check(t, got, want, true)
	if err := c.Stop(15 * time.Second); err != nil {
		t.Fatalf("SIGTERM exit: %v", err)
	}
}

// testBrokerDown makes the broker unreachable while rows are committed.
// The connector stays up, says it is not ready, and once the broker is
// back delivers every row in order per aggregate. With stalled, it also
// commits far more bytes than the pipeline may hold and checks that the
// connector's resident memory stays bounded (documented bound: the
// pipeline's batches and queue plus the sink's window, a few tens of MB;
// checked with a wide margin).
func testBrokerDown(t *testing.T, target Target, stalled bool) {
	name := objectName(t)
	src := newSource(t, "mysql", name)
	s := target.Prepare(t, Options{Outage: true})
	pipeline := ""
	if stalled {
		pipeline = "  max_batch_bytes: 1048576\n  queue_transactions: 8\n"
	}
	c := testenv.Start(t, config(t, name, src, s, pipeline))
	before := startWriter(t, src, "up", 20, 0, 0).wait()
	s.Read(t, len(before), 30*time.Second)

	s.Down(t)
	testenv.Eventually(t, 45*time.Second, "/readyz 503 with the broker unreachable", func() bool { return c.Status("/readyz") == 503 })
	baseRSS := c.RSS()
	txs, payload := 100, 0
	if stalled {
		txs, payload = 2000, 8<<10 // 6000 rows, about 50 MB
	}
	w := startWriter(t, src, "down", txs, 0, payload)
	maxRSS := baseRSS
	for done := false; !done; {
		select {
		case <-w.done:
			done = true
		case <-time.After(250 * time.Millisecond):
		}
		if c.Exited() {
			t.Fatalf("the connector exited while the broker was down: %v", c.Err())
		}
		maxRSS = max(maxRSS, c.RSS())
	}
	during := w.wait()
	if stalled {
		time.Sleep(2 * time.Second) // a deliberate gap: let the source read what it can
		maxRSS = max(maxRSS, c.RSS())
		committed := int64(len(during) * payload)
		t.Logf("broker stalled: %d rows (%.0f MB) committed; RSS %.1f MB before, at most %.1f MB during",
			len(during), float64(committed)/1e6, float64(baseRSS)/1e6, float64(maxRSS)/1e6)
		if maxRSS-baseRSS > committed/2 || maxRSS > 300<<20 {
			t.Fatalf("RSS grew from %.1f MB to %.1f MB while %.1f MB were committed: the connector reads ahead without bound",
				float64(baseRSS)/1e6, float64(maxRSS)/1e6, float64(committed)/1e6)
		}
	} else {
		time.Sleep(3 * time.Second) // a deliberate gap: the outage lasts a while
	}
	if c.Status("/healthz") != 200 {
		t.Fatal("/healthz failed during the outage: liveness must not flap")
	}
	s.Up(t)
	want := append(before, during...)
	got := readAll(t, s, len(want), 120*time.Second)
	check(t, got, want, false)
	testenv.Eventually(t, 30*time.Second, "/readyz 200 after the broker came back", func() bool { return c.Status("/readyz") == 200 })
	if err := c.Stop(20 * time.Second); err != nil {
		t.Fatalf("SIGTERM exit: %v", err)
	}
}

// testTooLarge commits a row too large for the destination between two
// small ones: with pipeline.on_error dlq its dead-letter record (without
// the payload) arrives at the dead-letter destination on the same broker,
// and the rows before and after it arrive as usual.
func testTooLarge(t *testing.T, target Target) {
	name := objectName(t)
	src := newSource(t, "mysql", name)
	s := target.Prepare(t, Options{MaxMessageBytes: 8 << 10})
	c := testenv.Start(t, config(t, name, src, s, "  on_error: dlq\n"))
	src.insertTx(t, []Row{{"tl-1", "ORDER", "A-1", "E", `{"n": 1}`}})
	big := fmt.Sprintf(`{"pad": %q}`, strings.Repeat("x", 20<<10))
	src.insertTx(t, []Row{{"tl-2", "ORDER", "A-1", "E", big}, {"tl-3", "ORDER", "A-2", "E", `{"n": 3}`}})
	src.insertTx(t, []Row{{"tl-4", "ORDER", "A-1", "E", `{"n": 4}`}})
	got := readAll(t, s, 4, 60*time.Second)
	var rows []Message
	var dead *Message
	for i, m := range got {
		if m.Headers[outboxcdc.HeaderMessageID] != "" {
			dead = &got[i]
			continue
		}
		rows = append(rows, m)
	}
	if dead == nil {
		t.Fatalf("no dead-letter record among %+v", got)
	}
	if dead.Headers[outboxcdc.HeaderMessageID] != "tl-2" || dead.Headers[outboxcdc.HeaderErrorClass] != outboxcdc.FailureRejected ||
		dead.Headers[outboxcdc.HeaderValueOmitted] == "" || len(dead.Value) > 0 || dead.Stream != s.DLQTopic {
		t.Fatalf("dead-letter record %+v", *dead)
	}
	check(t, rows, []string{"tl-1", "tl-3", "tl-4"}, false)
	if c.Exited() {
		t.Fatalf("the connector stopped: %v", c.Err())
	}
	if err := c.Stop(15 * time.Second); err != nil {
		t.Fatalf("SIGTERM exit: %v", err)
	}
}
