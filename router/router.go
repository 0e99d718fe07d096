// Package router turns outbox rows into Kafka records. It is a pure
// mapping with no I/O: Event in, Record out, or a *outboxcdc.BadRowError.
//
// The mapping, for both presets:
//
//   - Topic: the template (default "outbox.event.{aggregate_type}", as
//     Debezium's EventRouter names topics) rendered with the row's values.
//     A value that is empty or holds characters Kafka does not allow in a
//     topic name (legal: a-z A-Z 0-9 . _ -, at most 249 characters) makes
//     the row bad; it is never rewritten, because replacing characters
//     could silently merge two aggregate types into one topic, and
//     Debezium does not rewrite them either (the produce would fail).
//   - Key: the aggregate id, so one aggregate's events keep their order in
//     one partition. An empty aggregate id makes the row bad.
//   - Value: the payload bytes exactly as stored. A NULL payload makes the
//     row bad and an empty payload is sent as an empty value, unless
//     tombstone_on_empty_payload is on: then both are sent as a tombstone
//     (null value, key and headers as usual), as Debezium's
//     route.tombstone.on.empty.payload does. With payload_format: json a
//     payload that is not valid JSON makes the row bad (an empty payload
//     too, unless it becomes a tombstone); the default "any" sends any
//     bytes, as Debezium's EventRouter does.
//   - Headers: Debezium's context headers when route.context_headers is
//     on (context.go), the preset's built-in headers (seed: id,
//     event_type, aggregate_type; debezium: id only, as the EventRouter),
//     then the configured columns in order. A NULL column gives a header with a nil
//     (Kafka null) value, as the EventRouter does; a column the source did
//     not deliver (dropped from the table) gives no header.
//   - Timestamp: route.timestamp: zero by default, so the sink stamps the
//     time of production; the source commit time with "commit". A
//     timestamp column (columns.timestamp) that is not NULL overrides both.
//
// An empty message id makes the row bad too: consumers dedupe on it, and
// so does an event the source could not decode (Event.Invalid).
//
// With route.converters the key, value and headers are written as Kafka
// Connect's converters write what Debezium's Outbox EventRouter produces
// (converter.go, connect.go); with route.cloudevents the record is a
// CloudEvent (cloudevents.go).
package router

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
)

// Router maps events to records. It is immutable after New and safe for
// concurrent use.
type Router struct {
	c *compiled
	// tables are the routers of the tables route.tables names, by schema
	// (or database) and table name as configured.
	tables map[string]map[string]*Router
}

// New validates cfg and builds a Router. A configuration whose converters
// need the outbox table's column types (Config.NeedsTable) is refused:
// use NewForTable.
func New(cfg Config) (*Router, error) {
	if cfg.NeedsTable() {
		return nil, outboxcdc.KeyErrorf("converters", "", "the converters need the outbox table's column types (the command reads them from the database); "+
			"give every converted column's type in route.converters.column_types to build the route without it")
	}
	if len(cfg.Envelope) > 0 && orRaw(cfg.Converters.Value) != ConvRaw && cfg.Converters.ValueSchemas {
		return nil, outboxcdc.KeyErrorf("envelope", "", "the envelope's schema is named <topic_prefix>.<database>.<table>...: it needs the outbox table")
	}
	return NewForTable(cfg, nil)
}

// NewForTable validates cfg against the outbox table's columns (nil when
// not needed) and builds a Router.
func NewForTable(cfg Config, table *Table) (*Router, error) {
	if ch := &cfg.ContextHeaders; ch.Enabled && ch.RunID && ch.RunIDValue == "" {
		ch.RunIDValue = uuid.NewString() // one run id for every table's route
	}
	c, err := cfg.compile(table)
	if err != nil {
		return nil, err
	}
	r := &Router{c: c}
	for _, key := range sortedKeys(cfg.Tables) {
		if err := checkTableKey(key); err != nil {
			return nil, err
		}
		tc, err := cfg.forTable(key).compile(table)
		if err != nil {
			return nil, outboxcdc.KeysUnder(fmt.Sprintf("tables[%q]", key), err)
		}
		schema, name, _ := strings.Cut(key, ".")
		if r.tables == nil {
			r.tables = map[string]map[string]*Router{}
		}
		if r.tables[schema] == nil {
			r.tables[schema] = map[string]*Router{}
		}
		r.tables[schema][name] = &Router{c: tc}
	}
	return r, nil
}

