package binlog

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"
	"github.com/google/uuid"
	outboxcdc "github.com/outbox-cdc/outbox-cdc"
)

// stream assembles transactions from the events of one connection. It is
// discarded on reconnect, and with it any partial transaction (txn.go says
// how fragments already sent are not sent again).
type stream struct {
	src  *Source
	pos  Pos    // just past the last transaction end seen
	file string // binlog file of the current event, for Origin
	send func(outboxcdc.Tx) error

	inTx bool
	g    group // the transaction being read (txn.go)
	// pending are the prepared XA transactions with outbox rows whose XA
	// COMMIT or XA ROLLBACK has not been read, oldest first.
	pending []*xaPending
	// delivered is set when the stream started at a restart point: the
	// transactions up to it were delivered before (Pos.Restart).
	delivered *Pos

	// GTID of the current transaction, applied to pos at its end.
	mysqlGTID    uuid.UUID
	mysqlGNO     int64
	hasMySQLGTID bool
	mariaGTID    mysql.MariadbGTID
	hasMariaGTID bool

	lastEmit time.Time
	// quiet: a heartbeat sent the "nothing pending" marker and no
	// transaction was delivered since.
	quiet bool
	// rowsHint is the number of outbox rows of the last transaction
	// delivered: the next one's events are allocated for as many at once
	// (group.reserve), not grown by doubling.
	rowsHint int

	// Columns of the outbox tables (schema.go, table.go, tables.go).
	streamEnv
	tables   map[tableKey]*tableState
	lastTM   *replication.TableMapEvent // the table map of lastTS's last rows
	lastTS   *tableState
	scope    *binlogPoint // where the stream really starts (markScope)
	ddlScope *binlogPoint // just past the last statement that may have changed an outbox table
	lastDDL  *ddlEvent    // that statement

	// INSERT rows events read by the stream itself and left to go-mysql
	// (rowimage.go); for tests.
	fastEvents, slowEvents int
}

// streamEnv is what a stream needs of its session: the table matcher the
// syncer's row decoder uses, and a connection for information_schema.
type streamEnv struct {
	ctx   context.Context
	db    *sql.DB
	match *tableMatcher
	// rowsDec is the syncer's row decoder when it leaves the outbox
	// tables' INSERT rows to the stream (decode.go); nil: they arrive
	// decoded.
	rowsDec *rowDecoder
}

// newStream starts assembling at start (a plain position, or one with a
// restart point: reading then begins there). send delivers a Tx (or a
// fragment) to the pipeline.
func newStream(src *Source, start Pos, env streamEnv, send func(outboxcdc.Tx) error) *stream {
	st := &stream{src: src, send: send, streamEnv: env}
	st.pos = start.ReadFrom()
	st.file = st.pos.File
	if start.Restart != nil {
		d := start.Clone()
		d.Restart = nil
		st.delivered = &d
	}
	return st
}

