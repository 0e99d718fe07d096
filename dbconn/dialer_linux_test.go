package dbconn

import (
	"context"
	"net"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The dialer's sockets carry the keepalive intervals and TCP_USER_TIMEOUT
// the connector sets, not the kernel's defaults (2 hours idle).
func TestDialerSocketOptions(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	o := Defaults()
	c, err := o.Dialer().DialContext(context.Background(), "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	raw, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	raw.Control(func(fd uintptr) {
		for name, opt := range map[string][2]int{
			"SO_KEEPALIVE":     {syscall.SOL_SOCKET, syscall.SO_KEEPALIVE},
			"TCP_KEEPIDLE":     {syscall.IPPROTO_TCP, syscall.TCP_KEEPIDLE},
			"TCP_KEEPINTVL":    {syscall.IPPROTO_TCP, syscall.TCP_KEEPINTVL},
			"TCP_KEEPCNT":      {syscall.IPPROTO_TCP, syscall.TCP_KEEPCNT},
			"TCP_USER_TIMEOUT": {syscall.IPPROTO_TCP, unix.TCP_USER_TIMEOUT},
		} {
			v, err := syscall.GetsockoptInt(int(fd), opt[0], opt[1])
			if err != nil {
				t.Errorf("%s: %v", name, err)
			}
			got[name] = v
		}
	})
	want := map[string]int{
		"SO_KEEPALIVE": 1, "TCP_KEEPIDLE": int(o.Peer.Idle / time.Second), "TCP_KEEPINTVL": int(o.Peer.Interval / time.Second),
		"TCP_KEEPCNT": o.Peer.Count, "TCP_USER_TIMEOUT": int(o.Peer.DeadAfter().Milliseconds()),
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %d, want %d", k, got[k], v)
		}
	}
}
