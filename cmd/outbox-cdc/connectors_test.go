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
		{"shared key inside", "connectors:\n" + entry("a", "    http:\n      listen: \":1\"\n"), nil, `connectors[0].http (connector "a", line 8): http is shared by every connector; set it at the top level`},
		{"no name", "connectors:\n  - source:\n      type: mysql\n", nil, "connectors[0].name (line 2): every connector in a list needs its own name"},
		{"duplicate name", "connectors:\n" + entry("a", "") + entry("a", ""), nil, `connectors[1].name (connector "a"): "a" is also connectors[0] (a)'s; every connector needs its own`},
		{"shared checkpoint file", "connectors:\n" + entry("a", "    checkpoint:\n      path: /tmp/x\n") + entry("b", "    checkpoint:\n      path: /tmp/x\n"), nil, `connectors[1].checkpoint.path (connector "b"): "/tmp/x" is also connectors[0] (a)'s`},
		{"shared server_id", "connectors:\n" + entry("a", "") + entry("b", ""), map[string]string{"OUTBOX_CDC_SOURCE_SERVER_ID": "77"}, `connectors[1].source.server_id (connector "b"): "77" is also connectors[0] (a)'s`},
		{"unknown key in an entry", "connectors:\n" + entry("a", "    route:\n      topicz: x\n"), nil, `connectors[0].route.topicz (connector "a"`},
		{"unknown key names its line", "connectors:\n" + entry("a", "    route:\n      topicz: x\n"), nil, `connectors[0].route.topicz (connector "a", line 9): unknown configuration key "route.topicz" (did you mean "route.topic"?)`},
		{"invalid value names the connector", "connectors:\n" + entry("a", "") + entry("b", "    delivery: sometimes\n"), nil, `connectors[1] (connector "b"): delivery: "sometimes"`},
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

// TestConnectorFlag: with several connectors, config print and the
// position commands need --connector, and say which names there are;
// check (which checks them all without it) refuses an unknown name too.
func TestConnectorFlag(t *testing.T) {
	dir := t.TempDir()
	file := strings.ReplaceAll(twoConnectors, "/tmp/billing.checkpoint", dir+"/billing.checkpoint")
	p := writeFile(t, file)
	for _, args := range [][]string{
		{"config", "print", "--config", p},
		{"position", "show", "--config", p},
		{"position", "set", "--config", p, "--to", "0/16B3748"},
		{"position", "import-debezium", "--config", p, "--offset", "-"},
	} {
		var out, errOut strings.Builder
		if code := run(args, &out, &errOut); code != 2 || !strings.Contains(errOut.String(), "choose one with --connector NAME") ||
			!strings.Contains(errOut.String(), "orders, billing") {
			t.Errorf("%v: exit %d, stderr %q", args, code, errOut.String())
		}
		errOut.Reset()
		if code := run(append(args, "--connector", "shipping"), &out, &errOut); code != 2 || !strings.Contains(errOut.String(), `--connector "shipping": no such connector`) {
			t.Errorf("%v --connector shipping: exit %d, stderr %q", args, code, errOut.String())
		}
	}

	var out, errOut strings.Builder
	if code := run([]string{"check", "--config", p, "--connector", "shipping"}, &out, &errOut); code != 2 || !strings.Contains(errOut.String(), `--connector "shipping": no such connector`) {
		t.Errorf("check --connector shipping: exit %d, stderr %q", code, errOut.String())
	}
	out.Reset()
	errOut.Reset()
	if code := run([]string{"config", "print", "--config", p, "--connector", "billing"}, &out, &errOut); code != 0 {
		t.Fatalf("config print --connector billing: exit %d: %s", code, errOut.String())
	}
	if s := out.String(); !strings.Contains(s, "name: billing") || !strings.Contains(s, "type: postgres") || strings.Contains(s, "orders") {
		t.Fatalf("config print --connector billing:\n%s", s)
	}
	out.Reset()
	if code := run([]string{"position", "show", "--config", p, "--connector", "billing"}, &out, &errOut); code != 0 ||
		!strings.Contains(out.String(), dir+"/billing.checkpoint") {
		t.Fatalf("position show --connector billing: exit %d, out %q, err %q", code, out.String(), errOut.String())
	}
}