// handle consumes one event, sending what it completes. endPos is the
// offset just past the event (for events inside a compressed transaction
// payload: past the payload).
func (st *stream) handle(ev *replication.BinlogEvent, endPos uint32) error {
	st.markScope(ev, endPos) // schema.go
	switch e := ev.Event.(type) {
	case *replication.RotateEvent:
		st.file = string(e.NextLogName)
		// A copy: st.file changes at the next rotation while the
		// files-behind watcher reads what was stored.
		cur := st.file
		st.src.curFile.Store(&cur)
		st.src.curOffset.Store(e.Position)
		if !st.inTx && !st.pos.IsGTID() {
			// Not a transaction end, but the next one will be in this file;
			// keep pos meaningful for logs.
			st.pos.File, st.pos.Offset = st.file, uint32(e.Position)
		}
	case *replication.GtidTaggedLogEvent:
		if st.pos.MySQLGTID != nil {
			return fmt.Errorf("%w: tagged GTID (MySQL 8.4) at %s:%d; use gtid: off", ErrUnsupported, st.file, startOf(ev))
		}
	case *replication.GTIDEvent:
		if st.pos.MySQLGTID != nil {
			u, err := uuid.FromBytes(e.SID)
			if err != nil {
				return fmt.Errorf("%w: GTID event with bad server uuid at %s:%d", ErrUnsupported, st.file, startOf(ev))
			}
			st.mysqlGTID, st.mysqlGNO, st.hasMySQLGTID = u, e.GNO, true
		}
		st.newGroup(ev, 0)
	case *replication.MariadbGTIDEvent:
		// e.GTID is not read here: go-mysql keeps a pointer to it in its
		// own GTID tracking and overwrites it from its reader goroutine
		// when the next GTID of the domain arrives. The raw event is
		// immutable.
		g, err := rawMariaDBGTID(ev)
		if err != nil {
			return err
		}
		st.mariaGTID, st.hasMariaGTID = g, true
		st.newGroup(ev, rawMariaDBGTIDFlags(ev))
		// A MariaDB GTID event also opens the transaction (it replaces
		// BEGIN) unless the transaction is a single standalone statement.
		if !e.IsStandalone() {
			st.begin(ev)
		}
	case *replication.QueryEvent:
		return st.query(ev, e, endPos)
	case *replication.ExecuteLoadQueryEvent:
		// LOAD DATA logged as a statement.
		if schema, q, ok := executeLoadQuery(ev); ok {
			return st.statement(ev, schema, q)
		}
	case *replication.XIDEvent:
		return st.end(ev, endPos, endCommit, "")
	case *replication.RowsEvent:
		if e.Table == nil || !st.match.matches(e.Table.Schema, e.Table.Table) {
			return nil
		}
		return st.rows(ev, e, endPos)
	case *replication.TransactionPayloadEvent:
		// MySQL binlog_transaction_compression: a whole transaction inside
		// one event. Its inner events carry no usable offsets; the
		// transaction ends where the payload event ends. go-mysql parsed
		// them with the session's settings and row decoder (since v1.16),
		// so their INSERT rows wait in the decoder like any others and are
		// taken here, once.
		for _, inner := range e.Events {
			if err := st.handle(inner, endPos); err != nil {
				return err
			}
		}
	case *replication.HeartbeatEvent:
		if !st.inTx {
			st.src.m.LagSeconds.Set(0) // the server has nothing newer
			st.src.catchUp.Idle(st.posText)
			if !st.quiet && st.src.plan == nil && len(st.pending) == 0 {
				// Once per quiet spell: an end without a commit time tells
				// the pipeline nothing is pending (its lag reads 0 once
				// this is checkpointed, not the delay of the last row).
				st.quiet = true
				return st.send(outboxcdc.Tx{End: st.endPos()})
			}
		}
	case *replication.GenericEvent:
		if ev.Header.EventType == replication.XA_PREPARE_LOG_EVENT {
			return st.xaPrepare(ev, e.Data, endPos)
		}
	}
	return nil
}

// posText is the position read up to, for progress lines.
func (st *stream) posText() string { return st.pos.String() }

// rawMariaDBGTID decodes a MariaDB GTID event's GTID from its raw bytes:
// after the 19-byte header, the sequence number (8 bytes) and the domain
// id (4 bytes), little-endian; the server id is the header's.
func rawMariaDBGTID(ev *replication.BinlogEvent) (mysql.MariadbGTID, error) {
	d := ev.RawData
	if len(d) < replication.EventHeaderSize+12 {
		return mysql.MariadbGTID{}, fmt.Errorf("%w: short MariaDB GTID event (%d bytes)", ErrUnsupported, len(d))
	}
	d = d[replication.EventHeaderSize:]
	return mysql.MariadbGTID{
		SequenceNumber: binary.LittleEndian.Uint64(d),
		DomainID:       binary.LittleEndian.Uint32(d[8:]),
		ServerID:       ev.Header.ServerID,
	}, nil
}

func startOf(ev *replication.BinlogEvent) uint32 {
	if ev.Header.LogPos >= ev.Header.EventSize {
		return ev.Header.LogPos - ev.Header.EventSize
	}
	return ev.Header.LogPos
}

