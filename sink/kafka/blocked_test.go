package kafka

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
)

// noAutoCreate is a kfake cluster that does not create topics on demand,
// with the topics given.
func noAutoCreate(t *testing.T, topics ...string) (*kfake.Cluster, []string) {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.DefaultNumPartitions(3), kfake.SeedTopics(3, topics...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c, c.ListenAddrs()
}

func gauge(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

func createTopic(t *testing.T, brokers []string, topic string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	req := kmsg.NewPtrCreateTopicsRequest()
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = topic, 3, 1
	req.Topics = append(req.Topics, rt)
	if _, err := req.RequestWith(context.Background(), cl); err != nil {
		t.Fatal(err)
	}
}

// blockedWriter is what the tests below need of both Kafka sinks.
type blockedWriter interface {
	Ready() error
}

// watchBlocked samples Ready and the gauges while a Write waits for a
// topic, and checks that they name it.
func watchBlocked(t *testing.T, s blockedWriter, reg *prometheus.Registry, topic string, done <-chan struct{}) {
	t.Helper()
	time.Sleep(700 * time.Millisecond)
	select {
	case <-done:
		t.Fatal("the write gave up before the wait bound")
	default:
	}
	err := s.Ready()
	if err == nil || !strings.Contains(err.Error(), `"`+topic+`"`) || !strings.Contains(err.Error(), "sink.unwritable_topic_timeout") {
		t.Fatalf("Ready during the wait = %v; want it to name topic %q and the timeout", err, topic)
	}
	if n := gauge(t, reg, "outbox_cdc_sink_blocked_topics"); n != 1 {
		t.Fatalf("outbox_cdc_sink_blocked_topics = %v during the wait", n)
	}
	if s := gauge(t, reg, "outbox_cdc_sink_blocked_seconds"); s < 0.3 {
		t.Fatalf("outbox_cdc_sink_blocked_seconds = %v during the wait", s)
	}
}

// TestKafkaUnknownTopicWaitsThenFails: on a cluster that does not create
// topics, records for a missing topic wait (Ready says why, the gauges
// show the stall) for sink.unwritable_topic_timeout, then fail
// permanently, naming every record of that topic, so pipeline.on_error
// decides. Once the topic exists it is written again.
func TestKafkaUnknownTopicWaitsThenFails(t *testing.T) {
	_, addrs := noAutoCreate(t, "known")
	cfg := testConfig(addrs)
	cfg.UnwritableTopicTimeout = 2 * time.Second
	k, reg := newTestKafka(t, cfg)
	batch := []outboxcdc.Record{
		{Topic: "known", Key: []byte("a"), Value: []byte("0")},
		{Topic: "missing", Key: []byte("b"), Value: []byte("1")},
		{Topic: "known", Key: []byte("c"), Value: []byte("2")},
		{Topic: "missing", Key: []byte("d"), Value: []byte("3")},
	}
	done := make(chan struct{})
	var err error
	start := time.Now()
	go func() { err = k.Write(context.Background(), batch); close(done) }()
	watchBlocked(t, k, reg, "missing", done)
	<-done
	took := time.Since(start)
	var e *Error
	if !errors.As(err, &e) || !e.Permanent || e.Topic != "missing" || e.Index != 1 || len(e.Others) != 1 || e.Others[0] != 3 {
		t.Fatalf("Write = %#v (%v); want a permanent error for records 1 and 3 of topic missing", e, err)
	}
	if code, _ := Code(err); code != sarama.ErrUnknownTopicOrPartition || !strings.Contains(err.Error(), `create topic "missing"`) {
		t.Fatalf("error %v: want UNKNOWN_TOPIC_OR_PARTITION and the remedy", err)
	}
	if took < cfg.UnwritableTopicTimeout || took > cfg.UnwritableTopicTimeout+15*time.Second {
		t.Fatalf("gave up after %v; the bound is %v", took, cfg.UnwritableTopicTimeout)
	}
	t.Logf("gave up after %v (bound %v): %v", took.Round(time.Millisecond), cfg.UnwritableTopicTimeout, err)
	createTopic(t, addrs, "missing")
	if err := k.Write(context.Background(), batch[1:2]); err != nil {
		t.Fatalf("write after the topic was created: %v", err)
	}
	if err := k.Ready(); err != nil {
		t.Fatalf("Ready after the topic was written: %v", err)
	}
	if n := gauge(t, reg, "outbox_cdc_sink_blocked_topics"); n != 0 {
		t.Fatalf("outbox_cdc_sink_blocked_topics = %v after the topic was written", n)
	}
}

// TestTransactionalUnknownTopicWaitsThenFails: the same in exactly-once
// mode, for a transaction of one call and inside a transaction kept open
// across calls, which survives the wait (the topic is checked before its
// records go into the transaction).
func TestTransactionalUnknownTopicWaitsThenFails(t *testing.T) {
	for _, open := range []bool{false, true} {
		name := map[bool]string{false: "one call", true: "open transaction"}[open]
		t.Run(name, func(t *testing.T) {
			c, addrs := noAutoCreate(t, "known")
			_ = c
			cfg := DefaultKafkaConfig()
			cfg.Brokers = addrs
			cfg.RetryBackoffMin, cfg.RetryBackoffMax = 20*time.Millisecond, 300*time.Millisecond
			cfg.UnwritableTopicTimeout = 2 * time.Second
			tc := DefaultTxnConfig()
			tc.ProgressTopic = "progress"
			reg := prometheus.NewRegistry()
			s, err := NewTransactional(cfg, tc, "conn", "mysql", zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel), reg)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			ctx := context.Background()
			if _, err := s.Load(ctx); err != nil {
				t.Fatal(err)
			}
			if open {
				if err := s.WriteAtomic(ctx, recs("known", "f0", "f1"), ""); err != nil {
					t.Fatal(err)
				}
			}
			batch := append(recs("known", "a"), recs("missing", "b")...)
			done := make(chan struct{})
			start := time.Now()
			go func() { err = s.WriteAtomic(ctx, batch, "mysql:0-1-1"); close(done) }()
			watchBlocked(t, s, reg, "missing", done)
			<-done
			var e *Error
			if !errors.As(err, &e) || !e.Permanent || e.Topic != "missing" || e.Index != 1 || errors.Is(err, outboxcdc.ErrOpenWriteAborted) {
				t.Fatalf("WriteAtomic = %v; want a permanent error for record 1 that leaves an open transaction open", err)
			}
			if took := time.Since(start); took < cfg.UnwritableTopicTimeout {
				t.Fatalf("gave up after %v", took)
			}
			// The pipeline dead-letters the record and writes the batch again.
			if err := s.WriteAtomic(ctx, append(recs("known", "a"), recs("known", "dead-b")...), "mysql:0-1-1"); err != nil {
				t.Fatal(err)
			}
			want := "a,dead-b"
			if open {
				want = "f0,f1," + want
			}
			if got := values(readAll(t, addrs, "known", true)); got != want {
				t.Fatalf("read_committed = %q, want %q", got, want)
			}
		})
	}
}
