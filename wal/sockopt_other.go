//go:build !linux

package wal

import "syscall"

// setTCPUserTimeout is Linux only; elsewhere keepalives alone bound a
// half-open connection.
func setTCPUserTimeout(string, string, syscall.RawConn) error { return nil }
