package wal

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"

	"github.com/outbox-cdc/outbox-cdc/tlsconf"
)

// Errors are classified with the connector's one classification and its
// one default (errclass.go): an error nobody marked is permanent. The
// Postgres source marks where it meets them what the server and the
// network say (classify), and what reconnecting can cure (errSilent, the
// server ending the stream); Run settles a session's error with classify
// once more, so a network failure that reached it unwrapped is still
// retried, and stops on anything else: an error no one foresaw halts the
// connector with its cause instead of being retried for ever.

// permanent marks err as one reconnecting cannot fix: Run returns it.
func permanent(err error) error {
	if err == nil || isPermanent(err) {
		return err
	}
	return outboxcdc.Permanent(err, "")
}

// isPermanent reports whether err is not worth retrying: marked
// permanent, or not marked at all (the default). nil is not.
func isPermanent(err error) bool {
	return err != nil && !outboxcdc.IsTransient(err)
}

// retryable classifies err for retry.Do, which retries only what is
// marked transient: the network's and the server's transient failures.
func retryable(err error) error { return classify(err) }

// mark makes errors.Is(err, sentinel) true without changing err's message.
func mark(sentinel, err error) error { return &marked{sentinel: sentinel, err: err} }

type marked struct{ sentinel, err error }

func (m *marked) Error() string   { return m.err.Error() }
func (m *marked) Unwrap() []error { return []error{m.sentinel, m.err} }

// SQLSTATE codes we act on.
const (
	codeObjectInUse     = "55006" // replication slot is active for another PID
	codeDuplicateObject = "42710"
	codeNoPrivilege     = "42501" // insufficient_privilege
	codeLimitExceeded   = "53400" // configuration_limit_exceeded: all replication slots are in use
)

// createSlotError classifies a failed slot creation with the remedy of
// its cause: a role without the REPLICATION attribute is permanent; every
// slot of the server in use is retried (one may be freed), with the way
// to free one.
func createSlotError(slot string, err error) error {
	err = fmt.Errorf("create replication slot %q: %w", slot, err)
	switch pgCode(err) {
	case codeNoPrivilege:
		return outboxcdc.Permanent(err, "give the role the REPLICATION attribute (ALTER ROLE ... REPLICATION)")
	case codeLimitExceeded:
		return outboxcdc.TransientHint(err, "drop a slot nothing uses (find them with SELECT slot_name, active FROM pg_replication_slots, "+
			"drop one with pg_drop_replication_slot), or raise max_replication_slots, which needs a server restart")
	}
	return classify(err)
}

// classify marks server errors that will not go away by reconnecting
// permanent: authentication (28), unknown database (3D), missing objects,
// syntax and privileges (42), unsupported features (0A), an invalidated
// slot or WAL already removed (55000, 58P01). Every other server error
// (connection trouble, shutdowns 57P0x, too many connections 53, an active
// slot 55006) and a failed network round trip (outboxcdc.Network, a pgconn
// timeout, a request pgconn says is safe to retry) is marked transient. An
// error already classified keeps its mark; anything else is left unmarked,
// so it is permanent.
func classify(err error) error {
	if err == nil || outboxcdc.IsClassified(err) || errors.Is(err, context.Canceled) {
		return err
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		if tlsconf.IsVerifyError(err) {
			// Reconnecting cannot fix a certificate that does not verify.
			return permanent(fmt.Errorf("%w (TLS: check sslmode and sslrootcert in source.dsn against the server's certificate)", err))
		}
		if pgconn.Timeout(err) || pgconn.SafeToRetry(err) {
			return outboxcdc.Transient(err)
		}
		return outboxcdc.Network(err)
	}
	if pgErr.Code == codeObjectInUse {
		return outboxcdc.Transient(err)
	}
	switch pgErr.Code[:2] {
	case "28", "3D", "42", "0A":
		return permanent(err)
	}
	if pgErr.Code == "55000" || pgErr.Code == "58P01" {
		return permanent(err)
	}
	return outboxcdc.Transient(err)
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
	// ErrServerSettings: the server is not set up for logical decoding
	// (wal_level).
	ErrServerSettings = errors.New("server settings unsuitable for logical decoding")
	// ErrSlot: the replication slot is missing and may not be created, was
	// dropped, or is not a logical pgoutput slot.
	ErrSlot = errors.New("replication slot unusable")
	// ErrPublication: the publication is missing and may not be created,
	// or does not include the outbox table.
	ErrPublication = errors.New("publication unusable")
	// ErrTableLayout: a row of an outbox table that lacks a role column
	// its route names (a column dropped, or a new table matching
	// source.tables laid out differently without a route.tables entry).
	ErrTableLayout = errors.New("outbox table lacks a column the route needs")
	// errSilent: nothing arrived on the replication connection for the
	// receive timeout. Transient: the source reconnects.
	errSilent = errors.New("replication connection silent")
)

// withHint is a permanent error wrapping sentinel and cause, with the
// remedy as its hint: "sentinel: cause (hint)".
func withHint(sentinel, cause error, hint string) error {
	return outboxcdc.Permanent(fmt.Errorf("%w: %w", sentinel, cause), hint)
}

// behindSlot is the error for a checkpoint at from while the slot has
// confirmed everything before confirmed; recovery is the way back
// (Source.recovery).
func behindSlot(slot string, from, confirmed pglogrepl.LSN, recovery string) error {
	return withHint(ErrBehindSlot, behindSlotCause(slot, from, confirmed), behindSlotHint(recovery))
}

func behindSlotCause(slot string, from, confirmed pglogrepl.LSN) error {
	return fmt.Errorf("the checkpoint (LSN %s) is behind replication slot %q's confirmed_flush_lsn %s: the checkpoint is older than what the slot confirmed "+
		"(restored from a backup, moved back by hand), or the slot was dropped and created again, or advanced by something else", from, slot, confirmed)
}

func behindSlotHint(recovery string) string {
	return "PostgreSQL streams a slot only from its confirmed position, so the transactions in between cannot be read from it again and starting would skip them; " + recovery
}
