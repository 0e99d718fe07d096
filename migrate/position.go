package migrate

import (
	"fmt"
	"github.com/outbox-cdc/outbox-cdc/backfill"
	"regexp"
	"strconv"
	"strings"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
	"github.com/outbox-cdc/outbox-cdc/binlog"
	"github.com/outbox-cdc/outbox-cdc/wal"
)

var (
	mysqlGTIDStart = regexp.MustCompile(`^[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}:`)
	mariaDBList    = regexp.MustCompile(`^\d+-\d+-\d+(,\d+-\d+-\d+)*$`)
)

// ParsePosition reads a position typed by an operator for a source of the
// given kind and returns it in canonical form. It accepts a full position
// ("mysql:file:mysql-bin.000003:4", "postgres:0/16B3748") or a short form
// for the kind: for mysql a binlog "file:offset", a MySQL GTID set
// "uuid:1-5[,...]", a MariaDB GTID list "0-1-42[,...]" or a body with its
// form prefix ("file:...", "gtid:...", "mariadb-gtid:..."); for postgres an
// LSN "0/16B3748". A position of another source kind is refused with an
// error wrapping outboxcdc.ErrForeignPosition.
func ParsePosition(kind, s string) (outboxcdc.Position, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return "", fmt.Errorf("empty position")
	}
	full := outboxcdc.Position(s)
	switch full.Kind() {
	case binlog.Kind, wal.Kind:
		// a full position
	default:
		full = outboxcdc.MakePosition(kind, shortBody(kind, s))
	}
	switch kind {
	case binlog.Kind:
		p, err := binlog.ParsePosition(full)
		if err != nil {
			return "", err
		}
		return p.Encode(), nil
	case wal.Kind:
		lsn, err := wal.ParsePosition(full)
		if err != nil {
			return "", err
		}
		if lsn == 0 {
			return "", fmt.Errorf("position %q: LSN 0/0 is not a position", s)
		}
		return wal.MakePosition(lsn), nil
	}
	return "", fmt.Errorf("unknown source kind %q", kind)
}

func shortBody(kind, s string) string {
	if kind != binlog.Kind {
		return s
	}
	switch {
	case strings.HasPrefix(s, "file:"), strings.HasPrefix(s, "gtid:"), strings.HasPrefix(s, "mariadb-gtid:"):
		return s
	case mysqlGTIDStart.MatchString(s):
		return "gtid:" + s
	case mariaDBList.MatchString(s):
		return "mariadb-gtid:" + s
	}
	return "file:" + s
}

// Describe says in words what a position is, e.g. "binlog file
// mysql-bin.000003 offset 4", "MariaDB GTID 0-1-42", "LSN 0/16B3748".
func Describe(p outboxcdc.Position) string {
	if backfill.IsPending(p) {
		st, err := backfill.Parse(p, p.Kind())
		if err != nil {
			return "unreadable pending-backfill position (" + err.Error() + ")"
		}
		return fmt.Sprintf("pending backfill in progress: rows up to key %d published (pending rows go up to key %d), then streaming from %s",
			st.Last, st.High, Describe(st.StreamPosition(p.Kind())))
	}
	switch p.Kind() {
	case binlog.Kind:
		bp, err := binlog.ParsePosition(p)
		if err != nil {
			return "unreadable MySQL/MariaDB position (" + err.Error() + ")"
		}
		switch {
		case bp.MySQLGTID != nil:
			return "MySQL GTID set " + bp.MySQLGTID.String()
		case bp.IsMariaDB && len(bp.MariaDB) == 1:
			return "MariaDB GTID " + bp.MariaDB.String()
		case bp.IsMariaDB:
			return fmt.Sprintf("MariaDB GTID position %s (%d domains)", bp.MariaDB.String(), len(bp.MariaDB))
		}
		return fmt.Sprintf("binlog file %s offset %d", bp.File, bp.Offset)
	case wal.Kind:
		lsn, err := wal.ParsePosition(p)
		if err != nil {
			return "unreadable PostgreSQL position (" + err.Error() + ")"
		}
		return "LSN " + lsn.String()
	}
	return fmt.Sprintf("position of an unknown source kind %q", p.Kind())
}

