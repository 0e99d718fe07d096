package kafka

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outbox-cdc/outbox-cdc/sink"
	"github.com/outbox-cdc/outbox-cdc/sink/contract"
	"github.com/outbox-cdc/outbox-cdc/test/testenv"
)

// TestKafkaContract: the Kafka sink keeps the in-process sink contract
// (order per key, acknowledged means stored, broker down then back, too
// large, Close during a Write) against kfake behind a proxy. The size
// limit is the broker's message.max.bytes, so a record too large is the
// broker's MESSAGE_TOO_LARGE, found in its batch.
func TestKafkaContract(t *testing.T) {
	contract.Run(t, func(t *testing.T, o contract.Options) *contract.Env {
		const topic, parts = "contract", 3
		opts := []kfake.Opt{kfake.SeedTopics(parts, topic)}
		if o.MaxMessageBytes > 0 {
			opts = append(opts, kfake.BrokerConfigs(map[string]string{"message.max.bytes": itoa(o.MaxMessageBytes)}))
		}
		_, p, addrs := testenv.KafkaBehindProxy(t, opts...)
		k, _ := newTestKafka(t, testConfig(addrs))
		r := newKafkaReader(t, addrs, topic, parts)
		return &contract.Env{Sink: k, Topic: topic, Proxy: p, ErrClosed: sink.ErrClosed, Read: r.read}
	})
}

func itoa(n int) string { return strconv.Itoa(n) }

// kafkaReader reads a topic from the start up to its end offsets at the
// time of each read, keeping what it read.
type kafkaReader struct {
	cl    *kgo.Client
	topic string
	parts int32
	next  map[int32]int64
	got   []contract.Message
}

func newKafkaReader(t *testing.T, addrs []string, topic string, parts int32) *kafkaReader {
	offs := map[string]map[int32]kgo.Offset{topic: {}}
	for i := int32(0); i < parts; i++ {
		offs[topic][i] = kgo.NewOffset().AtStart()
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.ConsumePartitions(offs), kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return &kafkaReader{cl: cl, topic: topic, parts: parts, next: map[int32]int64{}}
}

func (r *kafkaReader) read(t *testing.T) []contract.Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req := kmsg.NewPtrListOffsetsRequest()
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = r.topic
	for i := int32(0); i < r.parts; i++ {
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Partition, rp.Timestamp = i, -1 // the end
		rt.Partitions = append(rt.Partitions, rp)
	}
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, r.cl)
	if err != nil {
		t.Fatalf("list offsets: %v", err)
	}
	end := map[int32]int64{}
	for _, tp := range resp.Topics {
		for _, pp := range tp.Partitions {
			end[pp.Partition] = pp.Offset
		}
	}
	behind := func() bool {
		for p, e := range end {
			if r.next[p] < e {
				return true
			}
		}
		return false
	}
	for behind() {
		fs := r.cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %v of end offsets %v before timeout", r.next, end)
		}
		fs.EachRecord(func(rec *kgo.Record) {
			var id string
			for _, h := range rec.Headers {
				if h.Key == "id" {
					id = string(h.Value)
				}
			}
			r.got = append(r.got, contract.Message{ID: id, Key: string(rec.Key), Value: string(rec.Value)})
			r.next[rec.Partition] = rec.Offset + 1
		})
	}
	return append([]contract.Message(nil), r.got...)
}
