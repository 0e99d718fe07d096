package kafka

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	outboxcdc "github.com/outbox-cdc/outbox-cdc"
	"github.com/outbox-cdc/outbox-cdc/retry"
	"github.com/outbox-cdc/outbox-cdc/sink"
	"github.com/outbox-cdc/outbox-cdc/test/testenv"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func testConfig(brokers []string) KafkaConfig {
	cfg := DefaultKafkaConfig()
	cfg.Brokers = brokers
	cfg.RetryBackoffMin = 20 * time.Millisecond
	cfg.RetryBackoffMax = 300 * time.Millisecond
	cfg.ReadyInterval = 200 * time.Millisecond
	cfg.DialTimeout = 2 * time.Second
	cfg.ProduceTimeout = 5 * time.Second
	return cfg
}

func newTestKafka(t testing.TB, cfg KafkaConfig) (*Kafka, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	k, err := NewKafka(cfg, zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.InfoLevel), reg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k.Close() })
	return k, reg
}

// consume reads n records of topic from the start, failing after timeout.
func consume(t testing.TB, addrs []string, topic string, n int) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var out []*kgo.Record
	for len(out) < n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("consumed %d of %d records of %s before timeout", len(out), n, topic)
		}
		for _, e := range fs.Errors() {
			t.Logf("fetch error %s/%d: %v", e.Topic, e.Partition, e.Err)
		}
		out = append(out, fs.Records()...)
	}
	return out
}

// consumeDistinct reads until n distinct values arrived (duplicates allowed),
// then a little longer to collect late duplicates.
func consumeDistinct(t testing.TB, addrs []string, topic string, n int) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var out []*kgo.Record
	seen := map[string]bool{}
	for len(seen) < n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("consumed %d distinct of %d records of %s before timeout", len(seen), n, topic)
		}
		for _, r := range fs.Records() {
			seen[string(r.Value)] = true
			out = append(out, r)
		}
	}
	tctx, tcancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer tcancel()
	out = append(out, cl.PollFetches(tctx).Records()...)
	return out
}

func seq(r *kgo.Record) int {
	n, err := strconv.Atoi(string(r.Value))
	if err != nil {
		panic(err)
	}
	return n
}

