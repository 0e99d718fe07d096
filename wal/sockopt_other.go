//go:build !linux

package wal

import (
	"errors"
	"syscall"
)

// setRcvLowat is Linux only (elsewhere poll may ignore it): batched reads
// stay off.
func setRcvLowat(syscall.RawConn, int) error { return errors.ErrUnsupported }
