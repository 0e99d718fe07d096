package main

import (
	"strings"
	"testing"
)

const multiTables = `
source:
  type: mysql
  dsn: "root:secret@tcp(127.0.0.1:3306)/shop"
  tables: ["tenant_%.outbox", "shop.outbox_message"]
route:
  topic: "{database}.{aggregate_type}"
  tables:
    shop.outbox_message:
      columns:
        message_id: id
      topic: "shop.{event_type}"
sink:
  type: kafka
  brokers: ["127.0.0.1:9092"]
`

func TestLoadConfigTables(t *testing.T) {
	cfg, err := loadConfig(writeFile(t, multiTables), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(cfg.Source.MySQL.Tables, ","); got != "tenant_%.outbox,shop.outbox_message" {
		t.Errorf("source.tables %q", got)
	}
	tr, ok := cfg.Route.Tables["shop.outbox_message"]
	if !ok || tr.Columns.MessageID != "id" || tr.Topic != "shop.{event_type}" {
		t.Errorf("route.tables %+v", cfg.Route.Tables)
	}
	cols := cfg.Route.Columns()
	if c := cols.For("shop", "outbox_message"); c.MessageID != "id" {
		t.Errorf("columns of shop.outbox_message: %+v", c)
	}
	if c := cols.For("tenant_1", "outbox"); c.MessageID != "message_id" {
		t.Errorf("columns of tenant_1.outbox: %+v", c)
	}

	pg := strings.NewReplacer("type: mysql", "type: postgres", `"root:secret@tcp(127.0.0.1:3306)/shop"`, "postgres://u@h/db",
		"  tables: [", "  messages:\n    prefixes: [a, b]\n  tables: [").Replace(multiTables)
	cfg, err = loadConfig(writeFile(t, pg), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(cfg.Source.Postgres.Messages.Prefixes, ","); got != "a,b" || len(cfg.Source.Postgres.Tables) != 2 {
		t.Errorf("postgres source %+v", cfg.Source.Postgres)
	}
}

func TestLoadConfigTablesErrors(t *testing.T) {
	for _, c := range []struct {
		name, file, want string
	}{
		{"route.tables without source.tables", minimal + "route:\n  tables:\n    shop.outbox: {topic: x}\n", "route.tables: per-table routes need source.tables"},
		{"table and tables", strings.Replace(multiTables, "  tables: [", "  table: other\n  tables: [", 1), "set either table or tables"},
		{"bad entry", strings.Replace(multiTables, `"tenant_%.outbox"`, `"a.b.c"`, 1), "source.tables[0]"},
		{"unknown key in a table's route", strings.Replace(multiTables, "topic: \"shop.{event_type}\"", "topik: x", 1), "topik"},
		{"pattern as a route.tables key", strings.Replace(multiTables, "    shop.outbox_message:\n", "    tenant_%.outbox:\n", 1), "not a pattern"},
		{"lifecycle", multiTables + "lifecycle:\n  mark_sent: true\n", "lifecycle: marks and cleans up one outbox table"},
		{"converters needing the table", multiTables[:strings.Index(multiTables, "sink:")] + "  converters:\n    value: json\nsink:\n  type: kafka\n  brokers: [\"127.0.0.1:9092\"]\n", "route.converters"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := loadConfig(writeFile(t, c.file), nil)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an error mentioning %q", err, c.want)
			}
		})
	}
}
