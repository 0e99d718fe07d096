//go:build !linux

package deadpeer

import (
	"syscall"
	"time"
)

// setUserTimeout does nothing where TCP_USER_TIMEOUT does not exist; the
// keepalives still end a connection to a dead peer.
func setUserTimeout(syscall.RawConn, time.Duration) error { return nil }
