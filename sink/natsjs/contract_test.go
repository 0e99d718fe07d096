package natsjs

import (
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/outbox-cdc/outbox-cdc/sink"
	"github.com/outbox-cdc/outbox-cdc/sink/contract"
	"github.com/outbox-cdc/outbox-cdc/test/testenv"
)

// TestContract: the sink keeps the in-process sink contract (order per
// key, acknowledged means stored, server down then back, too large, Close
// during a Write) on the local NATS server, through a proxy. The size
// limit is the stream's max_msg_size, so a record too large is the
// server's refusal, not the sink's own check.
func TestContract(t *testing.T) {
	contract.Run(t, func(t *testing.T, o contract.Options) *contract.Env {
		f := newFixture(t, int32(o.MaxMessageBytes))
		p := testenv.NewProxy(t, testenv.HostOf(t, f.url))
		cfg := testConfig(testenv.WithHost(t, f.url, p.Addr()), f.stream)
		var read []contract.Message
		return &contract.Env{
			Sink: newSink(t, cfg), Topic: f.prefix + ".ORDER", Proxy: p, ErrClosed: sink.ErrClosed,
			Read: func(t *testing.T) []contract.Message {
				// The stream keeps every message: read those stored since
				// the last call.
				for _, m := range f.readFrom(t, uint64(len(read))+1) {
					id, _, _ := strings.Cut(m.Header.Get(nats.MsgIdHdr), "~")
					read = append(read, contract.Message{ID: id, Key: m.Header.Get(HeaderKey), Value: string(m.Data)})
				}
				return append([]contract.Message(nil), read...)
			},
		}
	})
}