// forEvent returns the router of ev's table: its route.tables entry (the
// name as configured, or differing only in letter case), else r.
func (r *Router) forEvent(ev *outboxcdc.Event) *Router {
	if r.tables == nil {
		return r
	}
	if t := r.tables[ev.Schema][ev.Table]; t != nil {
		return t
	}
	for schema, byName := range r.tables {
		if !strings.EqualFold(schema, ev.Schema) {
			continue
		}
		for name, t := range byName {
			if strings.EqualFold(name, ev.Table) {
				return t
			}
		}
	}
	return r
}

// Columns returns the column names the source must deliver (see
// Config.Columns).
func (r *Router) Columns() outboxcdc.Columns { return r.c.columns }

// empty is a non-nil empty value: an empty column, as opposed to NULL (nil).
var empty = []byte{}

// Route maps one event to a record. The record's Value and extra header
// values share memory with ev; the caller must not modify them.
func (r *Router) Route(ev *outboxcdc.Event) (outboxcdc.Record, error) {
	r = r.forEvent(ev)
	c := r.c
	if ev.Invalid != "" {
		return outboxcdc.Record{}, r.bad(ev, ev.Invalid)
	}
	if ev.MessageID == "" {
		return outboxcdc.Record{}, r.bad(ev, "message id column "+quote(c.names.MessageID)+" is NULL or empty")
	}
	if ev.AggregateID == "" {
		return outboxcdc.Record{}, r.bad(ev, "aggregate id column "+quote(c.names.AggregateID)+" (the record key) is NULL or empty")
	}
	if c.conv != nil {
		return r.routeConnect(ev)
	}
	value := ev.Payload
	switch {
	case len(value) == 0 && c.tombstone:
		value = nil
	case value == nil:
		return outboxcdc.Record{}, r.nullPayload(ev)
	case c.json && !json.Valid(value):
		return outboxcdc.Record{}, r.notJSON(ev, value)
	}
	topic, err := r.topic(ev)
	if err != nil {
		return outboxcdc.Record{}, err
	}

	// One buffer holds the key and every string-role header value, so the
	// record costs three allocations: topic, this buffer, the header slice.
	n := len(ev.AggregateID)
	for i := range c.headers {
		n += len(c.headers[i].role.text(ev))
	}
	buf := make([]byte, 0, n)
	buf = append(buf, ev.AggregateID...)
	key := buf[:len(buf):len(buf)]

	headers := make([]outboxcdc.Header, 0, len(c.context)+len(c.headers))
	headers = append(headers, c.context...)
	for i := range c.headers {
		h := &c.headers[i]
		switch h.role {
		case roleNone:
			col, ok := extraColumn(ev, &h.columnRef)
			if !ok {
				if c.missingIsError {
					return outboxcdc.Record{}, r.missing(ev, "header", h.column)
				}
				continue
			}
			v := col.Value
			if col.Null {
				v = nil
			} else if v == nil {
				v = empty
			}
			headers = append(headers, outboxcdc.Header{Key: h.key, Value: v})
		case rolePayload:
			headers = append(headers, outboxcdc.Header{Key: h.key, Value: ev.Payload})
		default:
			start := len(buf)
			buf = append(buf, h.role.text(ev)...)
			headers = append(headers, outboxcdc.Header{Key: h.key, Value: buf[start:len(buf):len(buf)]})
		}
	}
	rec := outboxcdc.Record{
		Topic:   topic,
		Key:     key,
		Value:   value,
		Headers: headers,
	}
	if err := r.finish(ev, &rec); err != nil {
		return outboxcdc.Record{}, err
	}
	return rec, nil
}

// topic renders the topic (template or Debezium's regex routing).
func (r *Router) topic(ev *outboxcdc.Event) (string, error) {
	c := r.c
	if c.regex != nil {
		if ev.AggregateType == "" {
			return "", r.bad(ev, "aggregate type column "+quote(c.names.AggregateType)+" (the routing value) is NULL or empty")
		}
		topic := c.regex.route(ev.AggregateType)
		if why := c.dest.check(topic); why != "" {
			return "", r.bad(ev, "route.topic_regex "+quote(c.regex.src)+" makes the topic "+quote(topic)+": "+why)
		}
		return topic, nil
	}
	topic, why, badRole := c.template.render(ev)
	if why != "" {
		reason := "the topic template " + quote(c.template.String()) + " " + why
		if badRole != roleNone && badRole.source() {
			reason = "the source table's " + badRole.name() + " " + quote(badRole.text(ev)) + " " + why +
				" (topic template " + quote(c.template.String()) + ")"
		} else if badRole != roleNone {
			reason = badRole.name() + " column " + quote(c.names.columnOf(badRole)) + " " + why
			if v := badRole.text(ev); v != "" {
				reason += " (value " + quote(v) + ")"
			}
		}
		return "", r.bad(ev, reason)
	}
	return topic, nil
}

