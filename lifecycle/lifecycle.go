// Package lifecycle keeps an outbox table the way a polling relay left it:
// it marks delivered rows sent (status = 1) once they are checkpointed, and
// deletes or archives delivered rows older than a retention period.
//
// It is an outboxcdc.CheckpointObserver: the pipeline's saver goroutine
// hands it the message ids of every durable checkpoint. The ids are queued
// and marked by a background goroutine in UPDATEs of up to mark_batch ids
// on a pool of at most two connections of its own, so the business keeps
// its connections and the pipeline is not held up by the database.
//
// # A slow or failing mark_sent
//
// Marking never holds up the checkpoint: Checkpointed only appends to a
// queue bounded by lifecycle.queue ids and returns. While the database is
// slow (row locks, load) the ids accumulate and each UPDATE takes up to
// mark_batch of them at once (marking is idempotent, so they coalesce).
// When the queue is full the newest ids are left unmarked rather than
// blocking: those rows keep their status exactly as after a crash (they
// were delivered; cleanup never deletes them), and the ids and the
// checkpoint positions are counted and logged. Memory stays bounded by the
// queue, whatever the backlog.
//
// Every UPDATE has a deadline (mark_timeout, also the server's lock wait
// on these connections). A failure that retrying cannot fix (an unknown
// column in mark_sent_set, a syntax error, a missing privilege) stops the
// lifecycle at once; any other failure (lock wait timeout, deadlock, lost
// connection) is retried with backoff for mark_retry_timeout. Either way
// Failed then reports the error, naming the setting, and the command
// stops the connector with it.
//
// The sources never re-emit these changes: the binlog source skips UPDATE
// and DELETE rows on the outbox table (counted in
// outbox_cdc_source_skipped_operations_total), and the Postgres
// publication publishes inserts only.
package lifecycle

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
	"github.com/outbox-cdc/outbox-cdc/dbconn"
	"github.com/outbox-cdc/outbox-cdc/retry"
)

// Config is the lifecycle: section.
type Config struct {
	// MarkSent sets MarkSentSet on every row once its record is
	// acknowledged and its transaction checkpointed.
	MarkSent bool `yaml:"mark_sent"`
	// MarkSentSet is the SET clause of the marking UPDATE.
	MarkSentSet string `yaml:"mark_sent_set"`
	// MessageIDColumn is the column the ids are matched on; empty means
	// the route's message id column.
	MessageIDColumn string `yaml:"message_id_column"`
	// MarkBatch bounds the ids of one UPDATE.
	MarkBatch int `yaml:"mark_batch"`
	// Queue bounds the ids waiting to be marked. When it is full, the
	// newest ids are left unmarked (counted and logged); the checkpoint
	// never waits for marking.
	Queue int `yaml:"queue"`
	// MarkTimeout bounds one UPDATE, including its wait for row locks.
	MarkTimeout time.Duration `yaml:"mark_timeout"`
	// MarkRetryTimeout is how long a failing UPDATE is retried before the
	// connector stops with the error.
	MarkRetryTimeout time.Duration `yaml:"mark_retry_timeout"`
	// Cleanup deletes or archives old delivered rows.
	Cleanup CleanupConfig `yaml:"cleanup"`
}

// CleanupConfig is lifecycle.cleanup.
type CleanupConfig struct {
	// Enabled turns the periodic deletion (or archiving) of delivered rows on.
	Enabled bool `yaml:"enabled"`
	// Retention: rows whose CreatedColumn is older than this are removed.
	Retention time.Duration `yaml:"retention"`
	// Interval is the time between two cleanup passes (the first runs at
	// start).
	Interval time.Duration `yaml:"interval"`
	// Batch is the number of rows one DELETE removes, each DELETE its own
	// short transaction.
	Batch int `yaml:"batch"`
	// Pause is the wait between two DELETEs, which leaves the database
	// room for the business's own writes.
	Pause time.Duration `yaml:"pause"`
	// Delivered is the SQL condition that says a row is known to be
	// delivered: what mark_sent sets (status = 1).
	Delivered string `yaml:"delivered"`
	// Key is the table's integer primary key column: each batch deletes
	// the rows with the lowest keys first.
	Key string `yaml:"key"`
	// CreatedColumn is the column holding the row's insert time, which
	// Retention is measured against.
	CreatedColumn string `yaml:"created_column"`
	// ArchiveTable, when set, receives each row (INSERT ... SELECT *, same
	// columns) in the transaction that deletes it.
	ArchiveTable string `yaml:"archive_table"`
}

