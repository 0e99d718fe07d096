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
	d       *dbconn.Dialect
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
	d, err := dbconn.DialectOf(kind)
	if err != nil {
		return nil, fmt.Errorf("ha: no readiness records for source kind %q", kind)
	}
	o := cfg.conn(0)
	o.Application = "outbox-cdc-ha-ready"
	db, err := d.Open(dsn, o)
	if err != nil {
		return nil, fmt.Errorf("ha: opening %s: %w", outboxcdc.RedactDSN(dsn), err)
	}
	db.SetMaxOpenConns(2)
	return &Readiness{db: db, d: d, lock: LockName(connector), replica: replica, cfg: cfg,
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
  lock_name ` + r.d.KeyText(64) + ` NOT NULL,
  replica ` + r.d.KeyText(255) + ` NOT NULL,
  proved_at ` + r.d.Timestamp(3) + ` NOT NULL,
  PRIMARY KEY (lock_name, replica))`
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
	d := r.d
	q := d.Upsert(ReadyTable, []string{"lock_name", "replica", "proved_at"},
		[]string{d.Param(1), d.Param(2), d.MinusMicros(d.Now(3), d.Param(3))},
		[]string{"lock_name", "replica"}, []string{"proved_at"})
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
	q := `DELETE FROM ` + ReadyTable + ` WHERE lock_name = ` + r.d.Param(1) + ` AND replica = ` + r.d.Param(2)
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
	d := r.d
	q := `SELECT replica FROM ` + ReadyTable + ` WHERE lock_name = ` + d.Param(1) + ` AND replica <> ` + d.Param(2) + `
  AND proved_at > ` + d.MinusMicros(d.Now(3), d.Param(3)) + ` ORDER BY proved_at DESC LIMIT 1`
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
	q := `SELECT ` + r.d.MicrosSince("proved_at") + ` FROM ` + ReadyTable + ` WHERE lock_name = ` + r.d.Param(1) + ` AND replica = ` + r.d.Param(2)
	var us int64
	err := r.db.QueryRowContext(ctx, q, r.lock, replica).Scan(&us)
	if err == sql.ErrNoRows {
		return 0, false, nil
	}
	return time.Duration(us) * time.Microsecond, err == nil, err
}
