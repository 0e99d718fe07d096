// Package ha lets several instances of one connector run while exactly one
// streams. The instances compete for a lock the source database already
// offers, held on a dedicated connection:
//
//   - MySQL/MariaDB: GET_LOCK('outbox-cdc:<name>'), a named lock owned by the
//     session; the server releases it when the session ends.
//   - PostgreSQL: pg_try_advisory_lock(<64-bit hash of 'outbox-cdc:<name>'>),
//     a session-level advisory lock with the same release rule.
//
// The instance holding the lock is active; the others are standbys that
// retry every check_interval and take over as soon as the server releases
// the lock.
//
// # Bounds
//
// The server must release the lock of an active instance it no longer
// hears from, whether the process died (the kernel closes its socket: at
// once), its host died or was cut off (no FIN ever arrives), or the process
// is frozen (SIGSTOP, a stuck VM: its kernel still answers TCP keepalives).
// The lock session therefore carries a server-side idle timeout,
// session_timeout: MySQL wait_timeout (and net_read/net_write_timeout),
// PostgreSQL idle_session_timeout (14+; older servers only end it through
// TCP keepalives, which a frozen process's kernel answers). The active
// instance keeps the session busy with a check every check_interval, well
// inside session_timeout. So after the active instance goes silent:
//
//   - the server frees the lock within session_timeout (MySQL rounds up to
//     whole seconds), and a standby holds it at most check_interval later;
//   - the active instance, if it still runs, finds a check failing or
//     unanswered within check_interval + session_timeout/2 and reports the
//     lock lost, so it stops before a standby can start (Validate keeps
//     check_interval at most a third of session_timeout).
//
// Every statement on the lock connection has a deadline, the connection
// has TCP keepalives (dbconn), and the standby's waits are bounded the same
// way, so no path waits on a silent network.
//
// # Lease
//
// The active instance does not wait for a failing check to learn that it
// may have lost the lock. Every successful check extends a Lease on the
// monotonic clock (Lease.Valid): until the check's send time plus
// session_timeout minus a tenth of it, the earliest the server could free
// the lock is still ahead. The caller checks the lease before every write
// to the sink, so a frozen process (SIGSTOP, a paused VM) that resumes
// after a standby took over finds its lease expired before it writes
// anything, and aborts without draining what it had read ahead.
//
// The lease is the first guard, not the only one: the checkpoint table
// refuses a stale owner's saves (checkpoint.Table.Claim), in exactly-once
// mode the Kafka transactional id fences its producer, and the
// replication slot (PostgreSQL) or server_id (MySQL) was taken over by
// the new active instance.
package ha

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
	"github.com/outbox-cdc/outbox-cdc/dbconn"
	"github.com/outbox-cdc/outbox-cdc/deadpeer"
	"github.com/outbox-cdc/outbox-cdc/retry"
)

// Config is the ha: section.
type Config struct {
	// Enabled makes the instance take the lock before streaming. Every
	// instance of a connector must agree.
	Enabled bool `yaml:"enabled"`
	// CheckInterval is how often the active instance verifies it still
	// holds the lock, and how often a standby retries. Takeover after the
	// active process exits takes about this long.
	CheckInterval time.Duration `yaml:"check_interval"`
	// SessionTimeout is how long the database keeps the lock session of
	// an instance it hears nothing from (frozen, cut off, host dead)
	// before ending it, which frees the lock: a standby takes over within
	// session_timeout + check_interval of the active instance going
	// silent, and the active instance notices within check_interval +
	// session_timeout/2 (docs/delivery.md, takeover bounds). At least 3
	// check intervals.
	SessionTimeout time.Duration `yaml:"session_timeout"`
	// SinkUnreachableTimeout is how long the active instance may hold
	// records it cannot deliver to the sink before it steps down for a
	// standby that reaches the sink: it gives the lock up without
	// draining and waits as a standby, and the standby streams within
	// this timeout + 2 check intervals. Only a standby that reached the
	// sink after the delivery stopped counts, so an outage of the sink
	// itself never moves the lock (docs/delivery.md, stepping down). At
	// least sink.produce_timeout (Kafka) and 2 check intervals.
	SinkUnreachableTimeout time.Duration `yaml:"sink_unreachable_timeout"`
}

// DefaultConfig returns the defaults (disabled, 1s checks, 10s session
// timeout, 10s without delivery before stepping down).
func DefaultConfig() Config {
	return Config{CheckInterval: time.Second, SessionTimeout: 10 * time.Second, SinkUnreachableTimeout: 10 * time.Second}
}

