package sinktest

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"

	"github.com/outbox-cdc/outbox-cdc/test/testenv"
)

// source is a source database prepared for one test: a fresh database
// (MySQL) or schema (PostgreSQL) with the seed outbox table.
type source struct {
	kind   string
	db     *sql.DB
	insert string
	yaml   string // the source: section's lines
}

func newSource(t *testing.T, kind, name string) *source {
	t.Helper()
	if kind == "postgres" {
		return postgresSource(t, name)
	}
	return mysqlSource(t, name)
}

func mysqlSource(t *testing.T, name string) *source {
	base := testenv.MySQLDSN(t)
	cfg, err := mysql.ParseDSN(base)
	if err != nil {
		t.Fatal(err)
	}
	admin := testenv.MySQL(t)
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
	if _, err := db.Exec(testenv.SeedTableMySQL("outbox_message")); err != nil {
		t.Fatal(err)
	}
	return &source{
		kind: "mysql", db: db,
		insert: "INSERT INTO outbox_message (message_id, aggregate_type, aggregate_id, event_type, payload) VALUES (?, ?, ?, ?, ?)",
		yaml:   fmt.Sprintf("  type: mysql\n  dsn: %q\n  table: outbox_message\n  start: latest\n", dsn),
	}
}

func postgresSource(t *testing.T, name string) *source {
	dsn := testenv.PostgresDSN(t)
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range append([]string{"DROP SCHEMA IF EXISTS " + name + " CASCADE", "CREATE SCHEMA " + name},
		testenv.SeedTablePostgres(name+".outbox_message")...) {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for i := 0; i < 50; i++ { // the walsender may still be exiting
			if _, err := db.ExecContext(ctx, "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1", name); err == nil {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		db.ExecContext(ctx, "DROP PUBLICATION IF EXISTS "+name)
		db.ExecContext(ctx, "DROP SCHEMA IF EXISTS "+name+" CASCADE")
		db.Close()
	})
	return &source{
		kind: "postgres", db: db,
		insert: "INSERT INTO " + name + ".outbox_message (message_id, aggregate_type, aggregate_id, event_type, payload) VALUES ($1, $2, $3, $4, $5)",
		yaml:   fmt.Sprintf("  type: postgres\n  dsn: %q\n  table: %s.outbox_message\n  slot: %s\n  publication: %s\n", dsn, name, name, name),
	}
}

// Row is one outbox row.
type Row struct{ ID, AggType, AggID, EvType, Payload string }

// insertTx commits rows in one transaction.
func (s *source) insertTx(t testing.TB, rows []Row) {
	t.Helper()
	tx, err := s.db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if _, err := tx.Exec(s.insert, r.ID, r.AggType, r.AggID, r.EvType, r.Payload); err != nil {
			tx.Rollback()
			t.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
}

// writer commits transactions of 1..5 rows over 7 aggregates until done,
// remembering the message ids in commit order.
type writer struct {
	mu   sync.Mutex
	ids  []string
	done chan struct{}
}

func startWriter(t *testing.T, s *source, prefix string, txs int, pause time.Duration, payload int) *writer {
	w := &writer{done: make(chan struct{})}
	go func() {
		defer close(w.done)
		n := 0
		pad := strings.Repeat("x", payload)
		for i := 0; i < txs; i++ {
			rows := make([]Row, 1+i%5)
			for j := range rows {
				n++
				rows[j] = Row{fmt.Sprintf("%s-%d", prefix, n), "ORDER", fmt.Sprintf("agg-%d", (n*7919)%7), "ORDER_CREATED",
					fmt.Sprintf(`{"seq": %d, "pad": %q}`, n, pad)}
			}
			s.insertTx(t, rows)
			w.mu.Lock()
			for _, r := range rows {
				w.ids = append(w.ids, r.ID)
			}
			w.mu.Unlock()
			time.Sleep(pause)
		}
	}()
	return w
}

func (w *writer) wait() []string {
	<-w.done
	return w.ids
}

func writeConfig(t *testing.T, yaml string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "outbox-cdc.yaml")
	if err := os.WriteFile(p, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
