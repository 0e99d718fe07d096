package binlog

import (
	"bytes"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"
	outboxcdc "github.com/outbox-cdc/outbox-cdc"
)

// collationBinary is the collation id of the binary character set: a
// CHAR column with it is BINARY(n).
const collationBinary = 63

// colInfo is what turning one binlog column value into text needs.
type colInfo struct {
	name     string
	typ      byte   // binlog column type (table map)
	meta     uint16 // binlog column metadata (table map)
	unsigned bool
	binary   bool     // BINARY(n): the server keeps trailing zero bytes the binlog drops
	labels   []string // ENUM or SET labels in definition order
	set      bool     // labels are a SET's
}

// layout maps the outbox table's binlog columns to Event fields. It is
// resolved from a table map event and kept while later table maps describe
// the same columns (see sameMap), so rows are decoded by index, without
// names or maps.
type layout struct {
	tableID uint64
	types   []byte
	metas   []uint16
	names   [][]byte // the table map's names; nil when they came from information_schema
	ncols   int

	messageID, aggregateType, aggregateID, eventType, payload int
	cols                                                      []colInfo // per binlog column
	extra                                                     []extraColumn

	// fast reads the Event's columns from row images (rowimage.go); nil
	// when go-mysql decodes this layout's rows, for the reason fastWhy.
	fast    *fastLayout
	fastWhy string
}

type extraColumn struct {
	name  string
	index int // -1: not in the table, not delivered
}

// sameMap reports whether tm describes the columns l was resolved from.
func (l *layout) sameMap(tm *replication.TableMapEvent) bool {
	if tm.TableID != l.tableID || int(tm.ColumnCount) != l.ncols ||
		!bytes.Equal(tm.ColumnType, l.types) || !slices.Equal(tm.ColumnMeta, l.metas) {
		return false
	}
	if (len(tm.ColumnName) > 0) != (l.names != nil) {
		return false
	}
	for i, n := range l.names {
		if !bytes.Equal(n, tm.ColumnName[i]) {
			return false
		}
	}
	return true
}

// columnsFromBinlog describes tm's columns from its own metadata: with
// binlog_row_metadata=FULL the table map carries every column's name,
// signedness, character set and ENUM/SET labels.
func columnsFromBinlog(tm *replication.TableMapEvent) []colInfo {
	n := int(tm.ColumnCount)
	cols := make([]colInfo, n)
	unsigned := unsignedFlags(tm)
	collations := tm.CollationMap()
	enums, sets := tm.EnumStrValueMap(), tm.SetStrValueMap()
	for i := range cols {
		c := &cols[i]
		c.name = string(tm.ColumnName[i])
		c.typ, c.meta = tm.ColumnType[i], tm.ColumnMeta[i]
		c.unsigned = unsigned != nil && unsigned[i]
		c.binary = realType(c.typ, c.meta) == mysql.MYSQL_TYPE_STRING && collations[i] == collationBinary
		if l, ok := enums[i]; ok {
			c.labels = l
		} else if l, ok := sets[i]; ok {
			c.labels, c.set = l, true
		}
	}
	return cols
}

// columnsFromSchema describes tm's columns with information_schema's
// column list, after checking that the list fits the table map: the same
// number of columns, and each with the type, length, precision and
// nullability the binlog row carries (and signedness, when the table map
// has it). A list that does not fit is an error; one that fits is used only
// where the stream has proven it describes these rows (schema.go).
func columnsFromSchema(tm *replication.TableMapEvent, info []schemaColumn) ([]colInfo, error) {
	n := int(tm.ColumnCount)
	if len(info) != n {
		return nil, fmt.Errorf("the binlog row has %d columns, information_schema lists %d", n, len(info))
	}
	unsigned := unsignedFlags(tm)
	cols := make([]colInfo, n)
	for i := range cols {
		sc := &info[i]
		c := &cols[i]
		c.name = sc.Name
		c.typ, c.meta = tm.ColumnType[i], tm.ColumnMeta[i]
		if why := sc.fits(c.typ, c.meta); why != "" {
			return nil, fmt.Errorf("column %d (%s) is %s in information_schema, but the binlog row holds %s", i+1, sc.Name, sc.ColumnType, why)
		}
		if ok, nullable := tm.Nullable(i); ok && nullable != sc.Nullable {
			return nil, fmt.Errorf("column %d (%s) is %s in information_schema, but nullable=%v in the binlog row", i+1, sc.Name, sc.ColumnType, nullable)
		}
		if unsigned != nil && isNumber(c.typ) && unsigned[i] != sc.Unsigned {
			return nil, fmt.Errorf("column %d (%s) is %s in information_schema, but unsigned=%v in the binlog row", i+1, sc.Name, sc.ColumnType, unsigned[i])
		}
		c.unsigned = sc.Unsigned
		c.binary = sc.DataType == "binary"
		c.labels, c.set = sc.Labels, sc.DataType == "set"
	}
	return cols, nil
}