// finish applies what both paths share: the partition and timestamp
// columns and CloudEvents.
func (r *Router) finish(ev *outboxcdc.Event, rec *outboxcdc.Record) error {
	c := r.c
	if c.partition != nil {
		v, null, ok := columnText(ev, c.partition)
		switch {
		case !ok:
			if c.missingIsError {
				return r.missing(ev, "partition", c.partition.column)
			}
		case !null:
			p, err := strconv.ParseInt(string(v), 10, 32)
			if err != nil || p < 0 {
				return r.bad(ev, "partition column "+quote(c.partition.column)+" holds "+quote(string(v))+
					", not a partition number (0 to 2147483647)")
			}
			p32 := int32(p)
			rec.Partition = &p32
		}
	}
	if c.commitTime {
		rec.Timestamp = ev.CommitTime
	}
	if c.timestamp != nil {
		v, null, ok := columnText(ev, c.timestamp)
		switch {
		case !ok:
			if c.missingIsError {
				return r.missing(ev, "timestamp", c.timestamp.column)
			}
		case !null:
			t, err := r.timestampOf(v)
			if err != nil {
				return r.bad(ev, "timestamp column "+quote(c.timestamp.column)+": "+err.Error())
			}
			rec.Timestamp = t
		}
	}
	if c.ce != nil {
		if err := c.ce.apply(ev, rec, c.names.Payload); err != nil {
			return r.bad(ev, err.Error())
		}
	}
	rec.MessageID, rec.EventType = ev.MessageID, ev.EventType
	return nil
}

// timestampOf reads the timestamp column's text: Debezium takes the
// column's value in milliseconds (a micro- or nanosecond value divided
// down).
func (r *Router) timestampOf(v []byte) (time.Time, error) {
	t, err := parseTime(string(v), true)
	if err != nil {
		return time.Time{}, err
	}
	return t.Truncate(time.Millisecond), nil
}

func (r *Router) nullPayload(ev *outboxcdc.Event) error {
	return r.bad(ev, "payload column "+quote(r.c.names.Payload)+
		" is NULL (set route.tombstone_on_empty_payload to send such rows as tombstones)")
}

func (r *Router) notJSON(ev *outboxcdc.Event, value []byte) error {
	what := "is not valid JSON"
	if len(value) == 0 {
		what = "is empty, which is not valid JSON"
	}
	return r.bad(ev, "payload column "+quote(r.c.names.Payload)+" "+what+
		" ("+strconv.Itoa(len(value))+" bytes) and route.payload_format is json")
}

func (r *Router) missing(ev *outboxcdc.Event, what, col string) error {
	return r.bad(ev, what+" column "+quote(col)+" is not in the row (dropped from the table?) and route.on_missing_column is error")
}

// headerSpec is one header to send, resolved at construction.
type headerSpec struct {
	key string
	columnRef
}

func extraColumn(ev *outboxcdc.Event, h *columnRef) (outboxcdc.Column, bool) {
	if h.extraIdx < len(ev.Extra) && ev.Extra[h.extraIdx].Name == h.column {
		return ev.Extra[h.extraIdx], true
	}
	return ev.Column(h.column)
}

// columnText returns a column's value in a row: its text, whether it is
// NULL, and whether the row has the column at all. Role columns are never
// NULL (a NULL role value arrives as "").
func columnText(ev *outboxcdc.Event, ref *columnRef) (v []byte, null, ok bool) {
	switch ref.role {
	case roleNone:
		col, ok := extraColumn(ev, ref)
		if !ok {
			return nil, false, false
		}
		if col.Null {
			return nil, true, true
		}
		if col.Value == nil {
			return empty, false, true
		}
		return col.Value, false, true
	case rolePayload:
		return ev.Payload, ev.Payload == nil, true
	}
	return []byte(ref.role.text(ev)), false, true
}

func (r *Router) bad(ev *outboxcdc.Event, reason string) error {
	return &outboxcdc.BadRowError{Origin: ev.Origin, MessageID: ev.MessageID, Reason: reason}
}

// String returns the template as configured.
func (t *template) String() string {
	var s string
	for _, p := range t.parts {
		if p.role == roleNone {
			s += p.lit
		} else {
			s += "{" + p.role.name() + "}"
		}
	}
	return s
}

func quote(s string) string {
	const max = 80
	if len(s) > max {
		s = s[:max] + "..."
	}
	return strconv.Quote(s)
}