// Validate checks the configuration.
func (c Config) Validate() error {
	switch {
	case c.CheckInterval < 100*time.Millisecond || c.CheckInterval > time.Minute:
		return outboxcdc.KeyErrorf("check_interval", "", "%s is outside 100ms..1m", c.CheckInterval)
	case c.SessionTimeout < 2*time.Second || c.SessionTimeout > time.Hour:
		return outboxcdc.KeyErrorf("session_timeout", "", "%s is outside 2s..1h", c.SessionTimeout)
	case c.SessionTimeout < 3*c.CheckInterval:
		return outboxcdc.KeyErrorf("session_timeout", "", "%s must be at least 3 × ha.check_interval (%s), so that the active instance notices a lost lock before the database frees it for a standby", c.SessionTimeout, c.CheckInterval)
	case c.SinkUnreachableTimeout < time.Second || c.SinkUnreachableTimeout > time.Hour:
		return outboxcdc.KeyErrorf("sink_unreachable_timeout", "", "%s is outside 1s..1h", c.SinkUnreachableTimeout)
	case c.SinkUnreachableTimeout < 2*c.CheckInterval:
		return outboxcdc.KeyErrorf("sink_unreachable_timeout", "", "%s must be at least 2 × ha.check_interval (%s)", c.SinkUnreachableTimeout, c.CheckInterval)
	}
	return nil
}

// CheckTimeout is how long one lock check may take before the lock counts
// as lost: half the session timeout.
func (c Config) CheckTimeout() time.Duration { return c.SessionTimeout / 2 }

// ActiveStopsWithin bounds the time from the active instance's database
// path going silent to the active instance reporting the lock lost.
func (c Config) ActiveStopsWithin() time.Duration { return c.CheckInterval + c.CheckTimeout() }

// TakeoverWithin bounds the time from the active instance going silent
// (frozen, cut off, host dead) to a standby holding the lock: the session
// timeout (whole seconds on MySQL) plus one standby retry. Starting to
// stream (connecting the source and the sink) comes on top.
func (c Config) TakeoverWithin() time.Duration {
	return time.Duration(math.Ceil(c.SessionTimeout.Seconds()))*time.Second + c.CheckInterval
}

// ProofFresh is how recent a standby's proof that it reaches the sink
// must be for the active instance to step down for it: three standby
// probes (one every check_interval), at least 3s.
func (c Config) ProofFresh() time.Duration { return max(3*c.CheckInterval, 3*time.Second) }

// StepDownWithin bounds the time from the active instance's last
// delivery to a standby holding the lock, when a standby reaches the
// sink: the timeout, one check of the active instance, one standby retry.
func (c Config) StepDownWithin() time.Duration { return c.SinkUnreachableTimeout + 2*c.CheckInterval }

// conn is the lock connection's settings: the session timeout on the
// server, keepalives at a fifth of it, reads bounded by the longest
// statement (a standby's GET_LOCK wait) plus the check timeout.
func (c Config) conn(wait time.Duration) dbconn.Options {
	o := dbconn.Defaults()
	o.SessionIdle = c.SessionTimeout
	ka := max(time.Second, c.SessionTimeout/5)
	o.Peer = deadpeer.Policy{Idle: ka, Interval: ka, Count: 3, UserTimeout: true}
	o.IO = wait + c.CheckTimeout()
	o.Application = "outbox-cdc-ha"
	return o
}

// Locker hands out the connector's lock.
type Locker interface {
	// Lock blocks until this instance holds the lock (it is then the
	// active one) or ctx is done. lost is closed when the lock is found
	// lost or its lease expires; the caller must then stop streaming
	// immediately. release gives the lock up and closes the connection;
	// it may be called once, also after lost. An error is ctx's, or a
	// permanent one (bad DSN).
	Lock(ctx context.Context) (lost <-chan struct{}, release func(), err error)
	// Acquire is Lock returning the lock's Lease, which the caller checks
	// before every write that only the lock holder may make.
	Acquire(ctx context.Context) (lease *Lease, release func(), err error)
}

