package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outbox-cdc/outbox-cdc/sink/natsjs"
	"github.com/outbox-cdc/outbox-cdc/sink/rabbitmq"
	"github.com/outbox-cdc/outbox-cdc/test/testenv"
)

// TestHASinkCutStepsDownRabbitMQ and TestHASinkCutStepsDownNATS are
// TestHASinkCutStepsDown with the RabbitMQ and NATS JetStream sinks: the
// step-down wraps every sink, and a standby proves it reaches the broker
// with the sink's own check (RabbitMQ: AMQP connect and the exchange;
// NATS: JetStream and the stream). Each replica reaches the broker
// through its own testenv.Proxy; the active's path goes silent for 30 s
// under writes (at-least-once, the checkpoint in a table). The standby
// must stream within ha.sink_unreachable_timeout + 2 check intervals plus
// start-up, nothing committed may be lost, and each aggregate's first
// copies arrive in commit order.
func TestHASinkCutStepsDownRabbitMQ(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		u := testenv.RabbitMQURL(t)
		exchange := fmt.Sprintf("e2e.sinkcut.%d", rand.Int64())
		got := consumeRabbit(t, u, exchange)
		testHASinkCutBroker(t, b, "rabbitmq", u, func(url string) string {
			return fmt.Sprintf("  type: rabbitmq\n  url: %q\n  exchange: %q\n  heartbeat: 2s\n", url, exchange)
		}, "{aggregate_type}", got)
	})
}

func TestHASinkCutStepsDownNATS(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		u := testenv.NATSURL(t)
		id := rand.Int64N(1 << 40)
		stream, prefix := fmt.Sprintf("E2E_SINKCUT_%d", id), fmt.Sprintf("sinkcut%d", id)
		got := consumeNATS(t, u, stream, prefix)
		testHASinkCutBroker(t, b, "nats", u, func(url string) string {
			return fmt.Sprintf("  type: nats\n  url: %q\n  stream: %s\n  ping_interval: 2s\n", url, stream)
		}, prefix+".{aggregate_type}.{aggregate_id}", got)
	})
}

// testHASinkCutBroker runs the cut with the broker at u; sinkYAML is the
// sink section's type keys for a replica reaching the broker at url.
func testHASinkCutBroker(t *testing.T, b *backend, kind, u string, sinkYAML func(url string) string, topic string, got *brokerReceived) {
	name := connName(t, "e2e-sinkcut-"+kind+"-"+b.kind)
	pathA, pathB := testenv.NewProxy(t, testenv.HostOf(t, u)), testenv.NewProxy(t, testenv.HostOf(t, u))
	active := testenv.Start(t, b.brokerSinkCutConfig(t, name, sinkYAML(testenv.WithHost(t, u, pathA.Addr())), topic))
	standby := testenv.Launch(t, b.brokerSinkCutConfig(t, name, sinkYAML(testenv.WithHost(t, u, pathB.Addr())), topic))
	standby.WaitStatus(200, "standby", 15*time.Second)
	w := startChaosWriter(t, b, "sinkcut", 2*time.Millisecond)
	time.Sleep(2 * time.Second) // the active streams a while before the cut

	cut := time.Now()
	pathA.Silence()
	var streams time.Duration
	for streams == 0 {
		if time.Since(cut) > sinkCutFor {
			t.Fatalf("the standby did not stream within the %s cut\nactive:\n%s\nstandby:\n%s", sinkCutFor, active.Log(), standby.Log())
		}
		if standby.Streaming() {
			streams = time.Since(cut)
		}
		select {
		case <-standby.Done():
			t.Fatalf("standby exited: %v\n%s", standby.Err(), standby.Log())
		case <-active.Done():
			t.Fatalf("the active exited instead of stepping down: %v\n%s", active.Err(), active.Log())
		default:
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !strings.Contains(active.Log(), "stepping down") {
		t.Fatalf("the standby streams but the active did not say it stepped down:\n%s", active.Log())
	}
	bound := sinkCutTimeout + 2*haCutoffCheck
	t.Logf("%s %s: the standby streams %s after the cut (bound %s + start-up; %s without stepping down)",
		b.kind, kind, streams.Round(time.Millisecond), bound, sinkCutFor)
	if streams > bound+10*time.Second {
		t.Fatalf("the standby streamed %s after the cut, bound %s + start-up", streams, bound)
	}
	active.WaitStatus(200, "standby", 10*time.Second)
	pathA.Heal()

	want := w.finish()
	deadline := time.Now().Add(60 * time.Second)
	for len(got.ids()) < len(want) && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(time.Second) // late copies
	checkBrokerDelivery(t, got.all(), want)
	for _, c := range []*testenv.Connector{standby, active} { // the standby first, or it takes over while stopping
		if err := c.Stop(15 * time.Second); err != nil {
			t.Fatalf("SIGTERM exit: %v", err)
		}
	}
}

// brokerSinkCutConfig is an HA replica with the sink section's type keys
// sinkYAML and the step-down timings of the Kafka tests.
func (b *backend) brokerSinkCutConfig(t *testing.T, name, sinkYAML, topic string) string {
	table := "outbox_cdc_checkpoint"
	if b.kind == "postgres" {
		table = testObjectName(t) + "." + table
	}
	return writeConfig(t, fmt.Sprintf(`
name: %s
source:
%sroute:
  preset: seed
  topic: %q
sink:
%s  ack_timeout: 5s
  dial_timeout: 2s
  retry_backoff_min: 20ms
  retry_backoff_max: 500ms
checkpoint:
  type: table
  table: %s
pipeline:
  shutdown_timeout: 5s
ha:
  enabled: true
  check_interval: %s
  session_timeout: %s
  sink_unreachable_timeout: %s
`, name, b.sourceYAML(name), topic, sinkYAML, table, haCutoffCheck, haCutoffSessionTimeout, sinkCutTimeout))
}

// brokerReceived is what the test's consumer received.
type brokerReceived struct {
	mu  sync.Mutex
	got []brokerMsg
}

type brokerMsg struct{ id, key string }

func (r *brokerReceived) all() []brokerMsg {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]brokerMsg(nil), r.got...)
}