// DefaultConfig: nothing on; the seed table's columns.
func DefaultConfig() Config {
	return Config{
		MarkSentSet:      "status = 1",
		MarkBatch:        500,
		Queue:            100000,
		MarkTimeout:      10 * time.Second,
		MarkRetryTimeout: 2 * time.Minute,
		Cleanup: CleanupConfig{
			Retention: 168 * time.Hour, Interval: time.Hour, Batch: 500, Pause: 100 * time.Millisecond,
			Delivered: "status = 1", Key: "id", CreatedColumn: "created_at",
		},
	}
}

// Validate checks the keys; messages name them under lifecycle.
func (c Config) Validate() error {
	var errs []error
	bad := func(key, f string, a ...any) { errs = append(errs, outboxcdc.KeyErrorf(key, "", f, a...)) }
	if c.MarkSent {
		if strings.TrimSpace(c.MarkSentSet) == "" || strings.Contains(c.MarkSentSet, ";") {
			bad("mark_sent_set", "%q must be a SET clause such as \"status = 1, updated_at = CURRENT_TIMESTAMP\"", c.MarkSentSet)
		}
		if c.MessageIDColumn != "" && !ident(c.MessageIDColumn) {
			bad("message_id_column", "%q is not a plain column name", c.MessageIDColumn)
		}
		if c.MarkBatch < 1 || c.MarkBatch > 5000 {
			bad("mark_batch", "%d is not between 1 and 5000", c.MarkBatch)
		}
		if c.Queue < c.MarkBatch {
			bad("queue", "%d must be at least mark_batch (%d)", c.Queue, c.MarkBatch)
		}
		if c.MarkTimeout < time.Second || c.MarkTimeout > 10*time.Minute {
			bad("mark_timeout", "%s is outside 1s..10m", c.MarkTimeout)
		}
		if c.MarkRetryTimeout < 0 || c.MarkRetryTimeout > 24*time.Hour {
			bad("mark_retry_timeout", "%s is outside 0..24h", c.MarkRetryTimeout)
		}
	}
	cl := c.Cleanup
	if cl.Enabled {
		if !c.MarkSent && cl.Delivered == DefaultConfig().Cleanup.Delivered {
			// Without mark_sent nothing durable says a row was delivered;
			// status = 1 would then only cover the polling relay's rows.
			bad("cleanup", "needs mark_sent: true (the row's status is the durable record that it was delivered), or an explicit cleanup.delivered condition")
		}
		if strings.TrimSpace(cl.Delivered) == "" || strings.Contains(cl.Delivered, ";") {
			bad("cleanup.delivered", "%q must be one SQL condition", cl.Delivered)
		}
		if cl.Retention < time.Minute {
			bad("cleanup.retention", "%s is below 1m", cl.Retention)
		}
		if cl.Interval <= 0 {
			bad("cleanup.interval", "must be positive, got %s", cl.Interval)
		}
		if cl.Pause < 0 {
			bad("cleanup.pause", "must not be negative, got %s", cl.Pause)
		}
		if cl.Batch < 1 || cl.Batch > 10000 {
			bad("cleanup.batch", "%d is not between 1 and 10000", cl.Batch)
		}
		if !ident(cl.Key) {
			bad("cleanup.key", "%q is not a plain column name", cl.Key)
		}
		if !ident(cl.CreatedColumn) {
			bad("cleanup.created_column", "%q is not a plain column name", cl.CreatedColumn)
		}
		if cl.ArchiveTable != "" && !qualified(cl.ArchiveTable) {
			bad("cleanup.archive_table", "%q is not table or schema.table", cl.ArchiveTable)
		}
	}
	return errors.Join(errs...)
}

// Enabled reports whether anything is to be done.
func (c Config) Enabled() bool { return c.MarkSent || c.Cleanup.Enabled }