func TestKafkaDeliversRecordsToJavaPartition(t *testing.T) {
	const topic, parts = "outbox.event.ORDER", 6
	_, addrs := testenv.Kafka(t, kfake.SeedTopics(parts, topic))
	k, reg := newTestKafka(t, testConfig(addrs))

	ts := time.Now().Truncate(time.Millisecond)
	var recs []outboxcdc.Record
	for i := 0; i < 300; i++ {
		recs = append(recs, outboxcdc.Record{
			Topic: topic,
			Key:   []byte(fmt.Sprintf("order-%d", i%37)),
			Value: []byte(fmt.Sprintf(`{"n":%d}`, i)),
			Headers: []outboxcdc.Header{
				{Key: "id", Value: []byte(fmt.Sprintf("msg-%d", i))},
				{Key: "event_type", Value: []byte("ORDER_CREATED")},
				{Key: "empty", Value: []byte{}},
			},
			Timestamp: ts.Add(time.Duration(i) * time.Millisecond),
		})
	}
	recs = append(recs,
		outboxcdc.Record{Topic: topic, Key: []byte("order-1"), Value: nil, Timestamp: ts}, // tombstone
		outboxcdc.Record{Topic: topic, Key: nil, Value: []byte("no key"), Timestamp: ts},
	)
	if err := k.Write(context.Background(), recs); err != nil {
		t.Fatal(err)
	}
	if err := k.Ready(); err != nil {
		t.Fatalf("Ready after a write: %v", err)
	}

	got := consume(t, addrs, topic, len(recs))
	if len(got) != len(recs) {
		t.Fatalf("consumed %d records, wrote %d", len(got), len(recs))
	}
	byID := map[string]*kgo.Record{}
	var tomb, nullKey *kgo.Record
	for _, r := range got {
		switch {
		case r.Key == nil:
			nullKey = r
		case r.Value == nil:
			tomb = r
		default:
			byID[string(r.Headers[0].Value)] = r
		}
	}
	for i, w := range recs[:300] {
		r := byID[fmt.Sprintf("msg-%d", i)]
		if r == nil {
			t.Fatalf("record %d missing", i)
		}
		if r.Topic != topic || !bytes.Equal(r.Key, w.Key) || !bytes.Equal(r.Value, w.Value) {
			t.Fatalf("record %d: got %s %q %q", i, r.Topic, r.Key, r.Value)
		}
		if want := JavaPartition(w.Key, parts); r.Partition != want {
			t.Fatalf("record %d key %q: partition %d, Java murmur2 says %d", i, w.Key, r.Partition, want)
		}
		if !r.Timestamp.Equal(w.Timestamp) {
			t.Fatalf("record %d: timestamp %v, want %v", i, r.Timestamp, w.Timestamp)
		}
		if len(r.Headers) != 3 {
			t.Fatalf("record %d: %d headers", i, len(r.Headers))
		}
		for j, h := range w.Headers {
			if r.Headers[j].Key != h.Key || !bytes.Equal(r.Headers[j].Value, h.Value) {
				t.Fatalf("record %d header %d: %q=%q, want %q=%q", i, j, r.Headers[j].Key, r.Headers[j].Value, h.Key, h.Value)
			}
		}
	}
	if tomb == nil || tomb.Value != nil || tomb.Partition != JavaPartition([]byte("order-1"), parts) {
		t.Fatalf("tombstone: %+v", tomb)
	}
	if nullKey == nil || string(nullKey.Value) != "no key" {
		t.Fatalf("null-key record: %+v", nullKey)
	}

	if v := value(k.m.Connected); v != 1 {
		t.Errorf("connected = %v", v)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, mf := range mfs {
		names[mf.GetName()] = true
		if mf.GetName() == "outbox_cdc_sink_write_seconds" && mf.GetMetric()[0].GetHistogram().GetSampleCount() != 1 {
			t.Errorf("write_seconds count = %d", mf.GetMetric()[0].GetHistogram().GetSampleCount())
		}
	}
	for _, n := range []string{"outbox_cdc_sink_bytes_total", "outbox_cdc_sink_errors_total",
		"outbox_cdc_sink_write_seconds", "outbox_cdc_sink_connected"} {
		if !names[n] {
			t.Errorf("metric %s not registered", n)
		}
	}
	if v := value(k.m.Bytes); v <= 0 {
		t.Errorf("bytes_total = %v", v)
	}
}

// Thousands of records over several keys, in batches of varied size and with
// a small memory bound, keep their order per key and arrive exactly once.
func TestKafkaKeepsOrderPerKey(t *testing.T) {
	const topic = "orders"
	_, addrs := testenv.Kafka(t, kfake.SeedTopics(5, topic))
	cfg := testConfig(addrs)
	cfg.MaxInFlightBytes = 32 << 10
	k, _ := newTestKafka(t, cfg)

	const total, keys = 6000, 17
	i := 0
	for _, size := range []int{1, 1000, 7, 2500, 300, 2192} {
		var batch []outboxcdc.Record
		for j := 0; j < size; j++ {
			batch = append(batch, outboxcdc.Record{
				Topic: topic, Key: []byte(fmt.Sprintf("agg-%d", i%keys)),
				Value: []byte(strconv.Itoa(i)), Timestamp: time.Now(),
			})
			i++
		}
		if err := k.Write(context.Background(), batch); err != nil {
			t.Fatal(err)
		}
	}
	if i != total {
		t.Fatalf("wrote %d", i)
	}
	if used := k.mem.InUse(); used != 0 {
		t.Fatalf("%d bytes still counted in flight after all writes", used)
	}
	got := consume(t, addrs, topic, total)
	checkOrder(t, got, total, keys, false)
}

// checkOrder checks that every value 0..total-1 arrived, and that per key
// the values are increasing. With dups, a value may repeat; then the copies
// written last (the last occurrence of each value) must be increasing.
func checkOrder(t *testing.T, got []*kgo.Record, total, keys int, dups bool) {
	t.Helper()
	seen := make(map[int]int)
	perKey := map[string][]int{}
	for _, r := range got {
		n := seq(r)
		seen[n]++
		perKey[string(r.Key)] = append(perKey[string(r.Key)], n)
	}
	for n := 0; n < total; n++ {
		if seen[n] == 0 {
			t.Fatalf("value %d lost", n)
		}
		if seen[n] > 1 && !dups {
			t.Fatalf("value %d delivered %d times", n, seen[n])
		}
	}
	if len(perKey) != keys {
		t.Fatalf("%d keys, want %d", len(perKey), keys)
	}
	for key, vals := range perKey {
		// Keep the last occurrence of each value.
		last := map[int]int{}
		for i, v := range vals {
			last[v] = i
		}
		prev := -1
		for i, v := range vals {
			if last[v] != i {
				continue
			}
			if v <= prev {
				t.Fatalf("key %s: %d after %d (sequence %v)", key, v, prev, vals)
			}
			prev = v
		}
	}
}

// One partition keeps failing with a retryable error for longer than
// sarama's own retries: Write re-sends that partition's records from the
// first failure on, and everything arrives, in order per key.
func TestKafkaRetriesFailingPartition(t *testing.T) {
	const topic = "orders"
	c, addrs := testenv.Kafka(t, kfake.SeedTopics(4, topic))
	k, _ := newTestKafka(t, testConfig(addrs))

	// Warm up so the fault hits the real batch.
	if err := k.Write(context.Background(), []outboxcdc.Record{{Topic: topic, Key: []byte("x"), Value: []byte("warm")}}); err != nil {
		t.Fatal(err)
	}
	const total, keys = 3000, 12
	var recs []outboxcdc.Record
	for i := 0; i < total; i++ {
		recs = append(recs, outboxcdc.Record{Topic: topic, Key: []byte(fmt.Sprintf("agg-%d", i%keys)), Value: []byte(strconv.Itoa(i))})
	}
	h := c.Fault(kfake.Fault{
		Keys:       []kmsg.Key{kmsg.Produce},
		Topic:      topic,
		Partitions: []int32{1},
		Err:        kerr.NotEnoughReplicas,
		Count:      4, // several attempts in a row
	})
	defer h.Remove()
	if err := k.Write(context.Background(), recs); err != nil {
		t.Fatal(err)
	}
	if v := value(k.m.Retryable); v == 0 {
		t.Fatal("no retryable error counted: the fault did not fire")
	}
	got := consumeDistinct(t, addrs, topic, total+1)
	var data []*kgo.Record
	for _, r := range got {
		if string(r.Value) != "warm" {
			data = append(data, r)
		}
	}
	checkOrder(t, data, total, keys, true)
	for _, r := range data {
		if want := JavaPartition(r.Key, 4); r.Partition != want {
			t.Fatalf("key %s in partition %d, want %d", r.Key, r.Partition, want)
		}
	}
	t.Logf("consumed %d records for %d written", len(data), total)
}

func port(t testing.TB, addr string) int {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	n, _ := strconv.Atoi(p)
	return n
}

// The broker is down when Write starts and comes back on the same port:
// Write keeps retrying and succeeds, nothing lost.
func TestKafkaBrokerDownThenBack(t *testing.T) {
	const topic = "orders"
	c1, addrs := testenv.Kafka(t, kfake.SeedTopics(3, topic))
	k, _ := newTestKafka(t, testConfig(addrs))
	if err := k.Write(context.Background(), []outboxcdc.Record{{Topic: topic, Key: []byte("k"), Value: []byte("before")}}); err != nil {
		t.Fatal(err)
	}
	c1.Close()

	const total, keys = 1000, 5
	var recs []outboxcdc.Record
	for i := 0; i < total; i++ {
		recs = append(recs, outboxcdc.Record{Topic: topic, Key: []byte(fmt.Sprintf("agg-%d", i%keys)), Value: []byte(strconv.Itoa(i))})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- k.Write(ctx, recs) }()

	time.Sleep(1500 * time.Millisecond)
	select {
	case err := <-done:
		t.Fatalf("Write returned while the broker was down: %v", err)
	default:
	}
	if k.Ready() == nil {
		t.Error("Ready() is nil while the broker is down")
	}
	if v := value(k.m.Connected); v != 0 {
		t.Errorf("connected = %v while down", v)
	}
	_, addrs2 := testenv.Kafka(t, kfake.Ports(port(t, addrs[0])), kfake.SeedTopics(3, topic))
	start := time.Now()
	if err := <-done; err != nil {
		t.Fatalf("Write after the broker came back: %v", err)
	}
	t.Logf("Write finished %v after the broker came back", time.Since(start))
	if k.Ready() != nil {
		t.Errorf("Ready() = %v after success", k.Ready())
	}
	got := consumeDistinct(t, addrs2, topic, total)
	checkOrder(t, got, total, keys, true)
}

// Kafka is down when the sink starts: NewKafka succeeds, Ready says not
// ready, and Write succeeds once the broker is up.
func TestKafkaStartsWhileBrokerDown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	k, _ := newTestKafka(t, testConfig([]string{addr}))
	time.Sleep(300 * time.Millisecond)
	if k.Ready() == nil {
		t.Fatal("Ready() is nil with no broker")
	}
	done := make(chan error, 1)
	go func() {
		done <- k.Write(context.Background(), []outboxcdc.Record{{Topic: "t", Key: []byte("k"), Value: []byte("0")}})
	}()
	time.Sleep(500 * time.Millisecond)
	_, addrs := testenv.Kafka(t, kfake.Ports(port(t, addr)), kfake.SeedTopics(2, "t"))
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	consume(t, addrs, "t", 1)
}

