package binlog

import (
	"encoding/binary"
	"fmt"
	"math/bits"
	"slices"
	"unsafe"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"
	outboxcdc "github.com/outbox-cdc/outbox-cdc"
)

// The source's own reader of INSERT row images (WRITE_ROWS events). A row
// image is, per row: a NULL bitmap with one bit per column present in the
// event's column bitmap, then the value of every present non-NULL column,
// each laid out as its binlog type and table-map metadata say (a fixed
// width, or a little-endian length prefix and that many bytes). The reader
// finds every value's bounds without decoding it, and the layout takes
// only the columns an Event carries, as they are: strings and bytes that
// alias the event's buffer (go-mysql reads each packet into a buffer of
// its own and never reuses it: packet.Conn.ReadPacket, which the syncer's
// reader calls, copies a packet of up to 4 MiB out of its pooled buffer
// and hands a larger one over with the buffer it then drops; a compressed
// transaction is decompressed into a new buffer; checked for v1.16;
// layout.bytes relies on the same). go-mysql's
// decoder, by contrast, boxes every column of every row into []any (the
// DATETIMEs parsed into time.Time), and most of those columns are never
// read.
//
// Only what is certain is read here; everything else goes to go-mysql's
// decoder (stream.rows, rowDecoder.decodeInsert), event by event:
//   - a table with a column type or metadata widths cannot be computed from
//     with certainty (colWidths);
//   - a table with binary JSON (MySQL 8): its documents are turned into
//     MySQL's text form for every JSON column, read or not (jsonb.go);
//   - an Event column whose text needs render() (anything but VARCHAR,
//     CHAR, TEXT/BLOB: numbers, dates, ENUM/SET labels, BINARY(n) padding)
//     (fastLayout);
//   - a row image without every column (binlog_row_image MINIMAL/NOBLOB,
//     which checkImage refuses with the name of the missing column), and
//     MariaDB's compressed rows events (fastEvent).

// colWidth is how one column's value is laid out in a row image: fixed
// bytes, or a little-endian length of prefix bytes followed by that many.
type colWidth struct {
	fixed  int
	prefix int   // 1..4; 0: fixed
	max    int   // VARCHAR/CHAR: the most bytes the column holds; 0: no check
	typ    uint8 // the binlog type, for the error text
}

// dig2bytes is how many bytes a DECIMAL stores for 0..9 leftover digits.
var dig2bytes = [10]int{0, 1, 1, 2, 2, 3, 3, 4, 4, 4}

// colWidths returns how each column of a table map lays out its values,
// or why it cannot tell for one of them (the caller then leaves the
// event to go-mysql).
func colWidths(types []byte, metas []uint16) ([]colWidth, string) {
	if len(types) != len(metas) {
		return nil, "table map with fewer metadata than columns"
	}
	ws := make([]colWidth, len(types))
	for i, t := range types {
		w, why := colWidthOf(t, metas[i])
		if why != "" {
			return nil, fmt.Sprintf("column %d: %s", i+1, why)
		}
		ws[i] = w
	}
	return ws, ""
}

