package binlog

import (
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"

	mysqldriver "github.com/go-sql-driver/mysql"
	outboxcdc "github.com/outbox-cdc/outbox-cdc"
	"github.com/outbox-cdc/outbox-cdc/test/testenv"
)

func TestGlobMatch(t *testing.T) {
	for _, tc := range []struct {
		pat, name  string
		fold, want bool
	}{
		{"tenant_%", "tenant_1", false, true},
		{"tenant_%", "tenant_", false, true},
		{"tenant_%", "tenantx1", false, false}, // _ is not a wildcard
		{"*", "anything", false, true},
		{"*_outbox", "a_b_outbox", false, true},
		{"*_outbox", "a_b_outbox2", false, false},
		{"t%x%z", "tAxBxCz", false, true},
		{"T%", "tenant", false, false},
		{"T%", "tenant", true, true},
		{"%", "", false, true},
		{"a%", "", false, false},
	} {
		if got := outboxcdc.GlobMatch(tc.pat, []byte(tc.name), tc.fold); got != tc.want {
			t.Errorf("globMatch(%q, %q, fold=%v) = %v, want %v", tc.pat, tc.name, tc.fold, got, tc.want)
		}
	}
}

func TestPatternDDL(t *testing.T) {
	pats, err := parseTables([]string{"tenant_%.outbox", "shop.out*"}, "shop")
	if err != nil {
		t.Fatal(err)
	}
	m := &tableMatcher{pats: pats}
	for _, tc := range []struct {
		db, stmt string
		want     bool
	}{
		{"", "CREATE TABLE tenant_9.outbox (id INT)", true},
		{"tenant_9", "ALTER TABLE outbox ADD COLUMN x INT", true},
		{"tenant_9", "ALTER TABLE other ADD COLUMN x INT", false},
		{"other", "ALTER TABLE outbox ADD COLUMN x INT", false},
		{"", "DROP TABLE `shop`.`outbox_2`", true},
		{"", "DROP DATABASE tenant_3", true},
		{"", "DROP DATABASE billing", false},
		{"", "RENAME TABLE shop.x TO shop.outbox_old", true},
	} {
		if got := m.isTableDDL(tc.db, tc.stmt); got != tc.want {
			t.Errorf("isTableDDL(%q, %q) = %v, want %v", tc.db, tc.stmt, got, tc.want)
		}
	}
	if _, err := parseTables([]string{"a.b.c"}, "x"); err == nil {
		t.Error("a.b.c accepted")
	}
	if _, err := parseTables([]string{"outbox"}, ""); err == nil {
		t.Error("an unqualified table without a database in the DSN accepted")
	}
}

// tenants is a server with several outbox databases and a user of their
// own, so the binlog dumps counted are the connector's alone.
type tenants struct {
	*fixture
	prefix string
	user   string
	dsn    string // as the user, database <prefix>_t1
}

func newTenants(t *testing.T, serverDSN string, n int) *tenants {
	f := newFixtureOn(t, serverDSN)
	p := strings.ReplaceAll(uniqueName("mt"), "-", "")
	tn := &tenants{fixture: f, prefix: p, user: p + "_u"}
	for i := 1; i <= n; i++ {
		tn.addTenant(i)
	}
	f.exec("CREATE USER '" + tn.user + "'@'%' IDENTIFIED BY 'pw'")
	t.Cleanup(func() { f.db.Exec("DROP USER IF EXISTS '" + tn.user + "'@'%'") })
	f.exec("GRANT SELECT, PROCESS, REPLICATION SLAVE, BINLOG MONITOR ON *.* TO '" + tn.user + "'@'%'")
	dc, err := mysqldriver.ParseDSN(serverDSN)
	if err != nil {
		t.Fatal(err)
	}
	dc.User, dc.Passwd, dc.DBName = tn.user, "pw", tn.db(1)
	tn.dsn = dc.FormatDSN()
	return tn
}

func (tn *tenants) db(i int) string { return fmt.Sprintf("%s_t%d", tn.prefix, i) }

func (tn *tenants) addTenant(i int) {
	db := tn.db(i)
	tn.exec("CREATE DATABASE " + db)
	tn.t.Cleanup(func() { tn.fixture.db.Exec("DROP DATABASE IF EXISTS " + db) })
	tn.exec(testenv.SeedTableMySQL(db + ".outbox"))
}

