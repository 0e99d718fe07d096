package source

import (
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/rs/zerolog"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
)

func newReconnector(t *testing.T) (*Reconnector, *error) {
	t.Helper()
	reg := prometheus.NewRegistry()
	pm, err := outboxcdc.NewProgressMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	var ready error
	log := zerolog.Nop()
	r := &Reconnector{Server: "Test", Prefix: "test source: ", Address: func() string { return "db:1" },
		SetReady: func(err error) { ready = err }, Log: &log, Metrics: outboxcdc.NewSourceMetrics(reg), Progress: pm}
	r.Start(Backoff{Min: time.Second, Max: 8 * time.Second})
	return r, &ready
}

// TestReconnectorShortStreamKeepsBackoff: a stream that dies at once does
// not start the backoff again from min; one that stayed up StableStream
// does. Reconnections are counted when the loss is seen, failures to
// connect before the first stream apart.
func TestReconnectorShortStreamKeepsBackoff(t *testing.T) {
	r, ready := newReconnector(t)
	now := time.Now()
	stable := now.Add(-StableStream)
	step := func(began time.Time, streamed bool, want time.Duration, wantNever bool) {
		t.Helper()
		wait, never := r.Failed(began, streamed)
		if wait != want || never != wantNever {
			t.Fatalf("wait %s never %v, want %s %v", wait, never, want, wantNever)
		}
		if never {
			r.ConnectFailed(errors.New("refused"), wait, nil)
		}
	}
	step(now, false, time.Second, true) // cannot connect
	step(now, false, 2*time.Second, true)
	if !outboxcdc.IsConnecting(*ready) {
		t.Fatalf("ready %v, want connecting", *ready)
	}
	step(stable, true, time.Second, false) // a stream that lasted: from min again
	step(now, true, 2*time.Second, false)  // died at once: keeps doubling
	step(now, true, 4*time.Second, false)  // again
	step(now, false, 8*time.Second, false) // a failed reconnect is a reconnection
	step(now, true, 8*time.Second, false)  // capped
	step(stable, true, time.Second, false) // lasted again
	if n := count(r.Metrics.Reconnects); n != 6 {
		t.Fatalf("reconnects %v, want 6", n)
	}
	if n := count(r.Progress.ConnectFailures); n != 2 {
		t.Fatalf("connect failures %v, want 2", n)
	}
}

func count(c interface{ Write(*dto.Metric) error }) float64 {
	var m dto.Metric
	_ = c.Write(&m)
	return m.GetCounter().GetValue()
}
