package wal

import (
	"fmt"

	"github.com/jackc/pglogrepl"
	outboxcdc "github.com/outbox-cdc/outbox-cdc"
)

// Kind is the position kind this source issues: "postgres:<LSN>", the LSN in
// PostgreSQL's usual "X/X" upper-case hex form, e.g. "postgres:0/16B3748".
// A Tx's End is the TransactionEndLSN of its Commit message: the first byte
// after the transaction's commit record. Restarting from it resumes with the
// next transaction that commits after it.
const Kind = "postgres"

// MakePosition returns the position for an LSN.
func MakePosition(lsn pglogrepl.LSN) outboxcdc.Position {
	return outboxcdc.MakePosition(Kind, string(appendLSN(nil, lsn)))
}

// ParsePosition returns the LSN of a position issued by this source.
func ParsePosition(p outboxcdc.Position) (pglogrepl.LSN, error) {
	if err := p.CheckKind(Kind); err != nil {
		return 0, err
	}
	lsn, err := pglogrepl.ParseLSN(p.Body())
	if err != nil {
		return 0, fmt.Errorf("position %q: bad LSN: %w", string(p), err)
	}
	return lsn, nil
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
