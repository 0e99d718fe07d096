package deadpeer

import (
	"context"
	"net"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

type sockopts struct{ keepalive, idle, interval, count, userTimeoutMs int }

func dialOpts(t *testing.T, d *net.Dialer) sockopts {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := d.DialContext(context.Background(), "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	raw, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var o sockopts
	var errs []error
	raw.Control(func(fd uintptr) {
		for _, f := range []struct {
			dst        *int
			level, opt int
		}{
			{&o.keepalive, unix.SOL_SOCKET, unix.SO_KEEPALIVE},
			{&o.idle, unix.IPPROTO_TCP, unix.TCP_KEEPIDLE},
			{&o.interval, unix.IPPROTO_TCP, unix.TCP_KEEPINTVL},
			{&o.count, unix.IPPROTO_TCP, unix.TCP_KEEPCNT},
			{&o.userTimeoutMs, unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT},
		} {
			v, err := unix.GetsockoptInt(int(fd), f.level, f.opt)
			if err != nil {
				errs = append(errs, err)
			}
			*f.dst = v
		}
	})
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	return o
}

// Every policy's dialer puts its keepalive settings on the socket, and
// TCP_USER_TIMEOUT (DeadAfter) where the policy has it.
func TestPolicyDialerSocketOptions(t *testing.T) {
	for name, p := range map[string]Policy{"database": Database, "binlog": Binlog, "wal": WAL, "kafka": Kafka, "http": HTTP} {
		t.Run(name, func(t *testing.T) {
			want := sockopts{1, int(p.Idle / time.Second), int(p.Interval / time.Second), p.Count, 0}
			if p.UserTimeout {
				want.userTimeoutMs = int(p.DeadAfter().Milliseconds())
			}
			if got := dialOpts(t, p.Dialer(time.Second)); got != want {
				t.Fatalf("socket options %+v, want %+v", got, want)
			}
		})
	}
}

// The policies of the clients that take a keepalive period only (Kafka)
// or always did (the HTTP sinks) are what Go makes of that period: the
// same socket as a dialer given only the period.
func TestPeriodPoliciesMatchGoDefaults(t *testing.T) {
	for name, p := range map[string]Policy{"kafka": Kafka, "http": HTTP} {
		t.Run(name, func(t *testing.T) {
			got := dialOpts(t, p.Dialer(time.Second))
			want := dialOpts(t, &net.Dialer{Timeout: time.Second, KeepAlive: p.Idle})
			if got != want {
				t.Fatalf("policy socket %+v, period-only dialer %+v", got, want)
			}
		})
	}
}
