package redisstream

import (
	"testing"

	"github.com/outbox-cdc/outbox-cdc/sink"
	"github.com/outbox-cdc/outbox-cdc/sink/contract"
	"github.com/outbox-cdc/outbox-cdc/test/testenv"
)

// TestContract: the sink keeps the in-process sink contract (order per
// key, acknowledged means stored, Redis down then back, too large, Close
// during a Write) on the local Redis, through a proxy.
func TestContract(t *testing.T) {
	contract.Run(t, func(t *testing.T, o contract.Options) *contract.Env {
		f := newFixture(t)
		p := testenv.NewProxy(t, testenv.HostOf(t, f.url))
		cfg := testConfig(testenv.WithHost(t, f.url, p.Addr()))
		if o.MaxMessageBytes > 0 {
			cfg.MaxMessageBytes = o.MaxMessageBytes
		}
		stream := f.prefix + "ORDER"
		return &contract.Env{
			Sink: newSink(t, cfg), Topic: stream, Proxy: p, ErrClosed: sink.ErrClosed,
			Read: func(t *testing.T) []contract.Message {
				var out []contract.Message
				for _, m := range f.read(t, stream) {
					v, _ := m.Values[FieldValue].(string)
					out = append(out, contract.Message{
						ID:  m.Values[FieldMessageID].(string),
						Key: m.Values[FieldKey].(string), Value: v,
					})
				}
				return out
			},
		}
	})
}