func TestKafkaCancelWhileBrokerDown(t *testing.T) {
	c, addrs := testenv.Kafka(t, kfake.SeedTopics(3, "t"))
	k, _ := newTestKafka(t, testConfig(addrs))
	if err := k.Write(context.Background(), []outboxcdc.Record{{Topic: "t", Value: []byte("0")}}); err != nil {
		t.Fatal(err)
	}
	c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	start := time.Now()
	err := k.Write(ctx, []outboxcdc.Record{{Topic: "t", Key: []byte("k"), Value: []byte("1")}})
	took := time.Since(start)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("want DeadlineExceeded, got %v", err)
	}
	if IsPermanent(err) {
		t.Fatalf("ctx error classified permanent: %v", err)
	}
	if took > 1500*time.Millisecond {
		t.Fatalf("Write took %v to notice the deadline", took)
	}
	t.Logf("returned after %v: %v", took, err)
}

func TestKafkaCloseStopsBlockedWrite(t *testing.T) {
	c, addrs := testenv.Kafka(t, kfake.SeedTopics(3, "t"))
	k, _ := newTestKafka(t, testConfig(addrs))
	if err := k.Write(context.Background(), []outboxcdc.Record{{Topic: "t", Value: []byte("0")}}); err != nil {
		t.Fatal(err)
	}
	c.Close()
	done := make(chan error, 1)
	go func() { done <- k.Write(context.Background(), []outboxcdc.Record{{Topic: "t", Value: []byte("1")}}) }()
	time.Sleep(300 * time.Millisecond)
	start := time.Now()
	if err := k.Close(); err != nil {
		t.Fatal(err)
	}
	err := <-done
	if !IsPermanent(err) || !errors.Is(err, sink.ErrClosed) {
		t.Fatalf("Write during Close: %v", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("Close took %v", took)
	}
	if k.Ready() == nil {
		t.Fatal("Ready() nil after Close")
	}
}

func TestKafkaRecordTooLargeForBroker(t *testing.T) {
	const topic = "t"
	_, addrs := testenv.Kafka(t, kfake.SeedTopics(3, topic),
		kfake.BrokerConfigs(map[string]string{"message.max.bytes": "2048"}))
	k, _ := newTestKafka(t, testConfig(addrs))
	recs := []outboxcdc.Record{
		{Topic: topic, Key: []byte("a"), Value: []byte("small")},
		{Topic: topic, Key: []byte("big"), Value: bytes.Repeat([]byte("x"), 10000)},
	}
	start := time.Now()
	err := k.Write(context.Background(), recs)
	if !IsPermanent(err) {
		t.Fatalf("want a permanent error, got %v", err)
	}
	var e *Error
	if !errors.As(err, &e) || e.Index != 1 || e.Topic != topic || e.Partition != JavaPartition([]byte("big"), 3) {
		t.Fatalf("error does not name the record: %#v", e)
	}
	if code, ok := Code(err); !ok || code != sarama.ErrMessageSizeTooLarge {
		t.Fatalf("code %v %v, want MESSAGE_TOO_LARGE", code, ok)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Fatalf("permanent error took %v (retried?)", took)
	}
	if !strings.Contains(err.Error(), "code 10") || !strings.Contains(err.Error(), `topic "t" partition`) {
		t.Errorf("message: %v", err)
	}
	if v := value(k.m.Permanent); v != 1 {
		t.Errorf("permanent errors = %v", v)
	}
	// The sink stays usable.
	if err := k.Write(context.Background(), recs[:1]); err != nil {
		t.Fatalf("write after a permanent error: %v", err)
	}
}

// TestKafkaBatchRefusedWholeNamesTheRecord: the broker refuses a record
// batch as a whole (here MESSAGE_TOO_LARGE for a batch holding one record
// over the broker's limit after good ones of the same partition). The sink
// sends that partition one record per batch, so the error names the record
// at fault, and the good records before it are written.
func TestKafkaBatchRefusedWholeNamesTheRecord(t *testing.T) {
	const topic = "t"
	_, addrs := testenv.Kafka(t, kfake.SeedTopics(3, topic),
		kfake.BrokerConfigs(map[string]string{"message.max.bytes": "2048"}))
	k, _ := newTestKafka(t, testConfig(addrs))
	recs := []outboxcdc.Record{ // one key: one partition, one batch
		{Topic: topic, Key: []byte("k"), Value: []byte("small-0")},
		{Topic: topic, Key: []byte("k"), Value: []byte("small-1")},
		{Topic: topic, Key: []byte("k"), Value: bytes.Repeat([]byte("x"), 10000)},
		{Topic: topic, Key: []byte("k"), Value: []byte("small-3")},
	}
	err := k.Write(context.Background(), recs)
	var e *Error
	if !IsPermanent(err) || !errors.As(err, &e) {
		t.Fatalf("want a permanent error, got %v", err)
	}
	if e.Index != 2 || e.Partition != JavaPartition([]byte("k"), 3) {
		t.Fatalf("error names record %d partition %d, want record 2 partition %d: %v", e.Index, e.Partition, JavaPartition([]byte("k"), 3), err)
	}
	if code, ok := Code(err); !ok || code != sarama.ErrMessageSizeTooLarge {
		t.Fatalf("code %v %v, want MESSAGE_TOO_LARGE", code, ok)
	}
	got := consume(t, addrs, topic, 2)
	if len(got) != 2 || string(got[0].Value) != "small-0" || string(got[1].Value) != "small-1" {
		var vals []string
		for _, r := range got {
			vals = append(vals, string(r.Value))
		}
		t.Fatalf("partition holds %q, want the two records before the refused one", vals)
	}
}

// TestKafkaLingerHoldsSmallWrites: sink.linger holds a write smaller than
// sink.batch_bytes before sending it; a write of batch_bytes or more goes
// at once.
func TestKafkaLingerHoldsSmallWrites(t *testing.T) {
	_, addrs := testenv.Kafka(t, kfake.SeedTopics(3, "t"))
	cfg := testConfig(addrs)
	cfg.Linger = 1500 * time.Millisecond
	cfg.BatchBytes = 4096
	k, _ := newTestKafka(t, cfg)
	big := []outboxcdc.Record{{Topic: "t", Key: []byte("k"), Value: bytes.Repeat([]byte("x"), 5000)}}
	if err := k.Write(context.Background(), big); err != nil { // connects
		t.Fatal(err)
	}
	start := time.Now()
	if err := k.Write(context.Background(), big); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took >= cfg.Linger {
		t.Errorf("a write of batch_bytes took %v: it lingered", took)
	}
	start = time.Now()
	if err := k.Write(context.Background(), []outboxcdc.Record{{Topic: "t", Key: []byte("k"), Value: []byte("small")}}); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < cfg.Linger {
		t.Errorf("a small write took %v, less than sink.linger %v", took, cfg.Linger)
	}
	consume(t, addrs, "t", 3)
}

func TestKafkaRecordTooLargeForClient(t *testing.T) {
	_, addrs := testenv.Kafka(t, kfake.SeedTopics(3, "t"))
	cfg := testConfig(addrs)
	cfg.MaxMessageBytes = 4096
	k, _ := newTestKafka(t, cfg)
	err := k.Write(context.Background(), []outboxcdc.Record{{Topic: "t", Key: []byte("k"), Value: bytes.Repeat([]byte("x"), 5000)}})
	if !IsPermanent(err) {
		t.Fatalf("want permanent, got %v", err)
	}
	t.Log(err)
}

// TestKafkaTopicAuthorizationIsPermanent: a topic the connector may not
// write fails permanently, after sink.unwritable_topic_timeout (an ACL may
// be on its way).
func TestKafkaTopicAuthorizationIsPermanent(t *testing.T) {
	c, addrs := testenv.Kafka(t, kfake.SeedTopics(3, "secret"))
	cfg := testConfig(addrs)
	cfg.UnwritableTopicTimeout = 300 * time.Millisecond
	k, _ := newTestKafka(t, cfg)
	c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: "secret", Err: kerr.TopicAuthorizationFailed, Count: -1})
	start := time.Now()
	err := k.Write(context.Background(), []outboxcdc.Record{{Topic: "secret", Key: []byte("k"), Value: []byte("v")}})
	if code, _ := Code(err); !IsPermanent(err) || code != sarama.ErrTopicAuthorizationFailed {
		t.Fatalf("want permanent TOPIC_AUTHORIZATION_FAILED, got %v", err)
	}
	if took := time.Since(start); took < cfg.UnwritableTopicTimeout {
		t.Fatalf("gave up after %v, before sink.unwritable_topic_timeout", took)
	}
	if !strings.Contains(err.Error(), "WRITE and DESCRIBE") {
		t.Fatalf("the error does not say what to grant: %v", err)
	}
}

