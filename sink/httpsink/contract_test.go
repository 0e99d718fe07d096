package httpsink

import (
	"strings"
	"testing"

	"github.com/outbox-cdc/outbox-cdc/sink/broker"
	"github.com/outbox-cdc/outbox-cdc/sink/contract"
	"github.com/outbox-cdc/outbox-cdc/test/testenv"
)

// TestContract: the sink keeps the in-process sink contract (order per
// key, acknowledged means stored, receiver down then back, too large,
// Close during a Write) against an in-process receiver, through a proxy.
// The receiver keeps a request once it has read its whole body, before it
// answers 200; raw bodies, so what landed is the record's value, with its
// message id in webhook-id and its key in Outbox-Aggregate-Id.
func TestContract(t *testing.T) {
	contract.Run(t, func(t *testing.T, o contract.Options) *contract.Env {
		if strings.HasSuffix(t.Name(), "/AckedMeansLanded") {
			// The case waits for 8 KiB of its Write sent into the silent
			// path; in message mode the sink has at most one request per
			// aggregate open (7 keys: 7 requests of about 400 bytes), and
			// sends no more until they are answered. The same promise
			// under a silent path then a cut is held by the
			// BrokerDownThenBack cases and TestHTTPConnectionResetBeforeBody.
			t.Skip("message mode keeps one request per aggregate in flight: less than the 8 KiB the case waits to see dropped")
		}
		rc := newReceiver(t)
		p := testenv.NewProxy(t, testenv.HostOf(t, rc.srv.URL))
		base := testenv.WithHost(t, rc.srv.URL, p.Addr())
		cfg := testConfig(t, base+"/hooks/{aggregate_type}")
		cfg.Body = BodyRaw
		if o.MaxMessageBytes > 0 {
			cfg.MaxMessageBytes = o.MaxMessageBytes
		}
		return &contract.Env{
			Sink: newSink(t, cfg), Topic: base + "/hooks/CONTRACT", Proxy: p, ErrClosed: broker.ErrClosed,
			Read: func(t *testing.T) []contract.Message {
				var out []contract.Message
				for _, a := range rc.arrivals() {
					out = append(out, contract.Message{ID: a.id, Key: a.key, Value: string(a.body)})
				}
				return out
			},
		}
	})
}
