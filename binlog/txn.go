package binlog

// Transactions the binlog describes in other ways than BEGIN ... COMMIT,
// and transactions too large to hold.
//
// # Rows the binlog holds that are taken back
//
// The binlog is written at commit, so the rows of a transaction that only
// wrote transactional tables (InnoDB) are final when read: a ROLLBACK TO
// SAVEPOINT truncates the server's binlog cache, and a rolled-back
// transaction is not logged. A transaction that also wrote a
// non-transactional table (MyISAM, Aria) is logged differently: its rows
// stay in the cache, a ROLLBACK TO SAVEPOINT is logged as a query after
// them, and a ROLLBACK ends the group instead of a COMMIT. An XA
// transaction is logged at XA PREPARE and decided by a later XA COMMIT or
// XA ROLLBACK, a group of its own. So a row read is only known to survive
// once its group's end (and, for XA, the decision) has been read.
//
// The stream therefore tracks, per group, the SAVEPOINTs and the rows a
// ROLLBACK TO took back (by ordinal, the row's number within the group),
// and holds the rows until the end. MariaDB marks a group whose changes
// are all transactional (FL_TRANSACTIONAL in its GTID event): such a group
// is "final" and its rows can be sent as soon as they are read.
//
// # Transactions larger than memory
//
// A group holds at most outboxcdc.MaxFragmentEvents rows and
// MaxFragmentBytes of values. Past that:
//
//   - A final group (MariaDB, only transactional tables: the common case)
//     sends what it holds as a fragment (Tx.More) and goes on. No extra
//     cost.
//   - Any other group (MySQL, which has no such flag; or a group that also
//     wrote a non-transactional table) is read to its end without holding
//     rows, noting only which ordinals a ROLLBACK TO took back. At its end
//     the fate of every row is known: if it rolled back, nothing is sent;
//     if it committed, the stream is re-read from the last position sent
//     (a new binlog dump) and the group's surviving rows go out in
//     fragments as they are read. This is Debezium's look-ahead buffer with
//     a second read instead of a spill file: it needs no disk and no second
//     replica connection (a second dump would need a second server_id), and
//     costs one more read of that one transaction from the server.
//
// The pipeline never checkpoints inside a transaction, so a reconnect re-reads
// a transaction whose first fragments went out; the Run remembers how many
// rows it sent (txPlan.sent) and skips them.
//
// # XA
//
// A prepared XA transaction's rows wait for its XA COMMIT (sent then, as
// part of that transaction) or XA ROLLBACK (dropped). Meanwhile later
// transactions are delivered and checkpointed, so positions carry a
// restart point before the oldest undecided one (Pos.Restart): a restart
// reads its rows again, and of the transactions up to the position it only
// takes note of XA prepares and decisions. Rows of a prepared transaction
// are held in memory up to the fragment bounds; larger ones are read again
// at their XA COMMIT, like a large transaction above.

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"
	"github.com/google/uuid"
	outboxcdc "github.com/outbox-cdc/outbox-cdc"
)

// MariaDB GTID event flags (log_event.h) go-mysql does not name.
const (
	mariaFlTransactional = 4
	mariaFlPreparedXA    = 64
)

// Bounds on the rows of prepared, undecided XA transactions held in memory
// at once; beyond them a prepared transaction's rows are read again at its
// XA COMMIT.
const (
	xaHeldEvents = 4 * outboxcdc.MaxFragmentEvents
	xaHeldBytes  = 4 * outboxcdc.MaxFragmentBytes
)

// errRewind ends a session so that Run reconnects at once from the last
// position sent, to read a transaction again with what is now known about
// it (Source.plan). It is not a failure.
var errRewind = errors.New("reading a transaction again")