func TestKafkaInvalidTopicIsPermanent(t *testing.T) {
	c, addrs := testenv.Kafka(t)
	k, _ := newTestKafka(t, testConfig(addrs))
	// kfake accepts any name; a real broker answers INVALID_TOPIC_EXCEPTION.
	c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: "bad topic!", Err: kerr.InvalidTopicException, Count: -1})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := k.Write(ctx, []outboxcdc.Record{{Topic: "bad topic!", Value: []byte("v")}})
	if code, _ := Code(err); !IsPermanent(err) || code != sarama.ErrInvalidTopic {
		t.Fatalf("want permanent INVALID_TOPIC_EXCEPTION, got %v", err)
	}
	// An empty topic name is refused by the client before any request.
	err = k.Write(ctx, []outboxcdc.Record{{Topic: "", Value: []byte("v")}})
	if !IsPermanent(err) {
		t.Fatalf("empty topic: want permanent, got %v", err)
	}
	t.Log(err)
}

func TestClassification(t *testing.T) {
	for _, c := range []struct {
		err  error
		perm bool
	}{
		{sarama.ErrMessageSizeTooLarge, true},
		{sarama.ErrInvalidTopic, true},
		{sarama.ErrTopicAuthorizationFailed, true},
		{sarama.ErrClusterAuthorizationFailed, true},
		{sarama.ErrProducerFenced, true},
		{sarama.ErrInvalidRecord, true},
		{sarama.ErrUnknown, true},
		{sarama.ConfigurationError("too big"), true},
		{sarama.ErrLeaderNotAvailable, false},
		{sarama.ErrNotLeaderForPartition, false},
		{sarama.ErrRequestTimedOut, false},
		{sarama.ErrNotEnoughReplicas, false},
		{sarama.ErrOutOfOrderSequenceNumber, false},
		{sarama.ErrOutOfBrokers, false},
		{&net.OpError{Op: "dial", Err: errors.New("connection refused")}, false},
		{fmt.Errorf("wrapped: %w", sarama.ErrInvalidTopic), true},
	} {
		if got := permanent(c.err); got != c.perm {
			t.Errorf("permanent(%v) = %v, want %v", c.err, got, c.perm)
		}
	}
	e := fmt.Errorf("pipeline: %w", &Error{Topic: "t", Partition: 2, Err: sarama.ErrInvalidTopic, Permanent: true})
	if !IsPermanent(e) || IsPermanent(context.Canceled) || IsPermanent(&Error{Err: sarama.ErrRequestTimedOut}) {
		t.Error("IsPermanent")
	}
}

