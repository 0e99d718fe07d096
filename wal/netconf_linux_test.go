package wal

import (
	"context"
	"net"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/outbox-cdc/outbox-cdc/deadpeer"
)

// TestConnectionsHaveKeepalives: both kinds of connection of the source
// dial with TCP keepalives and TCP_USER_TIMEOUT, ask the server for
// keepalives on its side, and the replication connection carries the
// configured wal_sender_timeout.
func TestConnectionsHaveKeepalives(t *testing.T) {
	e := newPgEnv(t)
	cfg := e.config()
	cfg.WalSenderTimeout = 7 * time.Second
	src, _ := e.source(cfg, seedCols)
	ctx := context.Background()

	sockopts := func(c net.Conn) (keepalive, idle, userTimeout int) {
		t.Helper()
		if b := batchConnOf(c); b != nil {
			c = b.NetConn()
		}
		tc, ok := c.(*net.TCPConn)
		if !ok {
			t.Skipf("not a TCP connection (%T): the DSN uses a Unix socket", c)
		}
		raw, err := tc.SyscallConn()
		if err != nil {
			t.Fatal(err)
		}
		var errs []error
		_ = raw.Control(func(fd uintptr) {
			var err error
			keepalive, err = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_KEEPALIVE)
			errs = append(errs, err)
			idle, err = unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_KEEPIDLE)
			errs = append(errs, err)
			userTimeout, err = unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT)
			errs = append(errs, err)
		})
		for _, err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		return
	}

	meta, err := src.connectMeta(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer closeMeta(meta)
	if ka, idle, ut := sockopts(meta.PgConn().Conn()); ka != 1 || idle != int(deadpeer.WAL.Idle/time.Second) || ut != int(deadpeer.WAL.DeadAfter()/time.Millisecond) {
		t.Errorf("metadata connection: SO_KEEPALIVE %d TCP_KEEPIDLE %d TCP_USER_TIMEOUT %d", ka, idle, ut)
	}
	var serverIdle string
	if err := meta.QueryRow(ctx, `SHOW tcp_keepalives_idle`).Scan(&serverIdle); err != nil || serverIdle != "15" {
		t.Errorf("server-side tcp_keepalives_idle %q (%v), want 15", serverIdle, err)
	}

	repl, err := src.connectReplication(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer closeRepl(repl)
	if ka, idle, ut := sockopts(repl.Conn()); ka != 1 || idle != int(deadpeer.WAL.Idle/time.Second) || ut != int(deadpeer.WAL.DeadAfter()/time.Millisecond) {
		t.Errorf("replication connection: SO_KEEPALIVE %d TCP_KEEPIDLE %d TCP_USER_TIMEOUT %d", ka, idle, ut)
	}
	if wst, err := src.walSenderTimeout(ctx, repl); err != nil || wst != 7*time.Second {
		t.Errorf("wal_sender_timeout %s (%v)", wst, err)
	}
	res, err := repl.Exec(ctx, "SELECT current_setting('wal_sender_timeout'), current_setting('tcp_keepalives_count')").ReadAll()
	if err != nil || len(res) != 1 || len(res[0].Rows) != 1 {
		t.Fatalf("settings: %v", err)
	}
	if got := string(res[0].Rows[0][0]) + " " + string(res[0].Rows[0][1]); got != "7s 3" {
		t.Errorf("server-side wal_sender_timeout and tcp_keepalives_count %q, want \"7s 3\"", got)
	}

	// With wal_sender_timeout 0 the server's own applies, and is read.
	cfg.WalSenderTimeout = 0
	src0, _ := e.source(cfg, seedCols)
	repl0, err := src0.connectReplication(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer closeRepl(repl0)
	var server string
	if err := meta.QueryRow(ctx, `SELECT setting FROM pg_settings WHERE name = 'wal_sender_timeout'`).Scan(&server); err != nil {
		t.Fatal(err)
	}
	if wst, err := src0.walSenderTimeout(ctx, repl0); err != nil || server != strconv.FormatInt(wst.Milliseconds(), 10) {
		t.Errorf("server's wal_sender_timeout: read %s (%v), server says %sms", wst, err, server)
	}
}
