package sink

import (
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
)

// Health is what a sink knows of its broker, for Ready and
// outbox_cdc_sink_connected: the state outboxcdc.SinkHealth reports, and
// when the broker last answered and a write last failed, which decide
// whether a probe is due and whether its answer makes the sink ready.
// Safe for concurrent use.
type Health struct {
	*outboxcdc.SinkHealth
	lastOK   atomic.Int64 // unix nanos of the last answer from the broker
	lastFail atomic.Int64 // unix nanos of the last failed attempt or check
}

// NewHealth returns the health of the sink named name: notYet is its
// Ready error until the broker first answers, up the message logged when
// it does.
func NewHealth(name, notYet, up string, m *outboxcdc.SinkMetrics, log zerolog.Logger) *Health {
	return &Health{SinkHealth: outboxcdc.NewSinkHealth(name, notYet, up, m.Connected, log)}
}

// Reached records that the broker answered.
func (h *Health) Reached() {
	h.lastOK.Store(time.Now().UnixNano())
	h.SinkHealth.Reached()
}

// Failed records a failed attempt or check.
func (h *Health) Failed(err error) {
	h.lastFail.Store(time.Now().UnixNano())
	h.SinkHealth.Failed(err)
}

// AnsweredWithin reports whether the broker answered in the last d: no
// probe is due then.
func (h *Health) AnsweredWithin(d time.Duration) bool {
	return time.Now().UnixNano()-h.lastOK.Load() < d.Nanoseconds()
}

// Probed records a probe's outcome. An answer counts as reached only when
// no write failed in the last interval: a broker that answers probes while
// writes keep failing (a queue that nacks, NOT_ENOUGH_REPLICAS) is not
// ready.
func (h *Health) Probed(err error, interval time.Duration) {
	switch {
	case err != nil:
		h.Failed(err)
	case time.Now().UnixNano()-h.lastFail.Load() >= interval.Nanoseconds():
		h.Reached()
	}
}
