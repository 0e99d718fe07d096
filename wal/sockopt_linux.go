package wal

import (
	"syscall"

	"golang.org/x/sys/unix"
)

// setRcvLowat sets SO_RCVLOWAT: the socket is reported readable (and its
// reader woken) only once n bytes are waiting.
func setRcvLowat(c syscall.RawConn, n int) error {
	var serr error
	err := c.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVLOWAT, n)
	})
	if err != nil {
		return err
	}
	return serr
}
