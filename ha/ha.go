// Package ha lets several instances of one connector run while exactly one
// streams. The instances compete for a lock the source database already
// offers, held on a dedicated connection:
//
//   - MySQL/MariaDB: GET_LOCK('outbox-cdc:<name>'), a named lock owned by the
//     session; the server releases it when the session ends, including when
//     the process is killed and its connection drops.
//   - PostgreSQL: pg_try_advisory_lock(<64-bit hash of 'outbox-cdc:<name>'>),
//     a session-level advisory lock with the same release rule.
//
// The instance holding the lock is active; the others are standbys that
// retry every check_interval and take over as soon as the server releases
// the lock (within a second or two of the active process dying). The active
// instance checks every check_interval, on its lock connection, that it
// still holds the lock; when the check fails (connection killed or broken,
// server restarted, network partition) the lock counts as lost and the
// caller must stop streaming at once.
//
// The lock is the first guard, not the only one. After a partition the
// server may free the lock while the old active has not noticed yet; in
// that window two instances may write. On PostgreSQL the replication slot
// admits one reader at a time; in exactly-once mode the Kafka
// transactional id fences the older producer, so its writes are rejected
// whatever the lock says. In at-least-once mode the window can only add
// duplicates.
package ha

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	_ "github.com/go-sql-driver/mysql" // database/sql driver "mysql"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"
	"github.com/rs/zerolog"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
)

// Config is the ha: section.
type Config struct {
	// Enabled makes the instance take the lock before streaming. Every
	// instance of a connector must agree.
	Enabled bool `yaml:"enabled"`
	// CheckInterval is how often the active instance verifies it still
	// holds the lock, and how often a standby retries. Takeover after the
	// active process dies takes about this long.
	CheckInterval time.Duration `yaml:"check_interval"`
}

// DefaultConfig returns the defaults (disabled, 1s checks).
func DefaultConfig() Config { return Config{CheckInterval: time.Second} }

// Validate checks the configuration.
func (c Config) Validate() error {
	if c.CheckInterval < 100*time.Millisecond || c.CheckInterval > time.Minute {
		return fmt.Errorf("ha.check_interval: %s is outside 100ms..1m", c.CheckInterval)
	}
	return nil
}

