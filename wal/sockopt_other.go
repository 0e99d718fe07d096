//go:build !linux

package wal

import (
	"errors"
	"syscall"
)

// setTCPUserTimeout is Linux only; elsewhere keepalives alone bound a
// half-open connection.
func setTCPUserTimeout(string, string, syscall.RawConn) error { return nil }

// setRcvLowat is Linux only (elsewhere poll may ignore it): batched reads
// stay off.
func setRcvLowat(syscall.RawConn, int) error { return errors.ErrUnsupported }
