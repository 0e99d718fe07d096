package binlog

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/go-mysql-org/go-mysql/mysql"
	outboxcdc "github.com/outbox-cdc/outbox-cdc"
)

// Kind is the Position kind this source issues and accepts.
const Kind = "mysql"

// Position bodies (after the "mysql:" kind):
//
//	file:mariadb-bin.000003:1234          binlog file and offset
//	gtid:3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5,...   MySQL executed GTID set
//	mariadb-gtid:0-1-42,1-7-9              MariaDB GTID position, one per domain
//
// Every position is the point just after a transaction: the offset of the
// event that follows its XID/COMMIT, or the GTID set that includes it. A
// replica that starts there receives the next transaction first.
//
// While an XA transaction with outbox rows is prepared but not yet
// committed, its rows are in the binlog before the position, yet not
// delivered: they go out with its XA COMMIT. The position then carries a
// restart point too, the point just before the oldest such transaction,
// after a ";restart=" suffix in any of the three forms:
//
//	mariadb-gtid:0-1-57;restart=mariadb-gtid:0-1-42
//
// A restart reads from the restart point, and of the transactions up to
// the main position it only takes note of the prepared ones again.
const (
	bodyFile        = "file:"
	bodyMySQLGTID   = "gtid:"
	bodyMariaDBGTID = "mariadb-gtid:"
	restartSep      = ";restart="
)

// Pos is a decoded binlog position. Exactly one form is set: GTIDs (MySQL
// set or MariaDB per-domain list) or File/Offset.
type Pos struct {
	File   string
	Offset uint32

	MySQLGTID *mysql.MysqlGTIDSet // MySQL GTID set; nil unless in MySQL GTID form
	MariaDB   MariaDBGTIDs        // MariaDB GTID position; meaningful when IsMariaDB
	IsMariaDB bool                // MariaDB GTID form

	// Restart, when set, is where reading must begin so that prepared,
	// not yet committed XA transactions with outbox rows are read again;
	// everything up to the position itself was delivered. Its own Restart
	// is nil.
	Restart *Pos
}

// IsGTID reports whether p is in one of the GTID forms.
func (p *Pos) IsGTID() bool { return p.MySQLGTID != nil || p.IsMariaDB }

// Encode renders p as an outboxcdc.Position of kind "mysql".
func (p *Pos) Encode() outboxcdc.Position {
	if p.Restart != nil {
		main := *p
		main.Restart = nil
		return outboxcdc.MakePosition(Kind, main.Encode().Body()+restartSep+p.Restart.Encode().Body())
	}
	switch {
	case p.MySQLGTID != nil:
		// String() joins with "," and is sorted by UUID, so it is stable.
		return outboxcdc.MakePosition(Kind, bodyMySQLGTID+p.MySQLGTID.String())
	case p.IsMariaDB:
		return outboxcdc.MakePosition(Kind, bodyMariaDBGTID+p.MariaDB.String())
	default:
		return outboxcdc.MakePosition(Kind, bodyFile+p.File+":"+strconv.FormatUint(uint64(p.Offset), 10))
	}
}

// String is the position body, for logs.
func (p *Pos) String() string { return p.Encode().Body() }

// Clone returns a deep copy.
func (p *Pos) Clone() Pos {
	c := *p
	if p.MySQLGTID != nil {
		c.MySQLGTID = p.MySQLGTID.Clone().(*mysql.MysqlGTIDSet)
	}
	c.MariaDB = slices.Clone(p.MariaDB)
	if p.Restart != nil {
		r := p.Restart.Clone()
		c.Restart = &r
	}
	return c
}

// ReadFrom is where a stream resuming at p starts reading: the restart
// point when there is one, else p.
func (p *Pos) ReadFrom() Pos {
	if p.Restart != nil {
		return p.Restart.Clone()
	}
	return p.Clone()
}

