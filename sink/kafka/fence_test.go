package kafka

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
	"github.com/outbox-cdc/outbox-cdc/test/testenv"
)

var _ outboxcdc.FencedSink = (*Kafka)(nil)
var _ outboxcdc.FencedSink = (*Transactional)(nil)

// TestKafkaFenceRefusesEveryRequest: once the fence refuses, a Write
// sends no produce request, its retries none either, and it returns when
// its context ends; while the fence allows, records are written.
func TestKafkaFenceRefusesEveryRequest(t *testing.T) {
	const topic = "fenced"
	_, addrs := testenv.Kafka(t, kfake.SeedTopics(1, topic))
	k, _ := newTestKafka(t, testConfig(addrs))
	var refuse atomic.Bool
	var asked atomic.Int64
	expired := errors.New("lease expired")
	k.SetFence(func() error {
		asked.Add(1)
		if refuse.Load() {
			return expired
		}
		return nil
	})
	rec := func(v string) []outboxcdc.Record {
		return []outboxcdc.Record{{Topic: topic, Key: []byte("k"), Value: []byte(v)}}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := k.Write(ctx, rec("allowed")); err != nil {
		t.Fatal(err)
	}
	refuse.Store(true)
	before := asked.Load()
	wctx, wcancel := context.WithTimeout(context.Background(), time.Second)
	defer wcancel()
	if err := k.Write(wctx, rec("refused")); err == nil {
		t.Fatal("a write went through a refusing fence")
	}
	if n := asked.Load() - before; n < 2 {
		t.Fatalf("the fence was asked %d times in a second of retries, want every attempt", n)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var got []string
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		pctx, pcancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		for _, r := range cl.PollFetches(pctx).Records() {
			got = append(got, string(r.Value))
		}
		pcancel()
	}
	if len(got) != 1 || got[0] != "allowed" {
		t.Fatalf("topic holds %q, want only the record written before the fence refused", got)
	}
}