func TestKafkaConfigValidate(t *testing.T) {
	if err := (&KafkaConfig{}).Validate(); err == nil {
		t.Fatal("empty config accepted")
	}
	good := DefaultKafkaConfig()
	good.Brokers = []string{"127.0.0.1:9092"}
	if err := good.Validate(); err != nil {
		t.Fatalf("defaults with brokers: %v", err)
	}
	for _, c := range []struct {
		mut func(*KafkaConfig)
		key string
	}{
		{func(c *KafkaConfig) { c.Brokers = nil }, "brokers"},
		{func(c *KafkaConfig) { c.Brokers = []string{"localhost"} }, "brokers"},
		{func(c *KafkaConfig) { c.ClientID = "" }, "client_id"},
		{func(c *KafkaConfig) { c.KafkaVersion = "0.10.2.0" }, "kafka_version"},
		{func(c *KafkaConfig) { c.KafkaVersion = "banana" }, "kafka_version"},
		{func(c *KafkaConfig) { c.Compression = "brotli" }, "compression"},
		{func(c *KafkaConfig) { c.MaxMessageBytes = 10 }, "max_message_bytes"},
		{func(c *KafkaConfig) { c.Linger = -1 }, "linger"},
		{func(c *KafkaConfig) { c.Linger = time.Millisecond; c.BatchBytes = 0 }, "batch_bytes"},
		{func(c *KafkaConfig) { c.MaxInFlightBytes = 0 }, "max_in_flight_bytes"},
		{func(c *KafkaConfig) { c.ProduceTimeout = 0 }, "produce_timeout"},
		{func(c *KafkaConfig) { c.RetryBackoffMax = time.Millisecond }, "retry_backoff_max"},
	} {
		cfg := good
		c.mut(&cfg)
		err := cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), c.key) {
			t.Errorf("want an error naming %s, got %v", c.key, err)
		}
	}
}

