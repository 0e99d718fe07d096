package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/outbox-cdc/outbox-cdc/binlog"
	"github.com/outbox-cdc/outbox-cdc/wal"
)

func writeFile(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

const minimal = `
source:
  type: mysql
  dsn: "root:secret@tcp(127.0.0.1:3306)/shop"
sink:
  type: kafka
  brokers: ["127.0.0.1:9092"]
`

func TestLoadConfigFileAndEnv(t *testing.T) {
	p := writeFile(t, minimal)
	cfg, err := loadConfig(p, map[string]string{
		"OUTBOX_CDC_SOURCE_DSN":       "app:pw@tcp(db:3306)/orders",
		"OUTBOX_CDC_SINK_BROKERS":     "k1:9092, k2:9092",
		"OUTBOX_CDC_SOURCE_SERVER_ID": "4242",
		"OUTBOX_CDC_ROUTE_TOPIC":      "events.{event_type}",
		"OUTBOX_CDC_TEST_MYSQL_DSN":   "ignored: belongs to the tests",
	})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Source.MySQL.DSN != "app:pw@tcp(db:3306)/orders" {
		t.Errorf("dsn %q", cfg.Source.MySQL.DSN)
	}
	if cfg.Source.MySQL.ServerID != 4242 {
		t.Errorf("server_id %d", cfg.Source.MySQL.ServerID)
	}
	if got := strings.Join(cfg.Sink.Brokers, ","); got != "k1:9092,k2:9092" {
		t.Errorf("brokers %q", got)
	}
	if cfg.Route.Topic != "events.{event_type}" || cfg.Source.MySQL.Table != "outbox_message" || cfg.Checkpoint.Path == "" {
		t.Errorf("route/defaults wrong: %+v", cfg)
	}
}

func TestLoadConfigEnvOnly(t *testing.T) {
	cfg, err := loadConfig("", map[string]string{
		"OUTBOX_CDC_SOURCE_TYPE": "postgres",
		"OUTBOX_CDC_SOURCE_DSN":  "postgres://u@h/db",
		"OUTBOX_CDC_SINK_TYPE":   "stdout",
	})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Source.Type != "postgres" || cfg.Source.Postgres.DSN != "postgres://u@h/db" || cfg.Sink.Type != "stdout" {
		t.Fatalf("%+v", cfg)
	}
}

func TestLoadConfigErrors(t *testing.T) {
	cases := []struct {
		name, file string
		env        map[string]string
		want       string
	}{
		{"unknown key with hint", minimal + "checkpont:\n  path: x\n", nil, `unknown configuration key "checkpont" (did you mean "checkpoint"?)`},
		{"unknown nested key", strings.Replace(minimal, "dsn:", "dns:", 1), nil, `"source.dns" (did you mean "source.dsn"?)`},
		{"postgres key on mysql", minimal + "  slot: x\n", nil, ""},
		{"unknown source type", strings.Replace(minimal, "type: mysql", "type: oracle", 1), nil, "source.type"},
		{"unknown sink type", strings.Replace(minimal, "type: kafka", "type: pulsar", 1), nil, "sink.type"},
		{"bad start", minimal, map[string]string{"OUTBOX_CDC_SOURCE_START": "yesterday"}, "source.start"},
		{"no brokers", strings.Replace(minimal, `brokers: ["127.0.0.1:9092"]`, "brokers: []", 1), nil, "sink.brokers"},
		{"bad type", minimal + "pipeline:\n  max_batch_records: lots\n", nil, "pipeline.max_batch_records"},
		{"typo in env", minimal, map[string]string{"OUTBOX_CDC_SOURCE_DNS": "x"}, "OUTBOX_CDC_SOURCE_DSN"},
		{"bad listen", minimal + "http:\n  listen: nope\n", nil, "http.listen"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := loadConfig(writeFile(t, c.file), c.env)
			if err == nil {
				t.Fatal("accepted")
			}
			if _, ok := err.(*configError); !ok {
				t.Fatalf("not a configError: %T %v", err, err)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %q does not mention %q", err, c.want)
			}
		})
	}
}

