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
//   - Headers: the preset's built-in headers (seed: id, event_type,
//     aggregate_type; debezium: id only, as the EventRouter), then the
//     configured columns in order. A NULL column gives a header with a nil
//     (Kafka null) value, as the EventRouter does; a column the source did
//     not deliver (dropped from the table) gives no header.
//   - Timestamp: the source commit time.
//
// An empty message id makes the row bad too: consumers dedupe on it, and
// so does an event the source could not decode (Event.Invalid).
package router

import (
	"encoding/json"
	"strconv"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
)

// Router maps events to records. It is immutable after New and safe for
// concurrent use.
type Router struct {
	c *compiled
}

// New validates cfg and builds a Router.
func New(cfg Config) (*Router, error) {
	c, err := cfg.compile()
	if err != nil {
		return nil, err
	}
	return &Router{c: c}, nil
}

// Columns returns the column names the source must deliver (see
// Config.Columns).
func (r *Router) Columns() outboxcdc.Columns { return r.c.columns }

// empty is a non-nil empty value: an empty column, as opposed to NULL (nil).
var empty = []byte{}

// Route maps one event to a record. The record's Value and extra header
// values share memory with ev; the caller must not modify them.
func (r *Router) Route(ev *outboxcdc.Event) (outboxcdc.Record, error) {
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
	value := ev.Payload
	switch {
	case len(value) == 0 && c.tombstone:
		value = nil
	case value == nil:
		return outboxcdc.Record{}, r.bad(ev, "payload column "+quote(c.names.Payload)+
			" is NULL (set route.tombstone_on_empty_payload to send such rows as tombstones)")
	case c.json && !json.Valid(value):
		what := "is not valid JSON"
		if len(value) == 0 {
			what = "is empty, which is not valid JSON"
		}
		return outboxcdc.Record{}, r.bad(ev, "payload column "+quote(c.names.Payload)+" "+what+
			" ("+strconv.Itoa(len(value))+" bytes) and route.payload_format is json")
	}
	topic, why, badRole := c.template.render(ev)
	if why != "" {
		reason := "the topic template " + quote(c.template.String()) + " " + why
		if badRole != roleNone {
			reason = badRole.name() + " column " + quote(r.columnOf(badRole)) + " " + why
			if v := badRole.text(ev); v != "" {
				reason += " (value " + quote(v) + ")"
			}
		}
		return outboxcdc.Record{}, r.bad(ev, reason)
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

	headers := make([]outboxcdc.Header, 0, len(c.headers))
	for i := range c.headers {
		h := &c.headers[i]
		switch h.role {
		case roleNone:
			col, ok := extraColumn(ev, h)
			if !ok {
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
	return outboxcdc.Record{
		Topic:     topic,
		Key:       key,
		Value:     value,
		Headers:   headers,
		Timestamp: ev.CommitTime,
	}, nil
}

// headerSpec is one header to send, resolved at construction.
type headerSpec struct {
	key  string
	role role // roleNone: an extra column
	// column and extraIdx locate an extra column: sources deliver Extra in
	// the order Columns lists it, so extraIdx is tried before a search.
	column   string
	extraIdx int
}

func extraColumn(ev *outboxcdc.Event, h *headerSpec) (outboxcdc.Column, bool) {
	if h.extraIdx < len(ev.Extra) && ev.Extra[h.extraIdx].Name == h.column {
		return ev.Extra[h.extraIdx], true
	}
	return ev.Column(h.column)
}

func (r *Router) columnOf(ro role) string {
	n := r.c.names
	switch ro {
	case roleMessageID:
		return n.MessageID
	case roleAggregateType:
		return n.AggregateType
	case roleAggregateID:
		return n.AggregateID
	case roleEventType:
		return n.EventType
	case rolePayload:
		return n.Payload
	}
	return ""
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
