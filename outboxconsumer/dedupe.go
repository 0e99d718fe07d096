package outboxconsumer

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Outcome is what became of a message.
type Outcome int

const (
	// Applied: the handler ran and its transaction committed with the id.
	Applied Outcome = iota + 1
	// Duplicate: the database already held the id; nothing ran.
	Duplicate
	// DuplicateCached: RedisFilter knew the id as committed; neither the
	// database nor the handler was asked.
	DuplicateCached
)

func (o Outcome) String() string {
	switch o {
	case Applied:
		return "applied"
	case Duplicate:
		return "duplicate"
	case DuplicateCached:
		return "duplicate (redis)"
	}
	return "none"
}

// DedupeConfig configures a Dedupe.
type DedupeConfig struct {
	Dialect Dialect
	// Table is the processed-messages table; "" is processed_message.
	Table string
	// Consumer names this consumer (a consumer group, a queue's
	// subscriber): ids are unique per consumer, so several consumers of
	// the same events can share one table. Required, at most 64
	// characters.
	Consumer string
}

// Dedupe records processed message ids in the consumer's database, in the
// transaction that applies the message. Safe for concurrent use.
type Dedupe struct {
	d        Dialect
	table    string // quoted
	raw      string
	consumer string
	stats    dedupeStats
}

type dedupeStats struct{ applied, duplicates, failed, purged atomic.Int64 }

// DedupeStats are a Dedupe's counters since New.
type DedupeStats struct {
	// Applied and Duplicates count Process outcomes; Failed counts calls
	// that returned an error (handler, database), whose message is to be
	// delivered again; Purged counts rows Purge deleted.
	Applied, Duplicates, Failed, Purged int64
}

// NewDedupe validates cfg.
func NewDedupe(cfg DedupeConfig) (*Dedupe, error) {
	if err := cfg.Dialect.valid(); err != nil {
		return nil, err
	}
	if cfg.Consumer == "" || len(cfg.Consumer) > 64 {
		return nil, errors.New("outboxconsumer: DedupeConfig.Consumer must be a name of 1 to 64 characters")
	}
	if cfg.Table == "" {
		cfg.Table = "processed_message"
	}
	return &Dedupe{d: cfg.Dialect, table: cfg.Dialect.quoteIdent(cfg.Table), raw: cfg.Table, consumer: cfg.Consumer}, nil
}

// DDL returns the statements that create the processed-messages table (if
// it does not exist). The message id compares byte for byte (utf8mb4_bin
// on MySQL: the default collation would take "Ab" and "aB" for one id).
func (d *Dedupe) DDL() []string {
	name := d.raw[strings.LastIndexByte(d.raw, '.')+1:]
	if d.d == MySQL {
		return []string{"CREATE TABLE IF NOT EXISTS " + d.table + " (" +
			"consumer VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL, " +
			"message_id VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL, " +
			"processed_at DATETIME(3) NOT NULL, " +
			"PRIMARY KEY (consumer, message_id), KEY " + d.d.quoteIdent(name+"_processed_at") + " (consumer, processed_at)" +
			") ENGINE=InnoDB DEFAULT CHARSET=utf8mb4"}
	}
	return []string{
		"CREATE TABLE IF NOT EXISTS " + d.table + " (consumer VARCHAR(64) NOT NULL, message_id VARCHAR(128) NOT NULL, " +
			"processed_at TIMESTAMPTZ NOT NULL DEFAULT now(), PRIMARY KEY (consumer, message_id))",
		"CREATE INDEX IF NOT EXISTS " + d.d.quoteIdent(name+"_processed_at") + " ON " + d.table + " (consumer, processed_at)",
	}
}

// Stats returns the counters.
func (d *Dedupe) Stats() DedupeStats {
	return DedupeStats{Applied: d.stats.applied.Load(), Duplicates: d.stats.duplicates.Load(),
		Failed: d.stats.failed.Load(), Purged: d.stats.purged.Load()}
}

