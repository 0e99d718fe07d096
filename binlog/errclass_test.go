package binlog

import (
	"errors"
	"fmt"
	"io"
	"net"
	"testing"

	mysqldriver "github.com/go-sql-driver/mysql"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
)

// TestUnmarkedErrorIsPermanent: the connector's one error default
// (errclass.go) in the MySQL/MariaDB source. An error nobody marked, or a
// server error whose code the source does not know, stops Run; a broken
// connection and the server errors it knows to heal are retried.
func TestUnmarkedErrorIsPermanent(t *testing.T) {
	for _, tc := range []struct {
		name      string
		err       error
		transient bool
	}{
		{"unmarked", fmt.Errorf("read the outbox layout: %w", errors.New("an error no one foresaw")), false},
		{"unknown server code", classifyConnErr(&mysqldriver.MySQLError{Number: 1105, Message: "unknown error"}), false},
		{"access denied", classifyConnErr(&mysqldriver.MySQLError{Number: erAccessDenied, Message: "denied"}), false},
		{"server shutdown", classifyConnErr(&mysqldriver.MySQLError{Number: erServerShutdown, Message: "shutdown"}), true},
		{"connection reset", classifyConnErr(&net.OpError{Op: "read", Net: "tcp", Err: errors.New("connection reset by peer")}), true},
		{"eof", classifyConnErr(io.ErrUnexpectedEOF), true},
	} {
		// Run stops on what is not marked transient (source.go).
		if got := outboxcdc.IsTransient(tc.err); got != tc.transient {
			t.Errorf("%s: transient %v, want %v (%v)", tc.name, got, tc.transient, tc.err)
		}
	}
}
