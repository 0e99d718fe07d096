package binlog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"
)

// rowDecoder decodes the rows events of one session. go-mysql calls decode
// from its reader goroutine (BinlogSyncerConfig.RowsEventDecodeFunc) for
// every rows event; only the outbox tables' rows are decoded, which is
// most of the work on a busy server.
//
// UPDATE and DELETE rows are decoded there by go-mysql (the stream only
// counts them). INSERT rows are decoded by decodeInsert, or, when the
// decoder defers them (the session's syncer), handed to the stream
// undecoded (takeDeferred): the stream knows the table's layout, reads the
// columns an Event takes from the row images itself (rowimage.go), and
// calls decodeInsert for the events it leaves to go-mysql. decodeInsert
// and its JSON state are then used by the stream's goroutine alone.
//
// A MySQL binary JSON column of an INSERT is decoded by appendJSONText
// (jsonb.go) into MySQL's own text form, not by go-mysql, whose JSON
// decoder re-sorts keys, drops the spacing, turns decimals into strings or
// floats and HTML-escapes.
type rowDecoder struct {
	match *tableMatcher
	// deferred holds the undecoded INSERT rows events of the outbox
	// tables until the stream takes them; nil: decode them here.
	deferred *deferredRows

	// The last table map with JSON columns and its copy that shows them
	// as BLOBs (same length prefix), so go-mysql hands over their bytes.
	lastTM   *replication.TableMapEvent
	asBlob   *replication.TableMapEvent
	jsonCols []int
}

// rowsBody is a rows event's body (checksum removed) and the offset of
// its rows after the header go-mysql decoded.
type rowsBody struct {
	pos  int
	data []byte
}

// deferredRows passes the bodies of undecoded INSERT rows events from
// go-mysql's reader goroutine to the stream's. An entry lives from the
// event's parse to the stream's handle of it: at most the syncer's
// read-ahead.
type deferredRows struct {
	mu   sync.Mutex
	rows map[*replication.RowsEvent]rowsBody
}

func (d *deferredRows) put(e *replication.RowsEvent, b rowsBody) {
	d.mu.Lock()
	if d.rows == nil {
		d.rows = make(map[*replication.RowsEvent]rowsBody)
	}
	d.rows[e] = b
	d.mu.Unlock()
}

func (d *deferredRows) take(e *replication.RowsEvent) (rowsBody, bool) {
	d.mu.Lock()
	b, ok := d.rows[e]
	if ok {
		delete(d.rows, e)
	}
	d.mu.Unlock()
	return b, ok
}

// newDeferringDecoder is the session syncer's decoder: INSERT rows of the
// outbox tables are left to the stream.
func newDeferringDecoder(match *tableMatcher) *rowDecoder {
	return &rowDecoder{match: match, deferred: &deferredRows{}}
}

func (d *rowDecoder) decode(e *replication.RowsEvent, data []byte) error {
	pos, err := e.DecodeHeader(data)
	if err != nil {
		return err
	}
	if e.Table == nil || !d.match.matches(e.Table.Schema, e.Table.Table) {
		return nil
	}
	if e.Type() != replication.EnumRowsEventTypeInsert {
		return e.DecodeData(pos, data)
	}
	if d.deferred != nil {
		d.deferred.put(e, rowsBody{pos: pos, data: data})
		return nil
	}
	return d.decodeInsert(e, pos, data)
}

// takeDeferred returns the body of e if the decoder left its rows
// undecoded.
func (d *rowDecoder) takeDeferred(e *replication.RowsEvent) (rowsBody, bool) {
	if d == nil || d.deferred == nil || e.Rows != nil {
		return rowsBody{}, false
	}
	return d.deferred.take(e)
}