func colWidthOf(t byte, meta uint16) (colWidth, string) {
	w := colWidth{typ: t}
	fixed := func(n int) (colWidth, string) { w.fixed = n; return w, "" }
	switch t {
	case mysql.MYSQL_TYPE_TINY, mysql.MYSQL_TYPE_YEAR:
		return fixed(1)
	case mysql.MYSQL_TYPE_SHORT:
		return fixed(2)
	case mysql.MYSQL_TYPE_INT24, mysql.MYSQL_TYPE_DATE, mysql.MYSQL_TYPE_TIME:
		return fixed(3)
	case mysql.MYSQL_TYPE_LONG, mysql.MYSQL_TYPE_TIMESTAMP:
		return fixed(4)
	case mysql.MYSQL_TYPE_LONGLONG, mysql.MYSQL_TYPE_DATETIME:
		return fixed(8)
	case mysql.MYSQL_TYPE_FLOAT:
		if meta != 4 {
			return w, fmt.Sprintf("FLOAT with metadata %d", meta)
		}
		return fixed(4)
	case mysql.MYSQL_TYPE_DOUBLE:
		if meta != 8 {
			return w, fmt.Sprintf("DOUBLE with metadata %d", meta)
		}
		return fixed(8)
	case mysql.MYSQL_TYPE_NULL:
		return fixed(0)
	case mysql.MYSQL_TYPE_TIMESTAMP2:
		if meta > 6 {
			return w, fmt.Sprintf("TIMESTAMP(%d)", meta)
		}
		return fixed(4 + int(meta+1)/2)
	case mysql.MYSQL_TYPE_DATETIME2:
		if meta > 6 {
			return w, fmt.Sprintf("DATETIME(%d)", meta)
		}
		return fixed(5 + int(meta+1)/2)
	case mysql.MYSQL_TYPE_TIME2:
		if meta > 6 {
			return w, fmt.Sprintf("TIME(%d)", meta)
		}
		return fixed(3 + int(meta+1)/2)
	case mysql.MYSQL_TYPE_NEWDECIMAL:
		prec, scale := int(meta>>8), int(meta&0xff)
		if prec < 1 || prec > 65 || scale > 30 || scale > prec {
			return w, fmt.Sprintf("DECIMAL(%d,%d)", prec, scale)
		}
		intg := prec - scale
		return fixed(intg/9*4 + dig2bytes[intg%9] + scale/9*4 + dig2bytes[scale%9])
	case mysql.MYSQL_TYPE_BIT:
		nbits := int(meta>>8)*8 + int(meta&0xff)
		if meta&0xff > 7 || nbits < 1 || nbits > 64 {
			return w, fmt.Sprintf("BIT with metadata %#x", meta)
		}
		return fixed((nbits + 7) / 8)
	case mysql.MYSQL_TYPE_VARCHAR, mysql.MYSQL_TYPE_VAR_STRING:
		w.prefix, w.max = 1, int(meta)
		if meta >= 256 {
			w.prefix = 2
		}
		return w, ""
	case mysql.MYSQL_TYPE_BLOB, mysql.MYSQL_TYPE_GEOMETRY, mysql.MYSQL_TYPE_VECTOR:
		if meta < 1 || meta > 4 {
			return w, fmt.Sprintf("BLOB with a %d-byte length", meta)
		}
		w.prefix = int(meta)
		return w, ""
	case mysql.MYSQL_TYPE_STRING:
		switch realType(t, meta) {
		case mysql.MYSQL_TYPE_STRING: // CHAR, BINARY
			w.max = stringLength(meta)
			if meta < 256 {
				w.max = int(meta)
			}
			w.prefix = 1
			if w.max >= 256 {
				w.prefix = 2
			}
			return w, ""
		case mysql.MYSQL_TYPE_ENUM:
			if n := int(meta & 0xff); n == 1 || n == 2 {
				return fixed(n)
			}
		case mysql.MYSQL_TYPE_SET:
			if n := int(meta & 0xff); n >= 1 && n <= 8 {
				return fixed(n)
			}
		}
		return w, fmt.Sprintf("CHAR/ENUM/SET with metadata %#x", meta)
	case mysql.MYSQL_TYPE_JSON:
		// Binary JSON: go-mysql's path turns every JSON column into text.
		return w, "binary JSON"
	}
	return w, fmt.Sprintf("binlog type %d", t)
}

// rowReader walks the row images of one rows event's data (after its
// column bitmap), one row at a time.
type rowReader struct {
	widths  []colWidth
	present []byte // the event's column bitmap
	ncols   int
	nulls   int // bytes of each row's NULL bitmap
	data    []byte
	pos     int
	row     int // rows read so far
}

func newRowReader(widths []colWidth, present []byte, data []byte) (rowReader, error) {
	r := rowReader{widths: widths, present: present, ncols: len(widths), data: data}
	if len(present) < (r.ncols+7)/8 {
		return r, fmt.Errorf("column bitmap of %d bytes for %d columns", len(present), r.ncols)
	}
	n := bitmapOnes(present, r.ncols)
	if n == 0 {
		return r, fmt.Errorf("row image without columns")
	}
	r.nulls = (n + 7) / 8
	return r, nil
}

// fieldSpan is where one column's value lies in the event data; null when
// it is NULL (or absent from the image).
type fieldSpan struct {
	start, end int
	null       bool
}

