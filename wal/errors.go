package wal

import (
	"errors"
	"fmt"

	"github.com/jackc/pglogrepl"
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

// Errors about a slot the source cannot use as the checkpoint says wrap
// one of these (errors.Is); they are permanent, and the message carries
// the remedy.
var (
	// ErrBehindSlot: the checkpoint is behind the slot's
	// confirmed_flush_lsn. Logical decoding cannot go back, so starting
	// would skip the transactions in between.
	ErrBehindSlot = errors.New("checkpoint behind the replication slot")
	// ErrNameChanged: a checkpoint exists, the derived slot or publication
	// does not, and the one of the name earlier versions derived does (see
	// DeriveName).
	ErrNameChanged = errors.New("slot or publication not found under its derived name")
	// ErrTableLayout: a row of an outbox table that lacks a role column
	// its route names (a column dropped, or a new table matching
	// source.tables laid out differently without a route.tables entry).
	ErrTableLayout = errors.New("outbox table lacks a column the route needs")
	// errSilent: nothing arrived on the replication connection for the
	// receive timeout. Transient: the source reconnects.
	errSilent = errors.New("replication connection silent")
)

// hintError carries a sentinel, the cause and the remedy.
type hintError struct {
	sentinel error
	cause    error
	hint     string
}

func (e *hintError) Error() string {
	return e.sentinel.Error() + ": " + e.cause.Error() + " (" + e.hint + ")"
}
func (e *hintError) Unwrap() []error { return []error{e.sentinel, e.cause} }

func withHint(sentinel, cause error, hint string) error {
	return &hintError{sentinel: sentinel, cause: cause, hint: hint}
}

// behindSlot is the error for a checkpoint at from while the slot has
// confirmed everything before confirmed.
func behindSlot(slot string, from, confirmed pglogrepl.LSN) error {
	return withHint(ErrBehindSlot,
		fmt.Errorf("the checkpoint (LSN %s) is behind replication slot %q's confirmed_flush_lsn %s", from, slot, confirmed),
		fmt.Sprintf("PostgreSQL streams a slot only from its confirmed position, so the transactions in between cannot be read "+
			"from it again and starting would skip them; to re-publish rows, read them from the outbox table (README: Positions and replay); "+
			"to accept the skip, run: outbox-cdc position set --to %s --force", MakePosition(confirmed)))
}