func ident(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

func qualified(s string) bool {
	a, b, ok := strings.Cut(s, ".")
	if !ok {
		return ident(a)
	}
	return ident(a) && ident(b)
}

// Lifecycle marks and cleans up; create it with New, register it with
// Pipeline.Observe, watch Failed, and Close it after the pipeline stopped.
type Lifecycle struct {
	cfg   Config
	d     *dbconn.Dialect
	table string // quoted, qualified
	idCol string // quoted
	db    *sql.DB
	log   zerolog.Logger

	// The mark queue: ids in checkpoint order, at most cfg.Queue.
	mu       sync.Mutex
	queue    []string
	dropped  dropRange // ids left unmarked since the last log line
	wake     chan struct{}
	closed   chan struct{}
	failed   chan struct{}
	err      error
	failOnce sync.Once

	done    sync.WaitGroup
	ctx     context.Context
	cancel  context.CancelFunc
	closeMu sync.Once

	marked, deleted, errs, unmarked prometheus.Counter
	queued                          prometheus.Gauge
}

// dropRange is what a full queue left unmarked, for one log line.
type dropRange struct {
	ids         int
	first, last outboxcdc.Position
	logged      time.Time
}

var _ outboxcdc.CheckpointObserver = (*Lifecycle)(nil)

// New opens a pool of at most two connections to dsn and starts the
// background goroutines. table is "db.table" (MySQL) or "schema.table"
// (Postgres); messageIDColumn is the route's, used unless the config names
// one. reg may be nil.
func New(cfg Config, dialect, dsn, table, messageIDColumn string, log zerolog.Logger, reg prometheus.Registerer) (*Lifecycle, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	d, err := dbconn.DialectOf(dialect)
	if err != nil {
		return nil, fmt.Errorf("lifecycle: unknown dialect %q", dialect)
	}
	if cfg.MessageIDColumn == "" {
		cfg.MessageIDColumn = messageIDColumn
	}
	o := dbconn.Defaults()
	o.LockWait = cfg.MarkTimeout
	o.IO = max(o.IO, cfg.MarkTimeout+5*time.Second, 2*time.Minute) // cleanup statements run up to a minute
	db, err := d.Open(dsn, o)
	if err != nil {
		return nil, errors.New("lifecycle: cannot open the source database (check source.dsn)")
	}
	db.SetMaxOpenConns(2) // never starve the business of connections
	db.SetMaxIdleConns(1)
	db.SetConnMaxIdleTime(time.Minute)
	l := &Lifecycle{
		cfg: cfg, d: d, db: db,
		table:  d.QuoteQualified(table),
		idCol:  d.Quote(cfg.MessageIDColumn),
		log:    log.With().Str("component", "lifecycle").Logger(),
		wake:   make(chan struct{}, 1),
		closed: make(chan struct{}),
		failed: make(chan struct{}),
		marked: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "outbox_cdc_lifecycle_marked_total", Help: "Outbox rows marked sent (lifecycle.mark_sent) after their checkpoint.",
		}),
		deleted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "outbox_cdc_lifecycle_deleted_total", Help: "Delivered outbox rows deleted (or archived) by lifecycle.cleanup.",
		}),
		errs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "outbox_cdc_lifecycle_errors_total", Help: "Failed lifecycle statements (mark_sent UPDATEs and cleanup passes).",
		}),
		unmarked: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "outbox_cdc_lifecycle_unmarked_total",
			Help: "Delivered, checkpointed outbox rows left unmarked: the mark queue (lifecycle.queue) was full, or the connector stopped first.",
		}),
		queued: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "outbox_cdc_lifecycle_queue_ids", Help: "Message ids waiting to be marked sent.",
		}),
	}
	if reg != nil {
		reg.MustRegister(l.marked, l.deleted, l.errs, l.unmarked, l.queued)
	}
	l.ctx, l.cancel = context.WithCancel(context.Background())
	if cfg.MarkSent {
		l.done.Add(1)
		go l.marker()
	}
	if cfg.Cleanup.Enabled {
		l.done.Add(1)
		go l.cleaner()
	}
	l.log.Info().Bool("mark_sent", cfg.MarkSent).Bool("cleanup", cfg.Cleanup.Enabled).Str("table", table).Msg("outbox lifecycle on")
	return l, nil
}