// Lease says until when the lock is known to be held, on the monotonic
// clock. The server ends the lock session only after session_timeout
// without a statement from it, so a successful lock check sent at t
// proves that no other instance can hold the lock before
// t + session_timeout. The lease therefore runs until the send time of
// the last successful check (or of the acquisition) plus session_timeout
// minus a margin (LeaseMargin) that leaves time to cancel what is in
// flight. A frozen process (SIGSTOP, a paused VM) finds its lease expired
// the moment it resumes, because the monotonic clock kept running: it
// needs no check answer, no timer and no goroutine to know it must not
// write. Its methods may be called from any goroutine. The zero Lease is
// expired.
type Lease struct {
	base    time.Time     // monotonic reference
	until   atomic.Int64  // expiry as nanoseconds after base
	margin  time.Duration // subtracted from session_timeout
	timeout time.Duration // session_timeout
	lost    chan struct{}
	once    sync.Once
	// released: given up by release, invalid without being lost.
	released atomic.Bool
	mu       sync.Mutex // guards timer, stopped and why
	timer    *time.Timer
	stopped  bool
	why      string
}

// LeaseMargin is how much earlier than the server could free the lock a
// lease expires: a tenth of the session timeout. A confirmation comes at
// least every check_interval + session_timeout/2 (at most 5/6 of the
// session timeout apart), so a healthy lease never expires between two.
func (c Config) LeaseMargin() time.Duration { return c.SessionTimeout / 10 }

func newLease(cfg Config, confirmed time.Time) *Lease {
	l := &Lease{base: confirmed, margin: cfg.LeaseMargin(), timeout: cfg.SessionTimeout, lost: make(chan struct{})}
	l.until.Store(int64(cfg.SessionTimeout - l.margin))
	l.mu.Lock()
	l.timer = time.AfterFunc(time.Until(l.Expiry()), l.expireIfDue)
	l.mu.Unlock()
	return l
}

// Valid reports whether the lock is still known to be held at now (pass
// time.Now(), which carries the monotonic reading).
func (l *Lease) Valid(now time.Time) bool {
	if l == nil {
		return true
	}
	if l.released.Load() {
		return false
	}
	select {
	case <-l.lost:
		return false
	default:
	}
	return now.Sub(l.base) < time.Duration(l.until.Load())
}

// Expiry returns when the lease ends unless confirmed again.
func (l *Lease) Expiry() time.Time { return l.base.Add(time.Duration(l.until.Load())) }

// Lost is closed once the lease ended: the lock was found lost, or it was
// not confirmed in time.
func (l *Lease) Lost() <-chan struct{} { return l.lost }

// Why says why the lease ended ("" while it holds).
func (l *Lease) Why() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.why
}

// confirm extends the lease after a successful check sent at sent.
func (l *Lease) confirm(sent time.Time) {
	d := sent.Sub(l.base) + l.timeout - l.margin
	if d > time.Duration(l.until.Load()) {
		l.until.Store(int64(d))
	}
	l.rearm()
}

// rearm sets the expiry timer to the current expiry.
func (l *Lease) rearm() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.timer != nil && !l.stopped {
		l.timer.Reset(time.Until(l.Expiry()))
	}
}

// stopTimer stops the expiry timer for good.
func (l *Lease) stopTimer() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.stopped = true
	if l.timer != nil {
		l.timer.Stop()
	}
}

func (l *Lease) expireIfDue() {
	if l.released.Load() {
		return
	}
	if !l.Valid(time.Now()) {
		l.end(fmt.Sprintf("the lock was not confirmed within %s (ha.session_timeout minus a margin of %s)", l.timeout-l.margin, l.margin))
		return
	}
	l.rearm()
}

// release makes the lease invalid without reporting it lost (the lock
// was given up).
func (l *Lease) release() {
	l.released.Store(true)
	l.stopTimer()
}

// end closes Lost once, recording why.
func (l *Lease) end(why string) bool {
	ended := false
	l.once.Do(func() {
		l.mu.Lock()
		l.why = why
		l.mu.Unlock()
		l.stopTimer()
		close(l.lost)
		ended = true
	})
	return ended
}

// LockName is the lock's name for a connector: "outbox-cdc:<name>", cut to
// MySQL's 64-character limit with a hash when longer.
func LockName(connector string) string {
	n := "outbox-cdc:" + connector
	if len(n) <= 64 {
		return n
	}
	h := sha256.Sum256([]byte(connector))
	return "outbox-cdc:" + connector[:20] + ":" + hex.EncodeToString(h[:8])
}

// AdvisoryKey is the PostgreSQL advisory lock key for a connector: the
// first 8 bytes of SHA-256 of LockName.
func AdvisoryKey(connector string) int64 { return dbconn.AdvisoryKey(LockName(connector)) }