// group is the binlog event group (transaction) being read.
type group struct {
	open bool
	// id names the group across reconnects: its GTID, else the file and
	// offset of its first event.
	id        string
	start     Pos       // the position before it: reading from here reads it again
	startTime time.Time // its first event's timestamp (MariaDB's GTID event: the commit time)
	final     bool      // no later event can take its rows back (MariaDB FL_TRANSACTIONAL, not XA)
	xa        bool      // an XA transaction: XA START ... XA PREPARE
	xaStarted bool      // its XA START was read (a later XA COMMIT in it is ONE PHASE)
	skip      bool      // delivered before: read again from a restart point only for its XA state
	plan      *txPlan   // the Run's plan for this group, if any
	// pool is where events come from (Source.pool); they go out in a Tx
	// with Pool set, and the pipeline gives them back.
	pool *outboxcdc.EventPool

	ordinal    int // outbox rows read so far, whether taken back later or not
	survivors  int // rows the plan keeps, read so far
	events     []outboxcdc.Event
	bytes      int
	scanning   bool // over the memory bound: rows are counted, not held
	savepoints []savepoint
	undo       []span // ordinals taken back by ROLLBACK TO SAVEPOINT
}

type savepoint struct {
	name    string
	ordinal int // rows read before it
	index   int // len(events) when it was set
	bytes   int
}

// span is the ordinals [from, to) of rows taken back.
type span struct{ from, to int }

func inSpans(spans []span, ord int) bool {
	for _, s := range spans {
		if ord >= s.from && ord < s.to {
			return true
		}
	}
	return false
}

// txPlan is what a Run knows about one transaction before reading it
// (again): it survives reconnects, and ends with the Tx that carries the
// transaction's End.
type txPlan struct {
	id string // the group whose rows are sent
	// xid is set when the rows are a prepared XA transaction's, sent as
	// part of the group holding its XA COMMIT.
	xid        string
	undo       []span
	commitTime time.Time
	sent       int // rows already sent as fragments, skipped on a re-read
}

// xaPending is a prepared XA transaction with outbox rows, undecided.
type xaPending struct {
	xid    string
	id     string // its group
	start  Pos    // the position before its group
	events []outboxcdc.Event
	bytes  int
	held   bool // events are its surviving rows; else they are read again at XA COMMIT
	undo   []span
	// viaPlan: its rows went out as fragments of the open plan.
	viaPlan bool
}

// newGroup starts a group at ev (its GTID event, or BEGIN when there is
// none). mariaFlags are the MariaDB GTID event's flags.
func (st *stream) newGroup(ev *replication.BinlogEvent, mariaFlags byte) {
	off := startOf(ev)
	g := group{open: true, start: st.pos.Clone(), startTime: time.Unix(int64(ev.Header.Timestamp), 0), pool: st.src.pool}
	switch e := ev.Event.(type) {
	case *replication.MariadbGTIDEvent:
		var b strings.Builder
		appendMariaDBGTID(&b, st.mariaGTID)
		g.id = b.String()
		g.final = mariaFlags&mariaFlTransactional != 0 && mariaFlags&mariaFlPreparedXA == 0 && !st.src.noFinalFlag
		g.xa = mariaFlags&mariaFlPreparedXA != 0
	case *replication.GTIDEvent:
		if u, err := uuid.FromBytes(e.SID); err == nil && u != uuid.Nil {
			g.id = u.String() + ":" + strconv.FormatInt(e.GNO, 10)
		}
	}
	if g.id == "" {
		g.id = st.file + ":" + strconv.FormatUint(uint64(off), 10)
	}
	g.skip = st.wasDelivered(ev, off)
	if p := st.src.plan; p != nil && p.id == g.id {
		g.plan = p
	}
	st.g = g
}