// begin opens a transaction (BEGIN, XA START, a MariaDB GTID event, or
// rows outside one), starting a group unless its GTID event did.
func (st *stream) begin(ev *replication.BinlogEvent) {
	if !st.g.open {
		st.newGroup(ev, 0)
	}
	st.inTx = true
}

// query handles a query event: BEGIN opens a transaction, COMMIT and
// ROLLBACK end one, SAVEPOINT and ROLLBACK TO SAVEPOINT mark and take back
// rows, XA statements open, prepare and decide XA transactions (txn.go), an
// INSERT into the outbox table logged as a statement is refused, a
// statement that may change the outbox table is a boundary for its column
// list (schema.go), a statement outside a transaction (DDL) is a
// transaction of its own, and anything else inside one is ignored.
func (st *stream) query(ev *replication.BinlogEvent, e *replication.QueryEvent, endPos uint32) error {
	schema, q := e.Schema, bytes.TrimSpace(e.Query)
	switch {
	case bytes.EqualFold(q, []byte("BEGIN")):
		st.begin(ev)
		return nil
	case bytes.EqualFold(q, []byte("COMMIT")):
		return st.end(ev, endPos, endCommit, "")
	case bytes.EqualFold(q, []byte("ROLLBACK")):
		// Rolled back (a transaction that also wrote a non-transactional
		// table is logged with its rows): the rows never happened. Still a
		// transaction end.
		return st.end(ev, endPos, endRollback, "")
	case hasPrefixFold(q, "XA "):
		return st.xaQuery(ev, q, endPos)
	case hasPrefixFold(q, "SAVEPOINT"):
		return st.savepoint(ev, q[len("SAVEPOINT"):])
	case hasPrefixFold(q, "ROLLBACK TO"):
		return st.rollbackTo(ev, q[len("ROLLBACK TO"):])
	case hasPrefixFold(q, "RELEASE SAVEPOINT"):
		return st.release(ev, q[len("RELEASE SAVEPOINT"):])
	}
	// Checked inside a transaction too, not only standalone: MariaDB logs
	// CREATE OR REPLACE TABLE ... SELECT inside the group with its rows.
	st.ddl(ev, e)
	if err := st.statement(ev, schema, q); err != nil {
		return err
	}
	if st.inTx {
		return nil // a statement-logged change to another table, ...
	}
	return st.end(ev, endPos, endCommit, "") // standalone statement: DDL, ...
}

func hasPrefixFold(q []byte, prefix string) bool {
	return len(q) >= len(prefix) && strings.EqualFold(string(q[:len(prefix)]), prefix)
}

// rows takes the INSERTed rows of one rows event on the outbox table (see
// stream.row) and counts UPDATE/DELETE rows as skipped (UPDATEs as
// route.on_update says). endPos is where the event ends.
func (st *stream) rows(ev *replication.BinlogEvent, e *replication.RowsEvent, endPos uint32) error {
	switch ev.Header.EventType {
	case replication.WRITE_ROWS_EVENTv0, replication.WRITE_ROWS_EVENTv1, replication.WRITE_ROWS_EVENTv2,
		replication.MARIADB_WRITE_ROWS_COMPRESSED_EVENT_V1:
	case replication.DELETE_ROWS_EVENTv0, replication.DELETE_ROWS_EVENTv1, replication.DELETE_ROWS_EVENTv2,
		replication.MARIADB_DELETE_ROWS_COMPRESSED_EVENT_V1:
		st.src.m.SkippedOperations.WithLabelValues("delete").Add(float64(len(e.Rows)))
		return nil
	default: // updates: before and after image per row
		return st.src.cols.UpdateSeen(&st.src.log, st.src.m, st.origin(ev), len(e.Rows)/2)
	}
	if !st.inTx {
		st.begin(ev)
	}
	at := binlogPoint{st.file, endPos}
	body, deferred := st.rowsDec.takeDeferred(e)
	if !st.wants() {
		// Delivered before (read again from a restart point) or counted
		// ahead of a second read: the rows are numbered, not decoded, so
		// neither are their columns needed. The second read, which sends
		// them, maps and checks them.
		n := len(e.Rows)
		if deferred {
			var err error
			if n, err = st.countUndecoded(e, body, at); err != nil {
				return err
			}
		}
		st.g.ordinal += n
		return nil
	}
	// The columns these rows were written with (schema.go).
	ts := st.table(e.Table)
	if err := st.ensureLayout(ts, e.Table, at); err != nil {
		return err
	}
	l := ts.layout
	if deferred {
		if fastEvent(ev, e, l) {
			return st.fastRows(ev, e, body, ts, at)
		}
		st.slowEvents++
		if err := st.rowsDec.decodeInsert(e, body.pos, body.data); err != nil {
			return fmt.Errorf("%w: rows event of %s at %s: %w", ErrUnsupported, ts.key, at, err)
		}
	}
	if err := l.checkImage(e, at); err != nil {
		return err
	}
	if int(e.ColumnCount) != l.ncols {
		// go-mysql makes every row e.ColumnCount values long.
		return fmt.Errorf("%w: rows event at %s has %d columns, its table map %d", ErrUnsupported, at, e.ColumnCount, l.ncols)
	}
	origin := st.origin(ev)
	st.g.reserve(len(e.Rows), st.rowsHint)
	for _, row := range e.Rows {
		if !st.wants() {
			st.g.ordinal++ // over the memory bound: counted, not decoded into an Event
			continue
		}
		if err := st.take(l.event(row), origin, ts); err != nil {
			return err
		}
	}
	return nil
}