// decodeInsert decodes the rows of an INSERT rows event with go-mysql,
// binary JSON columns as MySQL's text (see rowDecoder).
func (d *rowDecoder) decodeInsert(e *replication.RowsEvent, pos int, data []byte) error {
	orig := e.Table
	if orig != d.lastTM {
		d.lastTM, d.asBlob, d.jsonCols = orig, nil, nil
		for i, t := range orig.ColumnType {
			if t == mysql.MYSQL_TYPE_JSON {
				d.jsonCols = append(d.jsonCols, i)
			}
		}
		if len(d.jsonCols) > 0 {
			cp := *orig
			cp.ColumnType = append([]byte(nil), orig.ColumnType...)
			for _, i := range d.jsonCols {
				cp.ColumnType[i] = mysql.MYSQL_TYPE_BLOB
			}
			d.asBlob = &cp
		}
	}
	if d.asBlob == nil {
		return e.DecodeData(pos, data)
	}
	e.Table = d.asBlob
	err := e.DecodeData(pos, data)
	e.Table = orig
	if err != nil {
		return err
	}
	for _, row := range e.Rows {
		for _, i := range d.jsonCols {
			raw, ok := row[i].([]byte)
			if !ok {
				continue // NULL
			}
			text, err := appendJSONText(make([]byte, 0, len(raw)+len(raw)/4), raw)
			if err != nil {
				return fmt.Errorf("binary JSON in column %d of %s.%s: %w", i+1, orig.Schema, orig.Table, err)
			}
			row[i] = text
		}
	}
	return nil
}

// payloadParser returns a parser that decodes the events inside a MySQL
// compressed transaction (binlog_transaction_compression) as the session's
// syncer decodes the others: go-mysql decodes them with a parser of its own
// that has none of the session's settings (DATETIME and TIMESTAMP come out
// as text in the process's time zone, JSON through go-mysql's decoder,
// every table's rows decoded). It is built once per format description.
func (st *stream) payloadParser() (*replication.BinlogParser, error) {
	if st.payload != nil {
		return st.payload, nil
	}
	if st.fde == nil {
		return nil, fmt.Errorf("%w: a compressed transaction before any format description event", ErrUnsupported)
	}
	p := replication.NewBinlogParser()
	p.SetFlavor(mysql.MySQLFlavor)
	p.SetParseTime(true)
	p.SetUseDecimal(false)
	p.SetVerifyChecksum(false)
	// A decoder of its own: the session's runs in go-mysql's goroutine.
	p.SetRowsEventDecodeFunc((&rowDecoder{match: st.match}).decode)
	if _, err := p.Parse(formatDescription(st.fde)); err != nil {
		return nil, fmt.Errorf("%w: format description for compressed transactions: %v", ErrUnsupported, err)
	}
	st.payload = p
	return p, nil
}

// payloadEvents re-parses the events of a compressed transaction (see
// payloadParser).
func (st *stream) payloadEvents(e *replication.TransactionPayloadEvent) ([]*replication.BinlogEvent, error) {
	p, err := st.payloadParser()
	if err != nil {
		return nil, err
	}
	out := make([]*replication.BinlogEvent, 0, len(e.Events))
	for _, inner := range e.Events {
		ev, err := p.Parse(inner.RawData)
		if err != nil {
			var ee *replication.EventError
			if errors.As(err, &ee) {
				return nil, err
			}
			return nil, fmt.Errorf("%w: event in a compressed transaction: %v", ErrUnsupported, err)
		}
		out = append(out, ev)
	}
	return out, nil
}

// formatDescription encodes fde as a format description event whose
// events carry no checksum, as the events inside a compressed transaction
// do.
func formatDescription(fde *replication.FormatDescriptionEvent) []byte {
	body := make([]byte, 0, 2+50+4+1+len(fde.EventTypeHeaderLengths)+5)
	body = binary.LittleEndian.AppendUint16(body, fde.Version)
	var version [50]byte
	copy(version[:], fde.ServerVersion)
	body = append(body, version[:]...)
	body = binary.LittleEndian.AppendUint32(body, fde.CreateTimestamp)
	body = append(body, replication.EventHeaderSize)
	body = append(body, fde.EventTypeHeaderLengths...)
	body = append(body, byte(replication.BINLOG_CHECKSUM_ALG_OFF), 0, 0, 0, 0)
	return eventBytes(replication.FORMAT_DESCRIPTION_EVENT, body)
}

// eventBytes prefixes body with a binlog event header.
func eventBytes(t replication.EventType, body []byte) []byte {
	b := make([]byte, replication.EventHeaderSize, replication.EventHeaderSize+len(body))
	b[4] = byte(t)
	binary.LittleEndian.PutUint32(b[9:], uint32(replication.EventHeaderSize+len(body)))
	return append(b, body...)
}
