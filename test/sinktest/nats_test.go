package sinktest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-cdc/outbox-cdc/sink/natsjs"
	"github.com/outbox-cdc/outbox-cdc/test/testenv"
)

// TestNATS holds the NATS JetStream sink to the contract: a stream of its
// own per test (max_msg_size is the stream's limit), the connector through
// a testenv.Proxy, read back in stream order with an independent nats.go
// client (there is no nats CLI here). JetStream drops a record sent again
// within the duplicate window, so even kill -9 must leave no duplicate.
func TestNATS(t *testing.T) { Run(t, natsTarget{}) }

type natsTarget struct{}

func (natsTarget) Prepare(t *testing.T, o Options) *Setup {
	u := testenv.NATSURL(t)
	nc, err := nats.Connect(u)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	id := rand.Int64N(1 << 40)
	stream, prefix := fmt.Sprintf("SINKTEST_%d", id), fmt.Sprintf("st%d", id)
	ctx := context.Background()
	st, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: stream, Subjects: []string{prefix + ".>"},
		Storage: jetstream.MemoryStorage, Duplicates: 2 * time.Minute, MaxMsgSize: int32(o.MaxMessageBytes)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { js.DeleteStream(context.Background(), stream) })

	p := testenv.NewProxy(t, testenv.HostOf(t, u))
	s := &Setup{
		Topic:         prefix + ".{aggregate_type}.{aggregate_id}",
		DLQTopic:      prefix + ".dlq",
		BrokerDedupes: true,
		Sink: fmt.Sprintf("  type: nats\n  url: %q\n  stream: %s\n  ack_timeout: 5s\n  ping_interval: 2s\n  retry_backoff_max: 1s\n  ready_interval: 500ms\n",
			testenv.WithHost(t, u, p.Addr()), stream),
		Down: func(*testing.T) { p.Silence(); p.Cut() },
		Up:   func(*testing.T) { p.Heal() },
	}
	var got []Message
	var next uint64 = 1
	s.Read = func(t *testing.T, n int, timeout time.Duration) []Message {
		deadline := time.Now().Add(timeout)
		for {
			info, err := st.Info(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for ; next <= info.State.LastSeq; next++ {
				m, err := st.GetMsg(ctx, next)
				if err != nil {
					t.Fatal(err)
				}
				h := map[string]string{}
				for k := range m.Header {
					h[k] = m.Header.Get(k)
				}
				got = append(got, Message{Stream: m.Subject, Key: h[natsjs.HeaderKey], DedupeID: h[nats.MsgIdHdr], Value: string(m.Data), Headers: h})
			}
			if len(got) >= n && n > 0 || time.Now().After(deadline) {
				return append([]Message(nil), got...)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return s
}