// take holds one row's Event of table ts, read from the rows event at
// origin (see row).
func (st *stream) take(evt outboxcdc.Event, origin string, ts *tableState) error {
	evt.Origin = origin
	evt.Schema, evt.Table = ts.key.db, ts.key.table
	return st.row(evt)
}

// fastRows takes the rows of an undecoded INSERT rows event as rows does,
// reading the columns the Events take from the row images (rowimage.go).
// Every row's bounds are checked before the first is taken.
func (st *stream) fastRows(ev *replication.BinlogEvent, e *replication.RowsEvent, body rowsBody, ts *tableState, at binlogPoint) error {
	st.fastEvents++
	bad := func(err error) error {
		return fmt.Errorf("%w: rows event of %s at %s: %v", ErrUnsupported, ts.key, at, err)
	}
	l := ts.layout
	f := l.fast
	data := body.data[body.pos:]
	n, spans, err := f.readRows(e.ColumnBitmap1, data)
	if err != nil {
		return bad(err)
	}
	r, err := newRowReader(f.widths, e.ColumnBitmap1, data)
	if err != nil {
		return bad(err)
	}
	origin := st.origin(ev)
	st.g.reserve(n, st.rowsHint)
	k := len(f.spans)
	for i := range n {
		if !st.wants() {
			if spans == nil {
				if _, err := r.next(nil, nil); err != nil {
					return bad(err)
				}
			}
			st.g.ordinal++ // over the memory bound: counted, not decoded into an Event
			continue
		}
		if spans != nil {
			copy(f.spans, spans[i*k:(i+1)*k])
		} else if _, err := r.next(f.take, f.spans); err != nil {
			return bad(err)
		}
		if err := st.take(l.eventAt(data), origin, ts); err != nil {
			return err
		}
	}
	return nil
}

// countUndecoded counts the rows of an undecoded INSERT rows event without
// decoding them, or decodes them with go-mysql when their widths are not
// known with certainty (rowimage.go).
func (st *stream) countUndecoded(e *replication.RowsEvent, body rowsBody, at binlogPoint) (int, error) {
	tm := e.Table
	if int(e.ColumnCount) == len(tm.ColumnType) {
		if ws, why := colWidths(tm.ColumnType, tm.ColumnMeta); why == "" {
			n, err := countRows(ws, e.ColumnBitmap1, body.data[body.pos:])
			if err != nil {
				return 0, fmt.Errorf("%w: rows event of %s.%s at %s: %v", ErrUnsupported, tm.Schema, tm.Table, at, err)
			}
			return n, nil
		}
	}
	if err := st.rowsDec.decodeInsert(e, body.pos, body.data); err != nil {
		return 0, fmt.Errorf("%w: rows event of %s.%s at %s: %w", ErrUnsupported, tm.Schema, tm.Table, at, err)
	}
	return len(e.Rows), nil
}