// Mark records id as processed in tx and reports whether it is new. A
// concurrent transaction that marked the same id makes Mark wait for it:
// new if it rolled back, not new if it committed. Call it first in the
// transaction (before the business change, so a duplicate takes no
// business lock) and apply the message only when it returns true.
func (d *Dedupe) Mark(ctx context.Context, tx Tx, id string) (bool, error) {
	if id == "" {
		return false, ErrNoID
	}
	if d.d == Postgres {
		n, err := tx.Exec(ctx, "INSERT INTO "+d.table+" (consumer, message_id) VALUES ($1, $2) ON CONFLICT DO NOTHING", d.consumer, id)
		if err != nil {
			return false, wrapf(err, "record message %s in %s", id, d.raw)
		}
		return n == 1, nil
	}
	_, err := tx.Exec(ctx, "INSERT INTO "+d.table+" (consumer, message_id, processed_at) VALUES (?, ?, UTC_TIMESTAMP(3))", d.consumer, id)
	var me *mysql.MySQLError
	if errors.As(err, &me) && me.Number == 1062 { // ER_DUP_ENTRY
		return false, nil
	}
	if err != nil {
		return false, wrapf(err, "record message %s in %s", id, d.raw)
	}
	return true, nil
}

// SQLBeginner starts database/sql transactions: a *sql.DB or a *sql.Conn.
type SQLBeginner interface {
	BeginTx(ctx context.Context, opts *sql.TxOptions) (*sql.Tx, error)
}

// Process applies msg once: in one transaction it records msg.ID and runs
// handle, then commits. It returns Duplicate, without running handle,
// when the id was already recorded. When handle or the commit fails it
// returns the error and nothing of the transaction remains, so the
// message must be delivered again (do not acknowledge it); a commit whose
// outcome is unknown (connection lost during COMMIT) is the same case, and
// the redelivery finds the id if the commit did happen.
func (d *Dedupe) Process(ctx context.Context, db SQLBeginner, msg Message, handle func(ctx context.Context, tx *sql.Tx) error) (Outcome, error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		d.stats.failed.Add(1)
		return 0, wrapf(err, "begin")
	}
	o, err := d.run(ctx, SQL(tx), msg, func(ctx context.Context) error { return handle(ctx, tx) }, tx.Commit, tx.Rollback)
	return o, err
}

// ProcessPgx is Process with a pgx pool or connection.
func (d *Dedupe) ProcessPgx(ctx context.Context, db PgxBeginner, msg Message, handle func(ctx context.Context, tx pgx.Tx) error) (Outcome, error) {
	tx, err := db.Begin(ctx)
	if err != nil {
		d.stats.failed.Add(1)
		return 0, wrapf(err, "begin")
	}
	// The rollback must run even when ctx is done.
	rollback := func() error { return tx.Rollback(context.WithoutCancel(ctx)) }
	return d.run(ctx, Pgx(tx), msg, func(ctx context.Context) error { return handle(ctx, tx) },
		func() error { return tx.Commit(ctx) }, rollback)
}

func (d *Dedupe) run(ctx context.Context, tx Tx, msg Message, handle func(context.Context) error, commit, rollback func() error) (Outcome, error) {
	fresh, err := d.Mark(ctx, tx, msg.ID)
	if err != nil {
		rollback()
		d.stats.failed.Add(1)
		return 0, err
	}
	if !fresh {
		rollback()
		d.stats.duplicates.Add(1)
		return Duplicate, nil
	}
	if err := handle(ctx); err != nil {
		rollback()
		d.stats.failed.Add(1)
		return 0, fmt.Errorf("outboxconsumer: %s: handler: %w", msg, err)
	}
	if err := commit(); err != nil {
		d.stats.failed.Add(1)
		return 0, wrapf(err, "%s: commit", msg)
	}
	d.stats.applied.Add(1)
	return Applied, nil
}

