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
// discarded on reconnect, and with it any partial transaction.
type stream struct {
	src  *Source
	pos  Pos    // just past the last transaction end seen
	file string // binlog file of the current event, for Origin

	inTx   bool
	events []outboxcdc.Event // the current transaction's outbox rows

	// GTID of the current transaction, applied to pos at its end.
	mysqlGTID    uuid.UUID
	mysqlGNO     int64
	hasMySQLGTID bool
	mariaGTID    mysql.MariadbGTID
	hasMariaGTID bool

	lastEmit time.Time

	// Columns of the outbox table (schema.go, table.go).
	streamEnv
	layout  *layout
	schema  *tableSchema // information_schema's list and its proof; nil: read at the next row
	scope   *binlogPoint // the stream has seen every event from here on, with no boundary
	lastDDL *ddlEvent    // the last statement that may have changed the table
	fde     *replication.FormatDescriptionEvent
	payload *replication.BinlogParser // for compressed transactions (decode.go)
}

// streamEnv is what a stream needs of its session: the table matcher the
// syncer's row decoder uses, and a connection for information_schema.
type streamEnv struct {
	ctx     context.Context
	db      *sql.DB
	match   *tableMatcher
	mariadb bool // the server is MariaDB (its table maps count YEAR as numeric)
}

func newStream(src *Source, start Pos, env streamEnv) *stream {
	return &stream{src: src, pos: start.Clone(), file: start.File, streamEnv: env}
}

// handle consumes one event and returns a Tx when it ends a transaction
// that should be delivered. endPos is the offset just past the event (for
// events inside a compressed transaction payload: past the payload).
func (st *stream) handle(ev *replication.BinlogEvent, endPos uint32) (*outboxcdc.Tx, error) {
	st.markScope(ev, endPos) // schema.go
	switch e := ev.Event.(type) {
	case *replication.RotateEvent:
		st.file = string(e.NextLogName)
		st.src.curFile.Store(&st.file)
		if !st.inTx && !st.pos.IsGTID() {
			// Not a transaction end, but the next one will be in this file;
			// keep pos meaningful for logs.
			st.pos.File, st.pos.Offset = st.file, uint32(e.Position)
		}
	case *replication.GtidTaggedLogEvent:
		if st.pos.MySQLGTID != nil {
			return nil, fmt.Errorf("%w: tagged GTID (MySQL 8.4) at %s:%d; use gtid: off", ErrUnsupported, st.file, startOf(ev))
		}
	case *replication.GTIDEvent:
		if st.pos.MySQLGTID != nil {
			u, err := uuid.FromBytes(e.SID)
			if err != nil {
				return nil, fmt.Errorf("%w: GTID event with bad server uuid at %s:%d", ErrUnsupported, st.file, startOf(ev))
			}
			st.mysqlGTID, st.mysqlGNO, st.hasMySQLGTID = u, e.GNO, true
		}
	case *replication.MariadbGTIDEvent:
		// e.GTID is not read here: go-mysql keeps a pointer to it in its
		// own GTID tracking and overwrites it from its reader goroutine
		// when the next GTID of the domain arrives. The raw event is
		// immutable.
		g, err := rawMariaDBGTID(ev)
		if err != nil {
			return nil, err
		}
		st.mariaGTID, st.hasMariaGTID = g, true
		// A MariaDB GTID event also opens the transaction (it replaces
		// BEGIN) unless the transaction is a single standalone statement.
		if !e.IsStandalone() {
			st.begin()
		}
	case *replication.QueryEvent:
		st.ddl(ev, e) // a statement that may change the outbox table (schema.go)
		return st.query(ev, e.Query, endPos)
	case *replication.XIDEvent:
		return st.commit(ev, endPos)
	case *replication.FormatDescriptionEvent:
		st.fde, st.payload = e, nil
	case *replication.RowsEvent:
		if e.Table == nil || !st.match.matches(e.Table.Schema, e.Table.Table) {
			return nil, nil
		}
		if e.Type() == replication.EnumRowsEventTypeInsert {
			// The columns these rows were written with (schema.go).
			at := binlogPoint{st.file, endPos}
			if err := st.ensureLayout(e.Table, at); err != nil {
				return nil, err
			}
			if err := st.layout.checkImage(e, at); err != nil {
				return nil, err
			}
		}
		if err := st.rows(ev, e); err != nil {
			return nil, err
		}
	case *replication.TransactionPayloadEvent:
		// MySQL binlog_transaction_compression: a whole transaction inside
		// one event. Its inner events carry no usable offsets; the
		// transaction ends where the payload event ends. They are decoded
		// again with the session's settings (decode.go).
		events, err := st.payloadEvents(e)
		if err != nil {
			return nil, err
		}
		var out *outboxcdc.Tx
		for _, inner := range events {
			tx, err := st.handle(inner, endPos)
			if err != nil {
				return nil, err
			}
			if tx != nil {
				out = tx
			}
		}
		return out, nil
	case *replication.GenericEvent:
		switch ev.Header.EventType {
		case replication.XA_PREPARE_LOG_EVENT:
			return st.xaPrepare(ev, e.Data, endPos)
		case replication.HEARTBEAT_EVENT, replication.HEARTBEAT_LOG_EVENT_V2:
			if !st.inTx {
				st.src.m.LagSeconds.Set(0) // the server has nothing newer
			}
		}
	}
	return nil, nil
}

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

