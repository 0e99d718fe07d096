package wal

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pglogrepl"
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
// ("postgres:0/16B3748") or an LSN ("0/16B3748"), and returns it in
// canonical form.
func ParseInput(s string) (outboxcdc.Position, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return "", errors.New("empty position")
	}
	full := outboxcdc.Position(s)
	if full.Kind() != Kind {
		full = outboxcdc.MakePosition(Kind, s)
	}
	lsn, err := ParsePosition(full)
	if err != nil {
		return "", err
	}
	if lsn == 0 {
		return "", fmt.Errorf("position %q: LSN 0/0 is not a position", s)
	}
	return MakePosition(lsn), nil
}

// Describe says in words what a position is: "LSN 0/16B3748".
func Describe(p outboxcdc.Position) string {
	if backfill.IsPending(p) {
		return backfill.Describe(p, Kind, Describe)
	}
	lsn, err := ParsePosition(p)
	if err != nil {
		return "unreadable PostgreSQL position (" + err.Error() + ")"
	}
	return "LSN " + lsn.String()
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
// A backfill in progress cannot be ordered: the error says why.
func Compare(a, b outboxcdc.Position) (int, error) {
	if a == b {
		return 0, nil
	}
	if ok, err := backfill.ComparePending(a, b); ok {
		return 0, err
	}
	x, err1 := ParsePosition(a)
	y, err2 := ParsePosition(b)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("a position cannot be read: %w", err)
	}
	return cmp.Compare(x, y), nil
}

// LatestPosition asks the server for its current WAL position
// (pg_current_wal_lsn), for `position set --to latest`. Positions have one
// form, so form is not used.
func LatestPosition(ctx context.Context, cfg Config, form string) (outboxcdc.Position, error) {
	s := &Source{cfg: cfg}
	conn, err := s.connectMeta(ctx)
	if err != nil {
		return "", err
	}
	defer closeMeta(conn)
	var text string
	if err := conn.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&text); err != nil {
		return "", classify(err)
	}
	lsn, err := pglogrepl.ParseLSN(text)
	if err != nil {
		return "", err
	}
	return MakePosition(lsn), nil
}
