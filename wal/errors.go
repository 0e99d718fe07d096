package wal

import (
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outbox-cdc/outbox-cdc/tlsconf"
)

// permanentError marks an error that reconnecting cannot fix: Run returns it.
// Errors are classified where they arise; everything not marked is retried.
type permanentError struct{ err error }

func (e permanentError) Error() string { return e.err.Error() }
func (e permanentError) Unwrap() error { return e.err }

func permanent(err error) error {
	if err == nil || isPermanent(err) {
		return err
	}
	return permanentError{err}
}

func isPermanent(err error) bool {
	var p permanentError
	return errors.As(err, &p)
}

// SQLSTATE codes we act on.
const (
	codeObjectInUse     = "55006" // replication slot is active for another PID
	codeDuplicateObject = "42710"
)

// classify marks server errors that will not go away by reconnecting:
// authentication (28), unknown database (3D), missing objects, syntax and
// privileges (42), unsupported features (0A), an invalidated slot or WAL
// already removed (55000, 58P01). Connection trouble, shutdowns (57P0x),
// too many connections (53) and an active slot (55006) are retried.
func classify(err error) error {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		if tlsconf.IsVerifyError(err) {
			// Reconnecting cannot fix a certificate that does not verify.
			return permanent(fmt.Errorf("%w (TLS: check sslmode and sslrootcert in source.dsn against the server's certificate)", err))
		}
		return err
	}
	if pgErr.Code == codeObjectInUse {
		return err
	}
	switch pgErr.Code[:2] {
	case "28", "3D", "42", "0A":
		return permanent(err)
	}
	if pgErr.Code == "55000" || pgErr.Code == "58P01" {
		return permanent(err)
	}
	return err
}

func pgCode(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}