// Checkpointed queues the ids for marking and returns at once: it never
// blocks the checkpoint. Ids beyond the queue's bound are left unmarked,
// counted in outbox_cdc_lifecycle_unmarked_total and logged with the
// checkpoint position (at most one line per dropLogInterval).
func (l *Lifecycle) Checkpointed(_ context.Context, end outboxcdc.Position, ids []string) {
	if !l.cfg.MarkSent || len(ids) == 0 {
		return
	}
	l.mu.Lock()
	stopped := l.err != nil
	select {
	case <-l.closed:
		stopped = true
	default:
	}
	kept := 0
	for _, id := range ids {
		if id == "" {
			continue
		}
		if stopped || len(l.queue) >= l.cfg.Queue {
			l.drop(end, 1)
			continue
		}
		l.queue = append(l.queue, id)
		kept++
	}
	l.queued.Set(float64(len(l.queue)))
	l.logDrops(false)
	l.mu.Unlock()
	if kept > 0 {
		select {
		case l.wake <- struct{}{}:
		default:
		}
	}
}

// dropLogInterval rate-limits the warning about ids left unmarked.
const dropLogInterval = 30 * time.Second

// drop counts n ids of the checkpoint at end left unmarked; l.mu is held.
func (l *Lifecycle) drop(end outboxcdc.Position, n int) {
	l.unmarked.Add(float64(n))
	if l.dropped.ids == 0 {
		l.dropped.first = end
	}
	l.dropped.ids += n
	l.dropped.last = end
}

// logDrops logs the ids left unmarked since the last line, at most once per
// dropLogInterval unless final; l.mu is held.
func (l *Lifecycle) logDrops(final bool) {
	d := &l.dropped
	if d.ids == 0 || (!final && time.Since(d.logged) < dropLogInterval) {
		return
	}
	l.log.Warn().Int("ids", d.ids).Str("from_checkpoint", string(d.first)).Str("to_checkpoint", string(d.last)).Int("queue", l.cfg.Queue).
		Msg("mark_sent: rows delivered and checkpointed but left with their old status (the mark queue was full, or marking stopped); they stay as after a crash, and cleanup never deletes them")
	d.ids, d.logged = 0, time.Now()
}

// Failed is closed when marking stopped on an error (Err says which); the
// connector must then stop.
func (l *Lifecycle) Failed() <-chan struct{} { return l.failed }

// Err returns the error that closed Failed, or nil.
func (l *Lifecycle) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

func (l *Lifecycle) fail(err error) {
	l.failOnce.Do(func() {
		l.mu.Lock()
		l.err = err
		l.mu.Unlock()
		// The error itself is logged once, when the connector has stopped.
		l.log.Warn().Msg("mark_sent failed: stopping the connector (what was received is still delivered and checkpointed)")
		close(l.failed)
	})
}

// Close stops the cleanup, marks what is queued (waiting at most timeout;
// 0 marks nothing more) and closes the pool. Call it after the pipeline
// stopped. It may be called more than once; only the first call counts.
func (l *Lifecycle) Close(timeout time.Duration) {
	l.closeMu.Do(func() {
		close(l.closed)
		if timeout <= 0 {
			l.cancel()
		}
		done := make(chan struct{})
		go func() { l.done.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(timeout):
			l.cancel()
			<-done
		}
		l.cancel()
		l.mu.Lock()
		if n := len(l.queue); n > 0 {
			l.drop("", n)
			l.queue = nil
			l.queued.Set(0)
		}
		l.logDrops(true)
		l.mu.Unlock()
		l.db.Close()
	})
}

// take removes up to MarkBatch ids from the head of the queue.
func (l *Lifecycle) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := min(len(l.queue), l.cfg.MarkBatch)
	if n == 0 {
		return nil
	}
	ids := append([]string(nil), l.queue[:n]...)
	l.queue = l.queue[n:]
	if len(l.queue) == 0 {
		l.queue = nil // let the backing array go
	}
	l.queued.Set(float64(len(l.queue)))
	return ids
}

