package sinktest

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-cdc/outbox-cdc/test/testenv"
)

// TestKafka holds the Kafka sink to the contract, against kfake (an
// in-process Kafka-protocol broker, stopped and started again on the same
// port with its data for an outage), read back with franz-go: the
// at-least-once sink, and the exactly-once sink (delivery: exactly-once,
// read back with read_committed), which must leave no duplicate even
// after kill -9.
func TestKafka(t *testing.T) {
	t.Run("AtLeastOnce", func(t *testing.T) { Run(t, kafkaTarget{}) })
	t.Run("ExactlyOnce", func(t *testing.T) { Run(t, kafkaTarget{exactlyOnce: true}) })
}

type kafkaTarget struct{ exactlyOnce bool }

// kafkaBroker is a kfake cluster that can be stopped and started again.
type kafkaBroker struct {
	port int
	dir  string
	mu   sync.Mutex
	c    *kfake.Cluster
}

func (b *kafkaBroker) start(t *testing.T) {
	b.mu.Lock()
	defer b.mu.Unlock()
	var err error
	for i := 0; i < 50; i++ { // the port may take a moment to be free again
		b.c, err = kfake.NewCluster(kfake.NumBrokers(1), kfake.DefaultNumPartitions(3), kfake.AllowAutoTopicCreation(),
			kfake.Ports(b.port), kfake.DataDir(b.dir))
		if err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("start kfake: %v", err)
}

func (b *kafkaBroker) stop() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.c != nil {
		b.c.Close()
		b.c = nil
	}
}

func (k kafkaTarget) Prepare(t *testing.T, o Options) *Setup {
	_, port, _ := net.SplitHostPort(testenv.FreeAddr(t))
	p, _ := strconv.Atoi(port)
	b := &kafkaBroker{port: p, dir: t.TempDir()}
	b.start(t)
	t.Cleanup(b.stop)
	addr := fmt.Sprintf("127.0.0.1:%d", p)
	prefix := fmt.Sprintf("st%d", time.Now().UnixNano()%1e9)
	s := &Setup{
		Topic:    prefix + ".{aggregate_type}",
		DLQTopic: prefix + "-dlq",
		Sink:     fmt.Sprintf("  type: kafka\n  brokers: [%q]\n  retry_backoff_max: 1s\n  ready_interval: 500ms\n", addr),
		Down:     func(*testing.T) { b.stop() },
		Up:       func(t *testing.T) { b.start(t) },
	}
	if o.MaxMessageBytes > 0 {
		s.Sink += fmt.Sprintf("  max_message_bytes: %d\n", o.MaxMessageBytes)
	}
	opts := []kgo.Opt{kgo.SeedBrokers(addr), kgo.ConsumeRegex(), kgo.ConsumeTopics(`^` + prefix + `.*`),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.MetadataMinAge(50 * time.Millisecond), kgo.MetadataMaxAge(250 * time.Millisecond), kgo.FetchMaxWait(100 * time.Millisecond)}
	if k.exactlyOnce {
		// The progress topic's name must not match the consumer's regex.
		s.Delivery = "exactly-once"
		s.Sink += fmt.Sprintf("  progress_topic: progress-%s\n", prefix)
		s.BrokerDedupes = true
		opts = append(opts, kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	}
	var mu sync.Mutex
	var got []Message
	var cl *kgo.Client
	s.Read = func(t *testing.T, n int, timeout time.Duration) []Message {
		t.Helper()
		if cl == nil {
			var err error
			cl, err = kgo.NewClient(opts...)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(cl.Close)
		}
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		for {
			mu.Lock()
			have := len(got)
			mu.Unlock()
			if have >= n && n > 0 || ctx.Err() != nil {
				break
			}
			fs := cl.PollFetches(ctx)
			fs.EachRecord(func(r *kgo.Record) {
				h := map[string]string{}
				for _, x := range r.Headers {
					h[x.Key] = string(x.Value)
				}
				mu.Lock()
				got = append(got, Message{Stream: r.Topic, Key: string(r.Key), DedupeID: h["id"], Value: string(r.Value), Headers: h})
				mu.Unlock()
			})
		}
		mu.Lock()
		defer mu.Unlock()
		return append([]Message(nil), got...)
	}
	return s
}
