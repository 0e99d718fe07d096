package sqs

import (
	"testing"
	"time"

	"github.com/outbox-cdc/outbox-cdc/sink"
	"github.com/outbox-cdc/outbox-cdc/sink/contract"
	"github.com/outbox-cdc/outbox-cdc/test/testenv"
)

// TestContract: the sink keeps the in-process sink contract (order per
// key, acknowledged means stored, SQS down then back, too large, Close
// during a Write) on the goaws emulator, a FIFO queue per case, with the
// query protocol through a proxy in front of the emulator's batch
// splitter. What landed is read from goaws directly (receive, then
// delete), and kept.
func TestContract(t *testing.T) {
	contract.Run(t, func(t *testing.T, o contract.Options) *contract.Env {
		const queue = "contract.fifo"
		e := testenv.Goaws(t, testenv.GoawsQueue{Name: queue})
		p := testenv.NewProxy(t, testenv.HostOf(t, e.Endpoint))
		cfg := testConfig(testenv.WithHost(t, e.Endpoint, p.Addr()))
		cfg.AckTimeout = 3 * time.Second
		if o.MaxMessageBytes > 0 {
			cfg.MaxMessageBytes = o.MaxMessageBytes
		}
		var read []contract.Message
		return &contract.Env{
			Sink: newSink(t, cfg), Topic: queue, Proxy: p, ErrClosed: sink.ErrClosed,
			Read: func(t *testing.T) []contract.Message {
				for _, m := range e.Drain(t, queue) {
					read = append(read, contract.Message{ID: m.Attrs[AttrMessageID], Key: m.Attrs[AttrKey], Value: m.Body})
				}
				return append([]contract.Message(nil), read...)
			},
		}
	})
}
