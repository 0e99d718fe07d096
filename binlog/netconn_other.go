//go:build !linux

package binlog

import "syscall"

// setUserTimeout is a no-op where TCP_USER_TIMEOUT does not exist;
// keepalives and read deadlines still apply.
func setUserTimeout(_, _ string, _ syscall.RawConn) error { return nil }