// wasDelivered says whether the group starting at ev lies at or before
// st.delivered, the position a restart point was saved with.
func (st *stream) wasDelivered(ev *replication.BinlogEvent, off uint32) bool {
	d := st.delivered
	if d == nil {
		return false
	}
	switch {
	case d.IsMariaDB:
		if _, ok := ev.Event.(*replication.MariadbGTIDEvent); !ok {
			return false
		}
		for _, x := range d.MariaDB {
			if x.DomainID == st.mariaGTID.DomainID {
				return st.mariaGTID.SequenceNumber <= x.SequenceNumber
			}
		}
		return false
	case d.MySQLGTID != nil:
		if !st.hasMySQLGTID {
			return false
		}
		one, err := mysql.ParseMysqlGTIDSet(st.mysqlGTID.String() + ":" + strconv.FormatInt(st.mysqlGNO, 10))
		return err == nil && d.MySQLGTID.Contain(one)
	}
	if st.file != d.File {
		return binlogFileBefore(st.file, d.File)
	}
	return off < d.Offset
}

// binlogFileBefore orders binlog file names by their numeric suffix.
func binlogFileBefore(a, b string) bool {
	i, j := strings.LastIndexByte(a, '.'), strings.LastIndexByte(b, '.')
	if i < 0 || j < 0 || a[:i] != b[:j] {
		return a < b
	}
	x, err1 := strconv.ParseUint(a[i+1:], 10, 64)
	y, err2 := strconv.ParseUint(b[j+1:], 10, 64)
	if err1 != nil || err2 != nil {
		return a < b
	}
	return x < y
}

// wants says whether the next outbox row of the group is decoded into an
// Event; rows of a group delivered before or being counted ahead are not.
func (st *stream) wants() bool {
	g := &st.g
	return g.plan != nil || (!g.scanning && (!g.skip || g.xa))
}

func eventSize(e *outboxcdc.Event) int {
	n := len(e.Payload) + len(e.MessageID) + len(e.AggregateID) + len(e.AggregateType) + len(e.EventType)
	for _, c := range e.Extra {
		n += len(c.Value)
	}
	return n
}

// reserve makes room for n more held rows before they are decoded. A
// group's first rows get room for hint rows (the size of the last
// transaction, so a stream of equal transactions takes one slice from the
// pool for each, which the pipeline gives back), capped at the fragment
// bound; later growth doubles.
func (g *group) reserve(n, hint int) {
	need := len(g.events) + n
	if need <= cap(g.events) {
		return
	}
	want := max(need, 2*cap(g.events))
	if len(g.events) == 0 {
		want = max(need, min(hint, outboxcdc.MaxFragmentEvents))
	}
	g.events = g.pool.Grow(g.events, want-len(g.events))
}

func (g *group) hold(e outboxcdc.Event) {
	g.events = append(g.events, e)
	g.bytes += eventSize(&e)
}

func (g *group) full() bool {
	return len(g.events) >= outboxcdc.MaxFragmentEvents || g.bytes >= outboxcdc.MaxFragmentBytes
}

// row takes one outbox row of the current group.
func (st *stream) row(e outboxcdc.Event) error {
	g := &st.g
	ord := g.ordinal
	g.ordinal++
	if p := g.plan; p != nil {
		if inSpans(p.undo, ord) {
			return nil
		}
		k := g.survivors
		g.survivors++
		if k < p.sent {
			return nil // sent before the reconnect
		}
		g.hold(e)
		if g.full() {
			return st.sendFragment(g)
		}
		return nil
	}
	if g.scanning || (g.skip && !g.xa) {
		return nil
	}
	g.hold(e)
	if !g.full() {
		return nil
	}
	if g.final && !g.skip {
		// Nothing can take these rows back: send them now.
		p := &txPlan{id: g.id, undo: g.undo, commitTime: g.startTime}
		st.src.plan, g.plan = p, p
		g.survivors = len(g.events)
		return st.sendFragment(g)
	}
	// Rows a later ROLLBACK TO SAVEPOINT or ROLLBACK may take back: count
	// the rest without holding them, and read the group again at its end.
	g.scanning = true
	g.pool.Put(g.events)
	g.events, g.bytes = nil, 0
	if !g.skip {
		st.src.log.Info().Str("transaction", g.id).Int("rows", g.ordinal).
			Msg("transaction larger than the memory bound, and later events may take rows back: counting its rows to its end, then reading it again to send them in fragments")
	}
	return nil
}