// unsignedFlags reads the table map's signedness bitmap (MINIMAL and FULL
// metadata), which has one bit per column of a type with a sign, most
// significant bit first; nil when the table map has none. MySQL
// (has_signedess_information_type) and MariaDB both give YEAR and the old
// DECIMAL a bit, as go-mysql's UnsignedMap does since v1.15.
func unsignedFlags(tm *replication.TableMapEvent) []bool {
	bitmap := tm.SignednessBitmap
	if len(bitmap) == 0 {
		return nil
	}
	out := make([]bool, tm.ColumnCount)
	bit := 0
	for i, t := range tm.ColumnType {
		if !hasSignednessBit(t) {
			continue
		}
		if bit/8 >= len(bitmap) {
			break
		}
		out[i] = bitmap[bit/8]&(0x80>>(bit%8)) != 0
		bit++
	}
	return out
}

func hasSignednessBit(t byte) bool {
	return isNumber(t) || t == mysql.MYSQL_TYPE_YEAR || t == mysql.MYSQL_TYPE_DECIMAL
}

// isNumber: the types information_schema calls signed or unsigned (YEAR's
// bit means nothing: MySQL writes 0, MariaDB 1).
func isNumber(t byte) bool {
	switch t {
	case mysql.MYSQL_TYPE_TINY, mysql.MYSQL_TYPE_SHORT, mysql.MYSQL_TYPE_INT24, mysql.MYSQL_TYPE_LONG,
		mysql.MYSQL_TYPE_LONGLONG, mysql.MYSQL_TYPE_NEWDECIMAL, mysql.MYSQL_TYPE_FLOAT, mysql.MYSQL_TYPE_DOUBLE:
		return true
	}
	return false
}

// resolveLayout maps the role and extra columns of cols (the table's
// columns in binlog order) to indexes. A missing role column is an
// ErrTable.
func resolveLayout(tm *replication.TableMapEvent, cols []colInfo, roles outboxcdc.Columns, table string, fromBinlog bool) (*layout, error) {
	find := func(name string) int {
		for i := range cols {
			if strings.EqualFold(cols[i].name, name) {
				return i
			}
		}
		return -1
	}
	l := &layout{
		tableID: tm.TableID, ncols: int(tm.ColumnCount),
		types: bytes.Clone(tm.ColumnType), metas: slices.Clone(tm.ColumnMeta),
		cols: cols,
	}
	if fromBinlog {
		l.names = make([][]byte, len(tm.ColumnName))
		for i, n := range tm.ColumnName {
			l.names[i] = bytes.Clone(n)
		}
	}
	var missing []string
	role := func(dst *int, name string) {
		*dst = find(name)
		if *dst < 0 {
			missing = append(missing, name)
		}
	}
	role(&l.messageID, roles.MessageID)
	role(&l.aggregateType, roles.AggregateType)
	role(&l.aggregateID, roles.AggregateID)
	role(&l.eventType, roles.EventType)
	role(&l.payload, roles.Payload)
	if len(missing) > 0 {
		names := make([]string, len(cols))
		for i := range cols {
			names[i] = cols[i].name
		}
		return nil, missingColumns(table, missing, names)
	}
	for _, name := range roles.Extra {
		l.extra = append(l.extra, extraColumn{name: name, index: find(name)})
	}
	for _, i := range l.used() {
		c := &cols[i]
		if rt := realType(c.typ, c.meta); (rt == mysql.MYSQL_TYPE_ENUM || rt == mysql.MYSQL_TYPE_SET) && c.labels == nil {
			return nil, fmt.Errorf("%w: column %s of %s is an ENUM or SET, and neither the binlog nor information_schema gave its labels",
				ErrUnsupported, c.name, table)
		}
	}
	l.fast, l.fastWhy = newFastLayout(l)
	return l, nil
}

// used returns the indexes of the columns an Event takes.
func (l *layout) used() []int {
	out := []int{l.messageID, l.aggregateType, l.aggregateID, l.eventType, l.payload}
	for _, ec := range l.extra {
		if ec.index >= 0 {
			out = append(out, ec.index)
		}
	}
	return out
}