// next reads the next row. When take is not nil, take[i] >= 0 names the
// slot of out that receives column i. It returns false at the end of the
// data; a row running past the end, or a length beyond its column's size,
// is an error naming the row, the column and the byte offset.
func (r *rowReader) next(take []int8, out []fieldSpan) (bool, error) {
	if r.pos >= len(r.data) {
		return false, nil
	}
	start := r.pos
	if r.nulls > len(r.data)-r.pos {
		return false, r.pastEnd(-1, start, r.nulls)
	}
	nullBits := r.data[r.pos : r.pos+r.nulls]
	pos := r.pos + r.nulls
	k := 0 // index among present columns
	for i := range r.ncols {
		slot := int8(-1)
		if take != nil {
			slot = take[i]
		}
		if r.present[i>>3]&(1<<(i&7)) == 0 {
			if slot >= 0 {
				out[slot] = fieldSpan{null: true}
			}
			continue
		}
		isNull := nullBits[k>>3]&(1<<(k&7)) != 0
		k++
		if isNull {
			if slot >= 0 {
				out[slot] = fieldSpan{null: true}
			}
			continue
		}
		w := &r.widths[i]
		vstart, n := pos, w.fixed
		if w.prefix > 0 {
			if w.prefix > len(r.data)-pos {
				return false, r.pastEnd(i, pos, w.prefix)
			}
			switch w.prefix {
			case 1:
				n = int(r.data[pos])
			case 2:
				n = int(binary.LittleEndian.Uint16(r.data[pos:]))
			case 3:
				n = int(r.data[pos]) | int(r.data[pos+1])<<8 | int(r.data[pos+2])<<16
			case 4:
				n = int(binary.LittleEndian.Uint32(r.data[pos:]))
			}
			if w.max > 0 && n > w.max {
				return false, fmt.Errorf("row %d, column %d: length %d at byte %d is more than the column's %d bytes", r.row+1, i+1, n, pos, w.max)
			}
			pos += w.prefix
			vstart = pos
		}
		if n > len(r.data)-pos {
			return false, r.pastEnd(i, vstart, n)
		}
		pos += n
		if slot >= 0 {
			out[slot] = fieldSpan{start: vstart, end: pos}
		}
	}
	r.pos = pos
	r.row++
	return true, nil
}

func (r *rowReader) pastEnd(col, at, n int) error {
	what := "its NULL bitmap"
	if col >= 0 {
		what = fmt.Sprintf("column %d (binlog type %d)", col+1, r.widths[col].typ)
	}
	return fmt.Errorf("row %d, %s: %d bytes at byte %d run past the end of the rows data (%d bytes)", r.row+1, what, n, at, len(r.data))
}

// countRows counts the rows of an event's data, checking every row's
// bounds.
func countRows(widths []colWidth, present, data []byte) (int, error) {
	r, err := newRowReader(widths, present, data)
	if err != nil {
		return 0, err
	}
	for {
		ok, err := r.next(nil, nil)
		if err != nil {
			return 0, err
		}
		if !ok {
			return r.row, nil
		}
	}
}

// fastLayout is what the layout needs to read its Event's columns from a
// row image itself (see the top of this file).
type fastLayout struct {
	widths []colWidth
	take   []int8 // per binlog column: its slot in spans, or -1
	spans  []fieldSpan
	// slots: messageID, aggregateType, aggregateID, eventType, payload, then
	// the extra columns present in the table, in l.extra's order.
	rows []fieldSpan // readRows: every row's spans, len(spans) per row
}

// maxReadRows is the most rows whose spans readRows keeps; a rows event of
// more (a server with a large binlog_row_event_max_size) is read twice.
const maxReadRows = 4096

// readRows reads the spans of every row of an event's data, checking every
// row's bounds, in one pass: it returns the rows' count and their spans
// (f.rows, len(f.spans) per row), or nil spans when there are more than
// maxReadRows rows (the caller reads them again one by one).
func (f *fastLayout) readRows(present, data []byte) (int, []fieldSpan, error) {
	r, err := newRowReader(f.widths, present, data)
	if err != nil {
		return 0, nil, err
	}
	k := len(f.spans)
	all := f.rows[:0]
	for {
		if r.row == maxReadRows {
			f.rows = all[:0]
			n, err := countRows(f.widths, present, data)
			return n, nil, err
		}
		all = slices.Grow(all, k)[:len(all)+k]
		ok, err := r.next(f.take, all[len(all)-k:])
		if err != nil {
			return 0, nil, err
		}
		if !ok {
			all = all[:len(all)-k]
			f.rows = all
			return r.row, all, nil
		}
	}
}

