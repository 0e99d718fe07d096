// Package lifecycle keeps an outbox table the way a polling relay left it:
// it marks delivered rows sent (status = 1) once they are checkpointed, and
// deletes or archives delivered rows older than a retention period.
//
// It is an outboxcdc.CheckpointObserver: the pipeline's saver goroutine
// hands it the message ids of every durable checkpoint. The ids are queued
// and marked by a background goroutine in small UPDATEs on a pool of at
// most two connections of its own, so the business keeps its connections
// and the pipeline is not held up by the database.
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

	_ "github.com/go-sql-driver/mysql" // database/sql driver "mysql"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
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
	// Queue bounds the ids waiting to be marked. When it is full the
	// checkpoint waits (back-pressure): ids are never dropped.
	Queue int `yaml:"queue"`
	// Cleanup deletes or archives old delivered rows.
	Cleanup CleanupConfig `yaml:"cleanup"`
}

// CleanupConfig is lifecycle.cleanup.
type CleanupConfig struct {
	Enabled bool `yaml:"enabled"`
	// Retention: rows whose CreatedColumn is older than this are removed.
	Retention time.Duration `yaml:"retention"`
	// Interval between cleanup passes (the first runs at start).
	Interval time.Duration `yaml:"interval"`
	// Batch rows per DELETE (each its own short transaction), Pause
	// between two batches.
	Batch int           `yaml:"batch"`
	Pause time.Duration `yaml:"pause"`
	// Delivered is the SQL condition that says a row is known to be
	// delivered: what mark_sent sets (status = 1).
	Delivered string `yaml:"delivered"`
	// Key is the integer primary key; CreatedColumn the insert time.
	Key           string `yaml:"key"`
	CreatedColumn string `yaml:"created_column"`
	// ArchiveTable, when set, receives each row (INSERT ... SELECT *, same
	// columns) in the transaction that deletes it.
	ArchiveTable string `yaml:"archive_table"`
}

// DefaultConfig: nothing on; the seed table's columns.
func DefaultConfig() Config {
	return Config{
		MarkSentSet: "status = 1",
		MarkBatch:   500,
		Queue:       100000,
		Cleanup: CleanupConfig{
			Retention: 168 * time.Hour, Interval: time.Hour, Batch: 500, Pause: 100 * time.Millisecond,
			Delivered: "status = 1", Key: "id", CreatedColumn: "created_at",
		},
	}
}

