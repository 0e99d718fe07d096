package testenv

import (
	"context"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestKafkaProxyPaths: each client sees the broker at its own proxy's
// address, so silencing one proxy cuts that client alone.
func TestKafkaProxyPaths(t *testing.T) {
	_, brokers := Kafka(t)
	a, b := NewKafkaProxy(t, brokers[0]), NewKafkaProxy(t, brokers[0])
	client := func(p *KafkaProxy) *kgo.Client {
		c, err := kgo.NewClient(kgo.SeedBrokers(p.Addr()), kgo.AllowAutoTopicCreation(),
			kgo.RequestTimeoutOverhead(500*time.Millisecond), kgo.RecordDeliveryTimeout(2*time.Second),
			kgo.TransactionalID("kafkaproxy-"+p.Addr()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		return c
	}
	ca, cb := client(a), client(b)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	meta, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, ca)
	if err != nil {
		t.Fatal(err)
	}
	for _, br := range meta.Brokers {
		if got := net.JoinHostPort(br.Host, strconv.Itoa(int(br.Port))); got != a.Addr() {
			t.Fatalf("client a sees broker %s, want its proxy %s", got, a.Addr())
		}
	}
	produce := func(c *kgo.Client, d time.Duration) error {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		defer cancel()
		// A transaction: the coordinator's address must be rewritten too.
		if err := c.BeginTransaction(); err != nil {
			return err
		}
		if err := c.ProduceSync(ctx, &kgo.Record{Topic: "kafkaproxy", Value: []byte("x")}).FirstErr(); err != nil {
			_ = c.EndTransaction(context.Background(), kgo.TryAbort)
			return err
		}
		return c.EndTransaction(ctx, kgo.TryCommit)
	}
	for _, c := range []*kgo.Client{ca, cb} {
		if err := produce(c, 10*time.Second); err != nil {
			t.Fatalf("before the cut: %v", err)
		}
	}
	accepted := a.Accepted()
	a.Silence()
	if err := produce(cb, 10*time.Second); err != nil {
		t.Fatalf("b while a is cut: %v", err)
	}
	if a.Accepted() != accepted {
		t.Fatalf("client b connected through a's proxy")
	}
	pctx, pcancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer pcancel()
	if err := ca.ProduceSync(pctx, &kgo.Record{Topic: "kafkaproxy", Value: []byte("y")}).FirstErr(); err == nil {
		t.Fatal("a produced through a silenced proxy")
	}
}
