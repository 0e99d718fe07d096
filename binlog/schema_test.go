package binlog

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
	"github.com/outbox-cdc/outbox-cdc/test/testenv"
	"github.com/rs/zerolog"
)

// A row of the ALTER matrix, by role.
type roleRow struct{ id, typ, agg, evt, payload string }

func (r roleRow) insert(table string) string {
	return fmt.Sprintf("INSERT INTO %s (message_id, aggregate_type, aggregate_id, event_type, payload) VALUES ('%s', '%s', '%s', '%s', '%s')",
		table, r.id, r.typ, r.agg, r.evt, r.payload)
}

func (r roleRow) check(t *testing.T, e outboxcdc.Event) {
	t.Helper()
	if e.MessageID != r.id || e.AggregateType != r.typ || e.AggregateID != r.agg || e.EventType != r.evt || string(e.Payload) != r.payload {
		t.Fatalf("row %s delivered as message_id=%q aggregate_type=%q aggregate_id=%q event_type=%q payload=%q, want %+v",
			r.id, e.MessageID, e.AggregateType, e.AggregateID, e.EventType, e.Payload, r)
	}
}

func rowNamed(id string) roleRow {
	return roleRow{id, "TYPE-" + id, fmt.Sprint(1000 + len(id)*7 + int(id[0])), "EVT-" + id, `{"row": "` + id + `"}`}
}

// alterShapes are the ALTER TABLE shapes of issue 11: each changes which
// binlog position holds which role, or a column's type, or recreates the
// table. %[1]s is the table.
var alterShapes = []struct {
	name  string
	stmts []string
}{
	{"add column first", []string{"ALTER TABLE %[1]s ADD COLUMN tenant VARCHAR(64) NULL FIRST"}},
	{"drop and add, same count", []string{"ALTER TABLE %[1]s DROP COLUMN retry_count, ADD COLUMN tenant VARCHAR(64) NULL AFTER message_id"}},
	{"drop column", []string{"ALTER TABLE %[1]s DROP COLUMN status"}},
	{"reorder after", []string{"ALTER TABLE %[1]s MODIFY aggregate_id VARCHAR(64) NOT NULL AFTER message_id"}},
	{"reorder first", []string{"ALTER TABLE %[1]s MODIFY event_type VARCHAR(64) NOT NULL FIRST"}},
	{"rename role columns", []string{"ALTER TABLE %[1]s RENAME COLUMN aggregate_type TO aggregate_id, RENAME COLUMN aggregate_id TO aggregate_type"}},
	{"type change", []string{"ALTER TABLE %[1]s MODIFY aggregate_id BIGINT NOT NULL"}},
	{"drop and create", []string{"DROP TABLE %[1]s", "CREATE TABLE %[1]s (payload JSON NOT NULL, event_type VARCHAR(64) NOT NULL, " +
		"aggregate_id VARCHAR(64) NOT NULL, aggregate_type VARCHAR(64) NOT NULL, message_id VARCHAR(64) NOT NULL, " +
		"id BIGINT UNSIGNED AUTO_INCREMENT PRIMARY KEY, status TINYINT NOT NULL DEFAULT 0) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4"}},
}

// metadataServers are the binlog_row_metadata settings the matrix runs
// under: FULL on the shared server (its setting), MINIMAL and NO_LOG on
// private servers (the setting is GLOBAL-only).
func metadataServer(t *testing.T, md string) string {
	if md == "FULL" {
		return testenv.MySQLDSN(t)
	}
	return testenv.PrivateMariaDB(t, testenv.MariaDBOptions{RowMetadata: md})
}