// marker runs the UPDATEs until closed (then marks what is queued) or
// until marking fails.
func (l *Lifecycle) marker() {
	defer l.done.Done()
	for l.markQueued() {
		select {
		case <-l.wake:
		case <-l.closed:
			l.markQueued()
			return
		case <-l.ctx.Done():
			return
		}
	}
}

// markQueued marks until the queue is empty; false when marking failed or
// was cancelled (the queue is then dropped and counted).
func (l *Lifecycle) markQueued() bool {
	for ids := l.take(); ids != nil; ids = l.take() {
		if err := l.mark(ids); err != nil {
			l.mu.Lock()
			l.drop("", len(ids)+len(l.queue))
			l.queue = nil
			l.queued.Set(0)
			l.mu.Unlock()
			if l.ctx.Err() == nil {
				l.fail(err)
			}
			return false
		}
	}
	return true
}

// mark updates one batch of ids. It retries what retrying can fix for up
// to MarkRetryTimeout, and returns an error naming the settings otherwise
// (or nil when the lifecycle was cancelled meanwhile: the ids are then
// counted as unmarked by the caller).
func (l *Lifecycle) mark(ids []string) error {
	q := "UPDATE " + l.table + " SET " + l.cfg.MarkSentSet + " WHERE " + l.idCol + " IN (" + l.d.Params(len(ids)) + ")"
	args := make([]any, len(ids))
	for i, id := range ids {
		args[i] = id
	}
	began := time.Now()
	b := retry.New(retry.Default())
	for attempt := 1; ; attempt++ {
		ctx, cancel := context.WithTimeout(l.ctx, l.cfg.MarkTimeout)
		n, err := l.exec(ctx, q, args...)
		cancel()
		if err == nil {
			l.marked.Add(float64(n))
			return nil
		}
		if l.ctx.Err() != nil {
			return l.ctx.Err()
		}
		l.errs.Inc()
		if permanentSQL(err) {
			return outboxcdc.Permanent(fmt.Errorf("lifecycle.mark_sent: %s failed and retrying cannot help: %w", l.describe(len(ids)), err),
				fmt.Sprintf("check lifecycle.mark_sent_set %q and lifecycle.message_id_column %q against the table, and that the user may UPDATE it",
					l.cfg.MarkSentSet, l.cfg.MessageIDColumn))
		}
		backoff := b.Next()
		if time.Since(began)+backoff > l.cfg.MarkRetryTimeout {
			return outboxcdc.Permanent(fmt.Errorf("lifecycle.mark_sent: %s kept failing for %s (%d attempts): %w",
				l.describe(len(ids)), time.Since(began).Round(time.Millisecond), attempt, err),
				fmt.Sprintf("rows locked by long transactions, or the database overloaded: end them, or raise lifecycle.mark_retry_timeout (%s) or lifecycle.mark_timeout (%s, each attempt)",
					l.cfg.MarkRetryTimeout, l.cfg.MarkTimeout))
		}
		l.log.Warn().Err(err).Int("ids", len(ids)).Int("attempt", attempt).Dur("backoff", backoff).Msg("mark_sent UPDATE failed; retrying")
		if err := retry.Sleep(l.ctx, backoff); err != nil {
			return err
		}
	}
}

// exec runs one statement in its own READ COMMITTED transaction and
// returns the rows it matched. On MySQL/MariaDB the default REPEATABLE
// READ would take next-key locks: an UPDATE waiting on a row the business
// holds locked would then also block the business's INSERTs into the
// outbox (into the gap before that row) for as long as it waits.
func (l *Lifecycle) exec(ctx context.Context, q string, args ...any) (int64, error) {
	tx, err := l.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return 0, err
	}
	defer tx.Rollback()
	res, err := tx.ExecContext(ctx, q, args...)
	if err != nil {
		return 0, err
	}
	if err := tx.Commit(); err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

func (l *Lifecycle) describe(n int) string {
	return fmt.Sprintf("UPDATE %s SET %s WHERE %s IN (%d ids)", l.table, l.cfg.MarkSentSet, l.idCol, n)
}