// Purge deletes this consumer's ids recorded more than keep ago, batch
// rows per statement (each its own transaction, so no large transaction
// holds locks), until none is left; it returns how many it deleted.
//
// keep must exceed the longest time a duplicate can still arrive after its
// first copy: a relay restart re-sends seconds to minutes of messages, but
// a replay (outbox-cdc position set, a consumer group reset to an old
// offset) can re-send anything still in the broker, so keep at least the
// broker's retention, or have the business state (Machine) stop replays.
func (d *Dedupe) Purge(ctx context.Context, db *sql.DB, keep time.Duration, batch int) (int64, error) {
	return d.purge(ctx, keep, batch, func(q string, args ...any) (int64, error) {
		res, err := db.ExecContext(ctx, q, args...)
		if err != nil {
			return 0, err
		}
		return res.RowsAffected()
	})
}

// PgxExecer runs statements: a *pgxpool.Pool or a *pgx.Conn.
type PgxExecer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// PurgePgx is Purge with a pgx pool or connection.
func (d *Dedupe) PurgePgx(ctx context.Context, db PgxExecer, keep time.Duration, batch int) (int64, error) {
	return d.purge(ctx, keep, batch, func(q string, args ...any) (int64, error) {
		tag, err := db.Exec(ctx, q, args...)
		return tag.RowsAffected(), err
	})
}

func (d *Dedupe) purge(ctx context.Context, keep time.Duration, batch int, exec func(q string, args ...any) (int64, error)) (int64, error) {
	if keep <= 0 || batch <= 0 {
		return 0, errors.New("outboxconsumer: Purge needs a positive keep and batch")
	}
	secs := keep.Seconds()
	var q string
	if d.d == MySQL {
		q = "DELETE FROM " + d.table + " WHERE consumer = ? AND processed_at < UTC_TIMESTAMP(3) - INTERVAL ? MICROSECOND LIMIT ?"
	} else {
		q = "DELETE FROM " + d.table + " WHERE ctid = ANY(ARRAY(SELECT ctid FROM " + d.table +
			" WHERE consumer = $1 AND processed_at < now() - make_interval(secs => $2) LIMIT $3))"
	}
	var total int64
	for {
		var n int64
		var err error
		if d.d == MySQL {
			n, err = exec(q, d.consumer, keep.Microseconds(), batch)
		} else {
			n, err = exec(q, d.consumer, secs, batch)
		}
		total += n
		d.stats.purged.Add(n)
		if err != nil {
			return total, wrapf(err, "purge %s", d.raw)
		}
		if n < int64(batch) {
			return total, nil
		}
		if err := ctx.Err(); err != nil {
			return total, err
		}
	}
}

// Retention is the schedule of RunRetention.
type Retention struct {
	// Keep is how long an id stays (see Purge); Every how often a purge
	// runs (default Keep/24, at least a minute); Batch rows per statement
	// (default 1000).
	Keep  time.Duration
	Every time.Duration
	Batch int
	// OnError, when set, hears a failed purge; the next one runs on
	// schedule.
	OnError func(error)
}

// RunRetention purges on r's schedule until ctx is done, and returns
// ctx's error.
func (d *Dedupe) RunRetention(ctx context.Context, db *sql.DB, r Retention) error {
	return d.runRetention(ctx, r, func(ctx context.Context, keep time.Duration, batch int) error {
		_, err := d.Purge(ctx, db, keep, batch)
		return err
	})
}

// RunRetentionPgx is RunRetention with a pgx pool or connection.
func (d *Dedupe) RunRetentionPgx(ctx context.Context, db PgxExecer, r Retention) error {
	return d.runRetention(ctx, r, func(ctx context.Context, keep time.Duration, batch int) error {
		_, err := d.PurgePgx(ctx, db, keep, batch)
		return err
	})
}

func (d *Dedupe) runRetention(ctx context.Context, r Retention, purge func(context.Context, time.Duration, int) error) error {
	if r.Keep <= 0 {
		return errors.New("outboxconsumer: Retention.Keep must be positive")
	}
	every := r.Every
	if every <= 0 {
		every = max(r.Keep/24, time.Minute)
	}
	batch := r.Batch
	if batch <= 0 {
		batch = 1000
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		if err := purge(ctx, r.Keep, batch); err != nil && ctx.Err() == nil && r.OnError != nil {
			r.OnError(err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}