// TestAlterTableMatrix: every ALTER shape, under FULL, MINIMAL and NO_LOG,
// while the source streams (caught up) and across a restart whose backlog
// holds rows written before the change. Rows are never delivered under the
// wrong roles: with column names in the binlog (FULL) every row arrives
// right; without them, a change met while caught up is followed, and a
// backlog with rows from before the change stops the source with ErrSchema
// naming the statement, its position and binlog_row_metadata=FULL.
func TestAlterTableMatrix(t *testing.T) {
	t.Parallel()
	for _, md := range []string{"FULL", "MINIMAL", "NO_LOG"} {
		t.Run(md, func(t *testing.T) {
			t.Parallel()
			dsn := metadataServer(t, md)
			for _, shape := range alterShapes {
				t.Run(shape.name, func(t *testing.T) {
					t.Parallel()
					t.Run("mid-stream", func(t *testing.T) { alterMidStream(t, dsn, shape.stmts) })
					t.Run("restart with backlog", func(t *testing.T) { alterAcrossRestart(t, dsn, shape.stmts, md == "FULL") })
				})
			}
		})
	}
}

func (f *fixture) alter(stmts []string) {
	f.t.Helper()
	for _, q := range stmts {
		f.exec(fmt.Sprintf(q, f.table))
	}
}

func alterMidStream(t *testing.T, dsn string, stmts []string) {
	f := newFixtureOn(t, dsn)
	r := f.start(f.config(), seedColumns, "")
	r.waitReady()
	a, b, c := rowNamed("A"), rowNamed("B"), rowNamed("C")
	f.exec(a.insert(f.table))
	tx := r.next()
	expectIDs(t, tx, "A")
	a.check(t, tx.Events[0])
	f.alter(stmts)
	f.exec(b.insert(f.table))
	tx = r.next()
	expectIDs(t, tx, "B")
	b.check(t, tx.Events[0])
	f.exec(c.insert(f.table))
	tx = r.next()
	expectIDs(t, tx, "C")
	c.check(t, tx.Events[0])
}

// markerEnd commits one row and returns the position after it, then
// stops the source: what a restarted connector resumes from.
func (f *fixture) markerEnd() outboxcdc.Position {
	f.t.Helper()
	r := f.start(f.config(), seedColumns, "")
	r.waitReady()
	f.exec(rowNamed("M").insert(f.table))
	end := r.next().End
	r.stop()
	<-r.done
	return end
}

func alterAcrossRestart(t *testing.T, dsn string, stmts []string, columnNames bool) {
	f := newFixtureOn(t, dsn)
	from := f.markerEnd()
	a, b := rowNamed("A"), rowNamed("B")
	f.exec(a.insert(f.table))
	f.alter(stmts)
	f.exec(b.insert(f.table))
	r := f.start(f.config(), seedColumns, from)
	if columnNames {
		tx := r.next()
		expectIDs(t, tx, "A")
		a.check(t, tx.Events[0])
		tx = r.next()
		expectIDs(t, tx, "B")
		b.check(t, tx.Events[0])
		return
	}
	err := r.stopped(t)
	first := strings.Fields(fmt.Sprintf(stmts[len(stmts)-1], f.table))[0] // ALTER or CREATE
	if len(stmts) > 1 {
		first = "DROP"
	}
	if !errors.Is(err, ErrSchema) || !strings.Contains(err.Error(), first+" TABLE ") || !strings.Contains(err.Error(), f.table) ||
		!strings.Contains(err.Error(), "binlog_row_metadata=FULL") || !strings.Contains(err.Error(), "binlog.") {
		t.Fatalf("got %v, want ErrSchema naming the %s statement, its position and binlog_row_metadata=FULL", err, first)
	}
	t.Logf("error: %v", err)
}

// stopped waits for the source to stop and returns Run's error, failing
// the test if a transaction with events arrives first.
func (r *running) stopped(t *testing.T) error {
	t.Helper()
	timeout := time.After(20 * time.Second)
	for {
		select {
		case <-r.done:
			return r.err
		case tx := <-r.out:
			if len(tx.Events) > 0 {
				t.Fatalf("delivered %v, want the source to stop", ids(tx))
			}
		case <-timeout:
			t.Fatal("the source did not stop")
		}
	}
}

