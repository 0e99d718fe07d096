package binlog

// Transactions the binlog describes in other ways than BEGIN ... COMMIT
// (issue 11 §3): savepoints taken back in a transaction that also wrote a
// non-transactional table, outbox INSERTs logged as statements, and XA.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
)

// session is one connection of the test, for statements that must run on
// the same session (BEGIN ... COMMIT, XA, SET SESSION).
type session struct {
	t    testing.TB
	conn *sql.Conn
}

func (f *fixture) session() *session {
	f.t.Helper()
	c, err := f.db.Conn(context.Background())
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { c.Close() })
	return &session{t: f.t, conn: c}
}

func (s *session) run(qs ...string) {
	s.t.Helper()
	for _, q := range qs {
		if _, err := s.conn.ExecContext(context.Background(), q); err != nil {
			s.t.Fatalf("%s: %v", q, err)
		}
	}
}

func (f *fixture) ins(ids ...string) string {
	var b strings.Builder
	b.WriteString("INSERT INTO " + f.table + " (message_id, aggregate_type, aggregate_id, event_type, payload) VALUES ")
	for i, id := range ids {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "('%s', 'X', 'agg-%s', 'E', '{}')", id, id)
	}
	return b.String()
}

func (f *fixture) myisam() string {
	f.t.Helper()
	name := uniqueName("myisam")
	f.exec("CREATE TABLE " + name + " (id INT AUTO_INCREMENT PRIMARY KEY, v INT) ENGINE=MyISAM")
	f.t.Cleanup(func() { f.db.Exec("DROP TABLE IF EXISTS " + name) })
	return name
}

// TestSavepointRollbackWithNonTransactionalTable: a transaction that also
// writes a MyISAM table keeps the rows a ROLLBACK TO SAVEPOINT takes back
// in the binlog and logs the ROLLBACK TO after them; those outbox rows
// must not be sent. Nested savepoints, a reused name, and a savepoint set
// before any change (MariaDB then logs the rows and a ROLLBACK, a whole
// group rolled back) are covered too.
func TestSavepointRollbackWithNonTransactionalTable(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	my := f.myisam()
	r := f.start(f.config(), seedColumns, "")
	r.waitReady()
	s := f.session()

	s.run("BEGIN", f.ins("k1"), "SAVEPOINT `sp 1`", f.ins("gone1", "gone2"), "INSERT INTO "+my+" (v) VALUES (1)",
		"ROLLBACK TO SAVEPOINT `sp 1`", f.ins("k2"), "COMMIT")
	expectIDs(t, r.next(), "k1", "k2")

	s.run("BEGIN", "INSERT INTO "+my+" (v) VALUES (2)", "SAVEPOINT a", f.ins("gone3"), "SAVEPOINT b", f.ins("gone4"),
		"ROLLBACK TO a", f.ins("k3"), "SAVEPOINT a", f.ins("k4"), "SAVEPOINT c", f.ins("gone5"), "ROLLBACK TO SAVEPOINT c",
		"RELEASE SAVEPOINT a", f.ins("k5"), "COMMIT")
	expectIDs(t, r.next(), "k3", "k4", "k5")

	s.run("BEGIN", "SAVEPOINT s0", "INSERT INTO "+my+" (v) VALUES (3)", f.ins("gone6"), "ROLLBACK TO s0", f.ins("k6"), "COMMIT")
	expectIDs(t, r.next(), "k6")

	// Transactional tables only: the server truncates its cache; still right.
	s.run("BEGIN", f.ins("k7"), "SAVEPOINT x", f.ins("gone7"), "ROLLBACK TO x", "COMMIT")
	expectIDs(t, r.next(), "k7")
	f.insertTx("last")
	expectIDs(t, r.next(), "last")
}