// Locker hands out the connector's lock.
type Locker interface {
	// Lock blocks until this instance holds the lock (it is then the
	// active one) or ctx is done. lost is closed when the lock is found
	// lost; the caller must then stop streaming immediately. release
	// gives the lock up and closes the connection; it may be called once,
	// also after lost. An error is ctx's, or a permanent one (bad DSN).
	Lock(ctx context.Context) (lost <-chan struct{}, release func(), err error)
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
func AdvisoryKey(connector string) int64 {
	h := sha256.Sum256([]byte(LockName(connector)))
	return int64(binary.BigEndian.Uint64(h[:8]))
}

// dialect is the SQL of one database's lock.
type dialect struct {
	driver string
	// try acquires without waiting longer than about wait; it returns a
	// row with 1 when acquired.
	try     func(ctx context.Context, c *sql.Conn, wait time.Duration) (bool, error)
	held    func(ctx context.Context, c *sql.Conn) (bool, error)
	release func(ctx context.Context, c *sql.Conn) error
	what    string
}

// New returns the Locker for a source kind ("mysql" or "postgres") whose
// DSN is dsn, for connector name.
func New(kind, dsn, connector string, cfg Config, log zerolog.Logger) (Locker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	name := LockName(connector)
	key := AdvisoryKey(connector)
	var d dialect
	switch kind {
	case "mysql":
		d = dialect{
			driver: "mysql",
			what:   fmt.Sprintf("GET_LOCK('%s')", name),
			try: func(ctx context.Context, c *sql.Conn, wait time.Duration) (bool, error) {
				var got sql.NullInt64
				secs := math.Max(1, math.Ceil(wait.Seconds()))
				err := c.QueryRowContext(ctx, "SELECT GET_LOCK(?, ?)", name, secs).Scan(&got)
				return got.Valid && got.Int64 == 1, err
			},
			held: func(ctx context.Context, c *sql.Conn) (bool, error) {
				var mine sql.NullInt64
				err := c.QueryRowContext(ctx, "SELECT IS_USED_LOCK(?) = CONNECTION_ID()", name).Scan(&mine)
				return mine.Valid && mine.Int64 == 1, err
			},
			release: func(ctx context.Context, c *sql.Conn) error {
				_, err := c.ExecContext(ctx, "DO RELEASE_LOCK(?)", name)
				return err
			},
		}
	case "postgres":
		d = dialect{
			driver: "pgx",
			what:   fmt.Sprintf("pg_advisory_lock(%d) for '%s'", key, name),
			try: func(ctx context.Context, c *sql.Conn, wait time.Duration) (bool, error) {
				var got bool
				err := c.QueryRowContext(ctx, "SELECT pg_try_advisory_lock($1)", key).Scan(&got)
				if err == nil && !got {
					// Session advisory locks cannot be waited for with a
					// timeout portably; poll.
					t := time.NewTimer(wait)
					defer t.Stop()
					select {
					case <-t.C:
					case <-ctx.Done():
						return false, ctx.Err()
					}
				}
				return got, err
			},
			held: func(ctx context.Context, c *sql.Conn) (bool, error) {
				var n int
				err := c.QueryRowContext(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid() AND granted
  AND classid = (($1::bigint >> 32) & 4294967295)::oid AND objid = ($1::bigint & 4294967295)::oid AND objsubid = 1`, key).Scan(&n)
				return n > 0, err
			},
			release: func(ctx context.Context, c *sql.Conn) error {
				_, err := c.ExecContext(ctx, "SELECT pg_advisory_unlock($1)", key)
				return err
			},
		}
	default:
		return nil, fmt.Errorf("ha: no lock for source kind %q", kind)
	}
	return &sqlLock{dsn: dsn, cfg: cfg, d: d,
		log: log.With().Str("component", "ha").Str("lock", d.what).Logger()}, nil
}

type sqlLock struct {
	dsn string
	cfg Config
	d   dialect
	log zerolog.Logger
}

// Lock implements Locker.
func (l *sqlLock) Lock(ctx context.Context) (<-chan struct{}, func(), error) {
	db, err := sql.Open(l.d.driver, l.dsn)
	if err != nil {
		return nil, nil, fmt.Errorf("ha: opening %s: %w", outboxcdc.RedactDSN(l.dsn), err)
	}
	db.SetMaxIdleConns(0)
	var conn *sql.Conn
	logged := false
	for {
		if conn == nil {
			conn, err = db.Conn(ctx)
		}
		var got bool
		if err == nil {
			got, err = l.d.try(ctx, conn, l.cfg.CheckInterval)
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
			t := time.NewTimer(l.cfg.CheckInterval)
			select {
			case <-t.C:
			case <-ctx.Done():
			}
			t.Stop()
			err = nil
			continue
		}
		if !logged {
			l.log.Info().Msg("standby: another instance holds the lock; waiting to take over")
			logged = true
		}
	}
	l.log.Info().Msg("lock acquired: this instance is active")

	lost := make(chan struct{})
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
			case <-t.C:
			}
			cctx, cancel := context.WithTimeout(context.Background(), l.cfg.CheckInterval)
			held, err := l.d.held(cctx, conn)
			cancel()
			select {
			case <-stop:
				return
			default:
			}
			if err != nil || !held {
				if err == nil {
					err = errors.New("the server says this session no longer holds it")
				}
				l.log.Error().Err(err).Msg("lock lost: this instance must stop streaming")
				close(lost)
				return
			}
		}
	}()
	var once sync.Once
	release := func() {
		once.Do(func() {
			close(stop)
			<-watched
			cctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			if err := l.d.release(cctx, conn); err == nil {
				l.log.Info().Msg("lock released")
			}
			cancel()
			conn.Close()
			db.Close()
		})
	}
	return lost, release, nil
}
