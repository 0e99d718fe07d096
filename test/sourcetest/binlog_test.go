package sourcetest_test

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	mysqldriver "github.com/go-sql-driver/mysql"
	"github.com/rs/zerolog"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
	"github.com/outbox-cdc/outbox-cdc/binlog"
	"github.com/outbox-cdc/outbox-cdc/test/sourcetest"
	"github.com/outbox-cdc/outbox-cdc/test/testenv"
)

func TestBinlogSource(t *testing.T) {
	sourcetest.Run(t, newMySQLEnv)
}

// mysqlEnv is an outbox table in the test database and a user of its own,
// so that the source's binlog dump connection can be found in the process
// list by its user.
type mysqlEnv struct {
	db    *sql.DB
	dsn   *mysqldriver.Config // the connector's user
	table string
	user  string
}

var seedCols = outboxcdc.Columns{MessageID: "message_id", AggregateType: "aggregate_type", AggregateID: "aggregate_id", EventType: "event_type", Payload: "payload"}

func newMySQLEnv(t *testing.T) sourcetest.Env {
	admin := testenv.MySQLDSN(t)
	db, err := sql.Open("mysql", admin)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	suffix := fmt.Sprintf("%08x", rand.Uint32())
	e := &mysqlEnv{db: db, table: "st_outbox_" + suffix, user: "st_" + suffix}
	e.exec(t, testenv.SeedTableMySQL(e.table))
	t.Cleanup(func() { db.Exec("DROP TABLE IF EXISTS " + e.table) })
	e.exec(t, "CREATE USER '"+e.user+"'@'%' IDENTIFIED BY 'st-pw'")
	t.Cleanup(func() { db.Exec("DROP USER IF EXISTS '" + e.user + "'@'%'") })
	e.exec(t, "GRANT REPLICATION SLAVE, REPLICATION CLIENT, SELECT, PROCESS ON *.* TO '"+e.user+"'@'%'")
	cfg, err := mysqldriver.ParseDSN(admin)
	if err != nil {
		t.Fatal(err)
	}
	cfg.User, cfg.Passwd = e.user, "st-pw"
	e.dsn = cfg
	return e
}

func (e *mysqlEnv) exec(t *testing.T, q string, args ...any) {
	t.Helper()
	if _, err := e.db.Exec(q, args...); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

func (e *mysqlEnv) Source(t *testing.T, name string, short bool, m *outboxcdc.SourceMetrics) outboxcdc.Source {
	c := binlog.DefaultConfig()
	c.DSN = e.dsn.FormatDSN()
	c.Table = e.table
	c.Reconnect = binlog.BackoffConfig{Min: 50 * time.Millisecond, Max: 500 * time.Millisecond}
	c.HeartbeatPeriod, c.ReadTimeout = time.Second, 10*time.Second
	if short {
		c.HeartbeatPeriod, c.ReadTimeout = 300*time.Millisecond, e.ReadTimeout()
	}
	src, err := binlog.New(c, name, seedCols, zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.InfoLevel), m, nil)
	if err != nil {
		t.Fatal(err)
	}
	return src
}

// ReadTimeout is 4 s, not 2: in a full CI run (every package at once on
// two cores, the server among them) a 2 s silence between a packet's
// header and its body was seen once, a reconnect this test would count as
// churn from the blocked consumer.
func (e *mysqlEnv) ReadTimeout() time.Duration { return 4 * time.Second }

func (e *mysqlEnv) Commit(t *testing.T, stmts ...string) {
	t.Helper()
	tx, err := e.db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range stmts {
		if _, err := tx.Exec(s); err != nil {
			tx.Rollback()
			t.Fatalf("%s: %v", s, err)
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
}

func (e *mysqlEnv) Insert(id string) string {
	return fmt.Sprintf("INSERT INTO %s (message_id, aggregate_type, aggregate_id, event_type, payload) VALUES ('%s', 'ORDER', 'agg-%s', 'ORDER_CREATED', '{\"id\": \"%s\"}')",
		e.table, id, id, id)
}

func (e *mysqlEnv) Update(id string) string {
	return fmt.Sprintf("UPDATE %s SET status = status + 1 WHERE message_id = '%s'", e.table, id)
}

func (e *mysqlEnv) Delete(id string) string {
	return fmt.Sprintf("DELETE FROM %s WHERE message_id = '%s'", e.table, id)
}

// KillStream kills the binlog dump thread of the env's user (one source
// runs at a time).
func (e *mysqlEnv) KillStream(t *testing.T, _ string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		var id uint64
		err := e.db.QueryRowContext(ctx, "SELECT ID FROM information_schema.PROCESSLIST WHERE USER = ? AND COMMAND LIKE 'Binlog Dump%'", e.user).Scan(&id)
		if err == nil {
			e.exec(t, fmt.Sprintf("KILL %d", id))
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("no binlog dump connection of user %s: %v", e.user, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// GonePosition is a binlog file older than the oldest the server holds:
// purged.
func (e *mysqlEnv) GonePosition(t *testing.T, _ string) (outboxcdc.Position, error) {
	t.Helper()
	rows, err := e.db.Query("SHOW BINARY LOGS")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	cols, _ := rows.Columns()
	if !rows.Next() {
		t.Fatal("SHOW BINARY LOGS lists nothing: is log_bin on?")
	}
	var first string
	dest := []any{&first}
	for range cols[1:] {
		dest = append(dest, new(sql.RawBytes))
	}
	if err := rows.Scan(dest...); err != nil {
		t.Fatal(err)
	}
	base := first[:strings.LastIndexByte(first, '.')]
	return outboxcdc.MakePosition(binlog.Kind, "file:"+base+".000000:4"), binlog.ErrPositionGone
}

func (e *mysqlEnv) Compare(a, b outboxcdc.Position) (int, error) { return binlog.Compare(a, b) }