func (r *brokerReceived) ids() map[string]bool {
	m := map[string]bool{}
	for _, g := range r.all() {
		m[g.id] = true
	}
	return m
}

// consumeRabbit declares exchange (topic, removed at the end) and a queue
// bound to it with "#", and receives from it directly, not through the
// replicas' paths.
func consumeRabbit(t *testing.T, u, exchange string) *brokerReceived {
	t.Helper()
	conn, err := amqp.Dial(u)
	if err != nil {
		testenv.Unavailable(t, "RabbitMQ at %s: %v", u, err)
	}
	t.Cleanup(func() { conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.ExchangeDeclare(exchange, "topic", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if c, err := amqp.Dial(u); err == nil {
			if ch, err := c.Channel(); err == nil {
				ch.ExchangeDelete(exchange, false, false)
			}
			c.Close()
		}
	})
	q, err := ch.QueueDeclare("", false, true, true, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind(q.Name, "#", exchange, false, nil); err != nil {
		t.Fatal(err)
	}
	ds, err := ch.Consume(q.Name, "", true, true, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	r := &brokerReceived{}
	go func() {
		for d := range ds {
			key := fmt.Sprint(d.Headers[rabbitmq.HeaderKey])
			if b, ok := d.Headers[rabbitmq.HeaderKey].([]byte); ok {
				key = string(b)
			}
			r.mu.Lock()
			r.got = append(r.got, brokerMsg{id: d.MessageId, key: key})
			r.mu.Unlock()
		}
	}()
	return r
}

// consumeNATS creates the stream (memory, capturing prefix.>, removed at
// the end) and reads it directly, not through the replicas' paths.
func consumeNATS(t *testing.T, u, stream, prefix string) *brokerReceived {
	t.Helper()
	nc, err := nats.Connect(u)
	if err != nil {
		testenv.Unavailable(t, "NATS at %s: %v", u, err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	st, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: stream, Subjects: []string{prefix + ".>"},
		Storage: jetstream.MemoryStorage, Duplicates: 2 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { js.DeleteStream(context.Background(), stream) })
	cons, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	r := &brokerReceived{}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		r.mu.Lock()
		id, _, _ := strings.Cut(m.Headers().Get(nats.MsgIdHdr), "~") // a copy re-sent to restore order: <id>~<n>
		r.got = append(r.got, brokerMsg{id: id, key: m.Headers().Get(natsjs.HeaderKey)})
		r.mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cc.Stop)
	return r
}

// checkBrokerDelivery: every committed row arrived, nothing else did, and
// each aggregate's first copies are in commit order; duplicates are
// counted (at-least-once).
func checkBrokerDelivery(t *testing.T, got []brokerMsg, want []string) {
	t.Helper()
	order := map[string]int{}
	for i, id := range want {
		order[id] = i
	}
	seen := map[string]int{}
	last := map[string]int{}
	dups := 0
	for _, m := range got {
		idx, ok := order[m.id]
		if !ok {
			t.Fatalf("unexpected message %+v", m)
		}
		seen[m.id]++
		if seen[m.id] > 1 {
			dups++
			continue
		}
		if p, ok := last[m.key]; ok && idx < p {
			t.Fatalf("aggregate %s out of order: %s (commit #%d) after commit #%d", m.key, m.id, idx, p)
		}
		last[m.key] = idx
	}
	lost := 0
	for _, id := range want {
		if seen[id] == 0 {
			lost++
		}
	}
	if lost > 0 {
		t.Fatalf("%d of %d committed rows never arrived", lost, len(want))
	}
	t.Logf("%d rows committed, %d messages read, %d duplicates, 0 lost", len(want), len(got), dups)
}