// TestAlterBeforeBacklogRows: without column names, a restart whose
// backlog starts with the change (no row before it) streams on: the rows
// after it have the table's current columns. Two changes with rows between
// them stop the source at the rows that the second change makes unknown.
func TestAlterBeforeBacklogRows(t *testing.T) {
	t.Parallel()
	f := newFixtureOn(t, testenv.PrivateMariaDB(t, testenv.MariaDBOptions{RowMetadata: "MINIMAL"}))
	from := f.markerEnd()
	f.exec("ALTER TABLE " + f.table + " MODIFY aggregate_id VARCHAR(64) NOT NULL AFTER message_id")
	b := rowNamed("B")
	f.exec(b.insert(f.table))
	r := f.start(f.config(), seedColumns, from)
	tx := r.next()
	expectIDs(t, tx, "B")
	b.check(t, tx.Events[0])
	end := tx.End
	r.stop()
	<-r.done

	c := rowNamed("C")
	f.exec(c.insert(f.table))
	f.exec("ALTER TABLE " + f.table + " RENAME COLUMN aggregate_type TO aggregate_id, RENAME COLUMN aggregate_id TO aggregate_type")
	f.exec(rowNamed("D").insert(f.table))
	r = f.start(f.config(), seedColumns, end)
	err := r.stopped(t)
	if !errors.Is(err, ErrSchema) || !strings.Contains(err.Error(), "RENAME COLUMN aggregate_type") {
		t.Fatalf("got %v, want ErrSchema naming the RENAME", err)
	}
}

// TestSchemaProofSurvivesReconnect: without column names, the column list
// proven in one session is kept for the next one after a reconnect, so a
// large backlog is not scanned again after every reconnect (a scan longer
// than the server's net_write_timeout would otherwise repeat forever). A
// change to the table after the reconnect is still followed.
func TestSchemaProofSurvivesReconnect(t *testing.T) {
	t.Parallel()
	f := newFixtureOn(t, testenv.PrivateMariaDB(t, testenv.MariaDBOptions{RowMetadata: "MINIMAL"}))
	r := f.start(f.config(), seedColumns, "")
	r.waitReady()
	a, b, c := rowNamed("A"), rowNamed("B"), rowNamed("C")
	f.exec(a.insert(f.table))
	a.check(t, r.next().Events[0])
	id := r.src.connID.Load()
	f.exec(fmt.Sprintf("KILL %d", id))
	testenv.Eventually(t, 20*time.Second, "a new dump connection", func() bool { n := r.src.connID.Load(); return n != 0 && n != id })
	f.exec(b.insert(f.table))
	b.check(t, r.next().Events[0])
	if n := r.src.schemaLoads.Load(); n != 1 {
		t.Fatalf("the column list was read and proven %d times, want once", n)
	}
	f.exec("ALTER TABLE " + f.table + " MODIFY aggregate_id VARCHAR(64) NOT NULL AFTER message_id")
	f.exec(c.insert(f.table))
	c.check(t, r.next().Events[0])
	if n := r.src.schemaLoads.Load(); n != 2 {
		t.Fatalf("the column list was read %d times, want twice (once more after the ALTER)", n)
	}
}

