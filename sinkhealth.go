package outboxcdc

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// SinkHealth is what a sink says about whether its destination answers:
// Ready's answer, the connected gauge (SinkMetrics.Connected) and the log
// lines of an outage. Every sink reports through it, so an outage reads
// the same whatever the broker:
//
//   - one warning "<name> unreachable or failing" when the destination
//     stops answering or fails every attempt, or has not answered since
//     the start (a connector started while its broker is down says so,
//     also with nothing to send);
//   - while it stays down, at most one warning per WarnInterval, with how
//     long it has been down;
//   - one line "<up>" when it answers again.
//
// A failure of the destination to take a record (a topic that does not
// exist, a refused record) is not an outage: the sink reports it itself.
// Safe for concurrent use.
type SinkHealth struct {
	name      string // the destination, in messages: "kafka", "rabbitmq"
	up        string // the line logged when it answers again
	connected prometheus.Gauge
	log       zerolog.Logger

	mu       sync.Mutex
	err      error     // nil while the destination answers
	down     time.Time // since when it does not (the start, first)
	everUp   bool
	throttle LogThrottle
	closed   bool
}

// NewSinkHealth returns the health of a sink writing to the destination
// name, not connected yet: Ready returns notYet until the destination
// answers. up is the line logged when it does ("kafka reachable").
func NewSinkHealth(name, notYet, up string, connected prometheus.Gauge, log zerolog.Logger) *SinkHealth {
	return &SinkHealth{name: name, up: up, connected: connected, log: log, err: errors.New(notYet), down: time.Now()}
}

// Ready returns nil while the destination answers.
func (h *SinkHealth) Ready() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.err
}

// Reached records that the destination answered.
func (h *SinkHealth) Reached() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.err == nil || h.closed {
		return
	}
	h.err = nil
	h.connected.Set(1)
	ev := h.log.Info()
	if h.everUp {
		ev = ev.Dur("down_for", time.Since(h.down).Round(time.Millisecond))
	}
	h.everUp = true
	h.throttle.Reset()
	ev.Msg(h.up)
}

// Failed records a failed attempt to reach the destination, or a check
// that found it silent.
func (h *SinkHealth) Failed(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return
	}
	if h.err == nil {
		h.down = time.Now()
	}
	h.err = fmt.Errorf("%s unreachable or failing: %w", h.name, err)
	h.connected.Set(0)
	if ok, _ := h.throttle.Allow(); !ok {
		return
	}
	// down_for counts from the start while it was never reached.
	h.log.Warn().Err(err).Dur("down_for", time.Since(h.down).Round(time.Millisecond)).Msg(h.name + " unreachable or failing")
}

// Closed marks the sink closed for good: Ready returns err from now on.
func (h *SinkHealth) Closed(err error) {
	if err == nil {
		err = errors.New(h.name + " sink closed")
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed, h.err = true, err
	h.connected.Set(0)
}
