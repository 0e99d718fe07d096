package sinktest

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/outbox-cdc/outbox-cdc/test/testenv"
	"github.com/outbox-cdc/outbox-cdc/test/webhook"
)

// TestHTTP holds the HTTP webhook sink to the contract: the connector
// posts signed requests through a testenv.Proxy to test/webhook's
// receiver.py, an independent receiver in Python that verifies every
// signature with its own code; what it accepted is read back from its
// file. The too-large row is refused by the receiver (413, as a real
// endpoint with a body limit does), not by the sink.
func TestHTTP(t *testing.T) { Run(t, httpTarget{}) }

type httpTarget struct{}

func (httpTarget) Prepare(t *testing.T, o Options) *Setup {
	secret := filepath.Join(t.TempDir(), "webhook-secret")
	if err := os.WriteFile(secret, []byte("whsec_"+base64.StdEncoding.EncodeToString([]byte("sinktest-secret-0123456789"))+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	rc := webhook.Start(t, webhook.Options{SecretFile: secret, MaxBody: o.MaxMessageBytes})
	p := testenv.NewProxy(t, strings.TrimPrefix(rc.URL, "http://"))
	base := "http://" + p.Addr()
	s := &Setup{
		Topic:    base + "/hooks/{aggregate_type}",
		DLQTopic: base + "/dead-letters",
		Sink: fmt.Sprintf("  type: http\n  signing_secret_file: %q\n  ack_timeout: 5s\n  retry_backoff_max: 1s\n  ready_interval: 500ms\n",
			secret),
		Down: func(*testing.T) { p.Silence(); p.Cut() },
		Up:   func(*testing.T) { p.Heal() },
	}
	s.Read = func(t *testing.T, n int, timeout time.Duration) []Message {
		deadline := time.Now().Add(timeout)
		for {
			var got []Message
			for _, l := range rc.Lines(t) {
				if !l.SignatureOK {
					t.Fatalf("receiver.py refused the signature of a request to %s", l.Path)
				}
				var env struct {
					ID          string            `json:"message_id"`
					Key         *string           `json:"aggregate_id"`
					Destination string            `json:"destination"`
					Headers     map[string]string `json:"headers"`
					Payload     json.RawMessage   `json:"payload"`
					Base64      *string           `json:"payload_base64"`
				}
				if err := json.Unmarshal(l.Body, &env); err != nil {
					t.Fatalf("envelope %q: %v", l.Body, err)
				}
				m := Message{Stream: env.Destination, DedupeID: env.ID, Headers: env.Headers}
				if env.Key != nil {
					m.Key = *env.Key
				}
				if string(env.Payload) != "null" {
					m.Value = string(env.Payload)
				}
				if env.Base64 != nil {
					v, _ := base64.StdEncoding.DecodeString(*env.Base64)
					m.Value = string(v)
				}
				if l.Headers["webhook-id"] != env.ID && env.ID != "" {
					t.Fatalf("webhook-id %q for message %q", l.Headers["webhook-id"], env.ID)
				}
				got = append(got, m)
			}
			if len(got) >= n && n > 0 || time.Now().After(deadline) {
				return got
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	return s
}
