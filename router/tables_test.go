package router

import (
	"errors"
	"strings"
	"testing"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
)

func tableEvent(schema, table string) outboxcdc.Event {
	ev := seedEvent()
	ev.Schema, ev.Table = schema, table
	return ev
}

// Placeholders for the source table render its names; per-table entries
// replace the topic and the column names of the table they name, and only
// of that table.
func TestRouteTablePlaceholdersAndOverrides(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Topic = "{database}.{table}.{aggregate_type}"
	cfg.Tables = map[string]TableRoute{
		"legacy.outbox": {
			Columns: ColumnNames{MessageID: "id", AggregateType: "kind"},
			Topic:   "legacy-{schema}-{event_type}",
		},
	}
	r, err := NewForTable(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		schema, table, topic string
	}{
		{"tenant_1", "outbox_message", "tenant_1.outbox_message.ORDER"},
		{"tenant_2", "outbox_message", "tenant_2.outbox_message.ORDER"},
		{"legacy", "outbox", "legacy-legacy-ORDER_CREATED"},
		{"LEGACY", "Outbox", "legacy-LEGACY-ORDER_CREATED"}, // same table on a case-insensitive server
		{"legacy", "outbox2", "legacy.outbox2.ORDER"},
	} {
		ev := tableEvent(tc.schema, tc.table)
		rec, err := r.Route(&ev)
		if err != nil {
			t.Fatalf("%s.%s: %v", tc.schema, tc.table, err)
		}
		if rec.Topic != tc.topic {
			t.Errorf("%s.%s: topic %q, want %q", tc.schema, tc.table, rec.Topic, tc.topic)
		}
	}

	cols := r.Columns()
	if cols.MessageID != "message_id" || len(cols.Tables) != 1 {
		t.Fatalf("columns %+v", cols)
	}
	legacy := cols.For("legacy", "outbox")
	if legacy.MessageID != "id" || legacy.AggregateType != "kind" || legacy.Payload != "payload" || legacy.Tables != nil {
		t.Errorf("legacy columns %+v", legacy)
	}
	if other := cols.For("tenant_1", "outbox_message"); other.MessageID != "message_id" || other.Tables != nil {
		t.Errorf("tenant_1 columns %+v", other)
	}
	if ci := cols.For("Legacy", "OUTBOX"); ci.MessageID != "id" {
		t.Errorf("columns by another letter case %+v", ci)
	}
}

// A table name that cannot be part of a topic makes the row bad, naming
// the table, as an illegal aggregate type does.
func TestRouteTablePlaceholderIllegalName(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Topic = "{table}"
	r, err := NewForTable(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	ev := tableEvent("db", "out$box")
	_, err = r.Route(&ev)
	var bad *outboxcdc.BadRowError
	if !errors.As(err, &bad) || !strings.Contains(bad.Reason, `table "out$box"`) {
		t.Fatalf("got %v", err)
	}
	ev = tableEvent("db", "")
	if _, err = r.Route(&ev); !errors.As(err, &bad) {
		t.Fatalf("empty table name: got %v", err)
	}
}

func TestTablesConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		tables map[string]TableRoute
		want   string
	}{
		{map[string]TableRoute{"outbox": {}}, "is not schema.table"},
		{map[string]TableRoute{"tenant_%.outbox": {}}, "not a pattern"},
		{map[string]TableRoute{"a.b": {Topic: "x.{nope}"}}, `route.tables["a.b"]: route.topic`},
		{map[string]TableRoute{"a.b": {Columns: ColumnNames{Payload: " p"}}}, `route.tables["a.b"]: route.columns.payload`},
	} {
		cfg := DefaultConfig()
		cfg.Tables = tc.tables
		err := cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: got %v, want %q", tc.tables, err, tc.want)
		}
		if _, err := NewForTable(cfg, nil); err == nil {
			t.Errorf("%v: NewForTable accepted it", tc.tables)
		}
	}
}