// TestImportDebeziumConnectorNames: --connector picks the outbox-cdc
// connector and the Debezium offset of the same name; --debezium-connector
// names another; with a single connector configured, a --connector that is
// not its name still names the Debezium connector, as before lists.
func TestImportDebeziumConnectorNames(t *testing.T) {
	offsets := "../../debezium/testdata/offsets-topic.kcat.txt"
	dir := t.TempDir()
	single := writeFile(t, minimal+"checkpoint:\n  path: "+dir+"/single.checkpoint\n")
	list := writeFile(t, `connectors:
  - name: orders-outbox
    source: {type: mysql, dsn: "root:secret@tcp(127.0.0.1:3306)/shop", gtid: "off"}
    sink: {brokers: ["k1:9092"]}
    checkpoint: {path: "`+dir+`/orders.checkpoint"}
  - name: other
    source: {type: mysql, dsn: "root:secret@tcp(127.0.0.1:3306)/shop", gtid: "off"}
    sink: {brokers: ["k1:9092"]}
    checkpoint: {path: "`+dir+`/other.checkpoint"}
`)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--config", single, "--connector", "orders-outbox"}, "checkpoint file " + dir + "/single.checkpoint"},
		{[]string{"--config", list, "--connector", "orders-outbox"}, dir + "/orders.checkpoint"},
		{[]string{"--config", list, "--connector", "other", "--debezium-connector", "orders-outbox"}, dir + "/other.checkpoint"},
	} {
		var out, errOut strings.Builder
		args := append([]string{"position", "import-debezium", "--offset", offsets, "--dry-run"}, tc.args...)
		code := run(args, &out, &errOut)
		if code != 0 || !strings.Contains(out.String(), `Debezium offset of ["orders-outbox",{"server":"orders"}]`) ||
			!strings.Contains(out.String(), "mysql-bin.000003:1748") || !strings.Contains(out.String(), tc.want) {
			t.Errorf("%v: exit %d\nout: %s\nerr: %s", tc.args, code, out.String(), errOut.String())
		}
	}
}

// TestConnectorMistakeIsStructured: a mistake in a connectors: entry is one
// *configError whose key starts with the entry, with the line of the key
// in the file and the file named once.
func TestConnectorMistakeIsStructured(t *testing.T) {
	file := "connectors:\n" +
		"  - name: a\n" +
		"    source:\n" +
		"      type: mysql\n" +
		"      dsn: \"u@tcp(h:3306)/d\"\n" +
		"    sink:\n" +
		"      brokers: [\"k:9092\"]\n" +
		"  - name: b\n" +
		"    source:\n" +
		"      type: mysql\n" +
		"      dsn: \"not a dsn\"\n" +
		"    sink:\n" +
		"      brokers: [\"k:9092\"]\n"
	p := writeFile(t, file)
	_, err := loadProcessConfig(p, nil)
	ce, ok := err.(*configError)
	if !ok {
		t.Fatalf("%T %v is not a configuration error", err, err)
	}
	if ce.Key != "connectors[1].source.dsn" || ce.Line != 11 || ce.File != p || ce.Connector != "b" {
		t.Errorf("key %q line %d file %q connector %q, want connectors[1].source.dsn, 11, %s, b", ce.Key, ce.Line, ce.File, ce.Connector, p)
	}
	msg := err.Error()
	if n := strings.Count(msg, p); n != 1 {
		t.Errorf("the file is named %d times in %q", n, msg)
	}
	if !strings.HasPrefix(msg, p+`: connectors[1].source.dsn (connector "b", line 11): `) {
		t.Errorf("message %q", msg)
	}

	// A mistake that names no key is about the entry.
	_, err = loadProcessConfig(writeFile(t, strings.Replace(file, "dsn: \"not a dsn\"", "dsn: \"u@tcp(h:3306)/d\"\n    delivery: sometimes", 1)), nil)
	if ce, ok := err.(*configError); !ok || ce.Key != "connectors[1]" || ce.Connector != "b" {
		t.Errorf("%T %v: want a configuration error about connectors[1] (b)", err, err)
	}
}