// ParsePosition decodes a position written by Encode. A position of another
// kind wraps outboxcdc.ErrForeignPosition.
func ParsePosition(p outboxcdc.Position) (Pos, error) {
	if err := p.CheckKind(Kind); err != nil {
		return Pos{}, err
	}
	body := p.Body()
	if main, restart, ok := strings.Cut(body, restartSep); ok {
		m, err := ParsePosition(outboxcdc.MakePosition(Kind, main))
		if err != nil {
			return Pos{}, err
		}
		r, err := ParsePosition(outboxcdc.MakePosition(Kind, restart))
		if err != nil {
			return Pos{}, err
		}
		if r.Restart != nil || r.IsGTID() != m.IsGTID() || r.IsMariaDB != m.IsMariaDB {
			return Pos{}, fmt.Errorf("binlog position %q: the restart point must be a plain position of the same form", string(p))
		}
		m.Restart = &r
		return m, nil
	}
	switch {
	case strings.HasPrefix(body, bodyFile):
		rest := body[len(bodyFile):]
		i := strings.LastIndexByte(rest, ':')
		if i <= 0 {
			return Pos{}, fmt.Errorf("binlog position %q: want file:<name>:<offset>", string(p))
		}
		off, err := strconv.ParseUint(rest[i+1:], 10, 32)
		if err != nil || off < 4 {
			return Pos{}, fmt.Errorf("binlog position %q: offset %q is not a number >= 4", string(p), rest[i+1:])
		}
		return Pos{File: rest[:i], Offset: uint32(off)}, nil
	case strings.HasPrefix(body, bodyMySQLGTID):
		s, err := mysql.ParseMysqlGTIDSet(body[len(bodyMySQLGTID):])
		if err != nil {
			return Pos{}, fmt.Errorf("binlog position %q: bad MySQL GTID set: %w", string(p), err)
		}
		return Pos{MySQLGTID: s.(*mysql.MysqlGTIDSet)}, nil
	case strings.HasPrefix(body, bodyMariaDBGTID):
		g, err := ParseMariaDBGTIDs(body[len(bodyMariaDBGTID):])
		if err != nil {
			return Pos{}, fmt.Errorf("binlog position %q: %w", string(p), err)
		}
		return Pos{MariaDB: g, IsMariaDB: true}, nil
	}
	return Pos{}, fmt.Errorf("binlog position %q: unknown form (want file:, gtid: or mariadb-gtid:)", string(p))
}

// MariaDBGTIDs is a MariaDB GTID position: the last GTID applied in each
// replication domain, sorted by domain, at most one per domain (what
// @slave_connect_state accepts). go-mysql's MariadbGTIDSet kept one entry
// per (domain, server) pair before v1.15, which the server refuses after a
// failover changed the server id within a domain; the source keeps its
// own, in the order it saves.
type MariaDBGTIDs []mysql.MariadbGTID

// ParseMariaDBGTIDs parses "0-1-42,1-7-9" (empty means no GTID yet).
func ParseMariaDBGTIDs(s string) (MariaDBGTIDs, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return MariaDBGTIDs{}, nil
	}
	var g MariaDBGTIDs
	for _, part := range strings.Split(s, ",") {
		f := strings.Split(strings.TrimSpace(part), "-")
		if len(f) != 3 {
			return nil, fmt.Errorf("bad MariaDB GTID %q: want domain-server-sequence", part)
		}
		d, err1 := strconv.ParseUint(f[0], 10, 32)
		sv, err2 := strconv.ParseUint(f[1], 10, 32)
		seq, err3 := strconv.ParseUint(f[2], 10, 64)
		if err1 != nil || err2 != nil || err3 != nil {
			return nil, fmt.Errorf("bad MariaDB GTID %q: want domain-server-sequence numbers", part)
		}
		if g.index(uint32(d)) >= 0 {
			return nil, fmt.Errorf("bad MariaDB GTID position %q: domain %d appears twice", s, d)
		}
		g.Set(mysql.MariadbGTID{DomainID: uint32(d), ServerID: uint32(sv), SequenceNumber: seq})
	}
	return g, nil
}

func (g MariaDBGTIDs) index(domain uint32) int {
	for i := range g {
		if g[i].DomainID == domain {
			return i
		}
	}
	return -1
}

// Set records gtid as the last one of its domain.
func (g *MariaDBGTIDs) Set(gtid mysql.MariadbGTID) {
	if i := g.index(gtid.DomainID); i >= 0 {
		(*g)[i] = gtid
		return
	}
	*g = append(*g, gtid)
	slices.SortFunc(*g, func(a, b mysql.MariadbGTID) int {
		return int(int64(a.DomainID) - int64(b.DomainID))
	})
}

func (g MariaDBGTIDs) String() string {
	var b strings.Builder
	for i := range g {
		if i > 0 {
			b.WriteByte(',')
		}
		appendMariaDBGTID(&b, g[i])
	}
	return b.String()
}

func appendMariaDBGTID(b *strings.Builder, g mysql.MariadbGTID) {
	var buf [64]byte
	n := strconv.AppendUint(buf[:0], uint64(g.DomainID), 10)
	n = append(n, '-')
	n = strconv.AppendUint(n, uint64(g.ServerID), 10)
	n = append(n, '-')
	n = strconv.AppendUint(n, g.SequenceNumber, 10)
	b.Write(n)
}

// gtidSet converts to what go-mysql's StartSyncGTID wants.
func (g MariaDBGTIDs) gtidSet() (mysql.GTIDSet, error) {
	return mysql.ParseMariadbGTIDSet(g.String())
}
