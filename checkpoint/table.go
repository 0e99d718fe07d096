package checkpoint

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"hash/crc32"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
	"github.com/outbox-cdc/outbox-cdc/dbconn"
)

// DefaultTable is the checkpoint table unless configured.
const DefaultTable = "outbox_cdc_checkpoint"

// TableConfig configures the table store (checkpoint.table, checkpoint.dsn).
type TableConfig struct {
	// Table is the table name, optionally qualified ("db.table" on MySQL,
	// "schema.table" on PostgreSQL). Created if missing.
	Table string `yaml:"table"`
	// DSN is the database to keep the table in, in the source's DSN
	// syntax; empty means the source's own DSN (the position then lives
	// next to the data, as Maxwell keeps it).
	DSN string `yaml:"dsn"`
}

// DefaultTableConfig returns the defaults.
func DefaultTableConfig() TableConfig { return TableConfig{Table: DefaultTable} }

var tableName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_$]{0,62}(\.[A-Za-z_][A-Za-z0-9_$]{0,62})?$`)

// Validate checks the configuration without connecting.
func (c TableConfig) Validate() error {
	if !tableName.MatchString(c.Table) {
		return outboxcdc.KeyErrorf("table", "", "%q is not a table name (letters, digits, _ and $, optionally qualified as schema.table)", c.Table)
	}
	return nil
}

// Table is a Checkpointer that keeps one row per connector in a table of
// the source database:
//
//	connector  the connector name (primary key)
//	position   the position text
//	checksum   CRC-32C (hex) of the format tag, connector and position
//	saved_at   when it was saved (for people; not checked)
//	epoch      the owner epoch (Claim); 0 until an instance claims the row
//
// Save is one autocommitted upsert, atomic and durable as any committed
// row (given the server's usual durability settings, innodb_flush_log_at_
// trx_commit=1 / synchronous_commit=on). Load refuses a row whose
// checksum does not match or whose position has no kind prefix, with an
// error wrapping ErrUntrusted; checkpoint.Expect adds the foreign-source
// check as for the file store. A missing row means "no checkpoint".
//
// On MySQL/MariaDB each save is itself a binlog transaction without outbox
// rows; the binlog source hands those on at most once a second, so an
// idle connector saves about once a second. PostgreSQL's publication
// covers only the outbox table, so saves never come back through the slot.
//
// # Fencing
//
// With high availability, the instance that takes the HA lock calls Claim
// before Load: it raises the row's epoch and from then on saves only while
// the row still carries its epoch. An older instance that wakes up after a
// standby took over (a frozen process, a partition) finds the epoch raised
// and its Save fails with ErrFenced, whatever it believes about the lock.
//
// Every statement has a deadline (tableTimeout) and the connections have
// TCP keepalives (dbconn), so a save never hangs on a silent network: it
// fails, and the pipeline stops before acknowledging anything further.
type Table struct {
	d         *dbconn.Dialect
	dsn       string
	table     string // quoted
	name      string // unquoted, for messages
	connector string
	log       zerolog.Logger

	mu      sync.Mutex
	db      *sql.DB
	created bool
	// epoch is this instance's claim (Claim); 0: saves are not fenced.
	epoch int64
}

// tableTimeout bounds every statement on the checkpoint table.
var tableTimeout = 15 * time.Second

// ErrFenced is wrapped by a Save refused because another instance claimed
// the checkpoint row since this one did (see Table's Fencing).
var ErrFenced = errors.New("checkpoint claimed by another instance")

var _ outboxcdc.Checkpointer = (*Table)(nil)

// NewTable checks cfg and returns the store for dialect "mysql" (a
// go-sql-driver DSN) or "postgres" (a libpq URL or keyword string). It does
// not connect: Load creates the table when it is missing.
func NewTable(dialect, dsn string, cfg TableConfig, connector string, log zerolog.Logger) (*Table, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.DSN != "" {
		dsn = cfg.DSN
	}
	if dsn == "" {
		return nil, errors.New("checkpoint.dsn: empty, and the source has no DSN either")
	}
	if connector == "" {
		return nil, errors.New("checkpoint: the table store needs a connector name")
	}
	d, err := dbconn.DialectOf(dialect)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: the table store supports mysql and postgres sources, not %q", dialect)
	}
	return &Table{
		d: d, dsn: dsn, table: d.QuoteQualified(cfg.Table), name: cfg.Table, connector: connector,
		log: log.With().Str("component", "checkpoint").Str("table", cfg.Table).Logger(),
	}, nil
}

// String describes the store for error messages.
func (t *Table) String() string {
	return fmt.Sprintf("checkpoint table %s (connector %q)", t.name, t.connector)
}

// connect opens the pool (dbconn: keepalives, bounded connect and I/O)
// without touching the table.
func (t *Table) connect() (*sql.DB, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.connectLocked()
}

func (t *Table) connectLocked() (*sql.DB, error) {
	if t.db == nil {
		o := dbconn.Defaults()
		o.LockWait = tableTimeout
		db, err := t.d.Open(t.dsn, o)
		if err != nil {
			return nil, fmt.Errorf("%s: opening the database at %s: %w", t, outboxcdc.RedactDSN(t.dsn), err)
		}
		db.SetMaxOpenConns(2)
		db.SetConnMaxIdleTime(time.Minute)
		t.db = db
	}
	return t.db, nil
}

func (t *Table) open(ctx context.Context) (*sql.DB, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, err := t.connectLocked(); err != nil {
		return nil, err
	}
	if !t.created {
		ddl := "CREATE TABLE IF NOT EXISTS " + t.table + ` (
  connector ` + t.d.KeyText(191) + ` NOT NULL PRIMARY KEY,
  position TEXT NOT NULL,
  checksum CHAR(8) NOT NULL,
  saved_at ` + t.d.DateTime(6) + ` NOT NULL,
  epoch ` + epochColumn + `
)` + t.d.TableOptions()
		if _, err := t.db.ExecContext(ctx, ddl); err != nil {
			return nil, fmt.Errorf("%s: creating the table: %w", t, err)
		}
		t.created = true
	}
	return t.db, nil
}

// epochColumn is the definition of the epoch column (fencing).
const epochColumn = "BIGINT NOT NULL DEFAULT 0"

// tableChecksum is the CRC-32C of what a row must hold, in hex.
func tableChecksum(connector string, pos outboxcdc.Position) string {
	h := crc32.New(castagnoli)
	fmt.Fprintf(h, "%s %d\n%s\n%s", magic, version, connector, pos)
	return string(appendHex32(nil, h.Sum32()))
}

// Load returns the connector's saved position, or a zero Position when it
// has no row. A row that fails the checks is an error wrapping ErrUntrusted.
func (t *Table) Load(ctx context.Context) (outboxcdc.Position, error) {
	ctx, cancel := context.WithTimeout(ctx, tableTimeout)
	defer cancel()
	db, err := t.open(ctx)
	if err != nil {
		return "", err
	}
	var pos, sum string
	var saved dbconn.Time
	err = db.QueryRowContext(ctx, t.selectRow(), t.connector).Scan(&pos, &sum, &saved)
	if errors.Is(err, sql.ErrNoRows) {
		t.log.Info().Msg("no checkpoint yet; the source starts where source.start says")
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("%s: reading the checkpoint: %w", t, err)
	}
	if pos == "" && strings.TrimSpace(sum) == "" {
		// Claimed by an instance that has not saved yet.
		t.log.Info().Msg("no checkpoint yet; the source starts where source.start says")
		return "", nil
	}
	p := outboxcdc.Position(pos)
	if strings.TrimSpace(sum) != tableChecksum(t.connector, p) {
		return "", outboxcdc.Permanent(fmt.Errorf("%w: %s holds a row whose checksum does not match its position %q (edited by hand, or damaged)",
			ErrUntrusted, t, pos), "restore the row, or delete it deliberately to start where source.start says")
	}
	if p.Kind() == "" {
		return "", outboxcdc.Permanent(fmt.Errorf("%w: %s holds position %q, which has no source kind prefix", ErrUntrusted, t, pos),
			"restore the row, or delete it deliberately to start where source.start says")
	}
	ev := t.log.Info().Str("position", pos)
	if saved.Text != "" {
		ev = ev.Str("saved_at", saved.Text)
	} else {
		ev = ev.Time("saved_at", saved.Time)
	}
	ev.Msg("checkpoint loaded")
	return p, nil
}

// Peek reads the connector's row without creating the table (for the
// position commands): found is false when the table or the row does not
// exist, or when the row was claimed (HA) but never saved. A row that
// fails the checks is an error wrapping ErrUntrusted.
func (t *Table) Peek(ctx context.Context) (pos outboxcdc.Position, savedAt time.Time, found bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, tableTimeout)
	defer cancel()
	db, err := t.connect()
	if err != nil {
		return "", time.Time{}, false, err
	}
	var raw, sum string
	var saved dbconn.Time
	err = db.QueryRowContext(ctx, t.selectRow(), t.connector).Scan(&raw, &sum, &saved)
	switch {
	case errors.Is(err, sql.ErrNoRows), dbconn.IsNoSuchTable(err):
		return "", time.Time{}, false, nil
	case err != nil:
		return "", time.Time{}, false, fmt.Errorf("%s: reading the checkpoint: %w", t, err)
	}
	if raw == "" && strings.TrimSpace(sum) == "" {
		// Claimed by an instance that has not saved yet (as in Load).
		return "", time.Time{}, false, nil
	}
	savedAt = saved.Time
	pos = outboxcdc.Position(raw)
	if strings.TrimSpace(sum) != tableChecksum(t.connector, pos) || pos.Kind() == "" {
		return pos, savedAt, true, fmt.Errorf("%w: %s holds a row whose checksum does not match its position %q, or that has no source kind prefix", ErrUntrusted, t, raw)
	}
	return pos, savedAt, true, nil
}

// selectRow reads the connector's row.
func (t *Table) selectRow() string {
	return "SELECT position, checksum, saved_at FROM " + t.table + " WHERE connector = " + t.d.Param(1)
}

// Save durably stores pos (one autocommitted statement). After Claim it
// is an UPDATE conditional on this instance's epoch, refused with
// ErrFenced once another instance claimed the row.
func (t *Table) Save(ctx context.Context, pos outboxcdc.Position) error {
	if pos.Kind() == "" {
		return fmt.Errorf("checkpoint: refusing to save position %q: it has no source kind prefix", string(pos))
	}
	ctx, cancel := context.WithTimeout(ctx, tableTimeout)
	defer cancel()
	db, err := t.open(ctx)
	if err != nil {
		return err
	}
	if epoch := t.claimed(); epoch != 0 {
		return t.saveFenced(ctx, db, pos, epoch)
	}
	q := t.d.Upsert(t.table, []string{"connector", "position", "checksum", "saved_at"},
		[]string{t.d.Param(1), t.d.Param(2), t.d.Param(3), t.d.UTCNow(6)},
		[]string{"connector"}, []string{"position", "checksum", "saved_at"})
	if _, err := db.ExecContext(ctx, q, t.connector, string(pos), tableChecksum(t.connector, pos)); err != nil {
		return fmt.Errorf("saving checkpoint %q to %s: %w", string(pos), t, err)
	}
	t.log.Debug().Str("position", string(pos)).Msg("checkpoint saved")
	return nil
}

func (t *Table) claimed() int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.epoch
}

func (t *Table) saveFenced(ctx context.Context, db *sql.DB, pos outboxcdc.Position, epoch int64) error {
	q := "UPDATE " + t.table + " SET position = " + t.d.Param(1) + ", checksum = " + t.d.Param(2) + ", saved_at = " + t.d.UTCNow(6) +
		" WHERE connector = " + t.d.Param(3) + " AND epoch = " + t.d.Param(4)
	res, err := db.ExecContext(ctx, q, string(pos), tableChecksum(t.connector, pos), t.connector, epoch)
	if err != nil {
		return fmt.Errorf("saving checkpoint %q to %s: %w", string(pos), t, err)
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		var now int64
		_ = db.QueryRowContext(ctx, "SELECT epoch FROM "+t.table+" WHERE connector = "+t.d.Param(1), t.connector).Scan(&now)
		return fmt.Errorf("%w: %s now carries epoch %d, this instance claimed epoch %d; another instance took over (this one lost the HA lock) and this one must stop without saving %q",
			ErrFenced, t, now, epoch, string(pos))
	}
	t.log.Debug().Str("position", string(pos)).Int64("epoch", epoch).Msg("checkpoint saved")
	return nil
}

// Claim makes this instance the checkpoint row's owner: it raises the
// row's epoch (creating the row, without a position, when there is none)
// and fences every later Save to that epoch. The HA active instance calls
// it once, after taking the lock and before Load; an instance that claimed
// earlier then cannot save any more (ErrFenced). A table created before
// fencing existed gets its epoch column added here.
func (t *Table) Claim(ctx context.Context) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, tableTimeout)
	defer cancel()
	db, err := t.open(ctx)
	if err != nil {
		return 0, err
	}
	if err := t.addEpochColumn(ctx, db); err != nil {
		return 0, err
	}
	epoch, err := t.d.Increment(ctx, db, t.table, []string{"connector", "position", "checksum", "saved_at", "epoch"},
		[]string{t.d.Param(1), "''", "''", t.d.UTCNow(6), "1"}, "connector", "epoch", t.connector)
	if err != nil {
		return 0, fmt.Errorf("%s: claiming the checkpoint row: %w", t, err)
	}
	t.mu.Lock()
	t.epoch = epoch
	t.mu.Unlock()
	t.log.Info().Int64("epoch", epoch).Msg("checkpoint row claimed: saves of any earlier owner are refused from now on")
	return epoch, nil
}

// addEpochColumn adds the epoch column to a table created without it.
func (t *Table) addEpochColumn(ctx context.Context, db *sql.DB) error {
	added, err := t.d.AddColumn(ctx, db, t.name, "epoch", epochColumn)
	if err != nil {
		return fmt.Errorf("%s: adding the epoch column: %w (the connector's user needs ALTER on the table, or add it: ALTER TABLE %s ADD COLUMN epoch %s)", t, err, t.name, epochColumn)
	}
	if added {
		t.log.Info().Msg("added the epoch column (HA fencing) to the checkpoint table")
	}
	return nil
}

// Close releases the database connections.
func (t *Table) Close() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.db == nil {
		return nil
	}
	err := t.db.Close()
	t.db = nil
	return err
}