// permanentSQL reports whether err is a statement the server rejects as
// written (syntax, unknown column or table, privilege, bad value): the same
// statement fails again. Lock waits, deadlocks, timeouts and connection
// trouble are not.
func permanentSQL(err error) bool {
	var my *mysql.MySQLError
	if errors.As(err, &my) {
		switch my.Number {
		case 1054, // unknown column
			1064,       // syntax
			1142, 1143, // command / column denied
			1146,       // no such table
			1136, 1048, // column count, NULL into NOT NULL
			1264, 1265, 1292, 1366, // out of range / truncated / wrong value
			1451, 1452: // foreign key
			return true
		}
		return false
	}
	var pg *pgconn.PgError
	if errors.As(err, &pg) {
		switch pg.Code[:2] {
		case "42", // syntax error or access rule violation (42703 undefined column, 42501 privilege)
			"22", // data exception
			"23": // integrity constraint violation
			return true
		}
	}
	return false
}

// cleaner runs a cleanup pass at start and every interval.
func (l *Lifecycle) cleaner() {
	defer l.done.Done()
	for {
		n, err := l.cleanup()
		if err != nil && l.ctx.Err() == nil {
			l.errs.Inc()
			l.log.Warn().Err(err).Msg("cleanup pass failed; trying again next interval")
		}
		if n > 0 {
			l.log.Info().Int("rows", n).Str("archive_table", l.cfg.Cleanup.ArchiveTable).Msg("cleanup: removed delivered rows past the retention")
		}
		select {
		case <-l.closed:
			return
		case <-time.After(l.cfg.Cleanup.Interval):
		}
	}
}

// cleanup removes delivered rows older than the retention in batches, each
// in its own short transaction, pausing between them. It returns the rows
// removed.
func (l *Lifecycle) cleanup() (int, error) {
	c := l.cfg.Cleanup
	key := l.d.Quote(c.Key)
	older := l.d.Quote(c.CreatedColumn) + " < " + l.d.MinusSeconds(l.d.Now(0), c.Retention)
	cond := "(" + c.Delivered + ") AND " + older
	sel := "SELECT " + key + " FROM " + l.table + " WHERE " + cond + " ORDER BY " + key + " LIMIT " + strconv.Itoa(c.Batch)
	total := 0
	for {
		select {
		case <-l.closed:
			return total, nil
		default:
		}
		keys, err := l.selectKeys(sel)
		if err != nil || len(keys) == 0 {
			return total, err
		}
		n, err := l.remove(keys, cond)
		total += n
		if err != nil {
			return total, err
		}
		if len(keys) < c.Batch {
			return total, nil
		}
		select {
		case <-l.closed:
			return total, nil
		case <-time.After(c.Pause):
		}
	}
}

func (l *Lifecycle) selectKeys(q string) ([]any, error) {
	ctx, cancel := context.WithTimeout(l.ctx, time.Minute)
	defer cancel()
	rows, err := l.db.QueryContext(ctx, q)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var keys []any
	for rows.Next() {
		var k int64
		if err := rows.Scan(&k); err != nil {
			return nil, err
		}
		keys = append(keys, k)
	}
	return keys, rows.Err()
}

// remove archives (optionally) and deletes the rows with keys, rechecking
// the condition so a row changed since the SELECT is kept.
func (l *Lifecycle) remove(keys []any, cond string) (int, error) {
	ctx, cancel := context.WithTimeout(l.ctx, time.Minute)
	defer cancel()
	// READ COMMITTED: no gap locks that would block the business's
	// INSERTs (see exec).
	tx, err := l.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return 0, err
	}
	defer tx.Rollback()
	where := " WHERE " + l.d.Quote(l.cfg.Cleanup.Key) + " IN (" + l.d.Params(len(keys)) + ") AND " + cond
	if a := l.cfg.Cleanup.ArchiveTable; a != "" {
		if _, err := tx.ExecContext(ctx, "INSERT INTO "+l.d.QuoteQualified(a)+" SELECT * FROM "+l.table+where, keys...); err != nil {
			return 0, fmt.Errorf("archive into %s: %w", a, err)
		}
	}
	res, err := tx.ExecContext(ctx, "DELETE FROM "+l.table+where, keys...)
	if err != nil {
		return 0, err
	}
	n, _ := res.RowsAffected()
	if err := tx.Commit(); err != nil {
		return 0, err
	}
	l.deleted.Add(float64(n))
	return int(n), nil
}
