package binlog

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"
	outboxcdc "github.com/outbox-cdc/outbox-cdc"
)

// schemaColumn is one column as information_schema describes it, used when
// the binlog carries no column names (binlog_row_metadata != FULL).
type schemaColumn struct {
	Name     string
	Unsigned bool
}

// layout maps the outbox table's binlog columns to Event fields. It is
// resolved once per TableMapEvent (per table id), so rows are decoded by
// index, without names or maps.
type layout struct {
	tableID                                                   uint64
	ncols                                                     int
	messageID, aggregateType, aggregateID, eventType, payload int
	extra                                                     []extraColumn
}

type extraColumn struct {
	name     string
	index    int // -1: not in the table, not delivered
	unsigned bool
	colType  byte
}

// resolveLayout maps cols' names onto the table map's columns. Names come
// from the binlog when present, else from info (read at connect time). A
// missing role column is a permanent ErrTable.
func resolveLayout(tm *replication.TableMapEvent, cols outboxcdc.Columns, info []schemaColumn, table string) (*layout, error) {
	n := int(tm.ColumnCount)
	names := tm.ColumnNameString()
	var unsigned []bool
	if len(names) == 0 {
		if len(info) != n {
			return nil, fmt.Errorf("%w: table %s changed shape mid-stream: the binlog has %d columns, information_schema had %d; "+
				"set binlog_row_metadata=FULL (MySQL >= 8.0.1, MariaDB >= 10.5) so the connector can follow ALTER TABLE, then restart it",
				ErrTable, table, n, len(info))
		}
		names = make([]string, n)
		unsigned = make([]bool, n)
		for i, c := range info {
			names[i], unsigned[i] = c.Name, c.Unsigned
		}
	} else {
		unsigned = make([]bool, n)
		for i, u := range tm.UnsignedMap() {
			if i < n {
				unsigned[i] = u
			}
		}
	}
	find := func(name string) int {
		for i, c := range names {
			if strings.EqualFold(c, name) {
				return i
			}
		}
		return -1
	}
	l := &layout{tableID: tm.TableID, ncols: n}
	var missing []string
	role := func(dst *int, name string) {
		*dst = find(name)
		if *dst < 0 {
			missing = append(missing, name)
		}
	}
	role(&l.messageID, cols.MessageID)
	role(&l.aggregateType, cols.AggregateType)
	role(&l.aggregateID, cols.AggregateID)
	role(&l.eventType, cols.EventType)
	role(&l.payload, cols.Payload)
	if len(missing) > 0 {
		return nil, fmt.Errorf("%w: table %s has no column %s (its columns: %s); "+
			"the route preset needs them: change the table or the preset",
			ErrTable, table, strings.Join(missing, ", "), strings.Join(names, ", "))
	}
	for _, name := range cols.Extra {
		i := find(name)
		ec := extraColumn{name: name, index: i}
		if i >= 0 {
			ec.unsigned = unsigned[i]
			ec.colType = tm.ColumnType[i]
		}
		l.extra = append(l.extra, ec)
	}
	return l, nil
}

// event builds an Event from one decoded row. origin and the commit time
// are filled in by the caller.
func (l *layout) event(row []any) outboxcdc.Event {
	e := outboxcdc.Event{
		MessageID:     textOf(row[l.messageID]),
		AggregateType: textOf(row[l.aggregateType]),
		AggregateID:   textOf(row[l.aggregateID]),
		EventType:     textOf(row[l.eventType]),
		Payload:       bytesOf(row[l.payload]),
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
			e.Extra = append(e.Extra, outboxcdc.Column{Name: ec.name, Value: render(v, ec.unsigned, ec.colType)})
		}
	}
	return e
}

// textOf renders a role column as a string. Role columns are normally
// VARCHAR (go-mysql gives a string, no copy) or integers. NULL is "".
func textOf(v any) string {
	switch x := v.(type) {
	case nil:
		return ""
	case string:
		return x
	case []byte:
		return string(x)
	}
	return string(render(v, false, 0))
}

// bytesOf returns the payload bytes exactly as stored; nil for NULL. A
// BLOB/TEXT/LONGTEXT value (MariaDB JSON) aliases the event's own buffer,
// which is never reused. MySQL's binary JSON arrives already converted to
// text by go-mysql, so a MySQL JSON payload is the server's canonical JSON
// rendering (keys sorted, whitespace normalised), not the inserted text.
func bytesOf(v any) []byte {
	switch x := v.(type) {
	case nil:
		return nil
	case []byte:
		if x == nil {
			return []byte{}
		}
		return x
	case string:
		return []byte(x)
	}
	return render(v, false, 0)
}

// render turns a decoded value into text: integers in decimal (unsigned
// columns corrected, since go-mysql decodes them as signed), strings and
// binary as their bytes, DATETIME as "2006-01-02T15:04:05[.ffffff]",
// TIMESTAMP as RFC 3339 in UTC.
func render(v any, unsigned bool, colType byte) []byte {
	switch x := v.(type) {
	case []byte:
		return x
	case string:
		return []byte(x)
	case int8:
		if unsigned {
			return strconv.AppendUint(nil, uint64(uint8(x)), 10)
		}
		return strconv.AppendInt(nil, int64(x), 10)
	case int16:
		if unsigned {
			return strconv.AppendUint(nil, uint64(uint16(x)), 10)
		}
		return strconv.AppendInt(nil, int64(x), 10)
	case int32:
		if unsigned {
			if colType == mysql.MYSQL_TYPE_INT24 {
				return strconv.AppendUint(nil, uint64(uint32(x)&0xFFFFFF), 10)
			}
			return strconv.AppendUint(nil, uint64(uint32(x)), 10)
		}
		return strconv.AppendInt(nil, int64(x), 10)
	case int64:
		if unsigned {
			return strconv.AppendUint(nil, uint64(x), 10)
		}
		return strconv.AppendInt(nil, x, 10)
	case int:
		return strconv.AppendInt(nil, int64(x), 10)
	case uint64:
		return strconv.AppendUint(nil, x, 10)
	case float32:
		return strconv.AppendFloat(nil, float64(x), 'g', -1, 32)
	case float64:
		if math.IsInf(x, 0) || math.IsNaN(x) {
			return []byte(strconv.FormatFloat(x, 'g', -1, 64))
		}
		return strconv.AppendFloat(nil, x, 'g', -1, 64)
	case time.Time:
		if colType == mysql.MYSQL_TYPE_TIMESTAMP || colType == mysql.MYSQL_TYPE_TIMESTAMP2 {
			return x.UTC().AppendFormat(nil, "2006-01-02T15:04:05.999999Z07:00")
		}
		return x.AppendFormat(nil, "2006-01-02T15:04:05.999999")
	}
	return fmt.Appendf(nil, "%v", v)
}
