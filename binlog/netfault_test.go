package binlog

// Reconnecting (issue 11 §5) and a silent server (issue 18): every network
// failure while reconnecting is transient, every call to the server has a
// deadline, only our own dump thread is killed, a stalled sink does not
// cycle the replication session, and a server gone quiet is noticed within
// read_timeout.

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	gomysql "github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"
	mysqldriver "github.com/go-sql-driver/mysql"
	outboxcdc "github.com/outbox-cdc/outbox-cdc"
	"github.com/outbox-cdc/outbox-cdc/test/testenv"
	"github.com/rs/zerolog"
)

// proxied returns the fixture's DSN pointed at a proxy in front of the
// server, and the proxy.
func (f *fixture) proxied() (string, *testenv.Proxy) {
	f.t.Helper()
	dc, err := mysqldriver.ParseDSN(f.dsn)
	if err != nil {
		f.t.Fatal(err)
	}
	if dc.Net != "tcp" {
		f.t.Skipf("the test DSN is not TCP (%s)", dc.Net)
	}
	p := testenv.NewProxy(f.t, dc.Addr)
	dc.Addr = p.Addr()
	return dc.FormatDSN(), p
}

// TestSinkStallLongerThanReadTimeout: the consumer stops taking
// transactions for 75 s, far longer than read_timeout (2 s) and than the
// server's default net_write_timeout (60 s), while 100 MB of outbox rows
// commit: more than go-mysql's event queue and both sockets' buffers hold,
// so the source stops reading and the server's dump thread blocks on its
// writes. The replication session must survive it: a read timeout counts
// only while the source waits for the server, and the dump session's
// net_write_timeout is raised (dumpWriteTimeout).
func TestSinkStallLongerThanReadTimeout(t *testing.T) {
	if testing.Short() {
		t.Skip("75 s stall")
	}
	t.Parallel()
	f := newFixture(t)
	cfg := f.config(func(c *Config) { c.ReadTimeout = 2 * time.Second; c.HeartbeatPeriod = 500 * time.Millisecond })
	r := f.start(cfg, seedColumns, "")
	r.waitReady()
	f.insertTx("first")
	expectIDs(t, r.next(), "first")

	stalled := time.Now()
	s := f.session()
	const txs, rows = 320, 10
	for i := range txs {
		s.run("BEGIN")
		f.bigInsert(s, fmt.Sprintf("s%03d-", i), 0, rows, 32<<10)
		s.run("COMMIT")
	}
	t.Logf("committed %d transactions of %d rows of 32 KiB in %v", txs, rows, time.Since(stalled).Round(time.Millisecond))
	time.Sleep(75*time.Second - time.Since(stalled))
	t.Logf("stalled for %v", time.Since(stalled).Round(time.Millisecond))
	for i := range txs {
		tx := r.next()
		if got, want := strings.Join(ids(tx), ","), strings.Join(seq(fmt.Sprintf("s%03d-", i), 0, rows), ","); got != want {
			t.Fatalf("transaction %d: %s, want %s", i, got, want)
		}
	}
	if got := counter(t, r.m.Reconnects); got != 0 {
		t.Fatalf("Reconnects = %v: the stalled sink cycled the replication session", got)
	}
}

// TestSilentServer: the path to the server goes silent both ways (no FIN,
// no RST) for 20 s, longer than every timeout involved, while rows keep
// committing. The source must notice within read_timeout (plus a margin),
// report not ready and Connected 0, keep retrying without returning (a
// timed-out reconnect is transient like a refused one), and once the path
// heals deliver every row once, in order.
func TestSilentServer(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	dsn, proxy := f.proxied()
	cfg := f.config(func(c *Config) {
		c.DSN = dsn
		c.ReadTimeout = 3 * time.Second
		c.HeartbeatPeriod = time.Second
		c.Reconnect = BackoffConfig{Min: 100 * time.Millisecond, Max: time.Second}
	})
	r := f.start(cfg, seedColumns, "")
	r.waitReady()
	f.insertTx("before")
	expectIDs(t, r.next(), "before")

	proxy.Silence()
	silenced := time.Now()
	var want []string
	var detected time.Duration
	for time.Since(silenced) < 20*time.Second {
		id := fmt.Sprintf("q%03d", len(want))
		f.insertTx(id)
		want = append(want, id)
		if detected == 0 && r.src.Ready() != nil {
			detected = time.Since(silenced)
			if g := counter(t, r.m.Connected); g != 0 {
				t.Fatalf("not ready but Connected = %v", g)
			}
		}
		select {
		case <-r.done:
			t.Fatalf("the source stopped while the server was silent: %v", r.err)
		default:
		}
		time.Sleep(100 * time.Millisecond)
	}
	if detected == 0 {
		t.Fatal("the source did not notice a silent server in 20 s")
	}
	if bound := cfg.ReadTimeout + 2*time.Second; detected > bound {
		t.Fatalf("noticed the silence after %v, bound %v", detected, bound)
	}
	if g := counter(t, r.m.Connected); g != 0 {
		t.Fatalf("Connected = %v while the server is unreachable", g)
	}
	proxy.Heal()
	healed := time.Now()
	for _, id := range want {
		expectIDs(t, r.next(), id)
	}
	caughtUp := time.Since(healed)
	t.Logf("silence of %v with read_timeout %v: noticed after %v; %d rows committed meanwhile arrived %v after the path healed",
		healed.Sub(silenced).Round(time.Millisecond), cfg.ReadTimeout, detected.Round(time.Millisecond), len(want), caughtUp.Round(time.Millisecond))
	if err := r.src.Ready(); err != nil {
		t.Fatalf("not ready after catching up: %v", err)
	}
	if got := counter(t, r.m.Reconnects); got < 1 {
		t.Fatalf("Reconnects = %v", got)
	}
}