// TestStatementLoggedOutboxInsertRefused: an outbox INSERT logged as a
// statement (a session with binlog_format=STATEMENT or MIXED) carries no
// row values; the source stops with ErrServerSettings naming the position
// and the fix, after delivering every transaction before it. Statements on
// other tables, and an INSERT ... SELECT from the outbox into another
// table, do not stop it.
func TestStatementLoggedOutboxInsertRefused(t *testing.T) {
	t.Parallel()
	for _, format := range []string{"STATEMENT", "MIXED"} {
		t.Run(format, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			other := uniqueName("other")
			f.exec("CREATE TABLE " + other + " (id INT AUTO_INCREMENT PRIMARY KEY, m VARCHAR(64))")
			t.Cleanup(func() { f.db.Exec("DROP TABLE IF EXISTS " + other) })
			r := f.start(f.config(), seedColumns, "")
			r.waitReady()
			f.insertTx("row1")
			s := f.session()
			s.run("SET SESSION binlog_format = "+format,
				"INSERT INTO "+other+" (m) VALUES ('x')",
				"INSERT INTO "+other+" (m) SELECT message_id FROM "+f.table,
				"SET SESSION binlog_format = ROW")
			f.insertTx("row2")
			s.run("SET SESSION binlog_format = "+format,
				"INSERT /* c */ LOW_PRIORITY INTO `test`.`"+f.table+"` (message_id, aggregate_type, aggregate_id, event_type, payload) VALUES ('stmt', 'X', 'x', 'E', '{}')")
			expectIDs(t, r.next(), "row1")
			expectIDs(t, r.next(), "row2")
			timeout := time.After(15 * time.Second)
		wait:
			for {
				select {
				case <-r.done:
					break wait
				case tx := <-r.out:
					if len(tx.Events) > 0 {
						t.Fatalf("delivered %v after the statement", ids(tx))
					}
				case <-timeout:
					t.Fatal("an outbox INSERT logged as a statement did not stop the source")
				}
			}
			if !errors.Is(r.err, ErrServerSettings) || !strings.Contains(r.err.Error(), "logged as a statement") ||
				!strings.Contains(r.err.Error(), "binlog_format=ROW") || !strings.Contains(r.err.Error(), "mariadb-bin.") {
				t.Fatalf("got %v, want ErrServerSettings naming the position and binlog_format=ROW", r.err)
			}
			if outboxcdc.IsTransient(r.err) {
				t.Fatal("classified transient")
			}
			t.Logf("error: %v", r.err)
		})
	}
}

func TestInsertTarget(t *testing.T) {
	for _, c := range []struct {
		q, db, table string
		ok           bool
	}{
		{"INSERT INTO outbox (a) VALUES (1)", "", "outbox", true},
		{"insert  into test.outbox values (1)", "test", "outbox", true},
		{"INSERT /* x */ LOW_PRIORITY IGNORE INTO `te``st`.`out box` (a) VALUES (1)", "te`st", "out box", true},
		{"INSERT outbox VALUES (1)", "", "outbox", true},
		{"REPLACE DELAYED INTO \"outbox\" VALUES (1)", "", "outbox", true},
		{"-- c\n# d\nINSERT INTO outbox SELECT * FROM x", "", "outbox", true},
		{"LOAD DATA LOCAL INFILE '/tmp/x' REPLACE INTO TABLE `outbox` FIELDS TERMINATED BY ','", "", "outbox", true},
		{"INSERT INTO archive SELECT * FROM outbox", "", "archive", true},
		{"UPDATE outbox SET status = 1", "", "", false},
		{"DELETE FROM outbox", "", "", false},
		{"CREATE TABLE outbox (a INT)", "", "", false},
	} {
		db, table, ok := insertTarget([]byte(c.q))
		if db != c.db || table != c.table || ok != c.ok {
			t.Errorf("insertTarget(%q) = %q, %q, %v; want %q, %q, %v", c.q, db, table, ok, c.db, c.table, c.ok)
		}
	}
}

func TestParseXID(t *testing.T) {
	a, err := parseXID([]byte(" X'786131',X'',1"))
	if err != nil {
		t.Fatal(err)
	}
	b, ok := eventXID(append([]byte{0, 1, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0}, "xa1"...))
	if !ok || a != b {
		t.Fatalf("query xid %q, event xid %q", a, b)
	}
	c, err := parseXID([]byte("X'786132',X'62',7"))
	if err != nil || c == a {
		t.Fatalf("%q %v", c, err)
	}
	for _, bad := range []string{"'xa1'", "X'786131'", "X'zz',X'',1", "X'78',X'',"} {
		if _, err := parseXID([]byte(bad)); err == nil {
			t.Errorf("parseXID(%q) accepted", bad)
		}
	}
}

