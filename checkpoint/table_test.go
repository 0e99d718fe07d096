package checkpoint

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
	"github.com/outbox-cdc/outbox-cdc/test/testenv"
)

// Both databases: save, load, the foreign-kind and corruption refusals, and
// one row per connector.
func TestTableStore(t *testing.T) {
	for _, tc := range []struct {
		dialect, dsn, kind, pos string
		db                      func(t *testing.T) *sql.DB
	}{
		{"mysql", testenv.MySQLDSN(t), "mysql", "mysql:0-1-42", func(t *testing.T) *sql.DB { return testenv.MySQL(t) }},
		{"postgres", testenv.PostgresDSN(t), "postgres", "postgres:0/16B3748", func(t *testing.T) *sql.DB {
			db, err := sql.Open("pgx", testenv.PostgresDSN(t))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { db.Close() })
			return db
		}},
	} {
		t.Run(tc.dialect, func(t *testing.T) {
			ctx := context.Background()
			db := tc.db(t)
			table := "outbox_cdc_checkpoint_test"
			db.Exec("DROP TABLE IF EXISTS " + table)
			t.Cleanup(func() { db.Exec("DROP TABLE IF EXISTS " + table) })
			open := func(connector string) *Table {
				s, err := NewTable(tc.dialect, tc.dsn, TableConfig{Table: table}, connector, zerolog.Nop())
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { s.Close() })
				return s
			}
			s := open("a")
			cp := Expect(tc.kind, s)
			if pos, err := cp.Load(ctx); err != nil || !pos.IsZero() {
				t.Fatalf("empty Load = %q, %v", pos, err)
			}
			if err := cp.Save(ctx, outboxcdc.Position(tc.pos)); err != nil {
				t.Fatal(err)
			}
			if err := cp.Save(ctx, outboxcdc.Position(tc.pos+"9")); err != nil {
				t.Fatal(err)
			}
			if err := open("b").Save(ctx, outboxcdc.Position(tc.pos+"1")); err != nil {
				t.Fatal(err)
			}
			if pos, err := Expect(tc.kind, open("a")).Load(ctx); err != nil || string(pos) != tc.pos+"9" {
				t.Fatalf("Load = %q, %v", pos, err)
			}
			if err := cp.Save(ctx, "other:1"); !errors.Is(err, outboxcdc.ErrForeignPosition) {
				t.Fatalf("foreign Save = %v", err)
			}
			// A row written by another kind of source is refused.
			if err := open("c").Save(ctx, "other:1"); err != nil {
				t.Fatal(err)
			}
			if _, err := Expect(tc.kind, open("c")).Load(ctx); !errors.Is(err, outboxcdc.ErrForeignPosition) {
				t.Fatalf("foreign Load = %v", err)
			}
			// A hand-edited row is refused.
			q := "UPDATE " + table + " SET position = 'mysql:0-1-1' WHERE connector = 'a'"
			if _, err := db.Exec(q); err != nil {
				t.Fatal(err)
			}
			_, err := open("a").Load(ctx)
			if !errors.Is(err, ErrUntrusted) || !strings.Contains(err.Error(), "checksum") {
				t.Fatalf("tampered Load = %v", err)
			}
		})
	}
}

func TestTableConfig(t *testing.T) {
	for _, bad := range []string{"", "a b", "x;drop", "a.b.c", "1abc"} {
		if err := (TableConfig{Table: bad}).Validate(); err == nil {
			t.Errorf("table %q accepted", bad)
		}
	}
	if err := DefaultTableConfig().Validate(); err != nil {
		t.Fatal(err)
	}
	if _, err := NewTable("sqlite", "x", DefaultTableConfig(), "n", zerolog.Nop()); err == nil {
		t.Fatal("sqlite accepted")
	}
}

// TestTablePeek: the position commands read the row without creating the
// table; a missing table or row is "no checkpoint", a row with a saved time.
func TestTablePeek(t *testing.T) {
	for _, tc := range []struct {
		dialect, dsn, pos string
		db                func(t *testing.T) *sql.DB
	}{
		{"mysql", testenv.MySQLDSN(t), "mysql:0-1-42", func(t *testing.T) *sql.DB { return testenv.MySQL(t) }},
		{"postgres", testenv.PostgresDSN(t), "postgres:0/16B3748", func(t *testing.T) *sql.DB {
			db, err := sql.Open("pgx", testenv.PostgresDSN(t))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { db.Close() })
			return db
		}},
	} {
		t.Run(tc.dialect, func(t *testing.T) {
			ctx := context.Background()
			db := tc.db(t)
			table := fmt.Sprintf("outbox_cdc_checkpoint_peek_%d", time.Now().UnixNano()%1e9)
			db.Exec("DROP TABLE IF EXISTS " + table)
			t.Cleanup(func() { db.Exec("DROP TABLE IF EXISTS " + table) })
			s, err := NewTable(tc.dialect, tc.dsn, TableConfig{Table: table}, "a", zerolog.Nop())
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if _, _, found, err := s.Peek(ctx); err != nil || found {
				t.Fatalf("Peek without a table = found %v, %v", found, err)
			}
			var n int
			q := "SELECT COUNT(*) FROM information_schema.tables WHERE table_name = '" + table + "'"
			if err := db.QueryRow(q).Scan(&n); err != nil || n != 0 {
				t.Fatalf("Peek created the table (%d, %v)", n, err)
			}
			if err := s.Save(ctx, outboxcdc.Position(tc.pos)); err != nil {
				t.Fatal(err)
			}
			pos, at, found, err := s.Peek(ctx)
			if err != nil || !found || pos != outboxcdc.Position(tc.pos) || at.IsZero() {
				t.Fatalf("Peek = %q %v %v %v", pos, at, found, err)
			}
		})
	}
}