// New returns the Locker for a source kind ("mysql" or "postgres") whose
// DSN is dsn, for connector name. log is the caller's logger as it is:
// New adds component ha (and the lock), so log must not carry a component
// field already, or every line would repeat the key.
func New(kind, dsn, connector string, cfg Config, log zerolog.Logger) (Locker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	d, err := dbconn.DialectOf(kind)
	if err != nil {
		return nil, fmt.Errorf("ha: no lock for source kind %q", kind)
	}
	lock := d.SessionLock(LockName(connector))
	return &sqlLock{dsn: dsn, d: d, cfg: cfg, lock: lock,
		log: log.With().Str("component", "ha").Str("lock", lock.String()).Logger()}, nil
}

type sqlLock struct {
	dsn  string
	d    *dbconn.Dialect
	cfg  Config
	lock dbconn.SessionLock
	log  zerolog.Logger
}

// wait is how long one standby attempt waits for the lock on the server
// (GET_LOCK takes whole seconds).
func (l *sqlLock) wait() time.Duration { return l.lock.Wait(l.cfg.CheckInterval) }

// Lock implements Locker.
func (l *sqlLock) Lock(ctx context.Context) (<-chan struct{}, func(), error) {
	lease, release, err := l.Acquire(ctx)
	if err != nil {
		return nil, nil, err
	}
	return lease.Lost(), release, nil
}

// Acquire implements Locker.
func (l *sqlLock) Acquire(ctx context.Context) (*Lease, func(), error) {
	db, err := l.d.Open(l.dsn, l.cfg.conn(l.wait()))
	if err != nil {
		return nil, nil, fmt.Errorf("ha: opening %s: %w", outboxcdc.RedactDSN(l.dsn), err)
	}
	db.SetMaxIdleConns(0)
	var conn *sql.Conn
	var sent time.Time
	logged := false
	for {
		if conn == nil {
			cctx, cancel := context.WithTimeout(ctx, l.cfg.SessionTimeout)
			conn, err = db.Conn(cctx)
			cancel()
		}
		var got bool
		if err == nil {
			// A standby's attempt waits on the server for up to wait();
			// beyond that plus the check timeout its path is silent.
			sent = time.Now()
			cctx, cancel := context.WithTimeout(ctx, l.wait()+l.cfg.CheckTimeout())
			got, err = l.lock.Try(cctx, conn, l.wait())
			cancel()
		}
		if got {
			break
		}
		if ctx.Err() != nil {
			if conn != nil {
				conn.Close()
			}
			db.Close()
			return nil, nil, ctx.Err()
		}
		if err != nil {
			l.log.Warn().Err(err).Msg("standby: cannot reach the database to take the lock; retrying")
			if conn != nil {
				conn.Close()
				conn = nil
			}
			// A fixed wait, not a growing one: a standby must notice a
			// free lock within check_interval (ha.Config's bound).
			_ = retry.Sleep(ctx, l.cfg.CheckInterval)
			err = nil
			continue
		}
		if !logged {
			l.log.Info().Msg("standby: another instance holds the lock; waiting to take over")
			logged = true
		}
	}
	// The attempt's send time: the server cannot free the lock earlier
	// than session_timeout after it.
	lease := newLease(l.cfg, sent)
	l.log.Info().Dur("session_timeout", l.cfg.SessionTimeout).Dur("stops_within", l.cfg.ActiveStopsWithin()).
		Dur("lease_margin", l.cfg.LeaseMargin()).Msg("lock acquired: this instance is active")

	stop := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		t := time.NewTicker(l.cfg.CheckInterval)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-lease.Lost():
				l.log.Error().Str("reason", lease.Why()).Msg("lock lease expired: this instance must stop streaming")
				return
			case <-t.C:
			}
			began := time.Now()
			cctx, cancel := context.WithTimeout(context.Background(), l.cfg.CheckTimeout())
			held, err := l.lock.Held(cctx, conn)
			timedOut := cctx.Err() != nil
			cancel()
			select {
			case <-stop:
				return
			default:
			}
			if err != nil || !held {
				if err == nil {
					err = errors.New("the server says this session no longer holds it")
				} else if timedOut {
					err = fmt.Errorf("the lock check got no answer within %s (ha.session_timeout / 2): %w", l.cfg.CheckTimeout(), err)
				}
				if lease.end(err.Error()) {
					l.log.Error().Err(err).Dur("check_took", time.Since(began)).Msg("lock lost: this instance must stop streaming")
				}
				return
			}
			lease.confirm(began)
		}
	}()
	var once sync.Once
	release := func() {
		once.Do(func() {
			close(stop)
			<-watched
			lease.release()
			cctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			if err := l.lock.Release(cctx, conn); err == nil {
				l.log.Info().Msg("lock released")
			}
			cancel()
			conn.Close()
			db.Close()
		})
	}
	return lease, release, nil
}