func (tn *tenants) insert(tx *sql.Tx, table, id string) {
	tn.t.Helper()
	if _, err := tx.Exec("INSERT INTO "+table+" (message_id, aggregate_type, aggregate_id, event_type, payload) VALUES (?, 'ORDER', ?, 'ORDER_CREATED', ?)",
		id, "agg-"+id, `{"id": "`+id+`"}`); err != nil {
		tn.t.Fatal(err)
	}
}

// write commits one transaction inserting rows: each "table=id".
func (tn *tenants) write(rows ...string) {
	tn.t.Helper()
	tx, err := tn.fixture.db.Begin()
	if err != nil {
		tn.t.Fatal(err)
	}
	for _, r := range rows {
		table, id, _ := strings.Cut(r, "=")
		tn.insert(tx, table, id)
	}
	if err := tx.Commit(); err != nil {
		tn.t.Fatal(err)
	}
}

// dumps counts the binlog dump threads of the tenants' user.
func (tn *tenants) dumps() int {
	tn.t.Helper()
	var n int
	if err := tn.fixture.db.QueryRow("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE USER = ? AND COMMAND LIKE 'Binlog Dump%'", tn.user).Scan(&n); err != nil {
		tn.t.Fatal(err)
	}
	return n
}

// expect checks a transaction's rows: each "db.table=id", in order.
func expectRows(t *testing.T, tx outboxcdc.Tx, want ...string) {
	t.Helper()
	var got []string
	for _, e := range tx.Events {
		got = append(got, e.Schema+"."+e.Table+"="+e.MessageID)
		if e.AggregateID != "agg-"+e.MessageID || string(e.Payload) != `{"id": "`+e.MessageID+`"}` {
			t.Errorf("row %s delivered as aggregate_id=%q payload=%q", e.MessageID, e.AggregateID, e.Payload)
		}
	}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("transaction rows [%s], want [%s]", strings.Join(got, " "), strings.Join(want, " "))
	}
}

// TestTablesOneStreamManyTenants: one source over the pattern
// <prefix>_t%.outbox reads 4 tenant databases and a fifth created while it
// runs, over one binlog dump: every row arrives once, in commit order
// within and across transactions, carrying its database and table; a
// table the pattern does not match is not read; one tenant laid out
// differently is read with its own columns (route.tables); a dropped
// tenant table leaves the others running. Without column names in the
// binlog (MINIMAL), every table's column list is read and proven on its
// own, and an ALTER of one tenant's table reads that table's list again
// and no other.
func TestTablesOneStreamManyTenants(t *testing.T) {
	for _, md := range []string{"FULL", "MINIMAL"} {
		t.Run(md, func(t *testing.T) {
			t.Parallel()
			tn := newTenants(t, testenv.PrivateMariaDB(t, testenv.MariaDBOptions{RowMetadata: md}), 4)
			// Tenant 4 has another layout, configured for it alone.
			t4 := tn.db(4) + ".outbox"
			tn.exec("ALTER TABLE " + t4 + " CHANGE COLUMN message_id msg_id VARCHAR(64) NOT NULL, CHANGE COLUMN payload body JSON NOT NULL FIRST")
			cols := seedColumns
			other := seedColumns
			other.MessageID, other.Payload = "msg_id", "body"
			cols.Tables = map[string]outboxcdc.Columns{t4: other}
			tn.exec(testenv.SeedTableMySQL(tn.db(1) + ".not_outbox"))

			cfg := tn.config(func(c *Config) {
				c.DSN = tn.dsn
				c.Table = ""
				c.Tables = []string{tn.prefix + "_t%.outbox"}
			})
			r := tn.start(cfg, cols, "")
			r.waitReady()
			if n := tn.dumps(); n != 1 {
				t.Fatalf("%d binlog dumps for the connector's user, want 1", n)
			}
			t1, t2, t3 := tn.db(1)+".outbox", tn.db(2)+".outbox", tn.db(3)+".outbox"
			insert4 := func(tx *sql.Tx, id string) {
				if _, err := tx.Exec("INSERT INTO "+t4+" (msg_id, aggregate_type, aggregate_id, event_type, body) VALUES (?, 'ORDER', ?, 'ORDER_CREATED', ?)",
					id, "agg-"+id, `{"id": "`+id+`"}`); err != nil {
					t.Fatal(err)
				}
			}

			// One transaction across the tenants, interleaved.
			tx, err := tn.fixture.db.Begin()
			if err != nil {
				t.Fatal(err)
			}
			tn.insert(tx, t2, "a1")
			tn.insert(tx, t1, "a2")
			insert4(tx, "a3")
			tn.insert(tx, tn.db(1)+".not_outbox", "x1")
			tn.insert(tx, t3, "a4")
			tn.insert(tx, t2, "a5")
			if err := tx.Commit(); err != nil {
				t.Fatal(err)
			}
			expectRows(t, r.next(), t2+"=a1", t1+"=a2", t4+"=a3", t3+"=a4", t2+"=a5")
			for i, table := range []string{t1, t2, t3} {
				id := fmt.Sprint("b", i)
				tn.write(table + "=" + id)
				expectRows(t, r.next(), table+"="+id)
			}
			tn.write(tn.db(1) + ".not_outbox=x2")
			tn.write(t1 + "=c1")
			expectRows(t, r.next(), t1+"=c1")
			loads := r.src.schemaLoads.Load()
			if md == "MINIMAL" && loads != 4 {
				t.Errorf("%d column lists read, want 4 (one per table)", loads)
			}

			// A tenant created while the source runs.
			tn.addTenant(5)
			t5 := tn.db(5) + ".outbox"
			tn.write(t5+"=d1", t1+"=d2")
			expectRows(t, r.next(), t5+"=d1", t1+"=d2")

			// An ALTER of one tenant's table: its rows follow it, and only its
			// column list is read again.
			tn.exec("ALTER TABLE " + t2 + " MODIFY aggregate_id VARCHAR(64) NOT NULL AFTER message_id")
			tn.write(t2+"=e1", t3+"=e2", t5+"=e3")
			expectRows(t, r.next(), t2+"=e1", t3+"=e2", t5+"=e3")
			if md == "MINIMAL" {
				if n := r.src.schemaLoads.Load(); n != loads+2 {
					t.Errorf("%d column lists read after tenant 5 and the ALTER of tenant 2, want %d (+1 for each)", n, loads+2)
				}
			}

			// A dropped tenant table: the others keep streaming.
			tn.exec("DROP TABLE " + t3)
			tn.write(t1+"=f1", t5+"=f2")
			expectRows(t, r.next(), t1+"=f1", t5+"=f2")

			if n := tn.dumps(); n != 1 {
				t.Fatalf("%d binlog dumps for the connector's user at the end, want 1", n)
			}
		})
	}
}

