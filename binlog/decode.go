package binlog

import (
	"fmt"
	"sync"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"
)

// rowDecoder decodes the rows events of one session. go-mysql calls decode
// from its reader goroutine (BinlogSyncerConfig.RowsEventDecodeFunc) for
// every rows event, those inside a compressed transaction too (go-mysql
// v1.16 gives their parser the session's settings); only the outbox
// tables' rows are decoded, which is most of the work on a busy server.
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
// floats and HTML-escapes (its RenderJSONAsMySQLText mode keeps keys and
// decimals but not the rest: jsonb.go).
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
