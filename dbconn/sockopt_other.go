//go:build !linux

package dbconn

import (
	"syscall"
	"time"
)

// userTimeout is a no-op where TCP_USER_TIMEOUT does not exist; the
// keepalives still end a connection to a dead peer.
func userTimeout(time.Duration) func(network, address string, c syscall.RawConn) error {
	return nil
}