// value reads a counter or gauge.
func value(m prometheus.Metric) float64 {
	var d dto.Metric
	if err := m.Write(&d); err != nil {
		panic(err)
	}
	if d.Counter != nil {
		return d.Counter.GetValue()
	}
	return d.Gauge.GetValue()
}

// The waits between a Write's attempts double from retry_backoff_min to
// retry_backoff_max, each within ±20%.
func TestRetryPolicy(t *testing.T) {
	cfg := DefaultKafkaConfig()
	cfg.RetryBackoffMin, cfg.RetryBackoffMax = 100*time.Millisecond, time.Second
	b := retry.New(cfg.retryPolicy())
	for i, w := range []time.Duration{100, 200, 400, 800, 1000, 1000} {
		w *= time.Millisecond
		if got := b.Next(); got < w*8/10 || got > w*12/10 {
			t.Errorf("wait %d = %v, want %v ±20%%", i, got, w)
		}
	}
}

func TestResendSetTakesPartitionSuffix(t *testing.T) {
	fail := errors.New("x")
	recs := []outboxcdc.Record{{Topic: "a"}, {Topic: "b"}, {Topic: "u"}}
	mk := func(idx int, rec int, part int32, err error) *pending {
		return &pending{index: idx, rec: &recs[rec], partition: part, err: err}
	}
	todo := []*pending{
		mk(0, 0, 1, nil),  // a/1 before the failure: done
		mk(1, 0, 2, nil),  // a/2 never failed: done
		mk(2, 0, 1, fail), // a/1 first failure
		mk(3, 0, 1, nil),  // a/1 acknowledged after it: again
		mk(4, 0, 2, nil),  // a/2: done
		mk(5, 1, 0, nil),  // b/0 before b's failure: done
		mk(6, 1, -1, fail),
		mk(7, 1, 3, nil), // b, after a failure with no partition: again
		mk(8, 2, 0, nil), // other topic: done
	}
	retry, first, n := resendSet(todo)
	var got []int
	for _, p := range retry {
		got = append(got, p.index)
	}
	if fmt.Sprint(got) != "[2 3 6 7]" || first.index != 2 || n != 2 {
		t.Fatalf("resend %v first %d failures %d", got, first.index, n)
	}
	for _, p := range todo {
		p.err = nil
	}
	if retry, first, _ := resendSet(todo); retry != nil || first != nil {
		t.Fatal("resend with no failure")
	}
}

