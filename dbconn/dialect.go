package dbconn

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgconn"
)

// Dialect is the SQL in which MySQL/MariaDB and PostgreSQL differ, for the
// connector's own tables and locks (the checkpoint table, the HA lock and
// its readiness records, the outbox lifecycle): quoting, placeholders,
// column types, clock expressions, upserts and session locks. Callers
// write their statements once with these pieces; a new database is one
// more Dialect value here.
//
// The values are fixed: DialectOf hands out the two there are.
type Dialect struct {
	name   string // the source kind: MySQL or Postgres
	driver string // the database/sql driver name
	quote  string // the identifier quote
	// numbered: placeholders are $1, $2, … (else ?).
	numbered bool
	// varchar: a bounded key column is VARCHAR(n) (else TEXT).
	varchar bool
	// dateTime and timestamp are the column types of a time without and
	// with the session's time zone, %d the fractional digits.
	dateTime, timestamp string
	// now and utcNow are the current time (%d the fractional digits).
	now, utcNow string
	// tableOptions follows a CREATE TABLE's column list.
	tableOptions string
	// inserted is the value an upsert inserted for a column (%s).
	inserted string
	// conflict starts an upsert's update clause, %s the key columns.
	conflict string
	// minusMicros is %s minus %s microseconds; minusSeconds the same with
	// a literal count of seconds (%d).
	minusMicros, minusSeconds string
	// microsSince is the microseconds from the time column %s to now.
	microsSince string
	// increment: see Increment.
	increment func(ctx context.Context, db *sql.DB, table, columnsValues, key, col string, keyArg any) (int64, error)
	// addColumn: see AddColumn.
	addColumn func(ctx context.Context, db *sql.DB, d *Dialect, table, column, definition string) (bool, error)
	// lock: see SessionLock.
	lock func(name string) SessionLock
	// open: see Open.
	open func(dsn string, o Options) (*sql.DB, error)
}

var mysqlDialect = &Dialect{
	name: MySQL, driver: "mysql", quote: "`", varchar: true, open: openMySQL,
	dateTime: "DATETIME(%d)", timestamp: "TIMESTAMP(%d)",
	now: "NOW(%d)", utcNow: "UTC_TIMESTAMP(%d)",
	tableOptions: " ENGINE=InnoDB DEFAULT CHARSET=utf8mb4",
	inserted:     "VALUES(%s)", conflict: "ON DUPLICATE KEY UPDATE",
	minusMicros: "%s - INTERVAL %s MICROSECOND", minusSeconds: "%s - INTERVAL %d SECOND",
	microsSince: "TIMESTAMPDIFF(MICROSECOND, %s, NOW(3))",
	// MariaDB and MySQL 5.7 have no RETURNING on an upsert: the upsert and
	// the read share a transaction, which holds the row's lock between them.
	increment: func(ctx context.Context, db *sql.DB, table, columnsValues, key, col string, keyArg any) (int64, error) {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return 0, err
		}
		defer tx.Rollback()
		if _, err := tx.ExecContext(ctx, "INSERT INTO "+table+" "+columnsValues+" ON DUPLICATE KEY UPDATE "+col+" = "+col+" + 1", keyArg); err != nil {
			return 0, err
		}
		var n int64
		if err := tx.QueryRowContext(ctx, "SELECT "+col+" FROM "+table+" WHERE "+key+" = ?", keyArg).Scan(&n); err != nil {
			return 0, err
		}
		return n, tx.Commit()
	},
	// MySQL has no ADD COLUMN IF NOT EXISTS (MariaDB has): look first.
	addColumn: func(ctx context.Context, db *sql.DB, d *Dialect, table, column, definition string) (bool, error) {
		schema, name, qualified := strings.Cut(table, ".")
		var n int
		var err error
		if qualified {
			err = db.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.columns WHERE table_schema = ? AND table_name = ? AND column_name = ?", schema, name, column).Scan(&n)
		} else {
			err = db.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.columns WHERE table_schema = DATABASE() AND table_name = ? AND column_name = ?", schema, column).Scan(&n)
		}
		if err != nil {
			return false, fmt.Errorf("looking for the %s column: %w", column, err)
		}
		if n > 0 {
			return false, nil
		}
		if _, err := db.ExecContext(ctx, "ALTER TABLE "+d.QuoteQualified(table)+" ADD COLUMN "+column+" "+definition); err != nil {
			return false, err
		}
		return true, nil
	},
	lock: func(name string) SessionLock {
		return SessionLock{
			what: fmt.Sprintf("GET_LOCK('%s')", name),
			wait: func(d time.Duration) time.Duration {
				return time.Duration(math.Max(1, math.Ceil(d.Seconds()))) * time.Second // whole seconds
			},
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
	},
}