func (st *stream) begin() {
	st.inTx = true
	st.events = st.events[:0]
}

// query handles a query event: BEGIN opens a transaction, COMMIT and
// ROLLBACK end one, a statement outside a transaction (DDL) is a
// transaction of its own, anything else inside one (SAVEPOINT) is ignored.
func (st *stream) query(ev *replication.BinlogEvent, q []byte, endPos uint32) (*outboxcdc.Tx, error) {
	switch {
	case bytes.EqualFold(q, []byte("BEGIN")), hasPrefixFold(q, "XA START"):
		st.begin()
		return nil, nil
	case bytes.EqualFold(q, []byte("COMMIT")), st.inTx && hasPrefixFold(q, "XA COMMIT"):
		return st.commit(ev, endPos)
	case bytes.EqualFold(q, []byte("ROLLBACK")), st.inTx && hasPrefixFold(q, "XA ROLLBACK"):
		// Rolled back: the rows never happened. Still a transaction end.
		st.events = st.events[:0]
		return st.commit(ev, endPos)
	case st.inTx:
		return nil, nil // SAVEPOINT, XA END, ...
	}
	return st.commit(ev, endPos) // standalone statement: DDL, XA COMMIT of a prepared XA, ...
}

func hasPrefixFold(q []byte, prefix string) bool {
	return len(q) >= len(prefix) && strings.EqualFold(string(q[:len(prefix)]), prefix)
}

// xaPrepare handles XA_PREPARE_LOG_EVENT: a one-phase XA COMMIT is a plain
// commit; a real XA PREPARE ends the binlogged part of a transaction that
// may still be rolled back by a later XA ROLLBACK. Holding its rows until
// then across restarts would need the checkpoint to stay behind it, so a
// prepared XA transaction that wrote outbox rows is refused rather than
// delivered early; one without outbox rows is an ordinary end.
func (st *stream) xaPrepare(ev *replication.BinlogEvent, data []byte, endPos uint32) (*outboxcdc.Tx, error) {
	onePhase := len(data) > 0 && data[0] != 0
	if !onePhase && len(st.events) > 0 {
		return nil, fmt.Errorf("%w: XA PREPARE at %s:%d holds %d outbox rows; two-phase XA transactions on the outbox table are not supported (commit outbox rows in ordinary transactions)",
			ErrUnsupported, st.file, startOf(ev), len(st.events))
	}
	return st.commit(ev, endPos)
}

// rows buffers the INSERTed rows of one rows event on the outbox table and
// counts UPDATE/DELETE rows as skipped (UPDATEs as route.on_update says).
func (st *stream) rows(ev *replication.BinlogEvent, e *replication.RowsEvent) error {
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
		st.begin()
	}
	origin := st.origin(ev)
	for _, row := range e.Rows {
		if len(row) != st.layout.ncols {
			continue // cannot happen with binlog_row_image=FULL
		}
		evt := st.layout.event(row)
		evt.Origin = origin
		st.events = append(st.events, evt)
	}
	return nil
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

// commit ends the current transaction at endPos: the position moves past
// it, and its events (or, at most once per emptyTxInterval, an empty Tx to
// move the checkpoint) are returned for delivery.
func (st *stream) commit(ev *replication.BinlogEvent, endPos uint32) (*outboxcdc.Tx, error) {
	if st.pos.IsGTID() {
		if st.hasMySQLGTID && st.pos.MySQLGTID != nil {
			st.pos.MySQLGTID.AddGTID(st.mysqlGTID, st.mysqlGNO)
		}
		if st.hasMariaGTID && st.pos.IsMariaDB {
			st.pos.MariaDB.Set(st.mariaGTID)
		}
	} else {
		if endPos < 4 {
			return nil, fmt.Errorf("%w: transaction end at %s without a binlog offset", ErrUnsupported, st.file)
		}
		st.pos.File, st.pos.Offset = st.file, endPos
	}
	hadGTID := st.hasMySQLGTID || st.hasMariaGTID
	st.inTx, st.hasMySQLGTID, st.hasMariaGTID = false, false, false
	m := st.src.m
	m.TransactionsRead.Inc()
	commitTime := time.Unix(int64(ev.Header.Timestamp), 0)
	now := time.Now()
	if lag := now.Sub(commitTime).Seconds(); lag > 0 {
		m.LagSeconds.Set(lag)
	} else {
		m.LagSeconds.Set(0)
	}
	if st.pos.IsGTID() && !hadGTID {
		// A GTID position cannot express a point after a transaction
		// without GTID; only happens on a server mixing anonymous ones.
		if len(st.events) > 0 {
			return nil, fmt.Errorf("%w: transaction without GTID at %s:%d while following GTID positions; set gtid_mode=ON or use gtid: off",
				ErrUnsupported, st.file, startOf(ev))
		}
		return nil, nil
	}
	if len(st.events) == 0 && now.Sub(st.lastEmit) < st.src.emptyTxInterval {
		return nil, nil
	}
	for i := range st.events {
		st.events[i].CommitTime = commitTime
	}
	m.EventsRead.Add(float64(len(st.events)))
	var events []outboxcdc.Event
	if len(st.events) > 0 {
		events = st.events
		st.events = nil // owned by the Tx now
	}
	st.lastEmit = now
	return &outboxcdc.Tx{Events: events, End: st.pos.Encode(), CommitTime: commitTime}, nil
}