func TestPositionRestartPoint(t *testing.T) {
	for _, s := range []string{
		"mysql:mariadb-gtid:0-1-57,1-2-3;restart=mariadb-gtid:0-1-42,1-2-3",
		"mysql:file:mariadb-bin.000003:1234;restart=file:mariadb-bin.000002:99",
		"mysql:gtid:3e11fa47-71ca-11e1-9e33-c80aa9429562:1-57;restart=gtid:3e11fa47-71ca-11e1-9e33-c80aa9429562:1-42",
	} {
		p, err := ParsePosition(outboxcdc.Position(s))
		if err != nil {
			t.Fatalf("%s: %v", s, err)
		}
		if p.Restart == nil || p.Encode() != outboxcdc.Position(s) {
			t.Fatalf("%s: round trip %s", s, p.Encode())
		}
		from := p.ReadFrom()
		if from.Restart != nil || from.Encode() == p.Encode() {
			t.Fatalf("%s: reads from %s", s, from.Encode())
		}
	}
	for _, bad := range []string{
		"mysql:mariadb-gtid:0-1-57;restart=file:x.000001:4",
		"mysql:file:x.000001:4;restart=file:x.000001:4;restart=file:x.000001:4",
		"mysql:file:x.000001:4;restart=",
	} {
		if _, err := ParsePosition(outboxcdc.Position(bad)); err == nil {
			t.Errorf("ParsePosition(%q) accepted", bad)
		}
	}
}

// TestXATwoPhase: the rows of an XA transaction are delivered once, at its
// XA COMMIT, after the transactions committed while it was prepared;
// nothing of an XA ROLLBACK; XA COMMIT ... ONE PHASE is an ordinary
// transaction. A restart between XA PREPARE and XA COMMIT, from a
// checkpoint written after later transactions, still delivers the XA rows
// once at the commit and nothing else again.
func TestXATwoPhase(t *testing.T) {
	t.Parallel()
	for _, gtid := range []string{GTIDAuto, GTIDOff} {
		t.Run("gtid="+gtid, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			cfg := f.config(func(c *Config) { c.GTID = gtid })
			r := f.start(cfg, seedColumns, "")
			r.waitReady()
			xid := uniqueName("xa")
			// A prepared XA transaction stays with its session: one each.
			s0, s1, s2, s3 := f.session(), f.session(), f.session(), f.session()
			t.Cleanup(func() {
				for i, s := range []*session{s1, s2, s3} {
					s.conn.ExecContext(context.Background(), fmt.Sprintf("XA ROLLBACK '%s%d'", xid, i+1))
				}
			})
			s0.run("XA START '"+xid+"0'", f.ins("one"), "XA END '"+xid+"0'", "XA COMMIT '"+xid+"0' ONE PHASE")
			expectIDs(t, r.next(), "one")

			s1.run("XA START '"+xid+"1'", f.ins("xa1a", "xa1b"), "XA END '"+xid+"1'", "XA PREPARE '"+xid+"1'")
			s2.run("XA START '"+xid+"2','q',3", f.ins("xa2"), "XA END '"+xid+"2','q',3", "XA PREPARE '"+xid+"2','q',3")
			f.insertTx("mid")
			mid := r.next()
			expectIDs(t, mid, "mid")
			if p, _ := ParsePosition(mid.End); p.Restart == nil {
				t.Fatalf("End %s while XA transactions are prepared has no restart point", mid.End)
			}
			s2.run("XA ROLLBACK '" + xid + "2','q',3")
			s1.run("XA COMMIT '" + xid + "1'")
			commit := r.next()
			expectIDs(t, commit, "xa1a", "xa1b")
			if p, _ := ParsePosition(commit.End); p.Restart != nil {
				t.Fatalf("End %s after every XA transaction was decided still has a restart point", commit.End)
			}
			f.insertTx("after")
			expectIDs(t, r.next(), "after")
			r.stop()
			<-r.done

			// Restart while one is prepared, from a checkpoint past later
			// transactions.
			r2 := f.start(cfg, seedColumns, commit.End)
			s3.run("XA START '"+xid+"3'", f.ins("xa3"), "XA END '"+xid+"3'", "XA PREPARE '"+xid+"3'")
			f.insertTx("later1")
			expectIDs(t, r2.next(), "after")
			later := r2.next()
			expectIDs(t, later, "later1")
			r2.stop()
			<-r2.done
			r3 := f.start(cfg, seedColumns, later.End)
			r3.waitReady()
			f.insertTx("later2")
			expectIDs(t, r3.next(), "later2")
			s3.run("XA COMMIT '" + xid + "3'")
			expectIDs(t, r3.next(), "xa3")
			f.insertTx("end")
			expectIDs(t, r3.next(), "end")
			r3.stop()
			<-r3.done

			// From the checkpoint before the XA COMMIT: the XA rows once more
			// (the commit was not checkpointed), nothing before it.
			r4 := f.start(cfg, seedColumns, later.End)
			expectIDs(t, r4.next(), "later2")
			expectIDs(t, r4.next(), "xa3")
			expectIDs(t, r4.next(), "end")
		})
	}
}
