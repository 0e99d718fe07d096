package wal

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
	"github.com/outbox-cdc/outbox-cdc/backfill"
)

// Positions as operators type and read them (outbox-cdc position).

// Forms of a position (Form).
const (
	FormLSN     = "lsn"
	FormPending = "pending"
)

// ParseInput reads a position typed by an operator, a full position
// ("postgres:0/16B3748,timeline=1,system=7345678901234567890" or
// "postgres:0/16B3748") or its body ("0/16B3748"), and returns it in
// canonical form. An LSN alone has no identity: the connector takes it as
// the server's it connects to (Identity).
func ParseInput(s string) (outboxcdc.Position, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return "", errors.New("empty position")
	}
	full := outboxcdc.Position(s)
	if full.Kind() != Kind {
		full = outboxcdc.MakePosition(Kind, s)
	}
	lsn, id, err := ParsePositionIdentity(full)
	if err != nil {
		return "", err
	}
	if lsn == 0 {
		return "", fmt.Errorf("position %q: LSN 0/0 is not a position", s)
	}
	return id.Position(lsn), nil
}

// Describe says in words what a position is: "LSN 0/16B3748 on timeline 1
// of system 7345678901234567890".
func Describe(p outboxcdc.Position) string {
	if backfill.IsPending(p) {
		return backfill.Describe(p, Kind, Describe)
	}
	lsn, id, err := ParsePositionIdentity(p)
	if err != nil {
		return "unreadable PostgreSQL position (" + err.Error() + ")"
	}
	if !id.Known() {
		return "LSN " + lsn.String()
	}
	return "LSN " + lsn.String() + " on " + id.String()
}

// Form names a position's form: FormLSN, FormPending, or "" when it cannot
// be read.
func Form(p outboxcdc.Position) string {
	if backfill.IsPending(p) {
		return FormPending
	}
	if _, err := ParsePosition(p); err != nil {
		return ""
	}
	return FormLSN
}

// Compare orders two positions as cmp.Compare does (-1: a is before b).
// A backfill in progress cannot be ordered, nor can positions of two
// different systems: the error says why. Positions on two timelines of one
// system are ordered by LSN (along the history of the later one).
func Compare(a, b outboxcdc.Position) (int, error) {
	if a == b {
		return 0, nil
	}
	if ok, err := backfill.ComparePending(a, b); ok {
		return 0, err
	}
	x, idA, err1 := ParsePositionIdentity(a)
	y, idB, err2 := ParsePositionIdentity(b)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("a position cannot be read: %w", err)
	}
	if idA.Known() && idB.Known() && idA.System != idB.System {
		return 0, fmt.Errorf("the positions belong to two different PostgreSQL systems (%d and %d): they cannot be ordered", idA.System, idB.System)
	}
	return cmp.Compare(x, y), nil
}

// LatestPosition asks the server for its current WAL position (the flush
// position IDENTIFY_SYSTEM reports, with the server's identity), for
// `position set --to latest`. Positions have one form, so form is not used.
func LatestPosition(ctx context.Context, cfg Config, form string) (outboxcdc.Position, error) {
	s := &Source{cfg: cfg}
	conn, err := s.connectReplication(ctx)
	if err != nil {
		return "", err
	}
	defer closeRepl(conn)
	srv, err := s.identify(ctx, conn)
	if err != nil {
		return "", err
	}
	return srv.id.Position(srv.flushed), nil
}