func TestRunExitCodes(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"version"}, &out, &errb); code != 0 || !strings.HasPrefix(out.String(), "outbox-cdc ") {
		t.Fatalf("version: %d %q", code, out.String())
	}
	errb.Reset()
	p := writeFile(t, minimal+"bogus: 1\n")
	if code := run([]string{"run", "--config", p}, &out, &errb); code != 2 || !strings.Contains(errb.String(), "bogus") {
		t.Fatalf("bad config: exit %d, stderr %q", code, errb.String())
	}
	errb.Reset()
	if code := run([]string{"frobnicate"}, &out, &errb); code != 2 {
		t.Fatalf("unknown command: exit %d", code)
	}
	// A wrong DSN password must not be printed.
	errb.Reset()
	p = writeFile(t, strings.Replace(minimal, "type: kafka", "type: nope", 1))
	run([]string{"run", "--config", p}, &out, &errb)
	if strings.Contains(errb.String(), "secret") {
		t.Fatalf("password printed: %q", errb.String())
	}
}

// TestConfigPrintRoundTrip: the printed configuration loads back to the same
// configuration (apart from the redacted password), for both sources.
func TestConfigPrintRoundTrip(t *testing.T) {
	for _, file := range []string{
		minimal + "pipeline:\n  shutdown_timeout: 7s\n",
		"source:\n  type: postgres\n  dsn: postgres://u:secret@h/db\n  heartbeat:\n    interval: 3s\nsink:\n  type: stdout\n",
	} {
		cfg, err := loadConfig(writeFile(t, file), nil)
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		if err := printConfig(&out, cfg); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(out.String(), ":secret@") {
			t.Fatalf("password printed:\n%s", out.String())
		}
		again, err := loadConfig(writeFile(t, out.String()), nil)
		if err != nil {
			t.Fatalf("printed config does not load: %v\n%s", err, out.String())
		}
		again.Source.MySQL.DSN, again.Source.Postgres.DSN = cfg.Source.MySQL.DSN, cfg.Source.Postgres.DSN
		var a, b bytes.Buffer
		printConfig(&a, cfg)
		printConfig(&b, again)
		if a.String() != b.String() {
			t.Fatalf("round trip changed the configuration:\n%s\n---\n%s", a.String(), b.String())
		}
	}
}

func TestSecretsFromFiles(t *testing.T) {
	dir := t.TempDir()
	dsnFile := filepath.Join(dir, "dsn")
	os.WriteFile(dsnFile, []byte("app:s3cret@tcp(db:3306)/orders\n"), 0o600)
	brokersFile := filepath.Join(dir, "brokers")
	os.WriteFile(brokersFile, []byte("k1:9092,k2:9092\n"), 0o600)

	file := strings.Replace(minimal, `dsn: "root:secret@tcp(127.0.0.1:3306)/shop"`, "dsn_file: "+dsnFile, 1)
	cfg, err := loadConfig(writeFile(t, file), map[string]string{"OUTBOX_CDC_SINK_BROKERS_FILE": brokersFile})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Source.MySQL.DSN != "app:s3cret@tcp(db:3306)/orders" {
		t.Fatalf("dsn from file: %q", cfg.Source.MySQL.DSN)
	}
	if strings.Join(cfg.Sink.Brokers, ",") != "k1:9092,k2:9092" {
		t.Fatalf("brokers from env file: %q", cfg.Sink.Brokers)
	}

	// The environment's dsn_file overrides the file's dsn.
	cfg, err = loadConfig(writeFile(t, minimal), map[string]string{"OUTBOX_CDC_SOURCE_DSN_FILE": dsnFile})
	if err != nil || cfg.Source.MySQL.DSN != "app:s3cret@tcp(db:3306)/orders" {
		t.Fatalf("env dsn_file over file dsn: %v %q", err, cfg.Source.MySQL.DSN)
	}
	both := strings.Replace(minimal, "  dsn:", "  dsn_file: "+dsnFile+"\n  dsn:", 1)
	if _, err := loadConfig(writeFile(t, both), nil); err == nil || !strings.Contains(err.Error(), "both set") {
		t.Fatalf("dsn and dsn_file both set in one file: %v", err)
	}
	if _, err := loadConfig(writeFile(t, file), map[string]string{"OUTBOX_CDC_SOURCE_DSN_FILE": filepath.Join(dir, "missing")}); err == nil || !strings.Contains(err.Error(), "source.dsn_file") {
		t.Fatalf("missing secret file: %v", err)
	}
}

