package e2e

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"

	"github.com/outbox-cdc/outbox-cdc/test/testenv"
)

// backend is one source database prepared for a test: a fresh database
// (MySQL) or schema (PostgreSQL) holding the seed outbox table and an
// orders table.
type backend struct {
	kind string
	db   *sql.DB
	// insertOutbox and insertOrder are the statements in this dialect.
	insertOutbox, insertOrder string
	// sourceYAML is the source: section for a connector named name.
	sourceYAML func(name string) string
}

var backends = []struct {
	kind  string
	setup func(t *testing.T) *backend
}{
	{"mysql", mysqlBackend},
	{"postgres", postgresBackend},
}

// forEachBackend runs test once per source database.
func forEachBackend(t *testing.T, test func(t *testing.T, b *backend)) {
	for _, be := range backends {
		t.Run(be.kind, func(t *testing.T) { test(t, be.setup(t)) })
	}
}

// objectNames holds each test's testObjectName.
var objectNames sync.Map // *testing.T -> string

// testObjectName is the test's database (MySQL), schema, slot and
// publication (PostgreSQL) name: e2e_, the test's name and a random
// suffix, the same for every call within one test. Concurrent runs of the
// suite against the same servers (two CI jobs) do not share it.
func testObjectName(t *testing.T) string {
	if n, ok := objectNames.Load(t); ok {
		return n.(string)
	}
	n, _ := objectNames.LoadOrStore(t, testenv.UniqueName(t, "e2e"))
	return n.(string)
}

// connName is base made unique to this run of the test with the suffix of
// testObjectName: a connector name, and so a server_id, HA lock, progress
// topic and transactional id, no concurrent run shares.
func connName(t *testing.T, base string) string {
	return base + "-" + testSuffix(t)
}

// testSuffix is the random suffix of testObjectName, for names of other
// server objects (users, roles) the test creates.
func testSuffix(t *testing.T) string {
	n := testObjectName(t)
	return n[strings.LastIndexByte(n, '_')+1:]
}

func mysqlBackend(t *testing.T) *backend { return mysqlBackendNamed(t, testObjectName(t)) }

// mysqlBackendNamed is mysqlBackend with the database called name.
func mysqlBackendNamed(t *testing.T, name string) *backend {
	t.Helper()
	return mysqlBackendOn(t, testenv.MySQLDSN(t), name)
}

// mysqlBackendOn is mysqlBackendNamed on the server of the DSN base (a
// private server, testenv.PrivateMariaDB).
func mysqlBackendOn(t *testing.T, base, name string) *backend {
	t.Helper()
	cfg, err := mysql.ParseDSN(base)
	if err != nil {
		t.Fatal(err)
	}
	admin, err := sql.Open("mysql", base)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Close() })
	for _, q := range []string{"DROP DATABASE IF EXISTS " + name, "CREATE DATABASE " + name} {
		if _, err := admin.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { admin.Exec("DROP DATABASE IF EXISTS " + name) })
	cfg.DBName = name
	dsn := cfg.FormatDSN()
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	for _, q := range []string{testenv.SeedTableMySQL("outbox_message"), "CREATE TABLE orders (id BIGINT AUTO_INCREMENT PRIMARY KEY, order_no VARCHAR(32) NOT NULL)"} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	return &backend{
		kind:         "mysql",
		db:           db,
		insertOutbox: "INSERT INTO outbox_message (message_id, aggregate_type, aggregate_id, event_type, payload) VALUES (?, ?, ?, ?, ?)",
		insertOrder:  "INSERT INTO orders (order_no) VALUES (?)",
		sourceYAML: func(string) string {
			return fmt.Sprintf("  type: mysql\n  dsn: %q\n  table: outbox_message\n  start: latest\n", dsn)
		},
	}
}

func postgresBackend(t *testing.T) *backend { return postgresBackendNamed(t, testObjectName(t)) }

// postgresBackendNamed is postgresBackend with the schema, slot and
// publication called schema.
func postgresBackendNamed(t *testing.T, schema string) *backend {
	t.Helper()
	dsn := testenv.PostgresDSN(t)
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range append([]string{
		"DROP SCHEMA IF EXISTS " + schema + " CASCADE",
		"CREATE SCHEMA " + schema,
		"CREATE TABLE " + schema + ".orders (id BIGSERIAL PRIMARY KEY, order_no VARCHAR(32) NOT NULL)",
	}, testenv.SeedTablePostgres(schema+".outbox_message")...) {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	slot := strings.ReplaceAll(schema, "-", "_")
	t.Cleanup(func() {
		// The connector is gone by now (its cleanup ran first); the slot
		// must not outlive the test or it pins WAL.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for i := 0; i < 50; i++ {
			_, err := db.ExecContext(ctx, "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1", slot)
			if err == nil {
				break
			}
			time.Sleep(100 * time.Millisecond) // the walsender may still be exiting
		}
		db.ExecContext(ctx, "DROP PUBLICATION IF EXISTS "+slot)
		db.ExecContext(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE")
		db.Close()
	})
	return &backend{
		kind:         "postgres",
		db:           db,
		insertOutbox: "INSERT INTO " + schema + ".outbox_message (message_id, aggregate_type, aggregate_id, event_type, payload) VALUES ($1, $2, $3, $4, $5)",
		insertOrder:  "INSERT INTO " + schema + ".orders (order_no) VALUES ($1)",
		sourceYAML: func(string) string {
			return fmt.Sprintf("  type: postgres\n  dsn: %q\n  table: %s.outbox_message\n  slot: %s\n  publication: %s\n", dsn, schema, slot, slot)
		},
	}
}

type row struct{ id, aggType, aggID, evType, payload string }

// insertTx commits an orders row and the outbox rows in one transaction,
// or rolls it back.
func (b *backend) insertTx(t testing.TB, rows []row, commit bool) {
	t.Helper()
	tx, err := b.db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(b.insertOrder, rows[0].aggID); err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if _, err := tx.Exec(b.insertOutbox, r.id, r.aggType, r.aggID, r.evType, r.payload); err != nil {
			t.Fatal(err)
		}
	}
	if commit {
		err = tx.Commit()
	} else {
		err = tx.Rollback()
	}
	if err != nil {
		t.Fatal(err)
	}
}

// table is the outbox table's name for statements in tests.
func (b *backend) table() string {
	_, rest, _ := strings.Cut(b.insertOutbox, "INTO ")
	name, _, _ := strings.Cut(rest, " ")
	return name
}

// config writes a connector configuration for this backend.
func (b *backend) config(t *testing.T, name string, brokers []string) string {
	return writeConfig(t, fmt.Sprintf(`
name: %s
source:
%sroute:
  preset: seed
  topic: "outbox.event.{aggregate_type}"
sink:
  type: kafka
  brokers: [%q]
checkpoint:
  type: file
  path: %q
`, name, b.sourceYAML(name), brokers[0], filepath.Join(t.TempDir(), "checkpoint")))
}
