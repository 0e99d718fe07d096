package wal

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pglogrepl"
	outboxcdc "github.com/outbox-cdc/outbox-cdc"
	"github.com/outbox-cdc/outbox-cdc/source"
)

// Positions as operators type and read them (outbox-cdc position).

// Forms of a position (Form).
const (
	FormLSN     = "lsn"
	FormPending = source.FormPending
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

// walPos is a position read: its LSN and the server history it names.
type walPos struct {
	lsn pglogrepl.LSN
	id  Identity
}

// positions is the position text of this source (source.Positions).
var positions = source.Positions[walPos]{
	Kind: Kind, Server: "PostgreSQL",
	Parse: func(p outboxcdc.Position) (walPos, error) {
		lsn, id, err := ParsePositionIdentity(p)
		return walPos{lsn, id}, err
	},
	Words: func(x walPos) string {
		if !x.id.Known() {
			return "LSN " + x.lsn.String()
		}
		return "LSN " + x.lsn.String() + " on " + x.id.String()
	},
	FormOf: func(walPos) string { return FormLSN },
	Order: func(x, y walPos) (int, error) {
		if x.id.Known() && y.id.Known() && x.id.System != y.id.System {
			return 0, fmt.Errorf("the positions belong to two different PostgreSQL systems (%d and %d): they cannot be ordered", x.id.System, y.id.System)
		}
		return cmp.Compare(x.lsn, y.lsn), nil
	},
}

// Describe says in words what a position is: "LSN 0/16B3748 on timeline 1
// of system 7345678901234567890".
func Describe(p outboxcdc.Position) string { return positions.Describe(p) }

// Form names a position's form: FormLSN, FormPending, or "" when it cannot
// be read.
func Form(p outboxcdc.Position) string { return positions.Form(p) }

// Compare orders two positions as cmp.Compare does (-1: a is before b).
// A backfill in progress cannot be ordered, nor can positions of two
// different systems: the error says why. Positions on two timelines of one
// system are ordered by LSN (along the history of the later one).
func Compare(a, b outboxcdc.Position) (int, error) { return positions.Compare(a, b) }

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
