package sink

import (
	"fmt"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// health tracks whether the brokers answer, for Ready, for the connected
// gauge and for one log line per change (not one per retry).
type health struct {
	state     atomic.Pointer[readiness]
	connected prometheus.Gauge
	log       zerolog.Logger
	upMsg     string // logged when the brokers answer again
}

type readiness struct{ err error }

func newHealth(initial error, connected prometheus.Gauge, log zerolog.Logger, upMsg string) *health {
	h := &health{connected: connected, log: log, upMsg: upMsg}
	h.state.Store(&readiness{initial})
	return h
}

// Ready returns nil while the brokers answer.
func (h *health) Ready() error { return h.state.Load().err }

// reached records that a broker answered.
func (h *health) reached() {
	if prev := h.state.Swap(&readiness{}); prev.err != nil {
		h.connected.Set(1)
		h.log.Info().Msg(h.upMsg)
	}
}

// failed records a failed attempt or check.
func (h *health) failed(err error) {
	prev := h.state.Swap(&readiness{fmt.Errorf("kafka unreachable or failing: %w", err)})
	h.connected.Set(0)
	if prev.err == nil {
		h.log.Warn().Err(err).Msg("kafka not reachable")
	}
}

// closed marks the sink closed for good.
func (h *health) closed() {
	h.state.Store(&readiness{errClosed})
	h.connected.Set(0)
}