// sendFragment sends the held rows of a planned group as a fragment.
func (st *stream) sendFragment(g *group) error {
	n := len(g.events)
	if n == 0 {
		return nil
	}
	ct := g.plan.commitTime
	for i := range g.events {
		g.events[i].CommitTime = ct
	}
	st.src.m.EventsRead.Add(float64(n))
	tx := outboxcdc.Tx{Events: g.events, CommitTime: ct, More: true, Pool: st.src.pool}
	g.events, g.bytes = nil, 0
	if err := st.send(tx); err != nil {
		return err
	}
	g.plan.sent += n
	return nil
}

// savepoint handles "SAVEPOINT `name`".
func (st *stream) savepoint(ev *replication.BinlogEvent, rest []byte) error {
	name, ok := parseIdent(rest)
	if !ok || !st.g.open {
		return fmt.Errorf("%w: cannot read the savepoint name of %q at %s:%d", ErrUnsupported, ev.Event.(*replication.QueryEvent).Query, st.file, startOf(ev))
	}
	g := &st.g
	g.savepoints = dropSavepoint(g.savepoints, name)
	g.savepoints = append(g.savepoints, savepoint{name: name, ordinal: g.ordinal, index: len(g.events), bytes: g.bytes})
	return nil
}

func dropSavepoint(sps []savepoint, name string) []savepoint {
	for i := range sps {
		if strings.EqualFold(sps[i].name, name) {
			return append(sps[:i], sps[i+1:]...)
		}
	}
	return sps
}

func findSavepoint(sps []savepoint, name string) int {
	for i := len(sps) - 1; i >= 0; i-- {
		if strings.EqualFold(sps[i].name, name) {
			return i
		}
	}
	return -1
}

// rollbackTo handles "ROLLBACK TO [SAVEPOINT] `name`": the rows read since
// that savepoint never happened.
func (st *stream) rollbackTo(ev *replication.BinlogEvent, rest []byte) error {
	rest = bytes.TrimSpace(rest)
	if hasPrefixFold(rest, "SAVEPOINT") {
		rest = rest[len("SAVEPOINT"):]
	}
	name, ok := parseIdent(rest)
	g := &st.g
	i := -1
	if ok {
		i = findSavepoint(g.savepoints, name)
	}
	if i < 0 {
		return fmt.Errorf("%w: ROLLBACK TO SAVEPOINT at %s:%d names a savepoint this transaction did not log, so which outbox rows it takes back is unknown",
			ErrUnsupported, st.file, startOf(ev))
	}
	sp := g.savepoints[i]
	g.savepoints = g.savepoints[:i+1] // later savepoints are gone, this one stays
	if sp.ordinal < g.ordinal {
		g.undo = append(g.undo, span{sp.ordinal, g.ordinal})
	}
	switch {
	case g.plan != nil && g.plan.id == g.id && g.plan.xid == "" && g.final:
		// Fragments of a group taken to be final went out already.
		return fmt.Errorf("%w: ROLLBACK TO SAVEPOINT at %s:%d in transaction %s, which the server marked transactional and whose rows were being sent",
			ErrUnsupported, st.file, startOf(ev), g.id)
	case g.plan != nil, g.scanning:
		return nil // the plan's spans drop them; or counting ahead
	}
	clear(g.events[sp.index:])
	g.events, g.bytes = g.events[:sp.index], sp.bytes
	return nil
}

// release handles "RELEASE SAVEPOINT `name`" (not logged by MariaDB 10.11,
// handled for servers that do).
func (st *stream) release(ev *replication.BinlogEvent, rest []byte) error {
	if name, ok := parseIdent(rest); ok {
		if i := findSavepoint(st.g.savepoints, name); i >= 0 {
			st.g.savepoints = st.g.savepoints[:i]
		}
	}
	return nil
}