// event builds an Event from one decoded row. origin and the commit time
// are filled in by the caller.
func (l *layout) event(row []any) outboxcdc.Event {
	e := outboxcdc.Event{
		MessageID:     l.text(row, l.messageID),
		AggregateType: l.text(row, l.aggregateType),
		AggregateID:   l.text(row, l.aggregateID),
		EventType:     l.text(row, l.eventType),
		Payload:       l.bytes(row, l.payload),
	}
	if len(l.extra) > 0 {
		e.Extra = make([]outboxcdc.Column, 0, len(l.extra))
		for _, ec := range l.extra {
			if ec.index < 0 {
				continue
			}
			v := row[ec.index]
			if v == nil {
				e.Extra = append(e.Extra, outboxcdc.Column{Name: ec.name, Null: true})
				continue
			}
			e.Extra = append(e.Extra, outboxcdc.Column{Name: ec.name, Value: render(v, &l.cols[ec.index])})
		}
	}
	return e
}

// text renders a role column as a string; NULL is "". Role columns are
// normally VARCHAR, which go-mysql gives as a string (no copy here).
func (l *layout) text(row []any, i int) string {
	switch x := row[i].(type) {
	case nil:
		return ""
	case string:
		if !l.cols[i].binary {
			return x
		}
	}
	return string(render(row[i], &l.cols[i]))
}

// bytes returns the payload bytes exactly as stored; nil for NULL. A
// BLOB/TEXT value (MariaDB's JSON is LONGTEXT) aliases the event's own
// buffer, which is never reused; a MySQL binary JSON value was turned into
// MySQL's own text form when the row was decoded (jsonb.go).
func (l *layout) bytes(row []any, i int) []byte {
	switch x := row[i].(type) {
	case nil:
		return nil
	case []byte:
		if x == nil {
			return []byte{}
		}
		if !l.cols[i].binary {
			return x
		}
	}
	return render(row[i], &l.cols[i])
}

// render turns a decoded value into the text the server's own client
// protocol gives for it, so the stream and the start: pending backfill
// (pending.go, renderText) produce the same bytes:
//   - integers in decimal, signed or unsigned as the column is, whichever
//     go-mysql took them for; BIT as its unsigned decimal value; YEAR 0 as
//     0000;
//   - DECIMAL exactly, with the column's scale (go-mysql gives its text);
//   - ENUM and SET as their labels (SET labels joined by commas, in
//     definition order);
//   - strings and binary as their bytes, BINARY(n) padded with zero bytes
//     to n as the server stores it;
//   - DATETIME as 2006-01-02T15:04:05[.ffffff] and TIMESTAMP as RFC 3339 in
//     UTC, trailing fractional zeros dropped (zero dates as the server
//     writes them, with T).
func render(v any, c *colInfo) []byte {
	switch c.typ {
	case mysql.MYSQL_TYPE_DATETIME, mysql.MYSQL_TYPE_DATETIME2:
		switch x := v.(type) {
		case time.Time:
			return x.AppendFormat(nil, "2006-01-02T15:04:05.999999")
		case string:
			return normDatetime(x, false)
		}
	case mysql.MYSQL_TYPE_TIMESTAMP, mysql.MYSQL_TYPE_TIMESTAMP2:
		switch x := v.(type) {
		case time.Time:
			return x.UTC().AppendFormat(nil, "2006-01-02T15:04:05.999999Z07:00")
		case string:
			return normDatetime(x, true)
		}
	case mysql.MYSQL_TYPE_BIT:
		if x, ok := v.(int64); ok {
			return strconv.AppendUint(nil, uint64(x), 10)
		}
	case mysql.MYSQL_TYPE_YEAR:
		if x, ok := v.(int); ok && x == 0 {
			return []byte("0000")
		}
	case mysql.MYSQL_TYPE_STRING:
		switch realType(c.typ, c.meta) {
		case mysql.MYSQL_TYPE_ENUM:
			if x, ok := v.(int64); ok {
				if x >= 1 && int(x) <= len(c.labels) {
					return []byte(c.labels[x-1])
				}
				return []byte{} // index 0: the empty string an invalid value became
			}
		case mysql.MYSQL_TYPE_SET:
			if x, ok := v.(int64); ok {
				var b []byte
				for i, l := range c.labels {
					if i < 64 && uint64(x)&(1<<i) != 0 {
						if len(b) > 0 {
							b = append(b, ',')
						}
						b = append(b, l...)
					}
				}
				if b == nil {
					b = []byte{}
				}
				return b
			}
		case mysql.MYSQL_TYPE_STRING:
			if c.binary {
				var b []byte
				switch x := v.(type) {
				case string:
					b = []byte(x)
				case []byte:
					b = x
				}
				if n := stringLength(c.meta); b != nil && len(b) < n {
					return append(append(make([]byte, 0, n), b...), make([]byte, n-len(b))...)
				}
				if b != nil {
					return b
				}
			}
		}
	}
	switch x := v.(type) {
	case []byte:
		return x
	case string:
		return []byte(x)
	case int8:
		return appendInteger(uint64(x), 8, c.unsigned)
	case uint8:
		return appendInteger(uint64(x), 8, c.unsigned)
	case int16:
		return appendInteger(uint64(x), 16, c.unsigned)
	case uint16:
		return appendInteger(uint64(x), 16, c.unsigned)
	case int32:
		return appendInteger(uint64(x), int32Bits(c.typ), c.unsigned)
	case uint32:
		return appendInteger(uint64(x), int32Bits(c.typ), c.unsigned)
	case int64:
		return appendInteger(uint64(x), 64, c.unsigned)
	case uint64:
		return appendInteger(x, 64, c.unsigned)
	case int:
		return strconv.AppendInt(nil, int64(x), 10)
	case float32:
		return strconv.AppendFloat(nil, float64(x), 'g', -1, 32)
	case float64:
		if math.IsInf(x, 0) || math.IsNaN(x) {
			return []byte(strconv.FormatFloat(x, 'g', -1, 64))
		}
		return strconv.AppendFloat(nil, x, 'g', -1, 64)
	case time.Time:
		return x.AppendFormat(nil, "2006-01-02T15:04:05.999999")
	}
	return fmt.Appendf(nil, "%v", v)
}