// origin is "mariadb-bin.000003:1234" (the rows event's offset), plus the
// transaction's GTID when known.
func (st *stream) origin(ev *replication.BinlogEvent) string {
	var b strings.Builder
	b.Grow(len(st.file) + 40)
	b.WriteString(st.file)
	b.WriteByte(':')
	b.WriteString(strconv.FormatUint(uint64(startOf(ev)), 10))
	switch {
	case st.hasMariaGTID:
		b.WriteString(" gtid ")
		appendMariaDBGTID(&b, st.mariaGTID)
	case st.hasMySQLGTID:
		b.WriteString(" gtid ")
		b.WriteString(st.mysqlGTID.String())
		b.WriteByte(':')
		b.WriteString(strconv.FormatInt(st.mysqlGNO, 10))
	}
	return b.String()
}

// advance moves pos past the transaction ending at endPos. ok is false for
// a transaction without GTID while following GTID positions, which a GTID
// position cannot express a point after (only on a server mixing anonymous
// ones); it has no place in the position and is not delivered.
func (st *stream) advance(ev *replication.BinlogEvent, endPos uint32) (ok bool, err error) {
	if st.pos.IsGTID() {
		if st.hasMySQLGTID && st.pos.MySQLGTID != nil {
			st.pos.MySQLGTID.AddGTID(st.mysqlGTID, st.mysqlGNO)
		}
		if st.hasMariaGTID && st.pos.IsMariaDB {
			st.pos.MariaDB.Set(st.mariaGTID)
		}
	} else {
		if endPos < 4 {
			return false, fmt.Errorf("%w: transaction end at %s without a binlog offset", ErrUnsupported, st.file)
		}
		st.pos.File, st.pos.Offset = st.file, endPos
	}
	hadGTID := st.hasMySQLGTID || st.hasMariaGTID
	st.inTx, st.hasMySQLGTID, st.hasMariaGTID = false, false, false
	m := st.src.m
	m.TransactionsRead.Inc()
	commit := time.Unix(int64(ev.Header.Timestamp), 0)
	if lag := time.Since(commit).Seconds(); lag > 0 {
		m.LagSeconds.Set(lag)
	} else {
		m.LagSeconds.Set(0)
	}
	st.src.catchUp.Observe(commit, st.g.ordinal, st.posText) // progress lines while behind (progress.go)
	if st.pos.IsGTID() && !hadGTID {
		if st.g.ordinal > 0 {
			return false, fmt.Errorf("%w: transaction without GTID at %s:%d while following GTID positions; set gtid_mode=ON or use gtid: off",
				ErrUnsupported, st.file, startOf(ev))
		}
		return false, nil
	}
	return true, nil
}

// deliver sends the rows ending a transaction with End set (or, at most
// once per emptyTxInterval, an empty Tx to move the checkpoint).
func (st *stream) deliver(events []outboxcdc.Event, commitTime time.Time, closes bool) error {
	now := time.Now()
	if len(events) == 0 && !closes && (now.Sub(st.lastEmit) < st.src.emptyTxInterval || st.src.plan != nil) {
		// While a transaction's fragments are out, nothing else may come
		// between them and its end.
		return nil
	}
	for i := range events {
		events[i].CommitTime = commitTime
	}
	st.src.m.EventsRead.Add(float64(len(events)))
	pool := st.src.pool
	if len(events) == 0 {
		pool.Put(events)
		events = nil
	} else {
		st.rowsHint = len(events)
		if cap(events) > 2*len(events) {
			// Room reserved for a larger transaction than this one: do
			// not hold it while the rows wait for delivery.
			small := append(pool.Get(len(events)), events...)
			pool.Put(events)
			events = small
		}
	}
	st.lastEmit, st.quiet = now, false
	return st.send(outboxcdc.Tx{Events: events, End: st.endPos(), CommitTime: commitTime, Pool: pool})
}
