package rabbitmq

import (
	"testing"
	"time"

	"github.com/outbox-cdc/outbox-cdc/sink"
	"github.com/outbox-cdc/outbox-cdc/sink/contract"
	"github.com/outbox-cdc/outbox-cdc/test/testenv"
)

// TestContract: the sink keeps the in-process sink contract (order per
// key, acknowledged means stored, broker down then back, too large, Close
// during a Write) on the local RabbitMQ, through a proxy. What landed is
// read from a queue bound to the exchange for every routing key: a
// publisher confirm comes once the message is in that queue.
func TestContract(t *testing.T) {
	contract.Run(t, func(t *testing.T, o contract.Options) *contract.Env {
		f := newFixture(t, "#")
		p := testenv.NewProxy(t, testenv.HostOf(t, f.url))
		cfg := testConfig(testenv.WithHost(t, f.url, p.Addr()), f.exchange)
		cfg.AckTimeout = 2 * time.Second
		cfg.Heartbeat = time.Second
		if o.MaxMessageBytes > 0 {
			cfg.MaxMessageBytes = o.MaxMessageBytes
		}
		var read []contract.Message
		return &contract.Env{
			Sink: newSink(t, cfg), Topic: "ORDER", Proxy: p, ErrClosed: sink.ErrClosed,
			Read: func(t *testing.T) []contract.Message {
				// Consuming takes the messages off the queue: keep them.
				for {
					d, ok, err := f.ch.Get(f.queue, true)
					if err != nil {
						t.Fatal(err)
					}
					if !ok {
						break
					}
					k, _ := d.Headers[HeaderKey].(string)
					read = append(read, contract.Message{ID: d.MessageId, Key: k, Value: string(d.Body)})
				}
				return append([]contract.Message(nil), read...)
			},
		}
	})
}
