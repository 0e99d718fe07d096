package outboxcdc

import (
	"sync"
	"time"

	"github.com/rs/zerolog"
)

// LogError adds err to ev as the cause and the remedy, each in a field of
// its own: error (Cause) and hint (Hint, when there is one). Every line
// that reports why a connector stopped uses it, so the remedy is read once,
// not inside a long error text.
func LogError(ev *zerolog.Event, err error) *zerolog.Event {
	ev = ev.Str(zerolog.ErrorFieldName, Cause(err))
	if h := Hint(err); h != "" {
		ev = ev.Str("hint", h)
	}
	return ev
}

// WarnInterval is the least time between two warnings about one condition
// that lasts (a sink down, a topic that cannot be written, payloads that
// fall back): the first at once, then at most one per interval.
const WarnInterval = 30 * time.Second

// LogThrottle rate-limits the warnings about one lasting condition: Allow
// says yes the first time and then at most once per interval, and counts
// the occurrences it said no to. Safe for concurrent use.
type LogThrottle struct {
	Interval time.Duration // WarnInterval when zero

	mu         sync.Mutex
	last       time.Time
	suppressed int
}

// Allow reports whether a warning is due now. When it is, suppressed is
// the number of occurrences since the last warning that were not logged.
func (t *LogThrottle) Allow() (ok bool, suppressed int) {
	iv := t.Interval
	if iv == 0 {
		iv = WarnInterval
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	now := time.Now()
	if !t.last.IsZero() && now.Sub(t.last) < iv {
		t.suppressed++
		return false, 0
	}
	t.last = now
	suppressed, t.suppressed = t.suppressed, 0
	return true, suppressed
}

// Reset makes the next Allow say yes: the condition ended, and its next
// occurrence is news.
func (t *LogThrottle) Reset() {
	t.mu.Lock()
	t.last, t.suppressed = time.Time{}, 0
	t.mu.Unlock()
}

// Event returns a warning on log when one is due (Allow), else a debug
// event: every occurrence is at debug, the first and then one per interval
// a warning.
func (t *LogThrottle) Event(log *zerolog.Logger) *zerolog.Event {
	if ok, _ := t.Allow(); ok {
		return log.Warn()
	}
	return log.Debug()
}