// BenchmarkScanDDL scans the server's whole binlog for statements that may
// change a table (what a restart without column names does over its
// backlog) and reports the rate.
func BenchmarkScanDDL(b *testing.B) {
	db, err := sql.Open("mysql", testenv.MySQLDSN(b))
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	cfg := DefaultConfig()
	cfg.DSN, cfg.Table = testenv.MySQLDSN(b), "none"
	src, err := New(cfg, "bench", seedColumns, zerolog.Nop(), nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	files, err := binaryLogs(context.Background(), db)
	if err != nil || len(files) == 0 {
		b.Fatalf("SHOW BINARY LOGS: %v", err)
	}
	var total int64
	for _, f := range files {
		total += int64(f.size)
	}
	last := files[len(files)-1]
	m := &tableMatcher{db: []byte("test"), table: []byte("no_such_table_" + uniqueName("x"))}
	b.SetBytes(total)
	for b.Loop() {
		hit, err := src.scanDDL(context.Background(), db, m, binlogPoint{files[0].name, 4}, binlogPoint{last.name, uint32(last.size)})
		if err != nil || hit != nil {
			b.Fatalf("scan: %v %v", hit, err)
		}
	}
}

// TestReadAgainAcrossAlterKeepsSchemaProof: without column names, a
// transaction read again (a reconnect in the middle of its fragments, and
// the look-ahead's second read) is read again from before the ALTER that
// preceded it. Meeting that ALTER again must not throw away the column
// list proven for the rows after it: by then a later ALTER may have been
// made, the list could no longer be proven for those rows, and the source
// would stop over rows it had mapped correctly the first time. Here a
// second ALTER is made while the first fragment waits in the test, then
// the replication connection is killed: the transaction still arrives
// whole and once, and the row after the second ALTER under its new
// columns.
func TestReadAgainAcrossAlterKeepsSchemaProof(t *testing.T) {
	t.Parallel()
	dsn := testenv.PrivateMariaDB(t, testenv.MariaDBOptions{RowMetadata: "MINIMAL"})
	for _, c := range []struct {
		name    string
		noFinal bool
	}{{"final", false}, {"lookahead", true}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			f := newFixtureOn(t, dsn)
			r := f.startUnbuffered(f.config(), "", func(s *Source) {
				s.noFinalFlag = c.noFinal
				// No empty Tx for the ALTER: the position stays before it,
				// so every read of the transaction starts before it.
				s.emptyTxInterval = time.Hour
			})
			r.waitReady()
			m := rowNamed("M")
			f.exec(m.insert(f.table))
			m.check(t, r.next().Events[0])

			f.exec("ALTER TABLE " + f.table + " MODIFY aggregate_id VARCHAR(64) NOT NULL AFTER message_id")
			n := 5 * outboxcdc.MaxFragmentEvents
			s := f.session()
			s.run("BEGIN")
			f.bigInsert(s, "g", 0, n, 40)
			s.run("COMMIT")
			altered := false
			var got []string
			txs := r.fragments(func(tx outboxcdc.Tx) {
				for i := range tx.Events {
					e := &tx.Events[i]
					got = append(got, e.MessageID)
					if e.AggregateType != "BIG" || e.EventType != "E" {
						t.Fatalf("row %s delivered as aggregate_type=%q event_type=%q", e.MessageID, e.AggregateType, e.EventType)
					}
				}
				if altered || !tx.More {
					return
				}
				altered = true
				f.exec("ALTER TABLE " + f.table + " RENAME COLUMN aggregate_type TO aggregate_id, RENAME COLUMN aggregate_id TO aggregate_type")
				id := r.src.connID.Load()
				if id == 0 {
					t.Fatal("no dump connection id")
				}
				f.exec(fmt.Sprintf("KILL %d", id))
			})
			if !altered {
				t.Fatal("no fragment to alter the table and kill the connection after")
			}
			sameIDs(t, got, seq("g", 0, n))
			t.Logf("%d fragments", len(txs))
			// The kill may land after the last fragment was read: the loss
			// is then seen when the source next reads.
			testenv.Eventually(t, 20*time.Second, "the killed dump connection is seen as a lost stream", func() bool {
				return counter(t, r.m.Reconnects) >= 1
			})

			// The RENAME swapped the two columns' names: the next row is
			// read under the new list.
			a := rowNamed("A")
			f.exec(a.insert(f.table))
			a.check(t, r.next().Events[0])
			// Read for M, for the transaction (once, whatever the reads
			// again), and after the RENAME.
			if n := r.src.schemaLoads.Load(); n != 3 {
				t.Fatalf("the column list was read and proven %d times, want 3 (for M, the transaction, A)", n)
			}
		})
	}
}