// Form names a position's form: "file", "gtid", "mariadb-gtid", "lsn",
// or "" if it cannot be read.
func Form(p outboxcdc.Position) string {
	if backfill.IsPending(p) {
		return "pending"
	}
	switch p.Kind() {
	case binlog.Kind:
		bp, err := binlog.ParsePosition(p)
		switch {
		case err != nil:
			return ""
		case bp.MySQLGTID != nil:
			return "gtid"
		case bp.IsMariaDB:
			return "mariadb-gtid"
		}
		return "file"
	case wal.Kind:
		if _, err := wal.ParsePosition(p); err == nil {
			return "lsn"
		}
	}
	return ""
}

// Direction is how a new position relates to the one it replaces.
type Direction int

const (
	Same          Direction = iota // the same point
	Backward                       // earlier: transactions in between are published again
	Forward                        // later: transactions in between are skipped, never published
	NotComparable                  // different forms, servers or domains: cannot tell
)

func (d Direction) String() string {
	switch d {
	case Same:
		return "same"
	case Backward:
		return "backward"
	case Forward:
		return "forward"
	}
	return "not comparable"
}

// Compare tells whether moving a checkpoint from old to new re-publishes
// (Backward) or skips (Forward) transactions. Why explains NotComparable.
func Compare(old, new outboxcdc.Position) (d Direction, why string) {
	if old == new {
		return Same, ""
	}
	if old.Kind() != new.Kind() {
		return NotComparable, fmt.Sprintf("the positions belong to different sources (%q, %q)", old.Kind(), new.Kind())
	}
	if backfill.IsPending(old) || backfill.IsPending(new) {
		return NotComparable, "a pending backfill was in progress; replacing its position abandons the backfill"
	}
	switch old.Kind() {
	case wal.Kind:
		a, err1 := wal.ParsePosition(old)
		b, err2 := wal.ParsePosition(new)
		if err1 != nil || err2 != nil {
			return NotComparable, "a position cannot be read"
		}
		return order(uint64(a), uint64(b)), ""
	case binlog.Kind:
		a, err1 := binlog.ParsePosition(old)
		b, err2 := binlog.ParsePosition(new)
		if err1 != nil || err2 != nil {
			return NotComparable, "a position cannot be read"
		}
		return compareBinlog(a, b)
	}
	return NotComparable, "unknown source kind"
}

func order(a, b uint64) Direction {
	switch {
	case a == b:
		return Same
	case b < a:
		return Backward
	}
	return Forward
}

func compareBinlog(a, b binlog.Pos) (Direction, string) {
	switch {
	case a.MySQLGTID != nil && b.MySQLGTID != nil:
		switch {
		case a.MySQLGTID.Equal(b.MySQLGTID):
			return Same, ""
		case a.MySQLGTID.Contain(b.MySQLGTID):
			return Backward, ""
		case b.MySQLGTID.Contain(a.MySQLGTID):
			return Forward, ""
		}
		return NotComparable, "neither GTID set contains the other"
	case a.IsMariaDB && b.IsMariaDB:
		if len(a.MariaDB) != len(b.MariaDB) {
			return NotComparable, "the MariaDB GTID positions name different replication domains"
		}
		d := Same
		for i := range a.MariaDB {
			x, y := a.MariaDB[i], b.MariaDB[i]
			if x.DomainID != y.DomainID {
				return NotComparable, "the MariaDB GTID positions name different replication domains"
			}
			o := order(x.SequenceNumber, y.SequenceNumber)
			switch {
			case o == Same:
			case d == Same:
				d = o
			case d != o:
				return NotComparable, "some domains move forward and others backward"
			}
		}
		return d, ""
	case a.File != "" && b.File != "" && !a.IsGTID() && !b.IsGTID():
		baseA, seqA, okA := splitBinlogName(a.File)
		baseB, seqB, okB := splitBinlogName(b.File)
		if !okA || !okB || baseA != baseB {
			return NotComparable, "the binlog file names have different bases"
		}
		if seqA != seqB {
			return order(seqA, seqB), ""
		}
		return order(uint64(a.Offset), uint64(b.Offset)), ""
	}
	return NotComparable, "the positions are in different forms (file, MySQL GTID, MariaDB GTID)"
}

// splitBinlogName splits "mysql-bin.000003" into "mysql-bin" and 3.
func splitBinlogName(f string) (string, uint64, bool) {
	i := strings.LastIndexByte(f, '.')
	if i < 0 {
		return "", 0, false
	}
	n, err := strconv.ParseUint(f[i+1:], 10, 64)
	if err != nil {
		return "", 0, false
	}
	return f[:i], n, true
}