// xaQuery handles XA START, XA END, XA COMMIT and XA ROLLBACK queries.
func (st *stream) xaQuery(ev *replication.BinlogEvent, q []byte, endPos uint32) error {
	rest := bytes.TrimSpace(q[len("XA "):])
	switch {
	case hasPrefixFold(rest, "START"), hasPrefixFold(rest, "BEGIN"):
		st.begin(ev)
		st.g.xa, st.g.xaStarted = true, true
		st.g.final = false
		return nil
	case hasPrefixFold(rest, "END"):
		return nil
	case hasPrefixFold(rest, "COMMIT"):
		if st.inTx && st.g.xaStarted {
			// XA COMMIT ... ONE PHASE ends its own transaction.
			return st.end(ev, endPos, endCommit, "")
		}
		xid, err := parseXID(rest[len("COMMIT"):])
		if err != nil {
			return fmt.Errorf("%w: %q at %s:%d: %v", ErrUnsupported, q, st.file, startOf(ev), err)
		}
		return st.end(ev, endPos, endXACommit, xid)
	case hasPrefixFold(rest, "ROLLBACK"):
		if st.inTx && st.g.xaStarted {
			return st.end(ev, endPos, endRollback, "")
		}
		xid, err := parseXID(rest[len("ROLLBACK"):])
		if err != nil {
			return fmt.Errorf("%w: %q at %s:%d: %v", ErrUnsupported, q, st.file, startOf(ev), err)
		}
		return st.end(ev, endPos, endXARollback, xid)
	}
	if st.inTx {
		return nil
	}
	return st.end(ev, endPos, endCommit, "")
}

// xaPrepare handles XA_PREPARE_LOG_EVENT: with one_phase set (XA COMMIT
// ... ONE PHASE on MySQL) it commits the group; else the group is prepared
// and its rows wait for the XA COMMIT or XA ROLLBACK naming its xid.
func (st *stream) xaPrepare(ev *replication.BinlogEvent, data []byte, endPos uint32) error {
	if len(data) > 0 && data[0] != 0 {
		return st.end(ev, endPos, endCommit, "")
	}
	xid, ok := eventXID(data)
	if !ok {
		return fmt.Errorf("%w: unreadable XA PREPARE event at %s:%d", ErrUnsupported, st.file, startOf(ev))
	}
	return st.end(ev, endPos, endXAPrepare, xid)
}

// eventXID reads the xid of an XA_PREPARE_LOG_EVENT body: one_phase (1),
// formatID (4), gtrid length (4), bqual length (4), gtrid and bqual.
func eventXID(d []byte) (string, bool) {
	if len(d) < 13 {
		return "", false
	}
	format := int32(binary.LittleEndian.Uint32(d[1:]))
	gl, bl := binary.LittleEndian.Uint32(d[5:]), binary.LittleEndian.Uint32(d[9:])
	if uint64(len(d)) < 13+uint64(gl)+uint64(bl) {
		return "", false
	}
	return xidKey(format, d[13:13+gl], d[13+gl:13+gl+bl]), true
}

func xidKey(format int32, gtrid, bqual []byte) string {
	return strconv.FormatInt(int64(format), 10) + "-" + hex.EncodeToString(gtrid) + "-" + hex.EncodeToString(bqual)
}

// parseXID reads the xid the server logs after XA COMMIT / XA ROLLBACK:
// X'gtrid',X'bqual',formatID (MariaDB and MySQL both write hex literals).
func parseXID(b []byte) (string, error) {
	b = bytes.TrimSpace(b)
	var parts [][]byte
	for i := 0; i < 2; i++ {
		if len(b) < 3 || (b[0] != 'X' && b[0] != 'x') || b[1] != '\'' {
			return "", errors.New("expected an xid as X'..',X'..',N")
		}
		end := bytes.IndexByte(b[2:], '\'')
		if end < 0 {
			return "", errors.New("unterminated xid literal")
		}
		v, err := hex.DecodeString(string(b[2 : 2+end]))
		if err != nil {
			return "", fmt.Errorf("xid literal: %w", err)
		}
		parts = append(parts, v)
		b = bytes.TrimSpace(b[2+end+1:])
		if len(b) == 0 || b[0] != ',' {
			return "", errors.New("expected an xid as X'..',X'..',N")
		}
		b = bytes.TrimSpace(b[1:])
	}
	n := 0
	for n < len(b) && (b[n] == '-' || (b[n] >= '0' && b[n] <= '9')) {
		n++
	}
	format, err := strconv.ParseInt(string(b[:n]), 10, 32)
	if err != nil {
		return "", errors.New("xid without a format id")
	}
	return xidKey(int32(format), parts[0], parts[1]), nil
}

