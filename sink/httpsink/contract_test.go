package httpsink

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/outbox-cdc/outbox-cdc/sink"
	"github.com/outbox-cdc/outbox-cdc/sink/contract"
	"github.com/outbox-cdc/outbox-cdc/test/testenv"
)

// TestContract: the sink keeps the in-process sink contract (order per
// key, acknowledged means stored, receiver down then back, too large,
// Close during a Write) against an in-process receiver, through a proxy,
// in message mode (raw bodies: what landed is the record's value, with
// its message id in webhook-id and its key in Outbox-Aggregate-Id) and in
// batch mode (each request a JSON array of envelopes). The receiver keeps
// a request once it has read its whole body, before it answers 200.
func TestContract(t *testing.T) {
	for _, mode := range []string{ModeMessage, ModeBatch} {
		t.Run(mode, func(t *testing.T) { contract.Run(t, contractFactory(mode)) })
	}
}

func contractFactory(mode string) contract.Factory {
	return func(t *testing.T, o contract.Options) *contract.Env {
		if mode == ModeMessage && strings.HasSuffix(t.Name(), "/AckedMeansLanded") {
			// The case waits for 8 KiB of its Write sent into the silent
			// path; in message mode the sink has at most one request per
			// aggregate open (7 keys: 7 requests of about 400 bytes) and
			// sends no more until they are answered. Batch mode runs the
			// case; for message mode the silent path then a cut is held by
			// BrokerDownThenBack and TestHTTPConnectionResetBeforeBody.
			t.Skip("message mode keeps one request per aggregate in flight: less than the 8 KiB the case waits to see dropped (batch mode runs this case)")
		}
		rc := newReceiver(t)
		p := testenv.NewProxy(t, testenv.HostOf(t, rc.srv.URL))
		base := testenv.WithHost(t, rc.srv.URL, p.Addr())
		cfg := testConfig(t, base+"/hooks/{aggregate_type}")
		cfg.Mode = mode
		if mode == ModeMessage {
			cfg.Body = BodyRaw
		}
		if o.MaxMessageBytes > 0 {
			cfg.MaxMessageBytes = o.MaxMessageBytes
		}
		return &contract.Env{
			Sink: newSink(t, cfg), Topic: base + "/hooks/CONTRACT", Proxy: p, ErrClosed: sink.ErrClosed,
			Read: func(t *testing.T) []contract.Message {
				var out []contract.Message
				for _, a := range rc.arrivals() {
					if mode == ModeMessage {
						out = append(out, contract.Message{ID: a.id, Key: a.key, Value: string(a.body)})
						continue
					}
					var envs []struct {
						ID      string          `json:"message_id"`
						Key     string          `json:"aggregate_id"`
						Payload json.RawMessage `json:"payload"`
					}
					if err := json.Unmarshal(a.body, &envs); err != nil {
						t.Fatalf("batch body %.200s: %v", a.body, err)
					}
					for _, e := range envs {
						out = append(out, contract.Message{ID: e.ID, Key: e.Key, Value: string(e.Payload)})
					}
				}
				return out
			},
		}
	}
}
