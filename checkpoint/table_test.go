package checkpoint

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
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
			table := uniqueTable("outbox_cdc_checkpoint_test")
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

// uniqueTable suffixes base so that concurrent test runs on the shared
// servers do not meet.
func uniqueTable(base string) string {
	return fmt.Sprintf("%s_%08x", base, rand.Uint32())
}

type tableBackend struct {
	dialect, dsn, pos string
	db                *sql.DB
	// proxied is dsn through a proxy the test controls.
	proxied func(t *testing.T) (string, *testenv.Proxy)
}

func tableBackends(t *testing.T) []tableBackend {
	my, pg := testenv.MySQLDSN(t), testenv.PostgresDSN(t)
	pgdb, err := sql.Open("pgx", pg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pgdb.Close() })
	return []tableBackend{
		{"mysql", my, "mysql:0-1-", testenv.MySQL(t), func(t *testing.T) (string, *testenv.Proxy) {
			cfg, err := mysql.ParseDSN(my)
			if err != nil {
				t.Fatal(err)
			}
			p := testenv.NewProxy(t, cfg.Addr)
			cfg.Addr = p.Addr()
			return cfg.FormatDSN(), p
		}},
		{"postgres", pg, "postgres:0/16B37", pgdb, func(t *testing.T) (string, *testenv.Proxy) {
			cfg, err := pgx.ParseConfig(pg)
			if err != nil {
				t.Fatal(err)
			}
			p := testenv.NewProxy(t, net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port))))
			return "postgres://" + cfg.User + "@" + p.Addr() + "/" + cfg.Database + "?sslmode=disable", p
		}},
	}
}

