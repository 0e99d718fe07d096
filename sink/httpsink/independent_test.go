package httpsink

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/outbox-cdc/outbox-cdc/test/webhook"
)

// TestHTTPIndependentReceiver: a receiver written in Python with its own
// signature check (test/webhook/receiver.py) accepts every request as
// signed, through a 500, a 429 with Retry-After, a reset before the body
// and a connection dropped after the body was taken (the one duplicate);
// first copies arrive in order per aggregate.
func TestHTTPIndependentReceiver(t *testing.T) {
	for _, mode := range []string{ModeMessage, ModeBatch} {
		t.Run(mode, func(t *testing.T) {
			cfg := testConfig(t, "")
			rc := webhook.Start(t, webhook.Options{SecretFile: cfg.SigningSecretFile, Script: "ok,500,429:1,reset,ok,drop"})
			cfg.Template = rc.URL + "/hooks/{aggregate_type}"
			cfg.Mode, cfg.BatchMaxMessages = mode, 7
			s := newSink(t, cfg)
			rs := records(rc.URL, 120, 5)
			start := time.Now()
			if err := write(t, s, rs, 60*time.Second); err != nil {
				t.Fatal(err)
			}
			took := time.Since(start)
			var got []arrival
			for _, l := range rc.Lines(t) {
				if !l.SignatureOK {
					t.Fatalf("the receiver refused the signature of a request to %s: %v", l.Path, l.Headers)
				}
				if mode == ModeMessage {
					got = append(got, arrival{id: l.Headers["webhook-id"], key: l.Headers["outbox-aggregate-id"]})
					continue
				}
				var envs []struct {
					ID  string `json:"message_id"`
					Key string `json:"aggregate_id"`
				}
				if err := json.Unmarshal(l.Body, &envs); err != nil {
					t.Fatal(err)
				}
				for _, e := range envs {
					got = append(got, arrival{id: e.ID, key: e.Key})
				}
			}
			dups := checkArrivals(t, got, rs)
			want := 1 // the dropped answer
			if mode == ModeBatch {
				want = -1 // a batch's worth; counted below
			}
			if want > 0 && dups != want {
				t.Fatalf("%d duplicates, want %d", dups, want)
			}
			if dups == 0 || dups > cfg.BatchMaxMessages {
				t.Fatalf("%d duplicates, want one request's worth", dups)
			}
			if took < time.Second {
				t.Fatalf("took %s: the 429's Retry-After: 1 was not honoured", took)
			}
			t.Logf("%s mode: %d requests accepted, %d duplicates, %s", mode, len(rc.Lines(t)), dups, took.Round(time.Millisecond))
		})
	}
}
