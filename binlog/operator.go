package binlog

import (
	"cmp"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
	"github.com/outbox-cdc/outbox-cdc/source"
)

// Positions as operators type and read them (outbox-cdc position).

var (
	mysqlGTIDStart = regexp.MustCompile(`^[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}:`)
	mariaDBList    = regexp.MustCompile(`^\d+-\d+-\d+(,\d+-\d+-\d+)*$`)
)

// ParseInput reads a position typed by an operator and returns it in
// canonical form: a full position ("mysql:file:mysql-bin.000003:4") or a
// body, with its form prefix ("file:...", "gtid:...", "mariadb-gtid:...")
// or without: a binlog "file:offset", a MySQL GTID set "uuid:1-5[,...]" or
// a MariaDB GTID list "0-1-42[,...]".
func ParseInput(s string) (outboxcdc.Position, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return "", errors.New("empty position")
	}
	full := outboxcdc.Position(s)
	if full.Kind() != Kind {
		switch {
		case strings.HasPrefix(s, bodyFile), strings.HasPrefix(s, bodyMySQLGTID), strings.HasPrefix(s, bodyMariaDBGTID):
		case mysqlGTIDStart.MatchString(s):
			s = bodyMySQLGTID + s
		case mariaDBList.MatchString(s):
			s = bodyMariaDBGTID + s
		default:
			s = bodyFile + s
		}
		full = outboxcdc.MakePosition(Kind, s)
	}
	p, err := ParsePosition(full)
	if err != nil {
		return "", err
	}
	return p.Encode(), nil
}

// positions is the position text of this source (source.Positions).
var positions = source.Positions[Pos]{Kind: Kind, Server: "MySQL/MariaDB", Parse: ParsePosition, Words: describe, FormOf: form, Order: compare}

// Describe says in words what a position is: "binlog file mysql-bin.000003
// offset 4", "MariaDB GTID 0-1-42", "MySQL GTID set ...".
func Describe(p outboxcdc.Position) string { return positions.Describe(p) }

func describe(bp Pos) string {
	switch {
	case bp.MySQLGTID != nil:
		return "MySQL GTID set " + bp.MySQLGTID.String()
	case bp.IsMariaDB && len(bp.MariaDB) == 1:
		return "MariaDB GTID " + bp.MariaDB.String()
	case bp.IsMariaDB:
		return fmt.Sprintf("MariaDB GTID position %s (%d domains)", bp.MariaDB.String(), len(bp.MariaDB))
	}
	return fmt.Sprintf("binlog file %s offset %d", bp.File, bp.Offset)
}

// Forms of a position (Form).
const (
	FormFile        = "file"
	FormMySQLGTID   = "gtid"
	FormMariaDBGTID = "mariadb-gtid"
	FormPending     = source.FormPending
)

// Form names a position's form: FormFile, FormMySQLGTID, FormMariaDBGTID,
// FormPending, or "" when it cannot be read.
func Form(p outboxcdc.Position) string { return positions.Form(p) }

func form(bp Pos) string {
	switch {
	case bp.MySQLGTID != nil:
		return FormMySQLGTID
	case bp.IsMariaDB:
		return FormMariaDBGTID
	}
	return FormFile
}

// Compare orders two positions of this source as cmp.Compare does: -1
// when a is before b, 0 when they are the same point, +1 when a is after
// b. Positions in different forms, of different servers or replication
// domains, or of a backfill in progress cannot be ordered: the error says
// why.
func Compare(a, b outboxcdc.Position) (int, error) { return positions.Compare(a, b) }

func compare(x, y Pos) (int, error) {
	switch {
	case x.MySQLGTID != nil && y.MySQLGTID != nil:
		switch {
		case x.MySQLGTID.Equal(y.MySQLGTID):
			return 0, nil
		case x.MySQLGTID.Contain(y.MySQLGTID):
			return 1, nil
		case y.MySQLGTID.Contain(x.MySQLGTID):
			return -1, nil
		}
		return 0, errors.New("neither GTID set contains the other")
	case x.IsMariaDB && y.IsMariaDB:
		if len(x.MariaDB) != len(y.MariaDB) {
			return 0, errors.New("the MariaDB GTID positions name different replication domains")
		}
		d := 0
		for i := range x.MariaDB {
			if x.MariaDB[i].DomainID != y.MariaDB[i].DomainID {
				return 0, errors.New("the MariaDB GTID positions name different replication domains")
			}
			o := cmp.Compare(x.MariaDB[i].SequenceNumber, y.MariaDB[i].SequenceNumber)
			switch {
			case o == 0:
			case d == 0:
				d = o
			case d != o:
				return 0, errors.New("some domains move forward and others backward")
			}
		}
		return d, nil
	case !x.IsGTID() && !y.IsGTID():
		baseX, seqX, okX := splitBinlogName(x.File)
		baseY, seqY, okY := splitBinlogName(y.File)
		if !okX || !okY || baseX != baseY {
			return 0, errors.New("the binlog file names have different bases")
		}
		if seqX != seqY {
			return cmp.Compare(seqX, seqY), nil
		}
		return cmp.Compare(x.Offset, y.Offset), nil
	}
	return 0, errors.New("the positions are in different forms (file, MySQL GTID, MariaDB GTID)")
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
