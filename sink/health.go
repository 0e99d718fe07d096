package sink

import (
	"fmt"
	"sync/atomic"
	"time"

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

// stallWatch reports a write whose records got no answer for longer than
// after: a broker path that went silent (a cut network delivers neither
// data nor a reset) is then shown by Ready within that bound, while
// sarama's own read deadlines end the attempt.
type stallWatch struct {
	after    time.Duration
	last     *atomic.Int64
	t        *time.Ticker
	reported bool
}

func newStallWatch(after time.Duration, last *atomic.Int64) *stallWatch {
	return &stallWatch{after: after, last: last, t: time.NewTicker(min(after/4, time.Second))}
}

func (w *stallWatch) tick() <-chan time.Time { return w.t.C }
func (w *stallWatch) stop()                  { w.t.Stop() }

// check returns an error (once) when no answer came for longer than after.
func (w *stallWatch) check() error {
	silent := time.Since(time.Unix(0, w.last.Load()))
	if silent < w.after || w.reported {
		return nil
	}
	w.reported = true
	return fmt.Errorf("records in flight got no answer from the brokers for %s (more than produce_timeout + 10s): the network path may be cut", silent.Round(time.Second))
}
