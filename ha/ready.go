package ha

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"time"

	"github.com/rs/zerolog"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
	"github.com/outbox-cdc/outbox-cdc/dbconn"
)

// ReadyTable is the table, in the database of the lock, where each
// instance of a connector records when it last proved that it reaches the
// sink: one row per (lock, replica), the time taken from the database's
// clock so that the instances' clocks do not matter.
//
// The active instance steps down when it has not delivered for
// sink_unreachable_timeout only if another instance's row is younger than
// ProofFresh: a sink that nobody reaches (the broker is down) keeps the
// lock where it is.
const ReadyTable = "outbox_cdc_ha_ready"

// Readiness records and reads the proofs of ReadyTable. Safe for
// concurrent use; every statement is bounded by the check timeout.
type Readiness struct {
	db      *sql.DB
	dialect string
	lock    string
	replica string
	cfg     Config
	log     zerolog.Logger

	mu      sync.Mutex
	created bool
}

// NewReadiness opens the readiness records of connector for the source
// kind ("mysql" or "postgres") whose DSN is dsn; replica names this
// instance (unique per process). log must not carry a component field.
func NewReadiness(kind, dsn, connector, replica string, cfg Config, log zerolog.Logger) (*Readiness, error) {
	if kind != "mysql" && kind != "postgres" {
		return nil, fmt.Errorf("ha: no readiness records for source kind %q", kind)
	}
	o := cfg.conn(0)
	o.Application = "outbox-cdc-ha-ready"
	db, err := dbconn.Open(kind, dsn, o)
	if err != nil {
		return nil, fmt.Errorf("ha: opening %s: %w", outboxcdc.RedactDSN(dsn), err)
	}
	db.SetMaxOpenConns(2)
	return &Readiness{db: db, dialect: kind, lock: LockName(connector), replica: replica, cfg: cfg,
		log: log.With().Str("component", "ha").Str("ready_table", ReadyTable).Logger()}, nil
}

// Close closes the connections.
func (r *Readiness) Close() error { return r.db.Close() }

func (r *Readiness) create(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.created {
		return nil
	}
	q := `CREATE TABLE IF NOT EXISTS ` + ReadyTable + ` (
  lock_name VARCHAR(64) NOT NULL,
  replica VARCHAR(255) NOT NULL,
  proved_at TIMESTAMP(3) NOT NULL,
  PRIMARY KEY (lock_name, replica))`
	if r.dialect == "postgres" {
		q = `CREATE TABLE IF NOT EXISTS ` + ReadyTable + ` (
  lock_name TEXT NOT NULL,
  replica TEXT NOT NULL,
  proved_at TIMESTAMPTZ NOT NULL,
  PRIMARY KEY (lock_name, replica))`
	}
	if _, err := r.db.ExecContext(ctx, q); err != nil {
		return fmt.Errorf("creating %s: %w", ReadyTable, err)
	}
	r.created = true
	return nil
}

func (r *Readiness) ctx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, r.cfg.CheckTimeout())
}

// Prove records that this instance reached the sink with a probe that
// began at began (the proof is dated then, on the database's clock, so a
// probe that began before the active instance's trouble never counts as
// evidence after it).
func (r *Readiness) Prove(ctx context.Context, began time.Time) error {
	ago := max(0, time.Since(began)).Microseconds()
	ctx, cancel := r.ctx(ctx)
	defer cancel()
	if err := r.create(ctx); err != nil {
		return err
	}
	q := `INSERT INTO ` + ReadyTable + ` (lock_name, replica, proved_at) VALUES (?, ?, NOW(3) - INTERVAL ? MICROSECOND)
  ON DUPLICATE KEY UPDATE proved_at = VALUES(proved_at)`
	if r.dialect == "postgres" {
		q = `INSERT INTO ` + ReadyTable + ` (lock_name, replica, proved_at) VALUES ($1, $2, now() - make_interval(secs => $3::float8 / 1e6))
  ON CONFLICT (lock_name, replica) DO UPDATE SET proved_at = EXCLUDED.proved_at`
	}
	_, err := r.db.ExecContext(ctx, q, r.lock, r.replica, ago)
	return err
}

// Withdraw deletes this instance's proof (it found the sink unreachable,
// or it stops).
func (r *Readiness) Withdraw(ctx context.Context) error {
	ctx, cancel := r.ctx(ctx)
	defer cancel()
	if err := r.create(ctx); err != nil {
		return err
	}
	q := `DELETE FROM ` + ReadyTable + ` WHERE lock_name = ? AND replica = ?`
	if r.dialect == "postgres" {
		q = `DELETE FROM ` + ReadyTable + ` WHERE lock_name = $1 AND replica = $2`
	}
	_, err := r.db.ExecContext(ctx, q, r.lock, r.replica)
	return err
}

// OtherReady reports whether another instance proved that it reaches the
// sink with a probe that began within ProofFresh and within the last
// since (how long the active instance has not delivered: only a probe
// that began after the trouble began shows the sink is reachable from
// elsewhere, not merely that it was before), and which one.
func (r *Readiness) OtherReady(ctx context.Context, since time.Duration) (string, bool, error) {
	ctx, cancel := r.ctx(ctx)
	defer cancel()
	if err := r.create(ctx); err != nil {
		return "", false, err
	}
	micros := min(r.cfg.ProofFresh(), since).Microseconds()
	q := `SELECT replica FROM ` + ReadyTable + ` WHERE lock_name = ? AND replica <> ?
  AND proved_at > NOW(3) - INTERVAL ? MICROSECOND ORDER BY proved_at DESC LIMIT 1`
	if r.dialect == "postgres" {
		q = `SELECT replica FROM ` + ReadyTable + ` WHERE lock_name = $1 AND replica <> $2
  AND proved_at > now() - make_interval(secs => $3::float8 / 1e6) ORDER BY proved_at DESC LIMIT 1`
	}
	var who string
	err := r.db.QueryRowContext(ctx, q, r.lock, r.replica, micros).Scan(&who)
	if err == sql.ErrNoRows {
		return "", false, nil
	}
	if err != nil {
		return "", false, err
	}
	return who, true, nil
}

// proofAge is for tests: how old the replica's proof is (false: none).
func (r *Readiness) proofAge(ctx context.Context, replica string) (time.Duration, bool, error) {
	q := `SELECT TIMESTAMPDIFF(MICROSECOND, proved_at, NOW(3)) FROM ` + ReadyTable + ` WHERE lock_name = ? AND replica = ?`
	if r.dialect == "postgres" {
		q = `SELECT (extract(epoch FROM now() - proved_at) * 1e6)::bigint FROM ` + ReadyTable + ` WHERE lock_name = $1 AND replica = $2`
	}
	var us int64
	err := r.db.QueryRowContext(ctx, q, r.lock, replica).Scan(&us)
	if err == sql.ErrNoRows {
		return 0, false, nil
	}
	return time.Duration(us) * time.Microsecond, err == nil, err
}
