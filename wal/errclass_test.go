package wal

import (
	"errors"
	"fmt"
	"io"
	"net"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// TestUnmarkedErrorIsPermanent: the connector's one error default
// (errclass.go) in the PostgreSQL source. An error nobody marked stops Run
// (before: it was retried for ever); a failed network round trip and the
// server errors that heal are retried, as before.
func TestUnmarkedErrorIsPermanent(t *testing.T) {
	for _, tc := range []struct {
		name      string
		err       error
		permanent bool
	}{
		{"unmarked", fmt.Errorf("decode: %w", errors.New("an error no one foresaw")), true},
		{"privileges", &pgconn.PgError{Code: "42501", Message: "permission denied"}, true},
		{"admin shutdown", &pgconn.PgError{Code: "57P01", Message: "terminating connection due to administrator command"}, false},
		{"slot active", &pgconn.PgError{Code: codeObjectInUse, Message: "replication slot is active"}, false},
		{"connection reset", fmt.Errorf("receive: %w", &net.OpError{Op: "read", Net: "tcp", Err: errors.New("connection reset by peer")}), false},
		{"eof", fmt.Errorf("receive: %w", io.ErrUnexpectedEOF), false},
	} {
		// What Run does with a session's error (source.go).
		if got := isPermanent(classify(tc.err)); got != tc.permanent {
			t.Errorf("%s: permanent %v, want %v (%v)", tc.name, got, tc.permanent, tc.err)
		}
	}
}
