package binlog

import (
	"context"
	"database/sql"
	"net"
	"syscall"
	"testing"
	"time"

	mysqldriver "github.com/go-sql-driver/mysql"
	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"github.com/outbox-cdc/outbox-cdc/deadpeer"
)

// TestConnectionsUseKeepalive: the binlog dump connection and the metadata
// pool's connections have TCP keepalives on, with the source's intervals,
// and a TCP user timeout for unacknowledged data.
func TestConnectionsUseKeepalive(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	dc, err := mysqldriver.ParseDSN(f.dsn)
	if err != nil || dc.Net != "tcp" {
		t.Skipf("the test DSN is not TCP")
	}
	check := func(what string, c net.Conn) {
		t.Helper()
		if ic, ok := c.(*idleConn); ok {
			c = ic.Conn
		}
		tc, ok := c.(*net.TCPConn)
		if !ok {
			t.Fatalf("%s: %T is not a TCP connection", what, c)
		}
		raw, err := tc.SyscallConn()
		if err != nil {
			t.Fatal(err)
		}
		var on, idle, intvl, cnt, user int
		raw.Control(func(fd uintptr) {
			on, _ = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_KEEPALIVE)
			idle, _ = syscall.GetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_KEEPIDLE)
			intvl, _ = syscall.GetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_KEEPINTVL)
			cnt, _ = syscall.GetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_KEEPCNT)
			user, _ = syscall.GetsockoptInt(int(fd), syscall.IPPROTO_TCP, unix.TCP_USER_TIMEOUT)
		})
		p := deadpeer.Binlog
		if on == 0 || idle != int(p.Idle/time.Second) || intvl != int(p.Interval/time.Second) || cnt != p.Count ||
			user != int(p.DeadAfter()/time.Millisecond) {
			t.Fatalf("%s: keepalive %d idle %ds interval %ds count %d, user timeout %dms", what, on, idle, intvl, cnt, user)
		}
	}
	d := newDumpDialer(time.Second)
	c, err := d.DialContext(context.Background(), "tcp", dc.Addr)
	if err != nil {
		t.Fatal(err)
	}
	check("binlog dump dialer", c)
	d.abort()
	if _, err := d.DialContext(context.Background(), "tcp", dc.Addr); err == nil {
		t.Fatal("a stopped dialer dialed")
	}

	src, err := New(f.config(), uniqueName("keepalive"), seedColumns, zerolog.Nop(), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg := src.dsn.Clone()
	var got net.Conn
	pool := keepaliveDialer(time.Second)
	cfg.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := pool.DialContext(ctx, network, addr)
		got = c
		return c, err
	}
	conn, err := mysqldriver.NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(conn)
	defer db.Close()
	if err := db.Ping(); err != nil {
		t.Fatal(err)
	}
	check("metadata pool", got)
}
