package wal

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pglogrepl"
	outboxcdc "github.com/outbox-cdc/outbox-cdc"
)

// Kind is the position kind this source issues:
//
//	postgres:<LSN>,timeline=<T>,system=<S>
//
// e.g. "postgres:0/16B3748,timeline=1,system=7345678901234567890". The LSN
// is in PostgreSQL's usual "X/X" upper-case hex form. A Tx's End is the
// TransactionEndLSN of its Commit message: the first byte after the
// transaction's commit record. Restarting from it resumes with the next
// transaction that commits after it.
//
// The timeline and the system identifier say which server history the LSN
// belongs to (see Identity): every connect proves the checkpoint is on the
// history of the server it reached before streaming (identity.go). The
// short form "postgres:<LSN>" is what earlier versions wrote, what an
// operator types and what a Debezium offset converts to: it still loads,
// with an unknown identity, and the next checkpoint carries the identity.
const Kind = "postgres"

// Identity names the server history a position was read from: the
// cluster's system identifier (IDENTIFY_SYSTEM: set by initdb, shared by a
// primary and every physical standby built from it with pg_basebackup) and
// the timeline the position was read on (a promotion starts a new one).
// The zero Identity is unknown.
type Identity struct {
	System   uint64
	Timeline int32
}

// Known reports whether the identity is set.
func (id Identity) Known() bool { return id.System != 0 && id.Timeline != 0 }

func (id Identity) String() string {
	if !id.Known() {
		return "unknown server"
	}
	return "timeline " + strconv.FormatInt(int64(id.Timeline), 10) + " of system " + strconv.FormatUint(id.System, 10)
}

// Position returns the position for lsn read on id (the short form when id
// is unknown).
func (id Identity) Position(lsn pglogrepl.LSN) outboxcdc.Position {
	b := append(make([]byte, 0, 64), Kind+":"...) // once per transaction: no fmt
	return outboxcdc.Position(id.appendBody(b, lsn))
}

func (id Identity) appendBody(dst []byte, lsn pglogrepl.LSN) []byte {
	dst = appendLSN(dst, lsn)
	if !id.Known() {
		return dst
	}
	dst = append(dst, ",timeline="...)
	dst = strconv.AppendInt(dst, int64(id.Timeline), 10)
	dst = append(dst, ",system="...)
	return strconv.AppendUint(dst, id.System, 10)
}

// MakePosition returns the short form of the position for an LSN, without
// an identity.
func MakePosition(lsn pglogrepl.LSN) outboxcdc.Position {
	return Identity{}.Position(lsn)
}

// ParsePosition returns the LSN of a position issued by this source.
func ParsePosition(p outboxcdc.Position) (pglogrepl.LSN, error) {
	lsn, _, err := ParsePositionIdentity(p)
	return lsn, err
}

// ParsePositionIdentity returns the LSN of a position issued by this
// source and the identity it names (zero for the short form).
func ParsePositionIdentity(p outboxcdc.Position) (pglogrepl.LSN, Identity, error) {
	if err := p.CheckKind(Kind); err != nil {
		return 0, Identity{}, err
	}
	return parseBody(p.Body(), string(p))
}

// parseBody reads "<LSN>[,timeline=<T>,system=<S>]"; what names the
// position in errors.
func parseBody(body, what string) (pglogrepl.LSN, Identity, error) {
	lsnText, rest, hasRest := strings.Cut(body, ",")
	lsn, err := pglogrepl.ParseLSN(lsnText)
	if err != nil {
		return 0, Identity{}, fmt.Errorf("position %q: bad LSN: %w", what, err)
	}
	var id Identity
	for hasRest {
		var field string
		field, rest, hasRest = strings.Cut(rest, ",")
		key, val, _ := strings.Cut(field, "=")
		switch key {
		case "timeline":
			t, err := strconv.ParseInt(val, 10, 32)
			if err != nil || t < 1 || id.Timeline != 0 {
				return 0, Identity{}, fmt.Errorf("position %q: timeline %q is not a timeline (1 or more, once)", what, val)
			}
			id.Timeline = int32(t)
		case "system":
			s, err := strconv.ParseUint(val, 10, 64)
			if err != nil || s == 0 || id.System != 0 {
				return 0, Identity{}, fmt.Errorf("position %q: system %q is not a system identifier (a positive decimal number, once)", what, val)
			}
			id.System = s
		default:
			return 0, Identity{}, fmt.Errorf("position %q: unknown field %q (want <LSN>,timeline=<T>,system=<S>)", what, field)
		}
	}
	if (id.Timeline == 0) != (id.System == 0) {
		return 0, Identity{}, errors.New("position " + strconv.Quote(what) + ": timeline and system go together (<LSN>,timeline=<T>,system=<S>, or the LSN alone)")
	}
	return lsn, id, nil
}

const hexUpper = "0123456789ABCDEF"

// appendLSN appends lsn as X/X without fmt (it runs once per row for
// Event.Origin).
func appendLSN(dst []byte, lsn pglogrepl.LSN) []byte {
	dst = appendHex(dst, uint32(lsn>>32))
	dst = append(dst, '/')
	return appendHex(dst, uint32(lsn))
}

func appendHex(dst []byte, v uint32) []byte {
	if v == 0 {
		return append(dst, '0')
	}
	var tmp [8]byte
	i := len(tmp)
	for v != 0 {
		i--
		tmp[i] = hexUpper[v&0xF]
		v >>= 4
	}
	return append(dst, tmp[i:]...)
}
