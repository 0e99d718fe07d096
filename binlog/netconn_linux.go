package binlog

import (
	"syscall"
	"time"
)

// userTimeout bounds how long data the connector sent may stay
// unacknowledged before the kernel drops the connection (TCP_USER_TIMEOUT):
// the counterpart of keepalives for a connection that is not idle, such as
// a query waiting on a partitioned server.
const userTimeout = keepaliveIdle + keepaliveCount*keepaliveInterval

// tcpUserTimeout is TCP_USER_TIMEOUT from linux/tcp.h (the syscall package
// does not name it).
const tcpUserTimeout = 0x12

func setUserTimeout(_, _ string, c syscall.RawConn) error {
	var serr error
	err := c.Control(func(fd uintptr) {
		serr = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, tcpUserTimeout, int(userTimeout/time.Millisecond))
	})
	if err != nil {
		return err
	}
	return serr
}
