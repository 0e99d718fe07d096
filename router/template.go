package router

import (
	"fmt"
	"strconv"
	"strings"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
)

// maxTopicLen is Kafka's limit on a topic name's length.
const maxTopicLen = 249

// role is the part an outbox column plays.
type role uint8

const (
	roleNone role = iota
	roleMessageID
	roleAggregateType
	roleAggregateID
	roleEventType
	rolePayload
	// The source table, for topic templates only: not columns.
	roleSchema   // {schema}: the Postgres schema or MySQL database
	roleDatabase // {database}: the same value, by its MySQL name
	roleTable    // {table}
)

// column returns the role's yaml name, for messages.
func (r role) name() string {
	switch r {
	case roleMessageID:
		return "message_id"
	case roleAggregateType:
		return "aggregate_type"
	case roleAggregateID:
		return "aggregate_id"
	case roleEventType:
		return "event_type"
	case rolePayload:
		return "payload"
	case roleSchema:
		return "schema"
	case roleDatabase:
		return "database"
	case roleTable:
		return "table"
	}
	return ""
}

// source reports whether r names the source table rather than a column.
func (r role) source() bool { return r == roleSchema || r == roleDatabase || r == roleTable }

// text returns the role's value in ev; only for the string roles.
func (r role) text(ev *outboxcdc.Event) string {
	switch r {
	case roleMessageID:
		return ev.MessageID
	case roleAggregateType:
		return ev.AggregateType
	case roleAggregateID:
		return ev.AggregateID
	case roleEventType:
		return ev.EventType
	case roleSchema, roleDatabase:
		return ev.Schema
	case roleTable:
		return ev.Table
	}
	return ""
}

// part is a literal piece of a topic template or a placeholder.
type part struct {
	lit  string
	role role // roleNone: literal
}

// template is a topic template parsed into parts. Literal parts are checked
// once here; placeholder values are checked per row.
type template struct {
	parts []part
	// literal is the whole topic when the template has no placeholder.
	literal string
	litLen  int
	dest    *Destination
}

// Placeholders a topic template may use. {aggregate_id} only where the
// destination allows it: it makes one destination per aggregate.
var placeholders = []struct {
	name string
	role role
}{
	{"aggregate_type", roleAggregateType},
	{"event_type", roleEventType},
	{"aggregate_id", roleAggregateID},
	{"schema", roleSchema},
	{"database", roleDatabase},
	{"table", roleTable},
}

func parseTemplate(s string, d *Destination) (template, error) {
	t := template{dest: d}
	if s == "" {
		return t, fmt.Errorf("%w: empty", errTemplate)
	}
	known := "{aggregate_type}, {event_type}, {schema}, {database}, {table}"
	if d.AggregateID {
		known += ", {aggregate_id}"
	}
	if strings.Contains(s, "${") {
		return t, fmt.Errorf("%w %q: use %s, not Debezium's ${...} form", errTemplate, s, known)
	}
	rest := s
	for rest != "" {
		open := strings.IndexByte(rest, '{')
		lit := rest
		if open >= 0 {
			lit = rest[:open]
		}
		if lit != "" {
			if i := illegalByte(lit, d.Literal); i >= 0 {
				return t, fmt.Errorf("%w %q: character %q is not allowed in a %s (legal: %s)", errTemplate, s, lit[i], d.Noun, d.Legal)
			}
			t.parts = append(t.parts, part{lit: lit})
			t.litLen += len(lit)
		}
		if open < 0 {
			break
		}
		end := strings.IndexByte(rest[open:], '}')
		if end < 0 {
			return t, fmt.Errorf("%w %q: unclosed '{'", errTemplate, s)
		}
		name := rest[open+1 : open+end]
		r := roleNone
		for _, p := range placeholders {
			if p.name == name && (p.role != roleAggregateID || d.AggregateID) {
				r = p.role
			}
		}
		if r == roleNone {
			hint := ""
			if name == "aggregate_id" {
				hint = fmt.Sprintf(" ({aggregate_id} would make one %s per aggregate; the aggregate id is the record key)", d.Noun)
			}
			return t, fmt.Errorf("%w %q: unknown placeholder {%s}%s; known: %s", errTemplate, s, name, hint, known)
		}
		t.parts = append(t.parts, part{role: r})
		rest = rest[open+end+1:]
	}
	if len(t.parts) == 1 && t.parts[0].role == roleNone {
		t.literal = t.parts[0].lit
		if err := d.check(t.literal); err != "" {
			return t, fmt.Errorf("%w %q: %s", errTemplate, s, err)
		}
	}
	if d.MaxLen > 0 && t.litLen > d.MaxLen {
		return t, fmt.Errorf("%w %q: longer than the %d-byte limit of a %s", errTemplate, s, d.MaxLen, d.Noun)
	}
	return t, nil
}

// render builds the topic for ev. Placeholder values must be non-empty and
// made of legal characters; an illegal value is reported, not replaced
// (see Route). bad is "" on success.
func (t *template) render(ev *outboxcdc.Event) (topic string, bad string, badRole role) {
	if t.literal != "" {
		return t.literal, "", roleNone
	}
	d := t.dest
	n := t.litLen
	for i := range t.parts {
		p := &t.parts[i]
		if p.role == roleNone {
			continue
		}
		v := p.role.text(ev)
		if v == "" {
			return "", "is empty but the topic template needs it", p.role
		}
		if j := illegalByte(v, d.Value); j >= 0 {
			return "", "contains " + quoteByte(v[j]) + ", which is not allowed in a " + d.Noun + " (legal: " + d.Legal + ")", p.role
		}
		n += len(v)
	}
	if d.MaxLen > 0 && n > d.MaxLen {
		return "", "makes the " + d.Noun + " longer than its " + strconv.Itoa(d.MaxLen) + "-byte limit", roleNone
	}
	var b strings.Builder
	b.Grow(n)
	for i := range t.parts {
		p := &t.parts[i]
		if p.role == roleNone {
			b.WriteString(p.lit)
		} else {
			b.WriteString(p.role.text(ev))
		}
	}
	topic = b.String()
	if d.Check != nil {
		if why := d.Check(topic); why != "" {
			return "", "makes the " + d.Noun + " " + quote(topic) + ", which " + why, roleNone
		}
	}
	return topic, "", roleNone
}

func quoteByte(c byte) string {
	if c >= 0x20 && c < 0x7f {
		return "'" + string(rune(c)) + "'"
	}
	return fmt.Sprintf("byte 0x%02x", c)
}
