package router

import (
	"fmt"
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
	}
	return ""
}

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
}

// Placeholders a topic template may use. {aggregate_id} is left out on
// purpose: it would create one topic per aggregate.
var placeholders = []struct {
	name string
	role role
}{
	{"aggregate_type", roleAggregateType},
	{"event_type", roleEventType},
}

func parseTemplate(s string) (template, error) {
	var t template
	if s == "" {
		return t, fmt.Errorf("%w: empty", errTemplate)
	}
	if strings.Contains(s, "${") {
		return t, fmt.Errorf("%w %q: use {aggregate_type} or {event_type}, not Debezium's ${...} form", errTemplate, s)
	}
	rest := s
	for rest != "" {
		open := strings.IndexByte(rest, '{')
		lit := rest
		if open >= 0 {
			lit = rest[:open]
		}
		if lit != "" {
			if i := illegalTopicByte(lit); i >= 0 {
				return t, fmt.Errorf("%w %q: character %q is not allowed in a Kafka topic name (legal: a-z A-Z 0-9 . _ -)", errTemplate, s, lit[i])
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
			if p.name == name {
				r = p.role
			}
		}
		if r == roleNone {
			hint := ""
			if name == "aggregate_id" {
				hint = " ({aggregate_id} would make one topic per aggregate; the aggregate id is the record key)"
			}
			return t, fmt.Errorf("%w %q: unknown placeholder {%s}%s; known: {aggregate_type}, {event_type}", errTemplate, s, name, hint)
		}
		t.parts = append(t.parts, part{role: r})
		rest = rest[open+end+1:]
	}
	if len(t.parts) == 1 && t.parts[0].role == roleNone {
		t.literal = t.parts[0].lit
		if err := checkTopic(t.literal); err != "" {
			return t, fmt.Errorf("%w %q: %s", errTemplate, s, err)
		}
	}
	if t.litLen > maxTopicLen {
		return t, fmt.Errorf("%w %q: longer than Kafka's %d-character limit", errTemplate, s, maxTopicLen)
	}
	return t, nil
}

// render builds the topic for ev. Placeholder values must be non-empty and
// made of legal topic characters; an illegal value is reported, not
// replaced (see Route). bad is "" on success.
func (t *template) render(ev *outboxcdc.Event) (topic string, bad string, badRole role) {
	if t.literal != "" {
		return t.literal, "", roleNone
	}
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
		if j := illegalTopicByte(v); j >= 0 {
			return "", "contains " + quoteByte(v[j]) + ", which is not allowed in a Kafka topic name (legal: a-z A-Z 0-9 . _ -)", p.role
		}
		n += len(v)
	}
	if n > maxTopicLen {
		return "", "makes the topic longer than Kafka's 249-character limit", roleNone
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
	if topic == "." || topic == ".." {
		return "", "makes the topic " + topic + ", which Kafka forbids", roleNone
	}
	return topic, "", roleNone
}

// illegalTopicByte returns the index of the first byte not legal in a Kafka
// topic name, or -1.
func illegalTopicByte(s string) int {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '.', c == '_', c == '-':
		default:
			return i
		}
	}
	return -1
}

// checkTopic reports why a complete topic name is illegal, or "".
func checkTopic(s string) string {
	switch {
	case s == "":
		return "empty topic name"
	case s == "." || s == "..":
		return "topic name " + s + " is forbidden by Kafka"
	case len(s) > maxTopicLen:
		return "longer than Kafka's 249-character limit"
	}
	return ""
}

func quoteByte(c byte) string {
	if c >= 0x20 && c < 0x7f {
		return "'" + string(rune(c)) + "'"
	}
	return fmt.Sprintf("byte 0x%02x", c)
}