// Validate checks the keys; messages name them under lifecycle.
func (c Config) Validate() error {
	var errs []error
	bad := func(f string, a ...any) { errs = append(errs, fmt.Errorf("lifecycle."+f, a...)) }
	if c.MarkSent {
		if strings.TrimSpace(c.MarkSentSet) == "" || strings.Contains(c.MarkSentSet, ";") {
			bad("mark_sent_set: %q must be a SET clause such as \"status = 1, updated_at = CURRENT_TIMESTAMP\"", c.MarkSentSet)
		}
		if c.MessageIDColumn != "" && !ident(c.MessageIDColumn) {
			bad("message_id_column: %q is not a plain column name", c.MessageIDColumn)
		}
		if c.MarkBatch < 1 || c.MarkBatch > 5000 {
			bad("mark_batch: %d is not between 1 and 5000", c.MarkBatch)
		}
		if c.Queue < c.MarkBatch {
			bad("queue: %d must be at least mark_batch (%d)", c.Queue, c.MarkBatch)
		}
	}
	cl := c.Cleanup
	if cl.Enabled {
		if !c.MarkSent && cl.Delivered == DefaultConfig().Cleanup.Delivered {
			// Without mark_sent nothing durable says a row was delivered;
			// status = 1 would then only cover the polling relay's rows.
			bad("cleanup: needs mark_sent: true (the row's status is the durable record that it was delivered), or an explicit cleanup.delivered condition")
		}
		if strings.TrimSpace(cl.Delivered) == "" || strings.Contains(cl.Delivered, ";") {
			bad("cleanup.delivered: %q must be one SQL condition", cl.Delivered)
		}
		if cl.Retention < time.Minute {
			bad("cleanup.retention: %s is below 1m", cl.Retention)
		}
		if cl.Interval <= 0 || cl.Pause < 0 {
			bad("cleanup.interval must be positive and cleanup.pause not negative")
		}
		if cl.Batch < 1 || cl.Batch > 10000 {
			bad("cleanup.batch: %d is not between 1 and 10000", cl.Batch)
		}
		if !ident(cl.Key) || !ident(cl.CreatedColumn) {
			bad("cleanup.key and cleanup.created_column must be plain column names")
		}
		if cl.ArchiveTable != "" && !qualified(cl.ArchiveTable) {
			bad("cleanup.archive_table: %q is not table or schema.table", cl.ArchiveTable)
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

// Dialects.
const (
	MySQL    = "mysql"
	Postgres = "postgres"
)

// Lifecycle marks and cleans up; create it with New, register it with
// Pipeline.Observe, and Close it after the pipeline stopped.
type Lifecycle struct {
	cfg     Config
	dialect string
	table   string // quoted, qualified
	idCol   string // quoted
	db      *sql.DB
	log     zerolog.Logger

	q       chan []string
	closed  chan struct{}
	done    sync.WaitGroup
	ctx     context.Context
	cancel  context.CancelFunc
	closeMu sync.Once

	marked, deleted, errs prometheus.Counter
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
	driver := map[string]string{MySQL: "mysql", Postgres: "pgx"}[dialect]
	if driver == "" {
		return nil, fmt.Errorf("lifecycle: unknown dialect %q", dialect)
	}
	if cfg.MessageIDColumn == "" {
		cfg.MessageIDColumn = messageIDColumn
	}
	db, err := sql.Open(driver, dsn)
	if err != nil {
		return nil, errors.New("lifecycle: cannot open the source database (check source.dsn)")
	}
	db.SetMaxOpenConns(2) // never starve the business of connections
	db.SetMaxIdleConns(1)
	db.SetConnMaxIdleTime(time.Minute)
	l := &Lifecycle{
		cfg: cfg, dialect: dialect, db: db,
		table:  quoteQualified(dialect, table),
		idCol:  quote(dialect, cfg.MessageIDColumn),
		log:    log.With().Str("component", "lifecycle").Logger(),
		q:      make(chan []string, max(1, cfg.Queue/max(1, cfg.MarkBatch))),
		closed: make(chan struct{}),
		marked: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "outbox_cdc_lifecycle_marked_total", Help: "Outbox rows marked sent (lifecycle.mark_sent) after their checkpoint.",
		}),
		deleted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "outbox_cdc_lifecycle_deleted_total", Help: "Delivered outbox rows deleted (or archived) by lifecycle.cleanup.",
		}),
		errs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "outbox_cdc_lifecycle_errors_total", Help: "Failed lifecycle statements (retried) and ids left unmarked at shutdown.",
		}),
	}
	if reg != nil {
		reg.MustRegister(l.marked, l.deleted, l.errs)
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

// Checkpointed queues the ids for marking. It blocks only while the queue
// is full (back-pressure on the checkpoint, never a dropped id), and gives
// up only when ctx ends or the lifecycle is closed; ids given up are
// counted as errors and left unmarked.
func (l *Lifecycle) Checkpointed(ctx context.Context, _ outboxcdc.Position, ids []string) {
	if !l.cfg.MarkSent {
		return
	}
	for len(ids) > 0 {
		n := min(len(ids), l.cfg.MarkBatch)
		chunk := make([]string, 0, n)
		for _, id := range ids[:n] {
			if id != "" {
				chunk = append(chunk, id)
			}
		}
		ids = ids[n:]
		if len(chunk) == 0 {
			continue
		}
		select {
		case l.q <- chunk:
		default:
			t := time.Now()
			select {
			case l.q <- chunk:
				l.log.Debug().Dur("waited", time.Since(t)).Msg("mark_sent queue was full; the checkpoint waited")
			case <-ctx.Done():
				l.giveUp(len(chunk) + len(ids))
				return
			case <-l.closed:
				l.giveUp(len(chunk) + len(ids))
				return
			}
		}
	}
}

func (l *Lifecycle) giveUp(n int) {
	l.errs.Add(float64(n))
	l.log.Warn().Int("ids", n).Msg("mark_sent: checkpointed rows left with their old status (stopping)")
}

// Close stops the cleanup, marks what is queued (waiting at most timeout)
// and closes the pool. Call it after the pipeline stopped.
func (l *Lifecycle) Close(timeout time.Duration) {
	l.closeMu.Do(func() {
		close(l.closed)
		done := make(chan struct{})
		go func() { l.done.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(timeout):
			l.cancel()
			<-done
		}
		l.cancel()
		l.db.Close()
	})
}

// marker runs the UPDATEs until closed, then drains the queue.
func (l *Lifecycle) marker() {
	defer l.done.Done()
	for {
		select {
		case c := <-l.q:
			l.mark(c)
		case <-l.closed:
			for {
				select {
				case c := <-l.q:
					l.mark(c)
				default:
					return
				}
			}
		}
	}
}

// mark updates one chunk, retrying until it succeeds or the lifecycle is
// cancelled.
func (l *Lifecycle) mark(ids []string) {
	q := "UPDATE " + l.table + " SET " + l.cfg.MarkSentSet + " WHERE " + l.idCol + " IN (" + l.placeholders(len(ids)) + ")"
	args := make([]any, len(ids))
	for i, id := range ids {
		args[i] = id
	}
	backoff := 200 * time.Millisecond
	for {
		ctx, cancel := context.WithTimeout(l.ctx, 30*time.Second)
		_, err := l.db.ExecContext(ctx, q, args...)
		cancel()
		if err == nil {
			l.marked.Add(float64(len(ids)))
			return
		}
		l.errs.Inc()
		if l.ctx.Err() != nil {
			l.giveUp(len(ids))
			return
		}
		l.log.Warn().Err(err).Int("ids", len(ids)).Dur("backoff", backoff).Msg("mark_sent UPDATE failed; retrying")
		select {
		case <-l.ctx.Done():
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 30*time.Second)
	}
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
	key := quote(l.dialect, c.Key)
	older := quote(l.dialect, c.CreatedColumn) + " < " + l.ago(c.Retention)
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
	tx, err := l.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback()
	where := " WHERE " + quote(l.dialect, l.cfg.Cleanup.Key) + " IN (" + l.placeholders(len(keys)) + ") AND " + cond
	if a := l.cfg.Cleanup.ArchiveTable; a != "" {
		if _, err := tx.ExecContext(ctx, "INSERT INTO "+quoteQualified(l.dialect, a)+" SELECT * FROM "+l.table+where, keys...); err != nil {
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

func (l *Lifecycle) ago(d time.Duration) string {
	secs := strconv.FormatInt(int64(d/time.Second), 10)
	if l.dialect == MySQL {
		return "NOW() - INTERVAL " + secs + " SECOND"
	}
	return "now() - interval '" + secs + " seconds'"
}

func (l *Lifecycle) placeholders(n int) string {
	var b strings.Builder
	for i := 0; i < n; i++ {
		if i > 0 {
			b.WriteString(", ")
		}
		if l.dialect == MySQL {
			b.WriteByte('?')
		} else {
			b.WriteByte('$')
			b.WriteString(strconv.Itoa(i + 1))
		}
	}
	return b.String()
}

func quote(dialect, id string) string {
	if dialect == MySQL {
		return "`" + strings.ReplaceAll(id, "`", "``") + "`"
	}
	return `"` + strings.ReplaceAll(id, `"`, `""`) + `"`
}

func quoteQualified(dialect, name string) string {
	a, b, ok := strings.Cut(name, ".")
	if !ok {
		return quote(dialect, a)
	}
	return quote(dialect, a) + "." + quote(dialect, b)
}