// appendInteger writes the low bits of v, an integer column's value as
// go-mysql read it, signed or unsigned as the column is: the column's own
// flag decides, not the Go type go-mysql chose (since v1.15 it reads the
// table map's signedness itself).
func appendInteger(v uint64, bits int, unsigned bool) []byte {
	shift := 64 - bits
	if unsigned {
		return strconv.AppendUint(nil, v<<shift>>shift, 10)
	}
	return strconv.AppendInt(nil, int64(v<<shift)>>shift, 10)
}

// int32Bits is how many bits of an int32 or uint32 from go-mysql hold the
// value: MEDIUMINT has 24.
func int32Bits(t byte) int {
	if t == mysql.MYSQL_TYPE_INT24 {
		return 24
	}
	return 32
}

// normDatetime rewrites the server's text form of a DATETIME or TIMESTAMP
// ("2006-01-02 15:04:05[.ffffff]", also for dates Go's time package
// refuses, such as zero dates) as render writes a decoded one: T between
// date and time, trailing fractional zeros dropped, Z after a TIMESTAMP.
// Other text is returned unchanged.
func normDatetime(s string, utc bool) []byte {
	if len(s) < 19 || s[10] != ' ' || s[4] != '-' || s[7] != '-' || s[13] != ':' || s[16] != ':' {
		return []byte(s)
	}
	b := []byte(s)
	b[10] = 'T'
	if len(b) > 19 && b[19] == '.' {
		for len(b) > 19 && b[len(b)-1] == '0' {
			b = b[:len(b)-1]
		}
		if len(b) == 20 {
			b = b[:19]
		}
	}
	if utc {
		b = append(b, 'Z')
	}
	return b
}

// realType is the type a STRING column's metadata says it really is (CHAR,
// BINARY, ENUM or SET), as the server encodes it; other types are
// returned as they are.
func realType(typ byte, meta uint16) byte {
	if typ != mysql.MYSQL_TYPE_STRING || meta < 256 {
		return typ
	}
	b0 := byte(meta >> 8)
	if b0&0x30 != 0x30 {
		return b0 | 0x30
	}
	return b0
}

// stringLength is a CHAR/BINARY column's length in bytes from its
// metadata.
func stringLength(meta uint16) int {
	b0, b1 := byte(meta>>8), byte(meta)
	if b0&0x30 != 0x30 {
		return int(uint16(b1) | uint16((b0&0x30)^0x30)<<4)
	}
	return int(b1)
}

// checkImage refuses INSERT rows that lack a column the Event takes: a
// session with binlog_row_image=MINIMAL or NOBLOB logs only the columns
// the statement set, and a missing value must not pass for NULL.
func (l *layout) checkImage(e *replication.RowsEvent, at binlogPoint) error {
	for _, skipped := range e.SkippedColumns {
		for _, i := range skipped {
			if slices.Contains(l.used(), i) {
				return fmt.Errorf("%w: the INSERT into %s.%s at %s does not carry column %s (a session with binlog_row_image=MINIMAL or NOBLOB wrote it); "+
					"set binlog_row_image=FULL for every session that writes the outbox table", ErrUnsupported, e.Table.Schema, e.Table.Table, at, l.cols[i].name)
			}
		}
	}
	return nil
}
