package outboxwriter

import (
	"fmt"
	"strings"

	"github.com/outbox-cdc/outbox-cdc/router"
)

// Layout names the outbox table and the column of each role, as the
// relay's route does (route.preset, route.columns, route.headers): one set
// of names describes both ends.
type Layout struct {
	// Table is the outbox table, optionally qualified (MySQL
	// "database.table", PostgreSQL "schema.table"). Unused with
	// Config.MessagePrefix.
	Table string
	// The role columns (route.columns). Every one must be set.
	MessageID     string
	AggregateType string
	AggregateID   string
	EventType     string
	Payload       string
	// Headers maps the name of a record header, as consumers see it, to
	// the outbox column the relay reads it from: the route.headers
	// entries ("tenant" is {"tenant": "tenant"}, "trace_id:traceparent"
	// is {"traceparent": "trace_id"}). Event.Headers may only name these.
	Headers map[string]string
}

// SeedLayout is the table of schema/mysql.sql and schema/postgres.sql
// under the name table: the relay's route.preset seed.
func SeedLayout(table string) Layout {
	return Layout{Table: table, MessageID: "message_id", AggregateType: "aggregate_type",
		AggregateID: "aggregate_id", EventType: "event_type", Payload: "payload"}
}

// DebeziumLayout is the table Debezium's Outbox EventRouter reads by
// default (id, aggregatetype, aggregateid, type, payload): the relay's
// route.preset debezium.
func DebeziumLayout(table string) Layout {
	return Layout{Table: table, MessageID: "id", AggregateType: "aggregatetype",
		AggregateID: "aggregateid", EventType: "type", Payload: "payload"}
}

// LayoutFromRoute builds the layout of table from the relay's route
// configuration: its preset, route.columns (and the route.tables entry of
// a qualified table name, as the relay applies it) and route.headers. A
// header entry that repeats a role column (Debezium's
// "type:header:eventType") needs no column of its own and is left out:
// the event's role field fills it.
func LayoutFromRoute(table string, route router.Config) (Layout, error) {
	if err := route.Validate(); err != nil {
		return Layout{}, fmt.Errorf("outboxwriter: route: %w", err)
	}
	cols := route.Columns()
	if schema, name, ok := strings.Cut(table, "."); ok {
		cols = cols.For(schema, name)
	}
	l := Layout{Table: table, MessageID: cols.MessageID, AggregateType: cols.AggregateType,
		AggregateID: cols.AggregateID, EventType: cols.EventType, Payload: cols.Payload}
	hs, err := route.HeaderColumns()
	if err != nil {
		return Layout{}, fmt.Errorf("outboxwriter: route: %w", err)
	}
	for _, h := range hs {
		if h.Role {
			continue
		}
		if l.Headers == nil {
			l.Headers = map[string]string{}
		}
		l.Headers[h.Key] = h.Column
	}
	return l, nil
}

// validate checks that every role has a column and no two roles share one.
func (l Layout) validate(needTable bool) error {
	if needTable && strings.TrimSpace(l.Table) == "" {
		return fmt.Errorf("outboxwriter: layout: the outbox table name is empty")
	}
	seen := map[string]string{}
	for _, r := range []struct{ role, col string }{
		{"message id", l.MessageID}, {"aggregate type", l.AggregateType}, {"aggregate id", l.AggregateID},
		{"event type", l.EventType}, {"payload", l.Payload},
	} {
		if r.col == "" {
			return fmt.Errorf("outboxwriter: layout: no column for the %s", r.role)
		}
		if other, ok := seen[r.col]; ok {
			return fmt.Errorf("outboxwriter: layout: column %q is both the %s and the %s", r.col, other, r.role)
		}
		seen[r.col] = r.role
	}
	for h, col := range l.Headers {
		if h == "" || col == "" {
			return fmt.Errorf("outboxwriter: layout: header %q has no name or no column (%q)", h, col)
		}
		if role, ok := seen[col]; ok {
			return fmt.Errorf("outboxwriter: layout: header %q is the %s column %q; set the event's field instead", h, role, col)
		}
	}
	return nil
}