var postgresDialect = &Dialect{
	name: Postgres, driver: "pgx", quote: `"`, numbered: true, open: openPostgres,
	dateTime: "TIMESTAMPTZ", timestamp: "TIMESTAMPTZ",
	now: "now()", utcNow: "now()",
	inserted: "EXCLUDED.%s", conflict: "ON CONFLICT (%s) DO UPDATE SET",
	minusMicros: "%s - make_interval(secs => %s::float8 / 1e6)", minusSeconds: "%s - interval '%d seconds'",
	microsSince: "(extract(epoch FROM now() - %s) * 1e6)::bigint",
	increment: func(ctx context.Context, db *sql.DB, table, columnsValues, key, col string, keyArg any) (int64, error) {
		// The existing row needs a name in the update clause: the alias c.
		var n int64
		err := db.QueryRowContext(ctx, "INSERT INTO "+table+" AS c "+columnsValues+" ON CONFLICT ("+key+") DO UPDATE SET "+col+" = c."+col+" + 1 RETURNING "+col, keyArg).Scan(&n)
		return n, err
	},
	addColumn: func(ctx context.Context, db *sql.DB, d *Dialect, table, column, definition string) (bool, error) {
		_, err := db.ExecContext(ctx, "ALTER TABLE "+d.QuoteQualified(table)+" ADD COLUMN IF NOT EXISTS "+column+" "+definition)
		return false, err
	},
	lock: func(name string) SessionLock {
		key := AdvisoryKey(name)
		return SessionLock{
			what: fmt.Sprintf("pg_advisory_lock(%d) for '%s'", key, name),
			wait: func(d time.Duration) time.Duration { return d },
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
	},
}

// DialectOf returns the dialect of a source kind (MySQL or Postgres).
func DialectOf(kind string) (*Dialect, error) {
	switch kind {
	case MySQL:
		return mysqlDialect, nil
	case Postgres:
		return postgresDialect, nil
	}
	return nil, fmt.Errorf("dbconn: unknown dialect %q", kind)
}

// Name is the source kind: MySQL or Postgres.
func (d *Dialect) Name() string { return d.name }

// Driver is the database/sql driver name.
func (d *Dialect) Driver() string { return d.driver }

// Quote quotes one identifier.
func (d *Dialect) Quote(id string) string {
	return d.quote + strings.ReplaceAll(id, d.quote, d.quote+d.quote) + d.quote
}

// QuoteQualified quotes "name" or "schema.name" (a MySQL database or a
// PostgreSQL schema), each part on its own.
func (d *Dialect) QuoteQualified(name string) string {
	a, b, ok := strings.Cut(name, ".")
	if !ok {
		return d.Quote(a)
	}
	return d.Quote(a) + "." + d.Quote(b)
}

// Param is the n-th placeholder (from 1).
func (d *Dialect) Param(n int) string {
	if d.numbered {
		return "$" + strconv.Itoa(n)
	}
	return "?"
}

// Params is the list of the placeholders 1 to n, comma separated.
func (d *Dialect) Params(n int) string {
	var b strings.Builder
	for i := 1; i <= n; i++ {
		if i > 1 {
			b.WriteString(", ")
		}
		b.WriteString(d.Param(i))
	}
	return b.String()
}

// KeyText is the type of a text column that is (part of) a key and holds
// at most n characters: VARCHAR(n) on MySQL (which indexes no TEXT
// without a prefix length), TEXT on PostgreSQL.
func (d *Dialect) KeyText(n int) string {
	if d.varchar {
		return "VARCHAR(" + strconv.Itoa(n) + ")"
	}
	return "TEXT"
}

// DateTime is the type of a column holding a UTC time with digits
// fractional digits (written with UTCNow): MySQL DATETIME, PostgreSQL
// TIMESTAMPTZ.
func (d *Dialect) DateTime(digits int) string { return withDigits(d.dateTime, digits) }

// Timestamp is the type of a column holding a time written with Now:
// MySQL TIMESTAMP, PostgreSQL TIMESTAMPTZ.
func (d *Dialect) Timestamp(digits int) string { return withDigits(d.timestamp, digits) }

// Now is the server's current time, with digits fractional digits on
// MySQL (PostgreSQL's has microseconds).
func (d *Dialect) Now(digits int) string { return withDigits(d.now, digits) }

// UTCNow is the server's current time for a DateTime column.
func (d *Dialect) UTCNow(digits int) string { return withDigits(d.utcNow, digits) }

// TableOptions ends a CREATE TABLE of the connector's own tables (MySQL:
// InnoDB, utf8mb4).
func (d *Dialect) TableOptions() string { return d.tableOptions }

// MinusMicros is the time expression t minus micros microseconds (an SQL
// expression, such as a placeholder).
func (d *Dialect) MinusMicros(t, micros string) string { return fmt.Sprintf(d.minusMicros, t, micros) }

// MinusSeconds is the time expression t minus whole seconds of d.
func (d *Dialect) MinusSeconds(t string, dur time.Duration) string {
	return fmt.Sprintf(d.minusSeconds, t, int64(dur/time.Second))
}

// MicrosSince is the whole microseconds from the time column col to now.
func (d *Dialect) MicrosSince(col string) string { return fmt.Sprintf(d.microsSince, col) }

// Upsert is an INSERT of values into cols of table (quoted) that, when
// a row with the same key columns exists, sets the update columns of that
// row to the values inserted instead.
func (d *Dialect) Upsert(table string, cols, values, key, update []string) string {
	set := make([]string, len(update))
	for i, c := range update {
		set[i] = c + " = " + fmt.Sprintf(d.inserted, c)
	}
	return "INSERT INTO " + table + " " + columnsValues(cols, values) + " " +
		conflictClause(d, key) + " " + strings.Join(set, ", ")
}

// columnsValues is "(cols) VALUES (values)".
func columnsValues(cols, values []string) string {
	return "(" + strings.Join(cols, ", ") + ") VALUES (" + strings.Join(values, ", ") + ")"
}

func conflictClause(d *Dialect, key []string) string {
	return strings.Replace(d.conflict, "%s", strings.Join(key, ", "), 1)
}

// Increment adds 1 to the integer column col of table's (quoted) row whose
// single-column key equals keyArg, or inserts that row with cols and
// values (the key as Param(1), col among cols, given 1), and returns col's
// new value: atomically, one increment per call whatever runs at the same
// time.
func (d *Dialect) Increment(ctx context.Context, db *sql.DB, table string, cols, values []string, key, col string, keyArg any) (int64, error) {
	return d.increment(ctx, db, table, columnsValues(cols, values), key, col, keyArg)
}

// AddColumn adds column (with its definition, such as "BIGINT NOT NULL
// DEFAULT 0") to table ("name" or "schema.name", unquoted) unless the
// table has it already. added is true when it was added and the database
// says so (MySQL; PostgreSQL's ADD COLUMN IF NOT EXISTS does not).
func (d *Dialect) AddColumn(ctx context.Context, db *sql.DB, table, column, definition string) (added bool, err error) {
	return d.addColumn(ctx, db, d, table, column, definition)
}

func withDigits(f string, digits int) string {
	return strings.Replace(f, "%d", strconv.Itoa(digits), 1)
}

// SessionLock is a named lock that one database session holds until it
// releases it or ends: MySQL GET_LOCK, PostgreSQL's session advisory lock
// (keyed by AdvisoryKey of the name). Every method runs on the one
// connection that holds, or is to hold, the lock.
type SessionLock struct {
	what    string
	wait    func(time.Duration) time.Duration
	try     func(ctx context.Context, c *sql.Conn, wait time.Duration) (bool, error)
	held    func(ctx context.Context, c *sql.Conn) (bool, error)
	release func(ctx context.Context, c *sql.Conn) error
}

// SessionLock returns the lock called name (at most 64 bytes: MySQL's
// limit).
func (d *Dialect) SessionLock(name string) SessionLock { return d.lock(name) }

// String names the lock as the server knows it, for logs.
func (l SessionLock) String() string { return l.what }

// Wait is how long a Try given wait really waits on the server (MySQL
// takes whole seconds, at least one).
func (l SessionLock) Wait(wait time.Duration) time.Duration { return l.wait(wait) }

// Try takes the lock on c, waiting about wait for it when another session
// holds it; it reports whether c holds it now.
func (l SessionLock) Try(ctx context.Context, c *sql.Conn, wait time.Duration) (bool, error) {
	return l.try(ctx, c, wait)
}

// Held reports whether c's session holds the lock.
func (l SessionLock) Held(ctx context.Context, c *sql.Conn) (bool, error) { return l.held(ctx, c) }

// Release gives the lock up.
func (l SessionLock) Release(ctx context.Context, c *sql.Conn) error { return l.release(ctx, c) }

// AdvisoryKey is the PostgreSQL advisory lock key of a lock name: the
// first 8 bytes of its SHA-256.
func AdvisoryKey(name string) int64 {
	h := sha256.Sum256([]byte(name))
	return int64(binary.BigEndian.Uint64(h[:8]))
}

// Time scans a time column from either driver: a time.Time (pgx), or the
// text go-sql-driver returns for DATETIME and TIMESTAMP without parseTime
// (kept in Text as the server wrote it, and parsed into Time).
type Time struct {
	time.Time
	Text string
}

// Scan implements sql.Scanner.
func (t *Time) Scan(v any) error {
	switch v := v.(type) {
	case time.Time:
		t.Time, t.Text = v, ""
	case []byte:
		t.Text = string(v)
		t.Time, _ = time.Parse("2006-01-02 15:04:05.999999", t.Text)
	case string:
		t.Text = v
		t.Time, _ = time.Parse("2006-01-02 15:04:05.999999", t.Text)
	case nil:
		*t = Time{}
	default:
		return fmt.Errorf("dbconn: cannot scan %T as a time", v)
	}
	return nil
}

// IsNoSuchTable reports whether err says a table does not exist (MySQL
// error 1146, PostgreSQL SQLSTATE 42P01), by code.
func IsNoSuchTable(err error) bool {
	var my *mysql.MySQLError
	if errors.As(err, &my) {
		return my.Number == 1146
	}
	var pg *pgconn.PgError
	if errors.As(err, &pg) {
		return pg.Code == "42P01"
	}
	return false
}
