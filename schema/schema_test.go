package schema_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-cdc/outbox-cdc/schema"
	"github.com/outbox-cdc/outbox-cdc/test/testenv"
)

// columns is the outbox table every source, the router's presets and the
// lifecycle's UPDATEs rely on.
var columns = []string{"id", "message_id", "aggregate_type", "aggregate_id", "event_type", "payload",
	"status", "retry_count", "next_retry_at", "created_at", "updated_at"}

func suffix(t *testing.T) string {
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// TestMySQLCreatesOutboxTable runs the embedded MySQL DDL, renamed into a
// private database, and reads the table's columns and indexes back.
func TestMySQLCreatesOutboxTable(t *testing.T) {
	db := testenv.MySQL(t)
	name := "schema_" + suffix(t)
	if _, err := db.Exec("CREATE DATABASE " + name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Exec("DROP DATABASE " + name) })
	ddl := schema.MySQL(name + ".events")
	if strings.Contains(ddl, schema.Table) {
		t.Fatalf("table name not replaced:\n%s", ddl)
	}
	if _, err := db.Exec(ddl); err != nil {
		t.Fatalf("%v\n%s", err, ddl)
	}
	rows, err := db.Query(`SELECT column_name FROM information_schema.columns
		WHERE table_schema = ? AND table_name = 'events' ORDER BY ordinal_position`, name)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var got []string
	for rows.Next() {
		var c string
		if err := rows.Scan(&c); err != nil {
			t.Fatal(err)
		}
		got = append(got, c)
	}
	if !slices.Equal(got, columns) {
		t.Fatalf("columns %v, want %v", got, columns)
	}
	var indexes int
	if err := db.QueryRow(`SELECT COUNT(DISTINCT index_name) FROM information_schema.statistics
		WHERE table_schema = ? AND table_name = 'events'`, name).Scan(&indexes); err != nil {
		t.Fatal(err)
	}
	if indexes != 4 { // primary, message_id, status/next_retry_at, aggregate
		t.Fatalf("%d indexes, want 4", indexes)
	}
}

// TestPostgresCreatesOutboxTable runs the embedded Postgres statements in a
// private schema.
func TestPostgresCreatesOutboxTable(t *testing.T) {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, testenv.PostgresDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	name := "schema_" + suffix(t)
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Exec(context.Background(), "DROP SCHEMA "+name+" CASCADE") })
	stmts := schema.Postgres(name + ".events")
	if len(stmts) != 3 {
		t.Fatalf("%d statements, want CREATE TABLE and two CREATE INDEX: %q", len(stmts), stmts)
	}
	for _, s := range stmts {
		if _, err := conn.Exec(ctx, s); err != nil {
			t.Fatalf("%v\n%s", err, s)
		}
	}
	rows, err := conn.Query(ctx, `SELECT column_name FROM information_schema.columns
		WHERE table_schema = $1 AND table_name = 'events' ORDER BY ordinal_position`, name)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, columns) {
		t.Fatalf("columns %v, want %v", got, columns)
	}
	var indexes int
	if err := conn.QueryRow(ctx, `SELECT COUNT(*) FROM pg_indexes WHERE schemaname = $1 AND tablename = 'events'`, name).Scan(&indexes); err != nil {
		t.Fatal(err)
	}
	if indexes != 4 { // primary, message_id, status/next_retry_at, aggregate
		t.Fatalf("%d indexes, want 4", indexes)
	}
}

// TestNoOtherCopyOfTheDDL: the demo, the compose files, the manifests and
// the docs create the outbox table from these files, never from a copy of
// their text that can drift.
func TestNoOtherCopyOfTheDDL(t *testing.T) {
	create := regexp.MustCompile(`(?i)CREATE TABLE\s+(IF NOT EXISTS\s+)?("?\w+"?\.)?"?` + schema.Table + `"?\s*\(`)
	root := ".."
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if d.Name() == ".git" || d.Name() == "bin" || path == filepath.Join(root, "schema") {
				return filepath.SkipDir
			}
			return nil
		}
		switch filepath.Ext(path) {
		case ".sql", ".sh", ".yaml", ".yml", ".md", ".json":
		default:
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if loc := create.FindIndex(b); loc != nil {
			line := 1 + bytes.Count(b[:loc[0]], []byte("\n"))
			t.Errorf("%s:%d creates the outbox table itself; use schema/mysql.sql or schema/postgres.sql instead", path, line)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