// textType says whether a column's value is delivered as its bytes, as
// stored, by layout.text, layout.bytes and render: VARCHAR, CHAR (not
// BINARY(n), which render pads), TEXT/BLOB.
func textType(c *colInfo) bool {
	switch c.typ {
	case mysql.MYSQL_TYPE_VARCHAR, mysql.MYSQL_TYPE_VAR_STRING, mysql.MYSQL_TYPE_BLOB:
		return true
	case mysql.MYSQL_TYPE_STRING:
		return realType(c.typ, c.meta) == mysql.MYSQL_TYPE_STRING && !c.binary
	}
	return false
}

// newFastLayout returns l's reader of row images, or nil and why the
// layout's rows are left to go-mysql's decoder.
func newFastLayout(l *layout) (*fastLayout, string) {
	ws, why := colWidths(l.types, l.metas)
	if why != "" {
		return nil, why
	}
	f := &fastLayout{widths: ws, take: make([]int8, l.ncols)}
	for i := range f.take {
		f.take[i] = -1
	}
	if len(l.cols) != l.ncols {
		return nil, "column list of another length"
	}
	used := l.used()
	if len(used) > 127 {
		return nil, "too many columns"
	}
	for slot, i := range used {
		c := &l.cols[i]
		if !textType(c) {
			return nil, fmt.Sprintf("column %s (binlog type %d) is rendered", c.name, c.typ)
		}
		if f.take[i] >= 0 {
			return nil, fmt.Sprintf("column %s has two roles", c.name)
		}
		f.take[i] = int8(slot)
	}
	f.spans = make([]fieldSpan, len(used))
	return f, ""
}

// fastEvent says whether the rows of e (an INSERT) can be read by l.fast:
// an uncompressed rows event whose image has every column of the table map.
func fastEvent(ev *replication.BinlogEvent, e *replication.RowsEvent, l *layout) bool {
	if l.fast == nil || int(e.ColumnCount) != l.ncols {
		return false
	}
	switch ev.Header.EventType {
	case replication.WRITE_ROWS_EVENTv0, replication.WRITE_ROWS_EVENTv1, replication.WRITE_ROWS_EVENTv2:
	default:
		return false
	}
	if len(e.ColumnBitmap1) != (l.ncols+7)/8 {
		return false
	}
	for i := range l.ncols {
		if e.ColumnBitmap1[i>>3]&(1<<(i&7)) == 0 {
			return false
		}
	}
	return true
}

// eventAt builds the Event of the row whose spans f.spans holds, exactly
// as layout.event builds it from go-mysql's values (values alias data).
func (l *layout) eventAt(data []byte) outboxcdc.Event {
	s := l.fast.spans
	e := outboxcdc.Event{
		MessageID:     spanText(data, s[0]),
		AggregateType: spanText(data, s[1]),
		AggregateID:   spanText(data, s[2]),
		EventType:     spanText(data, s[3]),
		Payload:       spanBytes(data, s[4]),
	}
	if len(l.extra) > 0 {
		e.Extra = make([]outboxcdc.Column, 0, len(l.extra))
		slot := 5
		for _, ec := range l.extra {
			if ec.index < 0 {
				continue
			}
			sp := s[slot]
			slot++
			if sp.null {
				e.Extra = append(e.Extra, outboxcdc.Column{Name: ec.name, Null: true})
				continue
			}
			e.Extra = append(e.Extra, outboxcdc.Column{Name: ec.name, Value: spanBytes(data, sp)})
		}
	}
	return e
}

// spanText is a value as a string sharing data's memory; NULL is "".
func spanText(data []byte, s fieldSpan) string {
	if s.null || s.end == s.start {
		return ""
	}
	return unsafe.String(&data[s.start], s.end-s.start)
}

// spanBytes is a value's bytes in data (never nil); NULL is nil.
func spanBytes(data []byte, s fieldSpan) []byte {
	if s.null {
		return nil
	}
	return data[s.start:s.end:s.end]
}

// bitmapOnes counts the set bits of the first n bits of b.
func bitmapOnes(b []byte, n int) int {
	c := 0
	for i := 0; i < n/8; i++ {
		c += bits.OnesCount8(b[i])
	}
	if n%8 != 0 {
		c += bits.OnesCount8(b[n/8] & (1<<(n%8) - 1))
	}
	return c
}
