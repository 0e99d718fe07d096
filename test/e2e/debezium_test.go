package e2e

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/outbox-cdc/outbox-cdc/sink/kafka"
	"github.com/outbox-cdc/outbox-cdc/test/testenv"
)

// The tests in this file run the binary with Kafka Connect converter
// settings against an outbox table shaped as Debezium's documentation
// shapes it, and read the records back with kcat (librdkafka, an
// independent Kafka client), comparing key, value, header and partition
// bytes with what Kafka Connect writes. The expected bytes are the ones
// router/connect_test.go derives from Kafka Connect's and Debezium's
// sources (cited there).

// dbzBackend is a fresh database (MySQL) or schema (Postgres) holding a
// Debezium-style outbox table:
//
//	id, aggregatetype, aggregateid, type (NOT NULL), payload (JSON/jsonb,
//	nullable), body (binary), seq (int), created_at (DATETIME(3) /
//	timestamp(3)), part (int)
type dbzBackend struct {
	kind   string
	db     *sql.DB
	insert string
	source string // the source: section
	table  string
}

func dbzMySQL(t *testing.T) *dbzBackend {
	t.Helper()
	cfg, err := mysql.ParseDSN(testenv.MySQLDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	name := testObjectName(t)
	admin := testenv.MySQL(t)
	for _, q := range []string{"DROP DATABASE IF EXISTS " + name, "CREATE DATABASE " + name} {
		if _, err := admin.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { admin.Exec("DROP DATABASE IF EXISTS " + name) })
	cfg.DBName = name
	dsn := cfg.FormatDSN()
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if _, err := db.Exec(`CREATE TABLE outboxevent (
  id CHAR(36) NOT NULL PRIMARY KEY,
  aggregatetype VARCHAR(255) NOT NULL,
  aggregateid VARCHAR(255) NOT NULL,
  type VARCHAR(255) NOT NULL,
  payload JSON NULL,
  body BLOB NULL,
  seq INT NULL,
  created_at DATETIME(3) NULL,
  part INT NULL
) DEFAULT CHARSET=utf8mb4`); err != nil {
		t.Fatal(err)
	}
	return &dbzBackend{kind: "mysql", db: db, table: "outboxevent",
		insert: "INSERT INTO outboxevent (id, aggregatetype, aggregateid, type, payload, body, seq, created_at, part) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
		source: fmt.Sprintf("  type: mysql\n  dsn: %q\n  table: outboxevent\n  start: latest\n", dsn)}
}

func dbzPostgres(t *testing.T) *dbzBackend {
	t.Helper()
	dsn := testenv.PostgresDSN(t)
	schema := testObjectName(t)
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		"DROP SCHEMA IF EXISTS " + schema + " CASCADE",
		"CREATE SCHEMA " + schema,
		`CREATE TABLE ` + schema + `.outboxevent (
  id uuid NOT NULL PRIMARY KEY,
  aggregatetype varchar(255) NOT NULL,
  aggregateid varchar(255) NOT NULL,
  type varchar(255) NOT NULL,
  payload jsonb,
  body bytea,
  seq integer,
  created_at timestamp(3),
  part integer
)`,
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	slot := schema
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for i := 0; i < 50; i++ {
			if _, err := db.ExecContext(ctx, "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1", slot); err == nil {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		db.ExecContext(ctx, "DROP PUBLICATION IF EXISTS "+slot)
		db.ExecContext(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE")
		db.Close()
	})
	return &dbzBackend{kind: "postgres", db: db, table: schema + ".outboxevent",
		insert: "INSERT INTO " + schema + ".outboxevent (id, aggregatetype, aggregateid, type, payload, body, seq, created_at, part) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
		source: fmt.Sprintf("  type: postgres\n  dsn: %q\n  table: %s.outboxevent\n  slot: %s\n  publication: %s\n", dsn, schema, slot, slot)}
}

// dbzRow is one outbox row; nil fields are NULL.
type dbzRow struct {
	id, aggType, aggID, typ string
	payload                 any // string or nil
	body                    []byte
	seq                     any
	createdAt               any // "2026-03-14 15:09:26.123" or nil
	part                    any
}

func (b *dbzBackend) insertTx(t *testing.T, rows ...dbzRow) {
	t.Helper()
	tx, err := b.db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		var body any
		if r.body != nil {
			body = r.body
		}
		if _, err := tx.Exec(b.insert, r.id, r.aggType, r.aggID, r.typ, r.payload, body, r.seq, r.createdAt, r.part); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
}

// kcatRecord is one record as kcat printed it.
type kcatRecord struct {
	partition int32
	key       []byte // nil: null key
	value     []byte // nil: null value
	headers   string // kcat's %h, "k=v,k=v"
	ts        int64
}

// kcat reads every record of topic from the beginning with kcat and
// returns them in partition order. Key and value are framed by their
// lengths (%K, %S), so any bytes survive.
func kcat(t *testing.T, broker, topic string, want int) []kcatRecord {
	t.Helper()
	path, err := exec.LookPath("kcat")
	if err != nil {
		testenv.Unavailable(t, "kcat is not installed (apt-get install kcat)")
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		cmd := exec.CommandContext(ctx, path, "-b", broker, "-C", "-t", topic, "-o", "beginning", "-e", "-q",
			"-f", `P%p K%K:%k S%S:%s T%T H%h`+"\x1e")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		cancel()
		if err == nil {
			recs, perr := parseKcat(out)
			if perr != nil {
				t.Fatalf("kcat output: %v\n%q", perr, out)
			}
			if len(recs) >= want {
				return recs
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("kcat read fewer than %d records of %s within 30s (last: %v, %s)", want, topic, err, stderr.String())
		}
		time.Sleep(300 * time.Millisecond)
	}
}

func parseKcat(out []byte) ([]kcatRecord, error) {
	var recs []kcatRecord
	for len(out) > 0 {
		var r kcatRecord
		num := func(prefix string, stop byte) (int64, error) {
			if !bytes.HasPrefix(out, []byte(prefix)) {
				return 0, fmt.Errorf("want %q at %q", prefix, out[:min(len(out), 20)])
			}
			out = out[len(prefix):]
			i := bytes.IndexByte(out, stop)
			if i < 0 {
				return 0, fmt.Errorf("no %q", stop)
			}
			n, err := strconv.ParseInt(string(out[:i]), 10, 64)
			out = out[i+1:]
			return n, err
		}
		field := func(prefix string) ([]byte, error) {
			n, err := num(prefix, ':')
			if err != nil || n < 0 {
				return nil, err
			}
			if int(n) > len(out) {
				return nil, fmt.Errorf("short field")
			}
			b := append([]byte{}, out[:n]...)
			out = out[n:]
			return b, nil
		}
		p, err := num("P", ' ')
		if err != nil {
			return nil, err
		}
		r.partition = int32(p)
		if r.key, err = field("K"); err != nil {
			return nil, err
		}
		if r.value, err = field(" S"); err != nil {
			return nil, err
		}
		if r.ts, err = num(" T", ' '); err != nil {
			return nil, err
		}
		if !bytes.HasPrefix(out, []byte("H")) {
			return nil, fmt.Errorf("no headers")
		}
		end := bytes.IndexByte(out, 0x1e)
		if end < 0 {
			return nil, fmt.Errorf("no record separator")
		}
		r.headers = string(out[1:end])
		out = out[end+1:]
		recs = append(recs, r)
	}
	return recs, nil
}

// dbzWant is one expected record.
type dbzWant struct {
	key, value string // "<null>" for a null value
	headers    []string
	partition  int32 // -1: Java's murmur2 of the key over 3 partitions
	ts         int64 // 0: not checked
}

func (w dbzWant) check(t *testing.T, got kcatRecord) {
	t.Helper()
	if string(got.key) != w.key {
		t.Errorf("key\n got %q\nwant %q", got.key, w.key)
	}
	switch {
	case w.value == "<null>":
		if got.value != nil {
			t.Errorf("value %q, want null", got.value)
		}
	case string(got.value) != w.value:
		t.Errorf("value\n got %q\nwant %q", got.value, w.value)
	}
	if h := strings.Join(w.headers, ","); got.headers != h {
		t.Errorf("headers\n got %q\nwant %q", got.headers, h)
	}
	p := w.partition
	if p < 0 {
		p = kafka.JavaPartition([]byte(w.key), 3)
	}
	if got.partition != p {
		t.Errorf("partition %d, want %d", got.partition, p)
	}
	if w.ts != 0 && got.ts != w.ts {
		t.Errorf("timestamp %d, want %d", got.ts, w.ts)
	}
}

// TestDebeziumConvertersKcat: one connector per Kafka Connect converter,
// read back byte for byte with kcat.
func TestDebeziumConvertersKcat(t *testing.T) {
	const (
		id1 = "7f1c2a4e-0b6d-4f7e-9a51-3c2d8e9f0a11"
		id2 = "0d6e8a53-9a4c-4d3f-8f5e-2b1c0a9e8d77"
	)
	ts := time.Date(2026, 3, 14, 15, 9, 26, 123e6, time.UTC).UnixMilli()
	cases := []struct {
		name    string
		backend func(*testing.T) *dbzBackend
		route   string
		rows    []dbzRow
		topic   string
		want    []dbzWant
	}{
		{
			name: "json_schemas_postgres", backend: dbzPostgres,
			route: `
  converters: {key: json, value: json, headers: simple}
  headers: ["type:eventType"]`,
			rows:  []dbzRow{{id: id1, aggType: "Order", aggID: "SO-1001", typ: "OrderCreated", payload: `{"orderNo": "SO-1001", "amount": 99.5}`}},
			topic: "outbox.event.Order",
			want: []dbzWant{{
				key:       `{"schema":{"type":"string","optional":false},"payload":"SO-1001"}`,
				value:     `{"schema":{"type":"string","optional":true,"name":"io.debezium.data.Json","version":1},"payload":"{\"amount\": 99.5, \"orderNo\": \"SO-1001\"}"}`,
				headers:   []string{"id=" + id1, "eventType=OrderCreated"},
				partition: -1,
			}},
		},
		{
			name: "json_plain_mysql_server_headers", backend: dbzMySQL,
			route: `
  converters: {key: json, value: json, headers: json, key_schemas: false, value_schemas: false, header_schemas: false, column_types: ["payload=json?"]}
  headers: [seq]`,
			rows: []dbzRow{
				{id: id1, aggType: "Order", aggID: "SO-1001", typ: "OrderCreated", payload: `{"orderNo":"SO-1001"}`, seq: 7},
			},
			topic: "outbox.event.Order",
			want: []dbzWant{
				{key: `"SO-1001"`, value: `"{\"orderNo\":\"SO-1001\"}"`, headers: []string{`id="` + id1 + `"`, `seq=7`}, partition: -1},
			},
		},
		{
			name: "context_headers_json_mysql", backend: dbzMySQL,
			route: `
  converters: {key: string, value: string, headers: json, column_types: ["payload=json?"]}
  context_headers: {enabled: true, logical_name: dbserver1, connector_name: mariadb, run_id: false}`,
			rows:  []dbzRow{{id: id1, aggType: "Order", aggID: "SO-1001", typ: "OrderCreated", payload: `{"orderNo":"SO-1001"}`}},
			topic: "outbox.event.Order",
			want: []dbzWant{{key: `SO-1001`, value: `{"orderNo":"SO-1001"}`, headers: []string{
				`__debezium.context.connectorLogicalName={"schema":{"type":"string","optional":false},"payload":"dbserver1"}`,
				`__debezium.context.taskId={"schema":{"type":"string","optional":false},"payload":"0"}`,
				`__debezium.context.connectorName={"schema":{"type":"string","optional":false},"payload":"mariadb"}`,
				`id={"schema":{"type":"string","optional":false},"payload":"` + id1 + `"}`,
			}, partition: -1}},
		},
		{
			name: "string_mysql_timestamp_partition", backend: dbzMySQL,
			route: `
  converters: {key: string, value: string, headers: simple}
  columns: {timestamp: created_at}
  partition_column: part
  topic_regex: "(?<agg>.*)"
  topic_replacement: "shop.$1.events"`,
			rows:  []dbzRow{{id: id1, aggType: "Order", aggID: "SO-1001", typ: "OrderCreated", payload: `{"orderNo":"SO-1001"}`, createdAt: "2026-03-14 15:09:26.123", part: 2}},
			topic: "shop.Order.events",
			want:  []dbzWant{{key: `SO-1001`, value: `{"orderNo":"SO-1001"}`, headers: []string{"id=" + id1}, partition: 2, ts: ts}},
		},
		{
			name: "bytearray_and_binary_postgres", backend: dbzPostgres,
			route: `
  columns: {payload: body}
  converters: {key: json, value: bytearray, headers: simple}
  headers: [seq]
  tombstone_on_empty_payload: true`,
			rows: []dbzRow{
				{id: id1, aggType: "Blob", aggID: "B-1", typ: "Stored", body: []byte{0x00, 0xff, 0x10, 'A'}, seq: 1},
				{id: id2, aggType: "Blob", aggID: "B-2", typ: "Deleted", body: nil, seq: 2},
			},
			topic: "outbox.event.Blob",
			want: []dbzWant{
				{key: `{"schema":{"type":"string","optional":false},"payload":"B-1"}`, value: "\x00\xff\x10A", headers: []string{"id=" + id1, "seq=1"}, partition: -1},
				{key: `{"schema":{"type":"string","optional":false},"payload":"B-2"}`, value: "<null>", headers: []string{"id=" + id2, "seq=2"}, partition: -1},
			},
		},
		{
			name: "binarydata_mysql", backend: dbzMySQL,
			route: `
  columns: {payload: body}
  converters: {key: string, value: binary, headers: simple}`,
			rows:  []dbzRow{{id: id1, aggType: "Blob", aggID: "B-1", typ: "Stored", body: []byte{0xca, 0xfe, 0x00}}},
			topic: "outbox.event.Blob",
			want:  []dbzWant{{key: `B-1`, value: "\xca\xfe\x00", headers: []string{"id=" + id1}, partition: -1}},
		},
		{
			name: "cloudevents_structured_postgres", backend: dbzPostgres,
			route: `
  cloudevents: {mode: structured, source: /outbox-cdc/orders}`,
			rows:  []dbzRow{{id: id1, aggType: "Order", aggID: "SO-1001", typ: "OrderCreated", payload: `{"n": 1}`}},
			topic: "outbox.event.Order",
			want:  nil, // checked below: the time attribute is the commit time
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := tc.backend(t)
			_, brokers := testenv.Kafka(t)
			cfg := writeConfig(t, fmt.Sprintf(`
name: %s
source:
%sroute:
  preset: debezium%s
sink:
  type: kafka
  brokers: [%q]
checkpoint:
  type: file
  path: %q
`, strings.ReplaceAll(testObjectName(t), "_", "-"), b.source, tc.route, brokers[0], filepath.Join(t.TempDir(), "checkpoint")))
			c := testenv.Start(t, cfg)
			b.insertTx(t, tc.rows...)
			n := len(tc.want)
			if n == 0 {
				n = len(tc.rows)
			}
			recs := kcat(t, brokers[0], tc.topic, n)
			if len(recs) != n {
				t.Fatalf("kcat read %d records, want %d", len(recs), n)
			}
			if tc.want == nil {
				r := recs[0]
				body := string(r.value)
				for _, part := range []string{`{"specversion":"1.0","id":"` + id1 + `","source":"/outbox-cdc/orders","type":"OrderCreated","subject":"SO-1001","time":"`,
					`","datacontenttype":"application/json","data":{"n": 1}}`} {
					if !strings.Contains(body, part) {
						t.Errorf("CloudEvent %s lacks %s", body, part)
					}
				}
				if r.headers != "content-type=application/cloudevents+json; charset=UTF-8,id="+id1 {
					t.Errorf("headers %q", r.headers)
				}
			}
			for i, w := range tc.want {
				// One aggregate per record: find it by key.
				var got *kcatRecord
				for j := range recs {
					if string(recs[j].key) == w.key {
						got = &recs[j]
					}
				}
				if got == nil {
					t.Fatalf("record %d (key %q) not read; read %+v", i, w.key, recs)
				}
				w.check(t, *got)
			}
			if err := c.Stop(15 * time.Second); err != nil {
				t.Fatalf("SIGTERM exit: %v", err)
			}
		})
	}
}

// TestDebeziumOnUpdate: route.on_update (Debezium's
// table.op.invalid.behavior). fatal stops the connector at the UPDATE of
// an outbox row, after delivering and checkpointing every transaction
// before it; restarted with warn, it skips the UPDATE with a warning and
// delivers what followed.
func TestDebeziumOnUpdate(t *testing.T) {
	for _, be := range []struct {
		kind    string
		backend func(*testing.T) *dbzBackend
	}{{"mysql", dbzMySQL}, {"postgres", dbzPostgres}} {
		t.Run(be.kind, func(t *testing.T) {
			b := be.backend(t)
			_, brokers := testenv.Kafka(t)
			checkpoint := filepath.Join(t.TempDir(), "checkpoint")
			config := func(onUpdate string) string {
				return writeConfig(t, fmt.Sprintf(`
name: %s
source:
%sroute:
  preset: debezium
  on_update: %s
sink:
  type: kafka
  brokers: [%q]
checkpoint:
  type: file
  path: %q
`, strings.ReplaceAll(testObjectName(t), "_", "-"), b.source, onUpdate, brokers[0], checkpoint))
			}
			c := testenv.Start(t, config("fatal"))
			const (
				id1 = "11111111-1111-4111-8111-111111111111"
				id2 = "22222222-2222-4222-8222-222222222222"
			)
			b.insertTx(t, dbzRow{id: id1, aggType: "Order", aggID: "A-1", typ: "Created", payload: `{"n":1}`})
			if _, err := b.db.Exec("UPDATE " + b.table + " SET type = 'Changed' WHERE aggregateid = 'A-1'"); err != nil {
				t.Fatal(err)
			}
			b.insertTx(t, dbzRow{id: id2, aggType: "Order", aggID: "A-2", typ: "Created", payload: `{"n":2}`})
			select {
			case <-c.Done():
			case <-time.After(30 * time.Second):
				t.Fatalf("the connector did not stop at the UPDATE:\n%s", c.Log())
			}
			if c.Err() == nil || !strings.Contains(c.Log(), "route.on_update is fatal") {
				t.Fatalf("exit %v, want status 1 naming route.on_update:\n%s", c.Err(), c.Log())
			}
			cons := newConsumer(t, brokers, `outbox\.event\..*`)
			got := cons.waitFor(t, 1, 10*time.Second)
			got = cons.quiet(t, 500*time.Millisecond)
			if len(got) != 1 || got[0].Headers["id"] != id1 {
				t.Fatalf("before the stop: read %+v, want only %s", got, id1)
			}

			c = testenv.Start(t, config("warn"))
			got = cons.waitFor(t, 2, 20*time.Second)
			if len(got) < 2 || got[len(got)-1].Headers["id"] != id2 {
				t.Fatalf("after the restart with warn: read %+v, want %s next", got, id2)
			}
			if !strings.Contains(c.Log(), "outbox row UPDATEd: skipped (route.on_update: warn)") {
				t.Fatalf("no warning for the skipped UPDATE:\n%s", c.Log())
			}
			if err := c.Stop(15 * time.Second); err != nil {
				t.Fatalf("SIGTERM exit: %v", err)
			}
		})
	}
}

// TestDebeziumOnUpdateInsertOnlyPublication: with route.on_update set, a
// Postgres publication that does not publish UPDATEs would hide them, so
// the connector refuses to start and says how to fix it.
func TestDebeziumOnUpdateInsertOnlyPublication(t *testing.T) {
	b := dbzPostgres(t)
	_, brokers := testenv.Kafka(t)
	pub := testObjectName(t)
	if _, err := b.db.Exec("CREATE PUBLICATION " + pub + " FOR TABLE " + b.table + " WITH (publish = 'insert')"); err != nil {
		t.Fatal(err)
	}
	cfg := writeConfig(t, fmt.Sprintf(`
name: %s
source:
%sroute:
  preset: debezium
  on_update: warn
sink:
  type: kafka
  brokers: [%q]
checkpoint:
  type: file
  path: %q
`, strings.ReplaceAll(testObjectName(t), "_", "-"), b.source, brokers[0], filepath.Join(t.TempDir(), "checkpoint")))
	code, out := testenv.Run(t, 30*time.Second, nil, "run", "--config", cfg)
	if code != 1 || !strings.Contains(out, "does not publish updates") || !strings.Contains(out, "SET (publish = 'insert, update')") {
		t.Fatalf("exit %d, want 1 naming the publication fix:\n%s", code, out)
	}
}

// TestDebeziumConvertersNeedUsableTable: route.converters read the outbox
// table's column types at start; a column type they cannot write as
// Debezium does is a configuration error (exit 2) before anything is
// read or written.
func TestDebeziumConvertersNeedUsableTable(t *testing.T) {
	b := dbzMySQL(t)
	_, brokers := testenv.Kafka(t)
	cfg := writeConfig(t, fmt.Sprintf(`
name: %s
source:
%sroute:
  preset: debezium
  columns: {payload: body}
  converters: {key: string, value: string}
sink:
  type: kafka
  brokers: [%q]
checkpoint:
  type: file
  path: %q
`, strings.ReplaceAll(testObjectName(t), "_", "-"), b.source, brokers[0], filepath.Join(t.TempDir(), "checkpoint")))
	code, out := testenv.Run(t, 30*time.Second, nil, "run", "--config", cfg)
	if code != 2 || !strings.Contains(out, "StringConverter writes a binary column") {
		t.Fatalf("exit %d, want 2 explaining the StringConverter trap:\n%s", code, out)
	}
}

// TestDebeziumExpandFallbackWarns: with route.expand_json_payload, a JSON
// payload whose schema cannot be inferred (an array mixing numbers and
// strings) is sent as text, as Debezium's EventRouter does, and the
// connector says so as Debezium does ("JSON expansion failed"): one
// warning for a burst of such rows (rate-limited, with the row count),
// naming the first row, without its payload. The other rows are expanded.
func TestDebeziumExpandFallbackWarns(t *testing.T) {
	for _, be := range []struct {
		kind    string
		backend func(*testing.T) *dbzBackend
	}{{"mysql", dbzMySQL}, {"postgres", dbzPostgres}} {
		t.Run(be.kind, func(t *testing.T) {
			b := be.backend(t)
			_, brokers := testenv.Kafka(t)
			cfg := writeConfig(t, fmt.Sprintf(`
name: %s
source:
%sroute:
  preset: debezium
  expand_json_payload: true
  converters: {key: string, value: json, headers: simple, value_schemas: false}
sink:
  type: kafka
  brokers: [%q]
checkpoint:
  type: file
  path: %q
`, strings.ReplaceAll(testObjectName(t), "_", "-"), b.source, brokers[0], filepath.Join(t.TempDir(), "checkpoint")))
			c := testenv.Start(t, cfg)
			const mixed = 20
			var rows []dbzRow
			for i := range mixed {
				rows = append(rows, dbzRow{id: fmt.Sprintf("00000000-0000-4000-8000-%012d", i), aggType: "Order", aggID: "SO-1",
					typ: "OrderCreated", payload: `{"secret": [1, "hunter2"]}`})
			}
			rows = append(rows, dbzRow{id: "00000000-0000-4000-8000-999999999999", aggType: "Order", aggID: "SO-2",
				typ: "OrderCreated", payload: `{"n": 1}`})
			b.insertTx(t, rows...)
			recs := kcat(t, brokers[0], "outbox.event.Order", len(rows))
			if len(recs) != len(rows) {
				t.Fatalf("kcat read %d records, want %d", len(recs), len(rows))
			}
			for _, r := range recs {
				switch string(r.key) {
				case "SO-1":
					if v := string(r.value); !strings.HasPrefix(v, `"{`) || !strings.Contains(v, `hunter2`) {
						t.Fatalf("a mixed payload's value is %s, want the payload as a JSON string", v)
					}
				case "SO-2":
					if v := string(r.value); v != `{"n":1}` {
						t.Fatalf("the good payload's value is %s, want it expanded", v)
					}
				}
			}
			if err := c.Stop(15 * time.Second); err != nil {
				t.Fatalf("SIGTERM exit: %v", err)
			}
			var warns []string
			for _, line := range strings.Split(c.Log(), "\n") {
				if strings.Contains(line, "JSON expansion failed") {
					warns = append(warns, line)
				}
				if strings.Contains(line, "hunter2") {
					t.Fatalf("a log line shows the payload: %s", line)
				}
			}
			if len(warns) != 1 {
				t.Fatalf("%d \"JSON expansion failed\" lines for %d rows in one burst, want 1 (rate-limited):\n%s", len(warns), mixed, c.Log())
			}
			for _, want := range []string{`"level":"warn"`, `"message_id":"` + rows[0].id + `"`, `"rows":1`, "not a homogeneous array"} {
				if !strings.Contains(warns[0], want) {
					t.Fatalf("the warning lacks %s: %s", want, warns[0])
				}
			}
		})
	}
}
