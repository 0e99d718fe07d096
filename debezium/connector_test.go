package debezium

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

var update = flag.Bool("update", false, "rewrite the golden translations in testdata/debezium-config")

// TestTranslateDebeziumConfig translates realistic Debezium configurations
// (the outbox examples of Debezium's documentation, for Kafka Connect and
// Debezium Server, MySQL and Postgres, with and without settings outbox-cdc
// cannot honour) and compares the YAML with golden files. The assertions
// below pin what matters in each; the goldens catch every other change.
func TestTranslateDebeziumConfig(t *testing.T) {
	cases := []struct {
		file string
		// want holds "path=value" pairs of the YAML (lists joined by ",").
		want        []string
		absent      []string
		unsupported []string // keys that must be reported
		ignored     []string
		notes       []string // substrings of notes
	}{
		{
			file: "connect-mysql-outbox.json",
			want: []string{"name=inventory-outbox", "source.type=mysql", "source.dsn=debezium:PASSWORD@tcp(mysql.internal:3306)/inventory",
				"source.table=outboxevent", "source.server_id=184054", "route.preset=debezium", "route.topic={aggregate_type}.events",
				"route.headers=type:eventType", "route.columns.timestamp=created_at", "route.converters.key=string",
				"route.converters.value=json", "route.converters.value_schemas=false", "route.converters.headers=simple",
				"route.on_update=warn", "route.on_missing_column=error", "route.timestamp=produce"},
			absent:  []string{"route.partition_column", "route.envelope"},
			ignored: []string{"tasks.max", "schema.history.internal.kafka.topic", "topic.prefix"},
			notes:   []string{"database.password is not copied", "sink.brokers", `set route.context_headers.enabled: true (logical_name "dbserver1")`},
		},
		{
			file: "connect-mariadb-extended-headers.json",
			want: []string{"name=shop-outbox", "source.type=mysql", "route.context_headers.enabled=true",
				"route.context_headers.logical_name=shop", "route.context_headers.connector_name=mariadb"},
			absent: []string{"route.context_headers.run_id"},
			notes:  []string{"route.context_headers.run_id: false"},
		},
		{
			file: "connect-postgres-outbox.json",
			want: []string{"name=orders-outbox", "source.type=postgres", "source.dsn=postgres://debezium:PASSWORD@orders-db:5432/orders?sslmode=require",
				"source.table=public.outboxevent", "source.slot=orders_outbox", "source.publication=orders_outbox_pub",
				"route.columns.aggregate_id=aggregate_id", "route.columns.aggregate_type=aggregate_type", "route.columns.event_type=event_type",
				"route.topic=orders.{aggregate_type}.v1", "route.headers=event_type:eventType", "route.envelope=tenant:tenantId",
				"route.partition_column=partition_no", "route.expand_json_payload=true", "route.tombstone_on_empty_payload=true",
				"route.on_update=fatal", "route.converters.key=json", "route.converters.key_schemas=true", "route.converters.value=json",
				"route.converters.topic_prefix=orders", "pipeline.on_error=dlq", "pipeline.dlq_topic=orders-outbox-dlq", "route.timestamp=produce"},
			ignored: []string{"snapshot.mode", "heartbeat.interval.ms", "errors.log.enable"},
			notes:   []string{"key.converter is not in the connector's configuration", "publish UPDATEs"},
		},
		{
			file: "connect-mysql-unsupported.json",
			want: []string{"source.server_id=5400", "source.tls.mode=verify-full", "route.topic_regex=(?<tenant>[^.]+)\\.(?<agg>.*)",
				"route.topic_replacement=${tenant}.outbox.${agg}", "route.converters.value=string", "route.converters.decimal_handling=string",
				"sink.compression=zstd", "sink.linger=5ms", "route.timestamp=produce"},
			absent: []string{"route.expand_json_payload", "source.table"},
			unsupported: []string{"key.converter", "key.converter.schema.registry.url", "table.include.list", "column.mask.with.12.chars",
				"provide.transaction.metadata", "time.precision.mode", "transforms.unwrap.type", "transforms.unwrap.drop.tombstones",
				"transforms.outbox.table.expand.json.payload", "transforms.outbox.tracing.span.context.field", "transforms.outbox.predicate",
				"predicates", "predicates.isOutbox.type", "errors.tolerance", "producer.override.security.protocol"},
			notes: []string{"set source.table", "database is unknown"},
		},
		{
			file: "server-postgres.properties",
			want: []string{"name=shop", "source.type=postgres", "source.dsn=postgres://postgres:PASSWORD@pg.internal:5432/shop",
				"source.table=outbox.events", "source.slot=debezium_shop", "sink.brokers=kafka-1:9092,kafka-2:9092", "sink.compression=lz4",
				"route.headers=type:eventType", "route.converters.key=json", "route.converters.key_schemas=true",
				"route.converters.value=json", "route.converters.value_schemas=false", "route.converters.headers=json",
				"route.converters.header_schemas=false", "route.timestamp=produce"},
			absent:  []string{"route.partition_column", "route.columns.timestamp"},
			ignored: []string{"transforms.outbox.table.fields.additional.placement", "transforms.outbox.table.field.event.timestamp", "offset.storage.file.filename", "quarkus.log.console.json"},
			notes:   []string{"no name (Debezium Server)"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.file, func(t *testing.T) {
			in, err := os.ReadFile(filepath.Join("testdata", "debezium-config", tc.file))
			if err != nil {
				t.Fatal(err)
			}
			tr, err := TranslateDebeziumConfig(in)
			if err != nil {
				t.Fatalf("TranslateDebeziumConfig: %v", err)
			}
			var doc map[string]any
			if err := yaml.Unmarshal(tr.YAML, &doc); err != nil {
				t.Fatalf("output is not YAML: %v\n%s", err, tr.YAML)
			}
			for _, w := range tc.want {
				path, val, _ := strings.Cut(w, "=")
				got, ok := lookupPath(doc, path)
				if !ok || got != val {
					t.Errorf("%s = %q (set: %v), want %q\n%s", path, got, ok, val, tr.YAML)
				}
			}
			for _, a := range tc.absent {
				if got, ok := lookupPath(doc, a); ok {
					t.Errorf("%s = %q, want it absent", a, got)
				}
			}
			keys := func(fs []Finding) map[string]string {
				m := map[string]string{}
				for _, f := range fs {
					if f.Reason == "" {
						t.Errorf("%s reported without a reason", f.Key)
					}
					m[f.Key] = f.Reason
				}
				return m
			}
			un, ig := keys(tr.Unsupported), keys(tr.Ignored)
			for _, k := range tc.unsupported {
				if _, ok := un[k]; !ok {
					t.Errorf("%s not reported as unsupported (unsupported: %v)", k, un)
				}
			}
			if tc.unsupported == nil && len(un) > 0 {
				t.Errorf("unexpected unsupported keys: %v", un)
			}
			for _, k := range tc.ignored {
				if _, ok := ig[k]; !ok {
					t.Errorf("%s not reported as ignored (ignored: %v)", k, ig)
				}
			}
			for _, n := range tc.notes {
				if !strings.Contains(strings.Join(tr.Notes, "\n"), n) {
					t.Errorf("no note about %q in %q", n, tr.Notes)
				}
			}
			// Nothing is copied that holds a secret.
			if bytes.Contains(tr.YAML, []byte(":dbz@")) || bytes.Contains(tr.YAML, []byte("secret")) || bytes.Contains(tr.YAML, []byte(":postgres@")) ||
				bytes.Contains(tr.YAML, []byte("${file:")) {
				t.Errorf("a password reached the output:\n%s", tr.YAML)
			}
			golden := filepath.Join("testdata", "debezium-config", strings.TrimSuffix(tc.file, filepath.Ext(tc.file))+".yaml")
			if *update {
				if err := os.WriteFile(golden, tr.YAML, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (go test ./debezium -run TestTranslateDebeziumConfig -update)", err)
			}
			if !bytes.Equal(tr.YAML, want) {
				t.Errorf("%s differs:\n%s", golden, tr.YAML)
			}
		})
	}
}

// TestTranslateEveryKeyAccountedFor: every input key is translated,
// ignored or unsupported, and an unknown key is reported, never dropped.
func TestTranslateEveryKeyAccountedFor(t *testing.T) {
	in := []byte(`{"connector.class":"io.debezium.connector.mysql.MySqlConnector","database.hostname":"h","database.user":"u",
		"table.include.list":"db.outbox","transforms":"o","transforms.o.type":"io.debezium.transforms.outbox.EventRouter",
		"some.future.option":"x","transforms.o.route.by.field":"kind"}`)
	tr, err := TranslateDebeziumConfig(in)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, f := range tr.Unsupported {
		if f.Key == "some.future.option" && strings.Contains(f.Reason, "not a setting this translation knows") {
			found = true
		}
	}
	if !found {
		t.Fatalf("unknown key not reported: %+v", tr.Unsupported)
	}
	if !bytes.Contains(tr.YAML, []byte("aggregate_type: kind")) {
		t.Fatalf("route.by.field not translated:\n%s", tr.YAML)
	}
}

func TestTranslateRefuses(t *testing.T) {
	cases := []struct{ in, want string }{
		{``, "empty"},
		{`{"name":"x"}`, "no connector.class"},
		{`{"connector.class":"io.debezium.connector.sqlserver.SqlServerConnector"}`, "MySQL, MariaDB and PostgreSQL"},
		{`{"connector.class":"io.debezium.connector.mysql.MySqlConnector"}`, "no transforms"},
		{`{"connector.class":"io.debezium.connector.mysql.MySqlConnector","transforms":"u","transforms.u.type":"io.debezium.transforms.ExtractNewRecordState"}`, "hold no io.debezium.transforms.outbox.EventRouter"},
		{`{"connector.class": ["a"]}`, "flat"},
		{"{not json", "not valid JSON"},
	}
	for _, c := range cases {
		_, err := TranslateDebeziumConfig([]byte(c.in))
		if !errors.Is(err, ErrDebeziumConfig) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want %q", c.in, err, c.want)
		}
	}
}

func TestParseProperties(t *testing.T) {
	in := "# comment\n! also\n  a.b = 1\nc:2\nd 3\ne=line\\\n    continued\nf=\\u00e9\\t\\\\\ng=\n"
	p, err := parseProperties([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"a.b": "1", "c": "2", "d": "3", "e": "linecontinued", "f": "é\t\\", "g": ""}
	for k, v := range want {
		if p[k] != v {
			t.Errorf("%s = %q, want %q", k, p[k], v)
		}
	}
	if len(p) != len(want) {
		t.Errorf("got %v", p)
	}
}

func lookupPath(doc map[string]any, path string) (string, bool) {
	var cur any = doc
	for _, p := range strings.Split(path, ".") {
		m, ok := cur.(map[string]any)
		if !ok {
			return "", false
		}
		if cur, ok = m[p]; !ok {
			return "", false
		}
	}
	switch x := cur.(type) {
	case []any:
		var s []string
		for _, e := range x {
			s = append(s, e.(string))
		}
		return strings.Join(s, ","), true
	case map[string]any:
		return "<map>", true
	}
	return strings.TrimSpace(strings.ReplaceAll(yamlScalar(cur), "\n", "")), true
}

func yamlScalar(v any) string {
	b, _ := yaml.Marshal(v)
	s := strings.TrimSpace(string(b))
	if strings.HasPrefix(s, "'") && strings.HasSuffix(s, "'") {
		s = strings.ReplaceAll(s[1:len(s)-1], "''", "'")
	}
	return s
}
