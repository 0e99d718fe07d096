package kafka

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
	"github.com/outbox-cdc/outbox-cdc/test/testenv"
)

func txnSink(t *testing.T, brokers []string, name string, mod ...func(*KafkaConfig, *TxnConfig)) *Transactional {
	t.Helper()
	cfg := DefaultKafkaConfig()
	cfg.Brokers = brokers
	cfg.RetryBackoffMin = 10 * time.Millisecond
	cfg.RetryBackoffMax = 100 * time.Millisecond
	tc := DefaultTxnConfig()
	tc.ProgressTopic = "progress"
	for _, m := range mod {
		m(&cfg, &tc)
	}
	s, err := NewTransactional(cfg, tc, name, "mysql", zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// readAll reads every record of topic with the given isolation until
// quiet for a while.
func readAll(t *testing.T, brokers []string, topic string, committed bool) []*kgo.Record {
	t.Helper()
	opts := []kgo.Opt{
		kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(50 * time.Millisecond),
	}
	if committed {
		opts = append(opts, kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var out []*kgo.Record
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 700*time.Millisecond)
		fs := cl.PollFetches(ctx)
		cancel()
		n := 0
		fs.EachRecord(func(r *kgo.Record) { out = append(out, r); n++ })
		if n == 0 {
			return out
		}
	}
}

func recs(topic string, ids ...string) []outboxcdc.Record {
	var out []outboxcdc.Record
	for _, id := range ids {
		out = append(out, outboxcdc.Record{Topic: topic, Key: []byte("agg"), Value: []byte(id),
			Headers: []outboxcdc.Header{{Key: "id", Value: []byte(id)}}, Timestamp: time.Now()})
	}
	return out
}

func values(rs []*kgo.Record) string {
	var v []string
	for _, r := range rs {
		v = append(v, string(r.Value))
	}
	return strings.Join(v, ",")
}

func TestTransactionalCommitAndLoad(t *testing.T) {
	_, brokers := testenv.Kafka(t)
	ctx := context.Background()
	s := txnSink(t, brokers, "conn-a")
	pos, err := s.Load(ctx)
	if err != nil || !pos.IsZero() {
		t.Fatalf("first Load = %q, %v; want zero", pos, err)
	}
	if err := s.WriteAtomic(ctx, recs("events", "1", "2"), "mysql:0-1-10"); err != nil {
		t.Fatal(err)
	}
	if err := s.WriteAtomic(ctx, nil, "mysql:0-1-11"); err != nil { // progress only
		t.Fatal(err)
	}
	if err := s.WriteAtomic(ctx, recs("events", "3"), "mysql:0-1-12"); err != nil {
		t.Fatal(err)
	}
	if got := values(readAll(t, brokers, "events", true)); got != "1,2,3" {
		t.Fatalf("read_committed got %q", got)
	}
	// Another connector sharing the progress topic writes after us.
	other := txnSink(t, brokers, "conn-b")
	if _, err := other.Load(ctx); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 300; i++ { // pushes ours out of the first scan window
		if err := other.WriteAtomic(ctx, nil, outboxcdc.Position(fmt.Sprintf("mysql:0-1-%d", 100+i))); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()

	again := txnSink(t, brokers, "conn-a")
	pos, err = again.Load(ctx)
	if err != nil || pos != "mysql:0-1-12" {
		t.Fatalf("Load after restart = %q, %v; want mysql:0-1-12", pos, err)
	}
	pos, err = txnSink(t, brokers, "conn-b").Load(ctx)
	if err != nil || pos != "mysql:0-1-399" {
		t.Fatalf("other connector Load = %q, %v", pos, err)
	}
	// The progress topic was created compacted with one partition.
	cl, _ := kgo.NewClient(kgo.SeedBrokers(brokers...))
	defer cl.Close()
	req := kmsg.NewPtrDescribeConfigsRequest()
	rr := kmsg.NewDescribeConfigsRequestResource()
	rr.ResourceType = kmsg.ConfigResourceTypeTopic
	rr.ResourceName = "progress"
	req.Resources = append(req.Resources, rr)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	compact := false
	for _, r := range resp.Resources {
		for _, c := range r.Configs {
			if c.Name == "cleanup.policy" && c.Value != nil && *c.Value == "compact" {
				compact = true
			}
		}
	}
	if !compact {
		t.Fatalf("progress topic is not compacted: %+v", resp.Resources)
	}
}

// A failed attempt is aborted and the whole batch sent again: read_committed
// consumers see each record once, read_uncommitted ones also the aborted copy.
func TestTransactionalAbortInvisible(t *testing.T) {
	c, brokers := testenv.Kafka(t)
	ctx := context.Background()
	s := txnSink(t, brokers, "conn")
	if _, err := s.Load(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.WriteAtomic(ctx, recs("events", "0"), "mysql:0-1-1"); err != nil {
		t.Fatal(err)
	}
	// Fail the produce requests to partition 1 of "events" twice (sarama
	// retries once by itself), after records of other partitions landed.
	var failed atomic.Int32
	c.ControlKey(int16(kmsg.Produce), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req := kr.(*kmsg.ProduceRequest)
		if failed.Load() >= 2 {
			return nil, nil, false
		}
		for _, tp := range req.Topics {
			if tp.Topic == "events" {
				failed.Add(1)
				resp := req.ResponseKind().(*kmsg.ProduceResponse)
				for _, tp := range req.Topics {
					rt := kmsg.NewProduceResponseTopic()
					rt.Topic = tp.Topic
					for _, p := range tp.Partitions {
						rp := kmsg.NewProduceResponseTopicPartition()
						rp.Partition = p.Partition
						rp.ErrorCode = 19 // NOT_ENOUGH_REPLICAS: retryable
						rt.Partitions = append(rt.Partitions, rp)
					}
					resp.Topics = append(resp.Topics, rt)
				}
				return resp, nil, true
			}
		}
		return nil, nil, false
	})
	batch := append(recs("other", "x"), recs("events", "1", "2")...)
	if err := s.WriteAtomic(ctx, batch, "mysql:0-1-2"); err != nil {
		t.Fatal(err)
	}
	if failed.Load() < 2 {
		t.Fatalf("fault injected %d times", failed.Load())
	}
	if got := values(readAll(t, brokers, "events", true)); got != "0,1,2" {
		t.Fatalf("read_committed events = %q", got)
	}
	if got := values(readAll(t, brokers, "other", true)); got != "x" {
		t.Fatalf("read_committed other = %q (the aborted copy must be invisible)", got)
	}
	if got := values(readAll(t, brokers, "other", false)); got == "x" {
		t.Logf("read_uncommitted other = %q (the aborted attempt's record was not written before the failure)", got)
	} else {
		t.Logf("read_uncommitted other = %q: the aborted copy is there, invisible to read_committed", got)
	}
	pos, err := txnSink(t, brokers, "conn").Load(ctx)
	if err != nil || pos != "mysql:0-1-2" {
		t.Fatalf("Load = %q, %v", pos, err)
	}
}

// A record Kafka refuses permanently aborts the transaction: nothing of
// the batch is visible, and the error names the record.
func TestTransactionalPermanentAborts(t *testing.T) {
	_, brokers := testenv.Kafka(t)
	ctx := context.Background()
	s := txnSink(t, brokers, "conn", func(k *KafkaConfig, _ *TxnConfig) { k.MaxMessageBytes = 2048 })
	if _, err := s.Load(ctx); err != nil {
		t.Fatal(err)
	}
	batch := recs("events", "a", "b")
	batch = append(batch, outboxcdc.Record{Topic: "events", Key: []byte("agg"), Value: make([]byte, 4096)})
	err := s.WriteAtomic(ctx, batch, "mysql:0-1-5")
	var e *Error
	if !errors.As(err, &e) || !e.Permanent || e.Index != 2 {
		t.Fatalf("WriteAtomic = %v; want a permanent error for record 2", err)
	}
	if got := readAll(t, brokers, "events", true); len(got) != 0 {
		t.Fatalf("read_committed sees %q of an aborted transaction", values(got))
	}
	pos, err := txnSink(t, brokers, "conn").Load(ctx)
	if err != nil || !pos.IsZero() {
		t.Fatalf("Load = %q, %v; want zero", pos, err)
	}
}

func TestTransactionalRefusesBadProgress(t *testing.T) {
	_, brokers := testenv.Kafka(t)
	ctx := context.Background()
	s := txnSink(t, brokers, "conn")
	if _, err := s.Load(ctx); err != nil {
		t.Fatal(err)
	}
	s.Close()
	put := func(v []byte) {
		cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic("progress"))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		if err := cl.ProduceSync(ctx, &kgo.Record{Key: []byte("conn"), Value: v}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	put([]byte("garbage"))
	if _, err := txnSink(t, brokers, "conn").Load(ctx); !errors.Is(err, ErrProgressUntrusted) {
		t.Fatalf("garbage progress: Load = %v", err)
	}
	put(encodeProgress("postgres:0/16B3748", "x", time.Now()))
	if _, err := txnSink(t, brokers, "conn").Load(ctx); !errors.Is(err, outboxcdc.ErrForeignPosition) {
		t.Fatalf("foreign progress: Load = %v", err)
	}
	put(nil) // tombstone: deliberate reset
	if pos, err := txnSink(t, brokers, "conn").Load(ctx); err != nil || !pos.IsZero() {
		t.Fatalf("tombstone: Load = %q, %v", pos, err)
	}
}

func TestTransactionalRefusesPartitionedProgressTopic(t *testing.T) {
	_, brokers := testenv.Kafka(t, kfake.SeedTopics(3, "progress"))
	s := txnSink(t, brokers, "conn")
	if _, err := s.Load(context.Background()); !errors.Is(err, errProgressLayout) {
		t.Fatalf("Load = %v", err)
	}
}

func TestTxnConfigValidate(t *testing.T) {
	c := DefaultTxnConfig()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if got := c.WithName("orders").TransactionalID; got != "outbox-cdc-orders" {
		t.Fatalf("derived id %q", got)
	}
	c.ProgressTopic = "bad topic"
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "progress_topic:") {
		t.Fatalf("Validate = %v", err)
	}
	c = DefaultTxnConfig()
	c.TransactionTimeout = time.Hour
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "transaction_timeout:") {
		t.Fatalf("Validate = %v", err)
	}
}

// Both Kafka sinks export one metric family: the exactly-once sink counts
// committed records, their bytes and write time, and its connection, under
// the outbox_cdc_sink_ names the at-least-once sink uses, plus its
// transaction counters under the same prefix.
func TestTransactionalExportsSinkMetrics(t *testing.T) {
	_, brokers := testenv.Kafka(t)
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	cfg := DefaultKafkaConfig()
	cfg.Brokers = brokers
	tc := DefaultTxnConfig()
	tc.ProgressTopic = "progress"
	s, err := NewTransactional(cfg, tc, "conn-m", "mysql", zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel), reg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Load(ctx); err != nil {
		t.Fatal(err)
	}
	batch := recs("events", "1", "2", "3")
	if err := s.WriteAtomic(ctx, batch, "mysql:0-1-10"); err != nil {
		t.Fatal(err)
	}
	// A source transaction in two fragments: counted once, at its commit.
	if err := s.WriteAtomic(ctx, recs("events", "4"), ""); err != nil {
		t.Fatal(err)
	}
	if err := s.WriteAtomic(ctx, recs("events", "5"), "mysql:0-1-11"); err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			name := mf.GetName()
			for _, l := range m.GetLabel() {
				name += "{" + l.GetName() + "=" + l.GetValue() + "}"
			}
			switch {
			case m.GetCounter() != nil:
				got[name] = m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				got[name] = m.GetGauge().GetValue()
			case m.GetHistogram() != nil:
				got[name] = float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	want := map[string]float64{
		"outbox_cdc_sink_bytes_total":                  float64(5 * (len("agg") + 1 + len("id") + 1)),
		"outbox_cdc_sink_connected":                    1,
		"outbox_cdc_sink_write_seconds":                2,
		"outbox_cdc_sink_errors_total{kind=permanent}": 0,
		"outbox_cdc_sink_transactions_committed_total": 2,
		"outbox_cdc_sink_transaction_seconds":          2,
		"outbox_cdc_sink_producer_inits_total":         1,
		"outbox_cdc_sink_transaction_open_records":     0,
	}
	for name, v := range want {
		if g, ok := got[name]; !ok || g != v {
			t.Errorf("%s = %v (present %v), want %v", name, g, ok, v)
		}
	}
	for name := range got {
		if !strings.HasPrefix(name, "outbox_cdc_sink_") {
			t.Errorf("metric %s is outside the sink family", name)
		}
	}
}

// TestTransactionalRetryWarningsRateLimited: a write that fails attempt
// after attempt (NOT_ENOUGH_REPLICAS, 15 times, 10-100 ms apart) warns
// once, not once per attempt (docs/sinks.md: one warning, then at most one
// every 30 s), and commits once the broker takes it.
func TestTransactionalRetryWarningsRateLimited(t *testing.T) {
	c, brokers := testenv.Kafka(t)
	ctx := context.Background()
	var logs strings.Builder
	var mu sync.Mutex
	cfg := DefaultKafkaConfig()
	cfg.Brokers = brokers
	cfg.RetryBackoffMin = 10 * time.Millisecond
	cfg.RetryBackoffMax = 100 * time.Millisecond
	tc := DefaultTxnConfig()
	tc.ProgressTopic = "progress"
	s, err := NewTransactional(cfg, tc, "conn", "mysql", zerolog.New(lockedWriter{&mu, &logs}).Level(zerolog.WarnLevel), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if _, err := s.Load(ctx); err != nil {
		t.Fatal(err)
	}
	var failed atomic.Int32
	c.ControlKey(int16(kmsg.Produce), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req := kr.(*kmsg.ProduceRequest)
		if failed.Load() >= 15 {
			return nil, nil, false
		}
		failed.Add(1)
		resp := req.ResponseKind().(*kmsg.ProduceResponse)
		for _, tp := range req.Topics {
			rt := kmsg.NewProduceResponseTopic()
			rt.Topic = tp.Topic
			for _, p := range tp.Partitions {
				rp := kmsg.NewProduceResponseTopicPartition()
				rp.Partition = p.Partition
				rp.ErrorCode = 19 // NOT_ENOUGH_REPLICAS: retryable
				rt.Partitions = append(rt.Partitions, rp)
			}
			resp.Topics = append(resp.Topics, rt)
		}
		return resp, nil, true
	})
	if err := s.WriteAtomic(ctx, recs("events", "1"), "mysql:0-1-2"); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	out := logs.String()
	mu.Unlock()
	if failed.Load() < 15 {
		t.Fatalf("fault injected %d times", failed.Load())
	}
	if n := strings.Count(out, "kafka transaction aborted, sending the whole batch again"); n != 1 {
		t.Fatalf("%d retry warnings for %d failed attempts, want 1:\n%s", n, failed.Load(), out)
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *strings.Builder
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