// TestServerCallsHaveDeadlines: against a silent path, each call the
// source makes to the server returns within its deadline (read_timeout)
// with a transient error: the metadata queries, the position check, the
// server-run check, the KILL of the previous dump thread, TLS set-up, and
// a whole session (its binlog dump included).
func TestServerCallsHaveDeadlines(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	dsn, proxy := f.proxied()
	cfg := f.config(func(c *Config) {
		c.DSN = dsn
		c.ReadTimeout = 2 * time.Second
		c.HeartbeatPeriod = 500 * time.Millisecond
	})
	src, err := New(cfg, uniqueName("deadline"), seedColumns, zerolog.New(zerolog.NewTestWriter(t)), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	db, err := src.openMetadataDB()
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	info, err := src.inspect(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	boot, err := src.serverBoot(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	pos, err := src.startPosition(ctx, db, info)
	if err != nil {
		t.Fatal(err)
	}
	proxy.Silence()
	bound := cfg.ReadTimeout + 3*time.Second
	within := func(what string, call func() error, wantErr bool) {
		t.Helper()
		done := make(chan error, 1)
		t0 := time.Now()
		go func() { done <- call() }()
		select {
		case err := <-done:
			t.Logf("%s: returned after %v: %v", what, time.Since(t0).Round(time.Millisecond), err)
			if wantErr && (err == nil || !outboxcdc.IsTransient(err)) {
				t.Errorf("%s: got %v, want a transient error", what, err)
			}
		case <-time.After(bound):
			t.Errorf("%s: still waiting after %v", what, bound)
			<-done
		}
	}
	within("inspect", func() error { _, err := src.inspect(ctx, db); return err }, true)
	within("startPosition", func() error { _, err := src.startPosition(ctx, db, info); return err }, true)
	within("checkResume (GTID)", func() error { return src.checkResume(ctx, db, &info, &pos) }, true)
	within("checkResume (file)", func() error {
		return src.checkResume(ctx, db, &info, &Pos{File: "mariadb-bin.000001", Offset: 4})
	}, true)
	within("serverBoot", func() error { _, err := src.serverBoot(ctx, db); return err }, true)
	// Without column names in the binlog, the column list is read at the
	// first row and after a change to the table (schema.go).
	within("loadSchema", func() error {
		_, err := src.loadSchema(ctx, db, info.table.matcher(), binlogPoint{"mariadb-bin.000001", 4})
		return err
	}, true)
	within("scanDDL", func() error {
		_, err := src.scanDDL(ctx, db, info.table.matcher(), binlogPoint{"mariadb-bin.000001", 4}, binlogPoint{"mariadb-bin.000001", 5})
		return err
	}, true)
	within("killPreviousDump", func() error {
		src.prevDump = dumpConn{id: 1, boot: boot}
		src.killPreviousDump(ctx, db, boot)
		return nil
	}, false)
	// TLS set-up asks the server whether the session got TLS (preferred).
	tcfg := cfg
	tcfg.TLS.Mode = TLSPreferred
	tsrc, err := New(tcfg, uniqueName("deadline"), seedColumns, zerolog.New(zerolog.NewTestWriter(t)), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	tdb, err := tsrc.openMetadataDB()
	if err != nil {
		t.Fatal(err)
	}
	defer tdb.Close()
	within("binlogTLS", func() error {
		tctx, cancel := context.WithTimeout(ctx, tsrc.callTimeout())
		defer cancel()
		if tsrc.binlogTLS(tctx, tdb) == nil {
			return errors.New("no TLS configuration")
		}
		return nil
	}, false)
	resume := outboxcdc.Position("")
	within("session", func() error {
		_, err := src.session(ctx, db, &resume, make(chan outboxcdc.Tx), false, false)
		return err
	}, true)
	// The binlog dump itself, on a connection made before the silence.
	proxy.Heal()
	resume = pos.Encode()
	// Drained: on a busy shared server the session delivers other
	// transactions, and a full channel is a stalled sink, which the read
	// timeout rightly does not count.
	out := make(chan outboxcdc.Tx, 1)
	errc := make(chan error, 1)
	go func() {
		for range out {
		}
	}()
	go func() {
		_, err := src.session(ctx, db, &resume, out, false, false)
		errc <- err
		close(out)
	}()
	deadline := time.Now().Add(10 * time.Second)
	for src.Ready() != nil && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	proxy.Silence()
	within("binlog dump", func() error { return <-errc }, true)
}

// TestKillPreviousDumpOnlyOurs: before a new session the source kills the
// previous binlog dump connection it remembers, but only when that id is
// still a binlog dump of its user on the same server run; an id that now
// names another connection (ids are reused after a server restart) is left
// alone.
func TestKillPreviousDumpOnlyOurs(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	src, err := New(f.config(), uniqueName("kill"), seedColumns, zerolog.New(zerolog.NewTestWriter(t)), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	db, err := src.openMetadataDB()
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	boot, err := src.serverBoot(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	victim, err := f.db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer victim.Close()
	var victimID uint32
	if err := victim.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&victimID); err != nil {
		t.Fatal(err)
	}
	alive := func() bool {
		var one int
		return victim.QueryRowContext(ctx, "SELECT 1").Scan(&one) == nil
	}
	// Another connection with the remembered id (a reused id).
	src.prevDump = dumpConn{id: victimID, boot: boot}
	src.killPreviousDump(ctx, db, boot)
	if !alive() {
		t.Fatal("a connection that is not a binlog dump was killed")
	}
	// The remembered id is from another server run.
	src.prevDump = dumpConn{id: victimID, boot: boot - 3600}
	src.killPreviousDump(ctx, db, boot)
	if !alive() {
		t.Fatal("a connection id from another server run was killed")
	}

	// Our own dump thread, still running: killed.
	r := f.start(f.config(func(c *Config) { c.ServerID = src.serverID }), seedColumns, "")
	r.waitReady()
	dump := r.src.connID.Load()
	r.stop()
	<-r.done
	src.prevDump = dumpConn{id: dump, boot: boot}
	if isDump(t, f.db, dump) {
		src.killPreviousDump(ctx, db, boot)
		deadline := time.Now().Add(5 * time.Second)
		for isDump(t, f.db, dump) {
			if time.Now().After(deadline) {
				t.Fatal("our previous dump thread was not killed")
			}
			time.Sleep(50 * time.Millisecond)
		}
	} else {
		t.Log("the server ended the dump thread on close; nothing left to kill")
	}
}

func isDump(t *testing.T, db *sql.DB, id uint32) bool {
	t.Helper()
	var cmd string
	err := db.QueryRow("SELECT COMMAND FROM information_schema.PROCESSLIST WHERE ID = ?", id).Scan(&cmd)
	return err == nil && (cmd == "Binlog Dump" || cmd == "Binlog Dump GTID")
}

// lockedBuffer is a log sink safe for go-mysql's goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestCloseAfterAbort: a stop closes the dump connection under go-mysql
// first (dumpDialer.abort, when the source's context ends); go-mysql's
// Close then sets a short read deadline on it to stop its reader, which
// must not fail: since go-mysql v1.15 a failure makes it close the
// connection while its reader goroutine may still run (a data race under
// -race) and log a warning on every clean stop.
func TestCloseAfterAbort(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	dc, err := mysqldriver.ParseDSN(f.dsn)
	if err != nil {
		t.Fatal(err)
	}
	if dc.Net != "tcp" {
		t.Skipf("the test DSN is not TCP (%s)", dc.Net)
	}
	host, p, err := net.SplitHostPort(dc.Addr)
	if err != nil {
		t.Fatal(err)
	}
	port, _ := strconv.Atoi(p)
	var version string
	if err := f.db.QueryRow("SELECT VERSION()").Scan(&version); err != nil {
		t.Fatal(err)
	}
	flavor := gomysql.MySQLFlavor
	if strings.Contains(version, "MariaDB") {
		flavor = gomysql.MariaDBFlavor
	}
	file, pos, err := binlogStatus(t.Context(), f.db)
	if err != nil {
		t.Fatal(err)
	}
	var logs lockedBuffer
	dial := newDumpDialer(10 * time.Second)
	syncer := replication.NewBinlogSyncer(replication.BinlogSyncerConfig{
		ServerID: 3_000_000_000 + uint32(time.Now().UnixNano()%1_000_000_000), Flavor: flavor,
		Host: host, Port: uint16(port), User: dc.User, Password: dc.Passwd,
		Dialer: dial.DialContext, DisableRetrySync: true,
		Logger: replicationLogger(zerolog.New(&logs).Level(zerolog.WarnLevel), nil),
	})
	streamer, err := syncer.StartSync(gomysql.Position{Name: file, Pos: pos})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if _, err := streamer.GetEvent(ctx); err != nil { // the reader runs
		t.Fatal(err)
	}
	dial.abort()
	syncer.Close()
	if l := logs.String(); strings.Contains(l, "read deadline") {
		t.Errorf("closing after abort logged:\n%s", l)
	}
}