// An instance that claimed the row earlier cannot save once another one
// claimed it: a zombie that wakes up after a takeover writes nothing.
// A table created before fencing gets its epoch column on the first claim.
func TestTableClaimFencesEarlierOwner(t *testing.T) {
	for _, b := range tableBackends(t) {
		t.Run(b.dialect, func(t *testing.T) {
			ctx := context.Background()
			table := uniqueTable("outbox_cdc_checkpoint_fence")
			b.db.Exec("DROP TABLE IF EXISTS " + table)
			t.Cleanup(func() { b.db.Exec("DROP TABLE IF EXISTS " + table) })
			// The table as earlier versions created it, without epoch.
			old := "CREATE TABLE " + table + " (connector VARCHAR(191) NOT NULL PRIMARY KEY, position TEXT NOT NULL, checksum CHAR(8) NOT NULL, saved_at DATETIME(6) NOT NULL)"
			if b.dialect == "postgres" {
				old = "CREATE TABLE " + table + " (connector TEXT NOT NULL PRIMARY KEY, position TEXT NOT NULL, checksum CHAR(8) NOT NULL, saved_at TIMESTAMPTZ NOT NULL)"
			}
			if _, err := b.db.Exec(old); err != nil {
				t.Fatal(err)
			}
			open := func() *Table {
				s, err := NewTable(b.dialect, b.dsn, TableConfig{Table: table}, "fence", zerolog.New(zerolog.NewTestWriter(t)))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { s.Close() })
				return s
			}
			a, c := open(), open()
			if err := a.Save(ctx, outboxcdc.Position(b.pos+"1")); err != nil { // unclaimed: a plain upsert
				t.Fatal(err)
			}
			ea, err := a.Claim(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if pos, err := a.Load(ctx); err != nil || string(pos) != b.pos+"1" {
				t.Fatalf("Load after claim = %q, %v", pos, err)
			}
			if err := a.Save(ctx, outboxcdc.Position(b.pos+"2")); err != nil {
				t.Fatal(err)
			}
			if err := a.Save(ctx, outboxcdc.Position(b.pos+"2")); err != nil { // the same position again still matches
				t.Fatal(err)
			}
			ec, err := c.Claim(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if ec <= ea {
				t.Fatalf("second claim epoch %d, first %d", ec, ea)
			}
			err = a.Save(ctx, outboxcdc.Position(b.pos+"3"))
			if !errors.Is(err, ErrFenced) {
				t.Fatalf("the earlier owner's Save = %v, want ErrFenced", err)
			}
			t.Logf("fenced: %v", err)
			if err := c.Save(ctx, outboxcdc.Position(b.pos+"4")); err != nil {
				t.Fatal(err)
			}
			if pos, err := open().Load(ctx); err != nil || string(pos) != b.pos+"4" {
				t.Fatalf("Load = %q, %v", pos, err)
			}

			// A claim without any row yet: no checkpoint, and the first
			// save creates the position.
			fresh, err := NewTable(b.dialect, b.dsn, TableConfig{Table: table}, "fresh", zerolog.Nop())
			if err != nil {
				t.Fatal(err)
			}
			defer fresh.Close()
			if _, err := fresh.Claim(ctx); err != nil {
				t.Fatal(err)
			}
			if pos, err := fresh.Load(ctx); err != nil || !pos.IsZero() {
				t.Fatalf("Load of a claimed, never saved row = %q, %v", pos, err)
			}
			if err := fresh.Save(ctx, outboxcdc.Position(b.pos+"5")); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// A save over a silent network path fails within the statement deadline
// instead of hanging until the kernel gives up (about 15 minutes).
func TestTableSaveBoundedOnSilentPath(t *testing.T) {
	defer func(d time.Duration) { tableTimeout = d }(tableTimeout)
	tableTimeout = 2 * time.Second
	for _, b := range tableBackends(t) {
		t.Run(b.dialect, func(t *testing.T) {
			ctx := context.Background()
			table := uniqueTable("outbox_cdc_checkpoint_silent")
			b.db.Exec("DROP TABLE IF EXISTS " + table)
			t.Cleanup(func() { b.db.Exec("DROP TABLE IF EXISTS " + table) })
			dsn, proxy := b.proxied(t)
			s, err := NewTable(b.dialect, dsn, TableConfig{Table: table}, "silent", zerolog.Nop())
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if err := s.Save(ctx, outboxcdc.Position(b.pos+"1")); err != nil {
				t.Fatal(err)
			}
			proxy.Silence()
			began := time.Now()
			done := make(chan error, 1)
			go func() { done <- s.Save(ctx, outboxcdc.Position(b.pos+"2")) }()
			select {
			case err := <-done:
				if err == nil {
					t.Fatal("Save over a silent path succeeded")
				}
				t.Logf("Save failed after %s: %v", time.Since(began).Round(time.Millisecond), err)
			case <-time.After(tableTimeout + 10*time.Second):
				t.Fatalf("Save still blocked %s after the path went silent (deadline %s)", time.Since(began), tableTimeout)
			}
		})
	}
}

// TestTablePeek: the position commands read the row without creating the
// table; a missing table or row, or a row claimed (HA) and never saved, is
// "no checkpoint"; a saved row comes with its saved time.
func TestTablePeek(t *testing.T) {
	for _, b := range tableBackends(t) {
		t.Run(b.dialect, func(t *testing.T) {
			ctx := context.Background()
			table := uniqueTable("outbox_cdc_checkpoint_peek")
			b.db.Exec("DROP TABLE IF EXISTS " + table)
			t.Cleanup(func() { b.db.Exec("DROP TABLE IF EXISTS " + table) })
			s, err := NewTable(b.dialect, b.dsn, TableConfig{Table: table}, "a", zerolog.Nop())
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if _, _, found, err := s.Peek(ctx); err != nil || found {
				t.Fatalf("Peek without a table = found %v, %v", found, err)
			}
			var n int
			q := "SELECT COUNT(*) FROM information_schema.tables WHERE table_name = '" + table + "'"
			if err := b.db.QueryRow(q).Scan(&n); err != nil || n != 0 {
				t.Fatalf("Peek created the table (%d, %v)", n, err)
			}
			if _, err := s.Claim(ctx); err != nil {
				t.Fatal(err)
			}
			if _, _, found, err := s.Peek(ctx); err != nil || found {
				t.Fatalf("Peek of a claimed, never saved row = found %v, %v", found, err)
			}
			pos := outboxcdc.Position(b.pos + "42")
			if err := s.Save(ctx, pos); err != nil {
				t.Fatal(err)
			}
			got, at, found, err := s.Peek(ctx)
			if err != nil || !found || got != pos || at.IsZero() {
				t.Fatalf("Peek = %q %v %v %v", got, at, found, err)
			}
		})
	}
}