// endKind is how a group ends.
type endKind int

const (
	endCommit endKind = iota
	endRollback
	endXAPrepare
	endXACommit
	endXARollback
)

// end closes the current group at endPos.
func (st *stream) end(ev *replication.BinlogEvent, endPos uint32, kind endKind, xid string) error {
	ok, err := st.advance(ev, endPos)
	g := st.g
	st.g = group{}
	if err != nil || !ok {
		return err
	}
	commitTime := time.Unix(int64(ev.Header.Timestamp), 0)
	var rows []outboxcdc.Event
	closes := false // the Tx ends a transaction whose fragments went out
	switch kind {
	case endRollback, endXARollback:
		if g.plan != nil && g.plan.sent > 0 {
			return fmt.Errorf("%w: transaction %s rolled back at %s:%d after some of its rows were sent", ErrUnsupported, g.id, st.file, startOf(ev))
		}
		if kind == endXARollback {
			st.takePending(xid)
		}
	case endXAPrepare:
		p := &xaPending{xid: xid, id: g.id, start: g.start, undo: g.undo}
		switch {
		case g.plan != nil:
			// Its XA COMMIT is known: the rows go out as fragments of it.
			if err := st.sendFragment(&g); err != nil {
				return err
			}
			p.viaPlan = true
		case g.ordinal == 0:
			p = nil // no outbox rows: nothing to wait for
		case !g.scanning && st.heldFits(len(g.events), g.bytes):
			p.events, p.bytes, p.held = g.events, g.bytes, true
		}
		if p != nil {
			st.takePending(xid) // read again from a restart point
			st.pending = append(st.pending, p)
		}
	case endXACommit:
		p := st.takePending(xid)
		switch {
		case p == nil, g.skip: // no outbox rows, or delivered before
		case p.viaPlan:
			closes = true
		case p.held:
			rows = p.events
		default:
			st.src.log.Info().Str("xid", xid).Str("transaction", p.id).
				Msg("XA COMMIT of a prepared transaction whose rows were not held: reading it again to send its rows")
			return st.rewind(&txPlan{id: p.id, xid: xid, undo: p.undo, commitTime: commitTime}, ev)
		}
	case endCommit:
		switch {
		case g.plan != nil:
			rows, closes = g.events, true
		case g.scanning && !g.skip:
			return st.rewind(&txPlan{id: g.id, undo: g.undo, commitTime: commitTime}, ev)
		case !g.skip:
			rows = g.events
		}
	}
	if g.skip {
		return nil // delivered before
	}
	if closes {
		commitTime = st.src.plan.commitTime
		st.src.plan = nil
	} else if len(rows) > 0 && st.src.plan != nil {
		if st.src.plan.sent > 0 {
			return fmt.Errorf("%w: transaction %s at %s:%d came between the fragments of transaction %s; the binlog is not what it was when they were sent",
				ErrUnsupported, g.id, st.file, startOf(ev), st.src.plan.id)
		}
		st.src.plan = nil // stale: the transaction it names is not there
	}
	return st.deliver(rows, commitTime, closes)
}

// rewind ends the session to read the transaction p names again. Asking
// twice for the same one means the second read did not find it where the
// first one had: the binlog is not what it was.
func (st *stream) rewind(p *txPlan, ev *replication.BinlogEvent) error {
	if old := st.src.plan; old != nil && old.id == p.id {
		return fmt.Errorf("%w: transaction %s was not found again when the binlog was read a second time (at %s:%d)",
			ErrUnsupported, p.id, st.file, startOf(ev))
	}
	st.src.plan = p
	return errRewind
}