// A write whose requests to one broker outgrow max_in_flight_bytes must not
// wait for room that only its own unanswered requests hold: before waiting
// it takes the answers of what it already sent (one broker, one partition,
// 2 MB in 256 KiB requests under a 300 KiB bound).
func TestKafkaInFlightBoundBelowTwoRequests(t *testing.T) {
	const topic = "big"
	_, addrs := testenv.Kafka(t, kfake.SeedTopics(1, topic))
	cfg := testConfig(addrs)
	cfg.MaxInFlightBytes = 300 << 10
	k, _ := newTestKafka(t, cfg)
	pad := strings.Repeat("x", 1000)
	const total = 2000
	var batch []outboxcdc.Record
	for i := 0; i < total; i++ {
		batch = append(batch, outboxcdc.Record{
			Topic: topic, Key: []byte("agg"), Value: []byte(fmt.Sprintf("%d %s", i, pad)), Timestamp: time.Now(),
		})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := k.Write(ctx, batch); err != nil {
		t.Fatalf("write of %d records (%d KiB) under a %d KiB bound: %v", total, total*len(pad)>>10, cfg.MaxInFlightBytes>>10, err)
	}
	if used := k.mem.InUse(); used != 0 {
		t.Fatalf("%d bytes still counted in flight after the write", used)
	}
	if got := consume(t, addrs, topic, total); len(got) != total {
		t.Fatalf("consumed %d of %d", len(got), total)
	}
}
