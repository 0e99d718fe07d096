package outboxcdc

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// What a source tells the operator about its progress and its connection,
// shared by both sources: the progress lines while it is behind (CatchUp),
// the backfill and connect-failure metrics (ProgressMetrics), and the
// readiness of a source that has not connected yet (ConnectingError).

// DefaultProgressInterval is the least time between two progress lines
// (log.progress_interval).
const DefaultProgressInterval = 15 * time.Second

// BehindThreshold is how old the last transaction read must be for the
// source to count as behind: a catch-up is logged from then until it is
// read up to less than this, or the server has nothing newer.
const BehindThreshold = 10 * time.Second

// ProgressMetrics are the metrics of a source's connection attempts and
// of a pending backfill. A source creates them with NewProgressMetrics on
// the registry it is given (the connector's).
type ProgressMetrics struct {
	// ConnectFailures counts connection attempts that failed before the
	// source ever streamed in this run (a wrong host or port, a server
	// down at the start); Reconnects counts those after a loss.
	ConnectFailures prometheus.Counter
	// BackfillPublished is the number of pending rows a backfill has
	// published in this run; BackfillExpected the number it will have
	// published when done (counted when its snapshot is opened).
	BackfillPublished prometheus.Gauge
	BackfillExpected  prometheus.Gauge
}

// NewProgressMetrics creates the metrics and registers them on reg (nil:
// none).
func NewProgressMetrics(reg prometheus.Registerer) (*ProgressMetrics, error) {
	m := &ProgressMetrics{
		ConnectFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "outbox_cdc_source_connect_failures_total",
			Help: "Connection attempts that failed before the source streamed for the first time since it started.",
		}),
		BackfillPublished: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "outbox_cdc_backfill_rows_published",
			Help: "Pending rows published by the backfill (source.start: pending) since the connector started.",
		}),
		BackfillExpected: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "outbox_cdc_backfill_rows_expected",
			Help: "Pending rows the backfill will have published when done (counted when it opens its snapshot).",
		}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.ConnectFailures, m.BackfillPublished, m.BackfillExpected} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}

// ConnectingError is a source's Ready answer while it has not streamed
// yet since it started: the connector is connecting (it never connected),
// not running with a lost stream. Err says why not yet.
type ConnectingError struct{ Err error }

func (e *ConnectingError) Error() string { return e.Err.Error() }
func (e *ConnectingError) Unwrap() error { return e.Err }

// Connecting wraps err as a ConnectingError.
func Connecting(err error) error { return &ConnectingError{Err: err} }

// IsConnecting reports whether err (a Ready answer, possibly wrapped) says
// the source never connected.
func IsConnecting(err error) bool {
	var c *ConnectingError
	return errors.As(err, &c)
}

// CatchUp logs a source's progress while it is behind: one line when the
// last transaction read is BehindThreshold old or older, then at most one
// every interval with the rows per second, the position, how far behind
// and an estimate of the time to catch up, and one "caught up" line when
// it is read up (or the server has nothing newer). Called from the
// source's Run goroutine only.
type CatchUp struct {
	log   zerolog.Logger
	every time.Duration
	now   func() time.Time // tests

	behind bool
	began  time.Time // when it was first seen behind
	rows   int64     // rows read since
	// at the last line: when, rows read, the commit time read up to
	lastLine   time.Time
	lastRows   int64
	lastCommit time.Time
	lines      int
}

// NewCatchUp returns a CatchUp logging on log at most once per every (0:
// DefaultProgressInterval).
func NewCatchUp(log zerolog.Logger, every time.Duration) *CatchUp {
	if every <= 0 {
		every = DefaultProgressInterval
	}
	return &CatchUp{log: log, every: every, now: time.Now}
}

// Observe is called for each transaction read, with its commit time, its
// outbox rows and a function giving the position after it (called only
// when a line is logged).
func (c *CatchUp) Observe(commit time.Time, rows int, pos func() string) {
	if c == nil {
		return
	}
	now := c.now()
	lag := now.Sub(commit)
	if !c.behind {
		if lag < BehindThreshold {
			return
		}
		c.behind, c.began, c.rows, c.lines = true, now, int64(rows), 1
		c.lastLine, c.lastRows, c.lastCommit = now, c.rows, commit
		c.log.Info().Str("position", pos()).Float64("behind_seconds", seconds(lag)).
			Msg("source is behind: catching up")
		return
	}
	c.rows += int64(rows)
	if lag < BehindThreshold {
		c.caughtUp(now, pos())
		return
	}
	if now.Sub(c.lastLine) < c.every {
		return
	}
	dt := now.Sub(c.lastLine).Seconds()
	ev := c.log.Info().Str("position", pos()).Float64("behind_seconds", seconds(lag)).
		Float64("rows_per_second", round1(float64(c.rows-c.lastRows)/dt)).Int64("rows_read", c.rows)
	// Source history read per second of wall time: above 1 the lag
	// shrinks, by (speed - 1) seconds each second.
	if speed := commit.Sub(c.lastCommit).Seconds() / dt; speed > 1 {
		ev.Float64("eta_seconds", round1(lag.Seconds()/(speed-1))).Msg("catching up")
	} else {
		ev.Msg("catching up: falling further behind")
	}
	c.lastLine, c.lastRows, c.lastCommit = now, c.rows, commit
	c.lines++
}

// Idle is called when the server says it has nothing newer than what was
// read (a heartbeat, a keepalive past the last transaction): a catch-up
// in progress is over. pos gives the position read up to.
func (c *CatchUp) Idle(pos func() string) {
	if c == nil || !c.behind {
		return
	}
	c.caughtUp(c.now(), pos())
}

func (c *CatchUp) caughtUp(now time.Time, pos string) {
	d := now.Sub(c.began)
	ev := c.log.Info().Str("position", pos).Int64("rows_read", c.rows).Float64("catch_up_seconds", round1(d.Seconds()))
	if d > 0 {
		ev = ev.Float64("rows_per_second", round1(float64(c.rows)/d.Seconds()))
	}
	ev.Msg("caught up")
	c.behind = false
}

func seconds(d time.Duration) float64 { return round1(d.Seconds()) }

func round1(f float64) float64 { return float64(int64(f*10+0.5)) / 10 }