// TestTablesNewTableIncompatibleLayout: a table created while the source
// runs that matches the pattern but lacks the route's columns, with no
// route.tables entry for it, stops the source with ErrTable naming the
// table and the missing column at its first row; nothing of its
// transaction is delivered under wrong roles, and what came before was.
func TestTablesNewTableIncompatibleLayout(t *testing.T) {
	for _, md := range []string{"FULL", "MINIMAL"} {
		t.Run(md, func(t *testing.T) {
			t.Parallel()
			tn := newTenants(t, testenv.PrivateMariaDB(t, testenv.MariaDBOptions{RowMetadata: md}), 1)
			cfg := tn.config(func(c *Config) {
				c.DSN = tn.dsn
				c.Table = ""
				c.Tables = []string{tn.prefix + "_%.outbox"}
			})
			r := tn.start(cfg, seedColumns, "")
			r.waitReady()
			t1 := tn.db(1) + ".outbox"
			tn.write(t1 + "=a1")
			expectRows(t, r.next(), t1+"=a1")

			bad := tn.db(2)
			tn.exec("CREATE DATABASE " + bad)
			t.Cleanup(func() { tn.fixture.db.Exec("DROP DATABASE IF EXISTS " + bad) })
			tn.exec("CREATE TABLE " + bad + ".outbox (id VARCHAR(64) PRIMARY KEY, kind VARCHAR(64), aggregate_id VARCHAR(64), event_type VARCHAR(64), payload JSON)")
			tn.exec("INSERT INTO " + bad + ".outbox VALUES ('z1', 'ORDER', 'agg', 'E', '{}')")
			select {
			case <-r.done:
			case tx := <-r.out:
				if len(tx.Events) > 0 {
					t.Fatalf("delivered %+v from a table without the route's columns", tx.Events)
				}
				<-r.done
			}
			if !errors.Is(r.err, ErrTable) || !strings.Contains(r.err.Error(), bad+".outbox") || !strings.Contains(r.err.Error(), "message_id") {
				t.Fatalf("source stopped with %v, want ErrTable naming %s.outbox and message_id", r.err, bad)
			}
		})
	}
}
