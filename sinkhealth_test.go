package outboxcdc

import (
	"bytes"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/rs/zerolog"
)

type lockedBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuf) count(s string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Count(l.b.String(), s)
}

// TestSinkHealthOutageLines: a destination down since the start is
// warned about at once (no write needed), then at most once per
// interval however often it fails; it is reported back once, and a new
// outage is warned about at once again.
func TestSinkHealthOutageLines(t *testing.T) {
	var buf lockedBuf
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "g"})
	h := NewSinkHealth("kafka", "kafka: not connected yet", "kafka reachable", g, zerolog.New(&buf))
	h.throttle.Interval = 100 * time.Millisecond
	if err := h.Ready(); err == nil || err.Error() != "kafka: not connected yet" {
		t.Fatalf("Ready before any answer = %v", err)
	}
	down := errors.New("dial tcp: connection refused")
	for range 20 {
		h.Failed(down)
	}
	if n := buf.count(`"message":"kafka unreachable or failing"`); n != 1 {
		t.Fatalf("%d warnings for 20 failures within the interval, want 1", n)
	}
	time.Sleep(120 * time.Millisecond)
	h.Failed(down)
	if n := buf.count(`"message":"kafka unreachable or failing"`); n != 2 {
		t.Fatalf("%d warnings after the interval, want 2", n)
	}
	h.Reached()
	h.Reached()
	if n := buf.count(`"message":"kafka reachable"`); n != 1 || gaugeValue(g) != 1 || h.Ready() != nil {
		t.Fatalf("back: %d lines, gauge %v, Ready %v", n, gaugeValue(g), h.Ready())
	}
	h.Failed(down)
	if n := buf.count(`"message":"kafka unreachable or failing"`); n != 3 || gaugeValue(g) != 0 {
		t.Fatalf("a new outage: %d warnings, gauge %v", n, gaugeValue(g))
	}
	h.Closed(nil)
	h.Reached()
	if h.Ready() == nil {
		t.Fatal("ready after Closed")
	}
}

func gaugeValue(g prometheus.Gauge) float64 {
	var m dto.Metric
	g.Write(&m)
	return m.GetGauge().GetValue()
}
