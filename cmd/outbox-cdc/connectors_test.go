package main

import (
	"strings"
	"testing"
)

const twoConnectors = `
http:
  listen: "127.0.0.1:9999"
log:
  level: warn
connectors:
  - name: orders
    source:
      type: mysql
      dsn: "root:secret@tcp(127.0.0.1:3306)/shop"
    sink:
      brokers: ["k1:9092"]
  - name: billing
    source:
      type: postgres
      dsn: "postgres://u@h/db"
      table: public.outbox
    sink:
      type: redis
      url: "redis://127.0.0.1:6379"
    checkpoint:
      path: /tmp/billing.checkpoint
`

func TestLoadProcessConfigList(t *testing.T) {
	pc, err := loadProcessConfig(writeFile(t, twoConnectors), map[string]string{
		"OUTBOX_CDC_SOURCE_GTID":       "off",  // MySQL only: applies to orders alone
		"OUTBOX_CDC_LOG_FORMAT":        "json", // shared
		"OUTBOX_CDC_PIPELINE_ON_ERROR": "dlq",  // every connector
	})
	if err != nil {
		t.Fatal(err)
	}
	if !pc.Listed || len(pc.Connectors) != 2 {
		t.Fatalf("got %d connectors, listed %v", len(pc.Connectors), pc.Listed)
	}
	o, b := pc.Connectors[0], pc.Connectors[1]
	if o.Name != "orders" || o.Source.Type != "mysql" || o.Sink.Type != "kafka" || o.Source.MySQL.GTID != "off" {
		t.Errorf("orders: %+v", o)
	}
	if b.Name != "billing" || b.Source.Type != "postgres" || b.Sink.Type != "redis" || b.Source.Postgres.Table != "public.outbox" {
		t.Errorf("billing: %+v", b)
	}
	for _, c := range pc.Connectors {
		if c.HTTP.Listen != "127.0.0.1:9999" || c.Log.Level != "warn" || c.Log.Format != "json" || c.Pipeline.OnError != "dlq" {
			t.Errorf("%s: shared settings not applied: %+v %+v on_error %q", c.Name, c.HTTP, c.Log, c.Pipeline.OnError)
		}
	}
	if pc.HTTP.Listen != "127.0.0.1:9999" || pc.Log.Format != "json" {
		t.Errorf("process settings %+v %+v", pc.HTTP, pc.Log)
	}
	// The default checkpoint file is per connector; a set one is kept.
	if o.Checkpoint.Path != "outbox-cdc.orders.checkpoint" || b.Checkpoint.Path != "/tmp/billing.checkpoint" {
		t.Errorf("checkpoint paths %q %q", o.Checkpoint.Path, b.Checkpoint.Path)
	}
	if _, err := pickConnector(pc, ""); err == nil || !strings.Contains(err.Error(), "--connector") || !strings.Contains(err.Error(), "orders, billing") {
		t.Errorf("no --connector with two: %v", err)
	}
	if c, err := pickConnector(pc, "billing"); err != nil || c.Name != "billing" {
		t.Errorf("pick billing: %v %v", c.Name, err)
	}
	if _, err := pickConnector(pc, "nope"); err == nil || !strings.Contains(err.Error(), "billing, orders") {
		t.Errorf("unknown connector: %v", err)
	}
}

func TestLoadProcessConfigSingleLayoutIsAListOfOne(t *testing.T) {
	pc, err := loadProcessConfig(writeFile(t, minimal), nil)
	if err != nil {
		t.Fatal(err)
	}
	if pc.Listed || len(pc.Connectors) != 1 || pc.Connectors[0].Name != "outbox-cdc" || pc.Connectors[0].Checkpoint.Path != "./outbox-cdc.checkpoint" {
		t.Fatalf("%+v", pc)
	}
	if c, err := pickConnector(pc, ""); err != nil || c.Name != "outbox-cdc" {
		t.Fatalf("pick the only one: %v", err)
	}
}

func TestLoadProcessConfigListMistakes(t *testing.T) {
	entry := func(name, extra string) string {
		return "  - name: " + name + "\n    source:\n      type: mysql\n      dsn: \"u@tcp(h:3306)/d\"\n    sink:\n      brokers: [\"k:9092\"]\n" + extra
	}
	for _, tc := range []struct {
		name, file string
		env        map[string]string
		want       string
	}{
		{"connector key at the top", "sink:\n  brokers: [a:1]\nconnectors:\n" + entry("a", ""), nil, `line 1: "sink" sits at the top level beside connectors:`},
		{"empty list", "connectors: []\n", nil, "connectors: want a list"},
		{"shared key inside", "connectors:\n" + entry("a", "    http:\n      listen: \":1\"\n"), nil, "connectors[0] (a): http is shared by every connector; set it at the top level"},
		{"no name", "connectors:\n  - source:\n      type: mysql\n", nil, "connectors[0]: name: every connector in a list needs its own name"},
		{"duplicate name", "connectors:\n" + entry("a", "") + entry("a", ""), nil, `connectors[1] (a): name "a" is also connectors[0] (a)'s`},
		{"shared checkpoint file", "connectors:\n" + entry("a", "    checkpoint:\n      path: /tmp/x\n") + entry("b", "    checkpoint:\n      path: /tmp/x\n"), nil, `connectors[1] (b): checkpoint.path "/tmp/x" is also connectors[0] (a)'s`},
		{"shared server_id", "connectors:\n" + entry("a", "") + entry("b", ""), map[string]string{"OUTBOX_CDC_SOURCE_SERVER_ID": "77"}, `source.server_id "77" is also connectors[0] (a)'s`},
		{"unknown key in an entry", "connectors:\n" + entry("a", "    route:\n      topicz: x\n"), nil, `connectors[0] (a): `},
		{"invalid value names the connector", "connectors:\n" + entry("a", "") + entry("b", "    delivery: sometimes\n"), nil, `connectors[1] (b): delivery: "sometimes"`},
		{"env matching no connector", "connectors:\n" + entry("a", ""), map[string]string{"OUTBOX_CDC_SOURCE_SLOT": "s"}, "OUTBOX_CDC_SOURCE_SLOT matches no configuration key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := loadProcessConfig(writeFile(t, tc.file), tc.env)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want it to contain %q", err, tc.want)
			}
			if _, ok := err.(*configError); !ok {
				t.Fatalf("%T is not a configuration error", err)
			}
		})
	}
}
