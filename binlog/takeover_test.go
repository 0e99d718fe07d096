package binlog

import (
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/outbox-cdc/outbox-cdc/test/testenv"
)

// TestTakeoverFromFrozenDump: an instance whose process froze (SIGSTOP, a
// stuck VM) keeps its binlog dump connection open but reads nothing, so
// once the socket buffers are full the server's dump thread blocks in a
// write, for up to the session's net_write_timeout (an hour, see
// dumpWriteTimeout). A new instance of the same connector (the HA standby
// that took over, same server_id) must stream within seconds all the same,
// and the frozen instance's dump thread must be gone.
// With TakeOver (HA) the old dump is ended at once, without it once it has
// been stuck in a write for dumpStuckAfter.
func TestTakeoverFromFrozenDump(t *testing.T) {
	t.Parallel()
	for _, takeOver := range []bool{true, false} {
		t.Run(fmt.Sprintf("take_over=%v", takeOver), func(t *testing.T) { testTakeoverFromFrozenDump(t, takeOver) })
	}
}

func testTakeoverFromFrozenDump(t *testing.T, takeOver bool) {
	// A server of its own: the 30 MiB written below stay out of the other
	// tests' binlog, and no other test's writes help or hinder the freeze.
	f := newFixtureOn(t, testenv.PrivateMariaDB(t, testenv.MariaDBOptions{RowMetadata: "FULL", Instance: "takeover"}))
	dsn, proxy := f.proxied()
	id := DeriveServerID(uniqueName("frozen"))
	frozen := f.start(f.config(func(c *Config) { c.DSN = dsn; c.ServerID = id }), seedColumns, "")
	frozen.waitReady()
	f.insertTx("before")
	expectIDs(t, frozen.next(), "before")
	zombie := frozen.src.connID.Load()
	if zombie == 0 {
		t.Fatal("no dump connection id")
	}

	// Freeze the path, then end the process side: the proxy reads nothing
	// from the server, which never learns that the client went away.
	proxy.Freeze()
	frozen.stop()
	<-frozen.done
	s := f.session()
	const txs, rows = 48, 20 // 30 MiB of binlog, more than the buffers on the way hold
	for i := range txs {
		s.run("BEGIN")
		f.bigInsert(s, fmt.Sprintf("z%02d-", i), 0, rows, 32<<10)
		s.run("COMMIT")
	}
	state := dumpState(t, f.db, zombie)
	t.Logf("the frozen instance's dump thread %d: %q", zombie, state)
	if state == "" {
		t.Fatal("the frozen instance's dump thread is gone already: the test no longer freezes it")
	}

	started := time.Now()
	next := f.start(f.config(func(c *Config) { c.ServerID = id; c.TakeOver = takeOver }), seedColumns, "")
	next.waitReady()
	f.insertTx("after")
	expectIDs(t, next.next(), "after")
	took := time.Since(started)
	t.Logf("the new instance streamed %v after it started", took.Round(time.Millisecond))
	if bound := 5 * time.Second; took > bound {
		t.Errorf("the new instance streamed %v after it started, bound %v", took, bound)
	}
	deadline := time.Now().Add(5 * time.Second)
	for dumpState(t, f.db, zombie) != "" {
		if time.Now().After(deadline) {
			t.Fatalf("the frozen instance's dump thread %d still runs: %q", zombie, dumpState(t, f.db, zombie))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// dumpState is the server's STATE of binlog dump connection id, "" when
// that connection is not a binlog dump (gone).
func dumpState(t *testing.T, db *sql.DB, id uint32) string {
	t.Helper()
	var cmd string
	var state sql.NullString
	err := db.QueryRow("SELECT COMMAND, STATE FROM information_schema.PROCESSLIST WHERE ID = ?", id).Scan(&cmd, &state)
	if err == sql.ErrNoRows || (err == nil && cmd != "Binlog Dump" && cmd != "Binlog Dump GTID") {
		return ""
	}
	if err != nil {
		t.Fatal(err)
	}
	return cmd + ": " + state.String
}
