package wal

import (
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// setTCPUserTimeout sets TCP_USER_TIMEOUT on a TCP socket before it
// connects: data the source sent that stays unacknowledged for
// tcpUserTimeout ends the connection with an error.
func setTCPUserTimeout(network, _ string, c syscall.RawConn) error {
	if !strings.HasPrefix(network, "tcp") {
		return nil
	}
	var serr error
	err := c.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT, int(tcpUserTimeout.Milliseconds()))
	})
	if err != nil {
		return err
	}
	return serr
}

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