// TestConfigPrintShowsDerivedValues: config print names, beside each key
// left for the connector to derive, the value it will use, as the code that
// uses it derives it.
func TestConfigPrintShowsDerivedValues(t *testing.T) {
	print := func(file string) string {
		t.Helper()
		cfg, err := loadConfig(writeFile(t, file), nil)
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		if err := printConfig(&out, cfg); err != nil {
			t.Fatal(err)
		}
		return out.String()
	}
	my := print("name: orders-outbox\n" + minimal)
	for _, want := range []string{
		fmt.Sprintf("server_id: 0 # derived: %d", binlog.DeriveServerID("orders-outbox")),
		`transactional_id: "" # derived: outbox-cdc-orders-outbox (used with delivery: exactly-once)`,
		`dlq_topic: "" # derived: orders-outbox.dlq (used with on_error: dlq)`,
		"preset: seed # derived: headers id=message_id, event_type=event_type, aggregate_type=aggregate_type",
	} {
		if !strings.Contains(my, want) {
			t.Errorf("mysql: no %q in\n%s", want, my)
		}
	}
	pg := print("name: orders-outbox\nsource:\n  type: postgres\n  dsn: postgres://u:secret@h/db\n" +
		"route:\n  preset: debezium\n  columns:\n    message_id: event_id\nsink:\n  type: stdout\n")
	slot := wal.DeriveName("orders-outbox")
	for _, want := range []string{
		`slot: "" # derived: ` + slot,
		`publication: "" # derived: ` + slot,
		"preset: debezium # derived: headers id=event_id",
	} {
		if !strings.Contains(pg, want) {
			t.Errorf("postgres: no %q in\n%s", want, pg)
		}
	}
	if strings.Contains(pg, "# derived: outbox-cdc-orders-outbox") {
		t.Errorf("postgres with stdout sink shows a transactional id:\n%s", pg)
	}
	pinned := print("name: orders-outbox\n" + strings.Replace(minimal, "/shop\"\n", "/shop\"\n  server_id: 77\n", 1))
	if strings.Contains(pinned, "server_id: 77 # derived") {
		t.Errorf("a set server_id is marked derived:\n%s", pinned)
	}
}

// TestContextHeadersDefaults: route.context_headers takes Debezium's
// values from the configuration: the logical name from
// route.converters.topic_prefix (else the connector name), the connector
// name from source.type.
func TestContextHeadersDefaults(t *testing.T) {
	on := "route:\n  context_headers:\n    enabled: true\n"
	for _, tc := range []struct {
		body, logical, connector string
	}{
		{"name: orders\n" + minimal + on, "orders", "mysql"},
		{"name: orders\n" + strings.Replace(minimal, "type: mysql", "type: postgres", 1) + on + "  converters:\n    topic_prefix: dbserver1\n", "dbserver1", "postgresql"},
		{"name: orders\n" + minimal + on + "    logical_name: shop\n    connector_name: mariadb\n", "shop", "mariadb"},
	} {
		if strings.Contains(tc.body, "postgres") {
			tc.body = strings.Replace(tc.body, `"root:secret@tcp(127.0.0.1:3306)/shop"`, `"postgres://u:p@127.0.0.1:5432/shop"`, 1)
		}
		cfg, err := loadConnectorConfig(writeFile(t, tc.body), "", nil)
		if err != nil {
			t.Fatal(err)
		}
		ch := cfg.Route.ContextHeaders
		if ch.LogicalName != tc.logical || ch.ConnectorName != tc.connector || !ch.RunID {
			t.Errorf("%q: logical_name %q connector_name %q run_id %v; want %q %q true", tc.body, ch.LogicalName, ch.ConnectorName, ch.RunID, tc.logical, tc.connector)
		}
	}
}