// heldFits reserves room for n rows of a prepared XA transaction.
func (st *stream) heldFits(n, b int) bool {
	events, size := n, b
	for _, p := range st.pending {
		events += len(p.events)
		size += p.bytes
	}
	return events <= xaHeldEvents && size <= xaHeldBytes
}

// takePending removes and returns the pending XA transaction xid.
func (st *stream) takePending(xid string) *xaPending {
	for i, p := range st.pending {
		if p.xid == xid {
			st.pending = append(st.pending[:i], st.pending[i+1:]...)
			return p
		}
	}
	return nil
}

// endPos is the position just past the last group read, with the restart
// point before the oldest undecided XA transaction when there is one.
func (st *stream) endPos() outboxcdc.Position {
	if len(st.pending) == 0 {
		return st.pos.Encode()
	}
	p := st.pos.Clone()
	r := st.pending[0].start.Clone()
	p.Restart = &r
	return p.Encode()
}

// statement refuses an INSERT into the outbox table logged as a statement
// (a session with binlog_format=STATEMENT or MIXED): its values are not in
// the binlog, and skipping it would lose the row.
func (st *stream) statement(ev *replication.BinlogEvent, schema, q []byte) error {
	db, table, ok := insertTarget(q)
	if !ok {
		return nil
	}
	if db == "" {
		db = string(schema)
	}
	if st.match.pats != nil {
		if !st.match.matchesFold(db, table) {
			return nil
		}
	} else if !strings.EqualFold(db, st.src.db) || !strings.EqualFold(table, st.src.table) {
		return nil
	}
	return fmt.Errorf("%w: an INSERT into %s at %s:%d%s was logged as a statement, not as rows, so its values cannot be read; "+
		"the writing session ran with binlog_format=STATEMENT or MIXED: set binlog_format=ROW globally and for every session that writes the outbox, "+
		"then re-send the rows from that transaction on (position set / start: pending)",
		ErrServerSettings, db+"."+table, st.file, startOf(ev), st.gtidSuffix())
}

func (st *stream) gtidSuffix() string {
	switch {
	case st.hasMariaGTID:
		var b strings.Builder
		b.WriteString(" (gtid ")
		appendMariaDBGTID(&b, st.mariaGTID)
		b.WriteString(")")
		return b.String()
	case st.hasMySQLGTID:
		return " (gtid " + st.mysqlGTID.String() + ":" + strconv.FormatInt(st.mysqlGNO, 10) + ")"
	}
	return ""
}

// executeLoadQuery returns the default database and the statement of an
// EXECUTE_LOAD_QUERY event (LOAD DATA logged as a statement), which go-mysql
// does not decode: after the header come the 13 bytes of a query event's
// post-header, 13 more (file id, start and end offsets, duplicate
// handling), the status variables, the database and a NUL, and the query.
func executeLoadQuery(ev *replication.BinlogEvent) (schema, q []byte, ok bool) {
	d := ev.RawData
	if len(d) < replication.EventHeaderSize+26 {
		return nil, nil, false
	}
	d = d[replication.EventHeaderSize:]
	if n := int(ev.Header.EventSize) - replication.EventHeaderSize; n < len(d) && n >= 26 {
		d = d[:n]
	}
	schemaLen := int(d[8])
	statusLen := int(binary.LittleEndian.Uint16(d[11:]))
	p := 26 + statusLen
	if len(d) < p+schemaLen+1 {
		return nil, nil, false
	}
	return d[p : p+schemaLen], d[p+schemaLen+1:], true
}

// rawMariaDBGTIDFlags reads a MariaDB GTID event's flags byte from its raw
// bytes (after the sequence number and the domain id).
func rawMariaDBGTIDFlags(ev *replication.BinlogEvent) byte {
	if d := ev.RawData; len(d) > replication.EventHeaderSize+12 {
		return d[replication.EventHeaderSize+12]
	}
	return 0
}
