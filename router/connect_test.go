package router

import (
	"encoding/hex"
	"errors"
	"math"
	"math/big"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
	"github.com/outbox-cdc/outbox-cdc/sink/kafka"
)

// The expected bytes in this file are derived by hand from the sources
// that define them, cited beside each case:
//
//   [JC]  apache/kafka connect/json/.../JsonConverter.java (asJsonSchema,
//         convertToJson, fromConnectData) and JsonSchema.java (field names,
//         the {"schema","payload"} envelope)
//   [JCC] apache/kafka connect/json/.../JsonConverterConfig.java
//         (schemas.enable default true, decimal.format default BASE64,
//         replace.null.with.default default true)
//   [SC]  apache/kafka connect/api/.../storage/StringConverter.java
//         (value.toString() in UTF-8, null stays null)
//   [SHC] apache/kafka connect/api/.../storage/SimpleHeaderConverter.java
//         and data/Values.java convertToString
//   [BAC] apache/kafka connect/runtime/.../converters/ByteArrayConverter.java
//   [BDC] debezium/debezium debezium-connect-plugins/.../converters/
//         BinaryDataConverter.java
//   [ER]  debezium/debezium debezium-connect-plugins/.../transforms/outbox/
//         EventRouterDelegate.java, EventRouterConfigDefinition.java,
//         JsonSchemaData.java
//   [DT]  debezium/debezium debezium-connector-common/.../data/Json.java
//         (io.debezium.data.Json, version 1), jdbc/JdbcValueConverters.java
//         and the binlog/postgres value converters (types, optional =
//         nullable, adaptive time precision)
//   [JK]  FasterXML/jackson-core io/CharTypes.java (sOutputEscapes128:
//         only '"', '\\' and control characters are escaped, \u00XX
//         upper-case) and json/UTF8JsonGenerator.java
//   [DS]  debezium/debezium-server debezium-server-core/.../producers/
//         DebeziumSerializationProducer.java (header format json by
//         default) and debezium-embedded/.../ConverterBuilder.java (the
//         header converter is JsonConverter)
//   [DH]  debezium/debezium debezium-connector-common/.../connector/common/
//         DebeziumHeaderProducer.java (connectorLogicalName, taskId,
//         connectorName as Connect STRING headers since 3.2.0; runId since
//         3.4.0), CdcSourceTaskContext.java (task id "0", connectorName
//         the connector's Module.name(): mysql, mariadb, postgresql, a
//         random UUID per task start), pipeline/EventDispatcher.java
//         (added to every record unless extended.headers.enabled=false,
//         3.2.1+), transforms/outbox/EventRouterDelegate.java (the routed
//         record keeps the source record's headers, id is added after them)
//   [CE]  cloudevents/spec cloudevents/spec.md, bindings/kafka-protocol-
//         binding.md, formats/json-format.md

func sp(s string) *string { return &s }

// pgOutbox is the outbox table of Debezium's documentation (Postgres),
// with a few more columns.
var pgOutbox = &Table{Flavor: FlavorPostgres, Schema: "public", Name: "outboxevent", Columns: []TableColumn{
	{Name: "id", Type: "uuid"},
	{Name: "aggregatetype", Type: "character varying(255)"},
	{Name: "aggregateid", Type: "character varying(255)"},
	{Name: "type", Type: "character varying(255)"},
	{Name: "payload", Type: "jsonb", Nullable: true},
	{Name: "tenant", Type: "character varying(64)", Nullable: true},
	{Name: "seq", Type: "integer"},
	{Name: "part", Type: "integer", Nullable: true},
	{Name: "version", Type: "integer", Nullable: true},
	{Name: "amount", Type: "numeric(10,2)", Nullable: true},
	{Name: "status", Type: "smallint", Default: sp("0")},
	{Name: "flag", Type: "boolean", Nullable: true},
	{Name: "created_at", Type: "timestamp(3) without time zone", Nullable: true},
	{Name: "occurred_at", Type: "timestamp with time zone", Nullable: true, Default: sp("now()")},
	{Name: "body", Type: "bytea", Nullable: true},
	{Name: "note", Type: "text", Nullable: true},
}}

// myOutbox is a MySQL outbox table with a BIGINT key column.
var myOutbox = &Table{Flavor: FlavorMySQL, Schema: "inventory", Name: "outbox", Columns: []TableColumn{
	{Name: "id", Type: "char(36)"},
	{Name: "aggregatetype", Type: "varchar(255)"},
	{Name: "aggregateid", Type: "bigint(20)"},
	{Name: "type", Type: "varchar(255)"},
	{Name: "payload", Type: "json", Nullable: true},
	{Name: "body", Type: "longblob", Nullable: true},
	{Name: "created_at", Type: "datetime(6)", Default: sp("CURRENT_TIMESTAMP(6)"), DefaultGenerated: true},
	{Name: "status", Type: "tinyint(4)", Default: sp("0")},
}}

func dbzEvent() outboxcdc.Event {
	return outboxcdc.Event{
		MessageID:     "7f1c2a4e-0b6d-4f7e-9a51-3c2d8e9f0a11",
		AggregateType: "Order",
		AggregateID:   "SO-1001",
		EventType:     "OrderCreated",
		Payload:       []byte(`{"orderNo": "SO-1001", "amount": 99.5}`),
		CommitTime:    commit,
		Origin:        "LSN 0/16B3748",
	}
}

func conv(key, value, headers string) Config {
	c := DefaultConfig()
	c.Preset = PresetDebezium
	c.Converters.Key, c.Converters.Value, c.Converters.Headers = key, value, headers
	return c
}

func with(c Config, f func(*Config)) Config {
	f(&c)
	return c
}

func evWith(f func(*outboxcdc.Event)) func() outboxcdc.Event {
	return func() outboxcdc.Event {
		ev := dbzEvent()
		f(&ev)
		return ev
	}
}

type connectCase struct {
	name  string
	cite  string
	table *Table
	cfg   Config
	ev    func() outboxcdc.Event
	// Expected bytes; "-" skips the check, nil-ness via the *Null flags.
	key, value string
	valueNull  bool
	headers    []string // "key=value", "key=<null>"
	partition  *int32   // explicit partition
	ts         time.Time
	err        string // substring of a BadRowError
}

func i32(n int32) *int32 { return &n }

const id = "7f1c2a4e-0b6d-4f7e-9a51-3c2d8e9f0a11"

// ctxHeaders is route.context_headers as a Debezium 3.4 PostgreSQL
// connector with topic.prefix dbserver1 sends them.
func ctxHeaders(c *Config) {
	c.ContextHeaders = ContextHeadersConfig{Enabled: true, LogicalName: "dbserver1", ConnectorName: "postgresql",
		RunID: true, RunIDValue: "3f0c5c2e-8a51-4d7e-b3a2-6c1d9e8f7a00"}
}

const runID = "3f0c5c2e-8a51-4d7e-b3a2-6c1d9e8f7a00"

var connectCases = []connectCase{
	{
		name: "context_headers_simple", table: pgOutbox, cfg: with(conv("json", "json", "simple"), ctxHeaders),
		cite: "[DH] four STRING context headers before the EventRouter's id; [SHC] a string header is its text",
		key:  "-", value: "-",
		headers: []string{"__debezium.context.connectorLogicalName=dbserver1", "__debezium.context.taskId=0",
			"__debezium.context.connectorName=postgresql", "__debezium.context.runId=" + runID, "id=" + id},
	},
	{
		name: "context_headers_json_debezium_server", table: pgOutbox, cfg: with(conv("json", "json", "json"), ctxHeaders),
		cite: "[DH] STRING_SCHEMA headers (not optional); [DS] JsonConverter for headers, schemas on; [JC] {schema,payload}",
		key:  "-", value: "-",
		headers: []string{
			`__debezium.context.connectorLogicalName={"schema":{"type":"string","optional":false},"payload":"dbserver1"}`,
			`__debezium.context.taskId={"schema":{"type":"string","optional":false},"payload":"0"}`,
			`__debezium.context.connectorName={"schema":{"type":"string","optional":false},"payload":"postgresql"}`,
			`__debezium.context.runId={"schema":{"type":"string","optional":false},"payload":"` + runID + `"}`,
			`id={"schema":{"type":"string","optional":false,"name":"io.debezium.data.Uuid","version":1},"payload":"` + id + `"}`,
		},
	},
	{
		name: "context_headers_json_no_schemas_3_2", table: myOutbox,
		cfg: with(conv("raw", "raw", "json"), func(c *Config) {
			ctxHeaders(c)
			c.Converters.HeaderSchemas = false
			c.ContextHeaders.ConnectorName, c.ContextHeaders.RunID = "mysql", false
		}),
		ev:   evWith(func(e *outboxcdc.Event) { e.AggregateID = "1001" }),
		cite: "[DH] Debezium 3.2 and 3.3 send no runId; [JC] without schemas a string header is a JSON string",
		key:  "1001", value: "-",
		headers: []string{`__debezium.context.connectorLogicalName="dbserver1"`, `__debezium.context.taskId="0"`,
			`__debezium.context.connectorName="mysql"`, `id="` + id + `"`},
	},
	{
		name: "json_schemas_string_key_jsonb_payload", table: pgOutbox, cfg: conv("json", "json", "simple"),
		cite: "[JCC] schemas.enable=true; [JC] envelope {schema,payload}, schema {type,optional[,name,version]}; " +
			"[DT] jsonb is io.debezium.data.Json v1, NOT NULL aggregateid is required, nullable payload optional; " +
			"[ER] header id carries the id column; [SHC] a string header is its text",
		key:     `{"schema":{"type":"string","optional":false},"payload":"SO-1001"}`,
		value:   `{"schema":{"type":"string","optional":true,"name":"io.debezium.data.Json","version":1},"payload":"{\"orderNo\": \"SO-1001\", \"amount\": 99.5}"}`,
		headers: []string{"id=" + id},
	},
	{
		name: "json_no_schemas", table: pgOutbox,
		cfg:  with(conv("json", "json", "simple"), func(c *Config) { c.Converters.KeySchemas, c.Converters.ValueSchemas = false, false }),
		cite: "[JC] convertToJsonWithoutEnvelope: a string is a JSON string literal, so the payload text is quoted and escaped",
		key:  `"SO-1001"`, value: `"{\"orderNo\": \"SO-1001\", \"amount\": 99.5}"`, headers: []string{"id=" + id},
	},
	{
		name: "string_converter", table: pgOutbox, cfg: conv("string", "string", "simple"),
		cite: "[SC] value.toString() in UTF-8: the column text as stored",
		key:  `SO-1001`, value: `{"orderNo": "SO-1001", "amount": 99.5}`, headers: []string{"id=" + id},
	},
	{
		name: "json_int64_key", table: myOutbox, cfg: conv("json", "json", "simple"),
		ev:   evWith(func(e *outboxcdc.Event) { e.AggregateID = "1001" }),
		cite: "[DT] BIGINT is int64; [JC] an int64 payload is a JSON number; MySQL JSON is io.debezium.data.Json",
		key:  `{"schema":{"type":"int64","optional":false},"payload":1001}`,
		value: `{"schema":{"type":"string","optional":true,"name":"io.debezium.data.Json","version":1},` +
			`"payload":"{\"orderNo\": \"SO-1001\", \"amount\": 99.5}"}`,
		headers: []string{"id=" + id},
	},
	{
		name: "json_int64_key_no_schema", table: myOutbox,
		cfg:  with(conv("json", "string", "simple"), func(c *Config) { c.Converters.KeySchemas = false }),
		ev:   evWith(func(e *outboxcdc.Event) { e.AggregateID = "1001" }),
		cite: "[JC] without schemas an int64 key is the bare number 1001 (not the string \"1001\", which hashes elsewhere)",
		key:  `1001`, value: `{"orderNo": "SO-1001", "amount": 99.5}`, headers: []string{"id=" + id},
	},
	{
		name: "jackson_escaping", table: pgOutbox,
		cfg: with(conv("json", "json", "simple"), func(c *Config) { c.Converters.KeySchemas, c.Converters.ValueSchemas = false, false }),
		ev: evWith(func(e *outboxcdc.Event) {
			e.AggregateID = "a\"b\\c/d\x7f"
			e.Payload = []byte("tab\there\nnl \x01 \x1f \u00e9 \u2028 <&>")
		}),
		cite: "[JK] only '\"', '\\\\' and control characters are escaped (\\t \\n short forms, \\u0001 with upper-case hex); '/', DEL, non-ASCII, U+2028, <&> are written as they are",
		key:  `"a\"b\\c/d` + "\x7f" + `"`, value: `"tab\there\nnl \u0001 \u001F ` + "\u00e9 \u2028 <&>" + `"`, headers: []string{"id=" + id},
	},
	{
		name: "bytes_payload_json", table: pgOutbox,
		cfg:  with(conv("string", "json", "simple"), func(c *Config) { c.ColumnNames.Payload = "body" }),
		ev:   evWith(func(e *outboxcdc.Event) { e.Payload = []byte{0x00, 0xff, 0x10, 'A'} }),
		cite: "[DT] bytea is bytes (binary.handling.mode=bytes); [JC] a bytes value is a binary node, written by [JK] as standard base64",
		key:  `SO-1001`, value: `{"schema":{"type":"bytes","optional":true},"payload":"AP8QQQ=="}`, headers: []string{"id=" + id},
	},
	{
		name: "bytes_payload_bytearray", table: pgOutbox,
		cfg:  with(conv("string", "bytearray", "simple"), func(c *Config) { c.ColumnNames.Payload = "body" }),
		ev:   evWith(func(e *outboxcdc.Event) { e.Payload = []byte{0x00, 0xff, 0x10, 'A'} }),
		cite: "[BAC] a byte[] value is written as it is",
		key:  `SO-1001`, value: "\x00\xff\x10A", headers: []string{"id=" + id},
	},
	{
		name: "bytes_payload_binarydata", table: myOutbox,
		cfg:  with(conv("json", "binary", "simple"), func(c *Config) { c.ColumnNames.Payload = "body" }),
		ev:   evWith(func(e *outboxcdc.Event) { e.AggregateID = "7"; e.Payload = []byte{0xca, 0xfe} }),
		cite: "[BDC] a BYTES schema's byte[] value passes through",
		key:  `{"schema":{"type":"int64","optional":false},"payload":7}`, value: "\xca\xfe", headers: []string{"id=" + id},
	},
	{
		name: "binarydata_json_delegate", table: pgOutbox,
		cfg:  with(conv("string", "binary", "simple"), func(c *Config) { c.Converters.Delegate = "json"; c.Converters.DelegateSchemas = false }),
		cite: "[BDC] a value that is not BYTES goes to delegate.converter.type (here JsonConverter without schemas)",
		key:  `SO-1001`, value: `"{\"orderNo\": \"SO-1001\", \"amount\": 99.5}"`, headers: []string{"id=" + id},
	},
	{
		name: "headers_simple_types", table: pgOutbox,
		cfg: with(conv("string", "string", "simple"), func(c *Config) {
			c.Headers = []string{"seq", "amount", "flag", "tenant", "created_at", "type:header:eventType"}
		}),
		ev: evWith(func(e *outboxcdc.Event) {
			e.Extra = []outboxcdc.Column{{Name: "seq", Value: []byte("42")}, {Name: "amount", Value: []byte("12.5")},
				{Name: "flag", Value: []byte("t")}, {Name: "tenant", Null: true}, {Name: "created_at", Value: []byte("2026-03-14 15:09:26.123")}}
		}),
		cite: "[SHC] Values.convertToString: numbers and booleans as Java's toString (numeric(10,2) keeps scale 2: 12.50), " +
			"a NULL is a null header; [DT] timestamp(3) is io.debezium.time.Timestamp, epoch milliseconds",
		key: `SO-1001`, value: `{"orderNo": "SO-1001", "amount": 99.5}`,
		headers: []string{"id=" + id, "seq=42", "amount=12.50", "flag=true", "tenant=<null>", "created_at=1773500966123", "eventType=OrderCreated"},
	},
	{
		name: "headers_json_debezium_server", table: pgOutbox,
		cfg: with(conv("json", "json", "json"), func(c *Config) { c.Headers = []string{"tenant", "status"} }),
		ev: evWith(func(e *outboxcdc.Event) {
			e.Extra = []outboxcdc.Column{{Name: "tenant", Null: true}, {Name: "status", Value: []byte("2")}}
		}),
		cite: "[DS] Debezium Server writes headers with JsonConverter, schemas on by default; [DT] uuid is io.debezium.data.Uuid v1; " +
			"[JC] a null optional value is null inside the envelope, a column default is the schema's \"default\"",
		key:   `{"schema":{"type":"string","optional":false},"payload":"SO-1001"}`,
		value: "-",
		headers: []string{
			`id={"schema":{"type":"string","optional":false,"name":"io.debezium.data.Uuid","version":1},"payload":"` + id + `"}`,
			`tenant={"schema":{"type":"string","optional":true},"payload":null}`,
			`status={"schema":{"type":"int16","optional":false,"default":0},"payload":2}`,
		},
	},
	{
		name: "headers_json_no_schemas", table: pgOutbox,
		cfg:  with(conv("raw", "raw", "json"), func(c *Config) { c.Converters.HeaderSchemas = false; c.Headers = []string{"tenant"} }),
		ev:   evWith(func(e *outboxcdc.Event) { e.Extra = []outboxcdc.Column{{Name: "tenant", Null: true}} }),
		cite: "[JC] without schemas a header is its JSON value: a quoted string; a NULL is the text null (fromConnectData returns null bytes only for a null schema)",
		key:  `SO-1001`, value: `{"orderNo": "SO-1001", "amount": 99.5}`, headers: []string{`id="` + id + `"`, `tenant=null`},
	},
	{
		name: "envelope_with_schema", table: pgOutbox,
		cfg: with(conv("json", "json", "simple"), func(c *Config) {
			c.Envelope = []string{"type:eventType", "status"}
			c.Converters.TopicPrefix = "dbserver1"
		}),
		ev: evWith(func(e *outboxcdc.Event) { e.Extra = []outboxcdc.Column{{Name: "status", Value: []byte("3")}} }),
		cite: "[ER] an envelope field makes the value a struct {payload, alias...} named <topic.prefix>.<schema>.<table>.<routing value>.Value " +
			"(getSchemaName over the after-schema's name); [JC] struct schema {type,fields,optional,name}, each field schema ends with \"field\"",
		key: `{"schema":{"type":"string","optional":false},"payload":"SO-1001"}`,
		value: `{"schema":{"type":"struct","fields":[` +
			`{"type":"string","optional":true,"name":"io.debezium.data.Json","version":1,"field":"payload"},` +
			`{"type":"string","optional":false,"field":"eventType"},` +
			`{"type":"int16","optional":false,"default":0,"field":"status"}],` +
			`"optional":false,"name":"dbserver1.public.outboxevent.Order.Value"},` +
			`"payload":{"payload":"{\"orderNo\": \"SO-1001\", \"amount\": 99.5}","eventType":"OrderCreated","status":3}}`,
		headers: []string{"id=" + id},
	},
	{
		name: "envelope_versioned_no_schemas", table: pgOutbox,
		cfg: with(conv("string", "json", "simple"), func(c *Config) {
			c.Envelope = []string{"type:envelope:eventType"}
			c.ColumnNames.SchemaVersion = "version"
			c.Converters.ValueSchemas = false
		}),
		ev:   evWith(func(e *outboxcdc.Event) { e.Extra = []outboxcdc.Column{{Name: "version", Value: []byte("3")}} }),
		cite: "[JC] without schemas the struct is a plain JSON object in field order",
		key:  `SO-1001`, value: `{"payload":"{\"orderNo\": \"SO-1001\", \"amount\": 99.5}","eventType":"OrderCreated"}`,
		headers: []string{"id=" + id},
	},
	{
		name: "expand_json_no_schemas", table: pgOutbox,
		cfg: with(conv("string", "json", "simple"), func(c *Config) {
			c.ExpandJSONPayload = true
			c.Converters.ValueSchemas = false
		}),
		ev: evWith(func(e *outboxcdc.Event) {
			e.Payload = []byte(`{"orderNo":"SO-1001","n":null,"e":[],"tags":["a","b"],"amount":1.50,"qty":3,"big":3000000000,` +
				`"addr":{"city":"Z\u00fcrich"},"orderNo":"SO-1002","esc":"\/ \u001f"}`)
		}),
		cite: "[ER] JsonSchemaData: nulls and empty arrays are left out, a duplicate key keeps its first place and last value, " +
			"1.50 is a double written by [JK] as Java's 1.5, 3000000000 a long; strings are re-escaped by [JK]",
		key:     `SO-1001`,
		value:   `{"orderNo":"SO-1002","tags":["a","b"],"amount":1.5,"qty":3,"big":3000000000,"addr":{"city":"Zürich"},"esc":"/ \u001F"}`,
		headers: []string{"id=" + id},
	},
	{
		name: "expand_json_schema", table: pgOutbox,
		cfg: with(conv("string", "json", "simple"), func(c *Config) { c.ExpandJSONPayload = true }),
		ev: evWith(func(e *outboxcdc.Event) {
			e.Payload = []byte(`{"id":7,"items":[{"sku":"a"},{"sku":"b","qty":2}],"ok":true}`)
		}),
		cite: "[ER] the schema is an optional struct named after the payload column, nested structs named payload.<field>, " +
			"an array of objects takes the union of their fields",
		key: `SO-1001`,
		value: `{"schema":{"type":"struct","fields":[` +
			`{"type":"int32","optional":true,"field":"id"},` +
			`{"type":"array","items":{"type":"struct","fields":[{"type":"string","optional":true,"field":"sku"},{"type":"int32","optional":true,"field":"qty"}],"optional":true,"name":"payload.items"},"optional":true,"field":"items"},` +
			`{"type":"boolean","optional":true,"field":"ok"}],"optional":true,"name":"payload"},` +
			`"payload":{"id":7,"items":[{"sku":"a","qty":null},{"sku":"b","qty":2}],"ok":true}}`,
		headers: []string{"id=" + id},
	},
	{
		name: "expand_json_not_json_unchanged", table: pgOutbox,
		cfg:  with(conv("string", "json", "simple"), func(c *Config) { c.ExpandJSONPayload = true; c.Converters.ValueSchemas = false }),
		ev:   evWith(func(e *outboxcdc.Event) { e.Payload = []byte(` {"leading":"space"}`) }),
		cite: "[ER] parseJsonPayload only parses text starting with { or [; otherwise the payload goes on unchanged",
		key:  `SO-1001`, value: `" {\"leading\":\"space\"}"`, headers: []string{"id=" + id},
	},
	{
		name: "expand_json_mixed_elements_unchanged", table: pgOutbox,
		cfg: with(conv("string", "json", "simple"), func(c *Config) { c.ExpandJSONPayload = true; c.Converters.ValueSchemas = false }),
		ev:  evWith(func(e *outboxcdc.Event) { e.Payload = []byte(`{"items":[1,"two"]}`) }),
		cite: "[ER] JsonSchemaData.getFirstArrayElement throws \"Field is not a homogenous array\" while the schema is inferred; " +
			"EventRouterDelegate catches it, logs \"JSON expansion failed\" and sends the payload unchanged",
		key: `SO-1001`, value: `"{\"items\":[1,\"two\"]}"`, headers: []string{"id=" + id},
	},
	{
		name: "expand_json_mixed_numbers_unchanged", table: pgOutbox,
		cfg:  with(conv("string", "json", "simple"), func(c *Config) { c.ExpandJSONPayload = true; c.Converters.ValueSchemas = false }),
		ev:   evWith(func(e *outboxcdc.Event) { e.Payload = []byte(`{"n":[1,2.5]}`) }),
		cite: "[ER] getFirstArrayElement throws for an array of an int and a double (different number types): sent unchanged with the warning",
		key:  `SO-1001`, value: `"{\"n\":[1,2.5]}"`, headers: []string{"id=" + id},
	},
	{
		name: "expand_json_top_level_array_is_bad", table: pgOutbox,
		cfg:  with(conv("string", "json", "simple"), func(c *Config) { c.ExpandJSONPayload = true }),
		ev:   evWith(func(e *outboxcdc.Event) { e.Payload = []byte(`[1,2]`) }),
		cite: "[ER] an array payload gets an array schema but toConnectData builds a Struct from it: the converter then throws and the task stops",
		err:  "top-level JSON array",
	},
	{
		name: "tombstone_whitespace_payload", table: pgOutbox,
		cfg:  with(conv("json", "json", "simple"), func(c *Config) { c.TombstoneOnEmptyPayload = true; c.ColumnNames.Payload = "note" }),
		ev:   evWith(func(e *outboxcdc.Event) { e.Payload = []byte(" \t\n ") }),
		cite: "[ER] isDeleteEvent: payload.toString().trim().isEmpty(); then value and schema are null, which [JC] fromConnectData writes as null",
		key:  `{"schema":{"type":"string","optional":false},"payload":"SO-1001"}`, valueNull: true, headers: []string{"id=" + id},
	},
	{
		name: "timestamp_and_partition_columns", table: pgOutbox,
		cfg: with(conv("string", "string", "simple"), func(c *Config) {
			c.ColumnNames.Timestamp = "created_at"
			c.PartitionColumn = "part"
		}),
		ev: evWith(func(e *outboxcdc.Event) {
			e.Extra = []outboxcdc.Column{{Name: "part", Value: []byte("4")}, {Name: "created_at", Value: []byte("2026-03-14 15:09:26.123")}}
		}),
		cite:      "[ER] table.field.event.timestamp: the record timestamp is the column's epoch milliseconds; a partition placement sets the record's partition",
		key:       `SO-1001`,
		value:     `{"orderNo": "SO-1001", "amount": 99.5}`,
		headers:   []string{"id=" + id},
		partition: i32(4),
		ts:        time.Date(2026, 3, 14, 15, 9, 26, 123e6, time.UTC),
	},
	{
		name: "timestamp_column_null_falls_back", table: pgOutbox,
		cfg:  with(conv("string", "string", "simple"), func(c *Config) { c.ColumnNames.Timestamp = "created_at" }),
		ev:   evWith(func(e *outboxcdc.Event) { e.Extra = []outboxcdc.Column{{Name: "created_at", Null: true}} }),
		cite: "[ER] getEventTimestampMs: a NULL column falls back to the event's own time",
		key:  `SO-1001`, value: `{"orderNo": "SO-1001", "amount": 99.5}`, headers: []string{"id=" + id}, ts: commit,
	},
	{
		name: "regex_routing", table: pgOutbox,
		cfg: with(conv("string", "string", "simple"), func(c *Config) {
			c.TopicRegex = `(?<tenant>[a-z]+)\.(?<agg>.*)`
			c.TopicReplacement = `${tenant}.events.$2_v1`
		}),
		ev:   evWith(func(e *outboxcdc.Event) { e.AggregateType = "acme.Order" }),
		cite: "[ER] RegexRouter: a whole-value match is replaced with Matcher.replaceFirst (${name}, $n)",
		key:  `SO-1001`, value: `{"orderNo": "SO-1001", "amount": 99.5}`, headers: []string{"id=" + id},
	},
	{
		name: "decimal_base64_and_numeric", table: pgOutbox,
		cfg: with(conv("json", "string", "simple"), func(c *Config) { c.ColumnNames.AggregateID = "amount"; c.Converters.KeySchemas = true }),
		ev:  evWith(func(e *outboxcdc.Event) { e.AggregateID = "-1.5" }),
		cite: "[DT] numeric(10,2) is org.apache.kafka.connect.data.Decimal with scale and precision parameters; " +
			"[JC] with decimal.format BASE64 the unscaled -150 is two's complement FF6A, base64 /2o=",
		key: `{"schema":{"type":"bytes","optional":true,"name":"org.apache.kafka.connect.data.Decimal","version":1,` +
			`"parameters":{"scale":"2","connect.decimal.precision":"10"}},"payload":"/2o="}`,
		value: "-", headers: []string{"id=" + id},
	},
	{
		name: "zoned_timestamp_default_placeholder", table: pgOutbox,
		cfg: with(conv("string", "string", "json"), func(c *Config) { c.Headers = []string{"occurred_at"} }),
		ev: evWith(func(e *outboxcdc.Event) {
			e.Extra = []outboxcdc.Column{{Name: "occurred_at", Value: []byte("2026-03-14 15:09:26.5+01")}}
		}),
		cite: "[DT] timestamptz is io.debezium.time.ZonedTimestamp, ISO-8601 in UTC; Postgres' now() default becomes the epoch placeholder",
		key:  `SO-1001`, value: "-",
		headers: []string{
			`id={"schema":{"type":"string","optional":false,"name":"io.debezium.data.Uuid","version":1},"payload":"` + id + `"}`,
			`occurred_at={"schema":{"type":"string","optional":true,"name":"io.debezium.time.ZonedTimestamp","version":1,"default":"1970-01-01T00:00:00Z"},"payload":"2026-03-14T14:09:26.5Z"}`,
		},
	},
	{
		name: "cloudevents_structured", table: nil,
		cfg: with(DefaultConfig(), func(c *Config) {
			c.Preset = PresetDebezium
			c.CloudEvents = CloudEventsConfig{Mode: CloudEventsStructured, Source: "/outbox-cdc/orders", DataContentType: "application/json"}
		}),
		cite: "[CE] JSON format: specversion, id, source, type, subject, time, datacontenttype, data (a JSON payload embedded); " +
			"structured mode's content-type is application/cloudevents+json",
		key: `SO-1001`,
		value: `{"specversion":"1.0","id":"` + id + `","source":"/outbox-cdc/orders","type":"OrderCreated","subject":"SO-1001",` +
			`"time":"2026-03-14T15:09:26Z","datacontenttype":"application/json","data":{"orderNo": "SO-1001", "amount": 99.5}}`,
		headers: []string{"content-type=application/cloudevents+json; charset=UTF-8", "id=" + id},
	},
	{
		name: "cloudevents_binary", table: nil,
		cfg: with(DefaultConfig(), func(c *Config) {
			c.Preset = PresetDebezium
			c.CloudEvents = CloudEventsConfig{Mode: CloudEventsBinary, Source: "/outbox-cdc/orders"}
		}),
		cite: "[CE] Kafka binary mode: every attribute a ce_ header, datacontenttype the content-type header, the payload the value",
		key:  `SO-1001`, value: `{"orderNo": "SO-1001", "amount": 99.5}`,
		headers: []string{"ce_specversion=1.0", "ce_id=" + id, "ce_source=/outbox-cdc/orders", "ce_type=OrderCreated",
			"ce_subject=SO-1001", "ce_time=2026-03-14T15:09:26Z", "content-type=application/json", "id=" + id},
	},
	{
		name: "cloudevents_structured_text_data", table: nil,
		cfg: with(DefaultConfig(), func(c *Config) {
			c.CloudEvents = CloudEventsConfig{Mode: CloudEventsStructured, Source: "urn:outbox:orders", DataContentType: "text/plain"}
		}),
		ev:   evWith(func(e *outboxcdc.Event) { e.Payload = []byte("plain \"text\"") }),
		cite: "[CE] JSON format: data that is not JSON is a JSON string",
		key:  `SO-1001`,
		value: `{"specversion":"1.0","id":"` + id + `","source":"urn:outbox:orders","type":"OrderCreated","subject":"SO-1001",` +
			`"time":"2026-03-14T15:09:26Z","datacontenttype":"text/plain","data":"plain \"text\""}`,
		headers: []string{"content-type=application/cloudevents+json; charset=UTF-8", "id=" + id, "event_type=OrderCreated", "aggregate_type=Order"},
	},
	{
		name: "partition_column_negative_is_bad", table: pgOutbox,
		cfg:  with(conv("string", "string", "simple"), func(c *Config) { c.PartitionColumn = "part" }),
		ev:   evWith(func(e *outboxcdc.Event) { e.Extra = []outboxcdc.Column{{Name: "part", Value: []byte("-1")}} }),
		cite: "Kafka's ProducerRecord refuses a negative partition (the task would fail): the row is bad",
		err:  "not a partition number",
	},
	{
		name: "timestamp_column_unreadable_is_bad", table: pgOutbox,
		cfg: with(conv("string", "string", "simple"), func(c *Config) { c.ColumnNames.Timestamp = "created_at" }),
		ev: evWith(func(e *outboxcdc.Event) {
			e.Extra = []outboxcdc.Column{{Name: "created_at", Value: []byte("yesterday")}}
		}),
		cite: "a timestamp column value that is no date and time: the row is bad, not stamped with another time",
		err:  "is not a date and time",
	},
	{
		name: "missing_column_error_is_bad", table: pgOutbox,
		cfg:  with(conv("string", "string", "simple"), func(c *Config) { c.Headers = []string{"tenant"}; c.OnMissingColumn = "error" }),
		cite: "[ER] table.field.additional.missing=error: a header column missing from the row stops the task; here the row is bad",
		err:  "route.on_missing_column is error",
	},
	{
		name: "missing_column_ignore_drops_header", table: pgOutbox,
		cfg:  with(conv("string", "string", "simple"), func(c *Config) { c.Headers = []string{"tenant"} }),
		cite: "[ER] table.field.additional.missing=ignore: the header is left out",
		key:  `SO-1001`, value: "-", headers: []string{"id=" + id},
	},
	{
		name: "cloudevents_json_type_but_not_json_is_bad", table: nil,
		cfg: with(DefaultConfig(), func(c *Config) {
			c.CloudEvents = CloudEventsConfig{Mode: CloudEventsBinary, Source: "/x", DataContentType: "application/json"}
		}),
		ev:   evWith(func(e *outboxcdc.Event) { e.Payload = []byte("not json") }),
		cite: "[CE] datacontenttype says JSON, so a payload that is not JSON would mislead every consumer: the row is bad",
		err:  "is not valid JSON",
	},
	{
		name: "cloudevents_empty_type_is_bad", table: nil,
		cfg: with(DefaultConfig(), func(c *Config) {
			c.CloudEvents = CloudEventsConfig{Mode: CloudEventsStructured, Source: "/x"}
		}),
		ev:   evWith(func(e *outboxcdc.Event) { e.EventType = "" }),
		cite: "[CE] type is a required attribute and must be a non-empty string",
		err:  "a CloudEvent needs a type",
	},
	{
		name: "value_type_changed_is_bad", table: myOutbox, cfg: conv("json", "string", "simple"),
		cite: "a key that no longer parses as the BIGINT read at start: the row is bad, with the remedy",
		err:  "after an ALTER TABLE restart the connector",
	},
}

func TestConnectConverters(t *testing.T) {
	for _, tc := range connectCases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.cite == "" {
				t.Fatal("every case cites the source of its expected bytes")
			}
			// The goldens show the commit time (route.timestamp: commit);
			// the default, production time, is TestRouteTimestamp's.
			tc.cfg.Timestamp = TimestampCommit
			r, err := NewForTable(tc.cfg, tc.table)
			if err != nil {
				t.Fatalf("NewForTable: %v", err)
			}
			mk := tc.ev
			if mk == nil {
				mk = dbzEvent
			}
			ev := mk()
			rec, err := r.Route(&ev)
			if tc.err != "" {
				var bad *outboxcdc.BadRowError
				if !errors.As(err, &bad) || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("Route = %v, want a bad row containing %q", err, tc.err)
				}
				checkGolden(t, filepath.Join("testdata", "connect", tc.name+".json"), golden{Error: err.Error()})
				return
			}
			if err != nil {
				t.Fatalf("Route: %v", err)
			}
			if tc.key != "-" && string(rec.Key) != tc.key {
				t.Errorf("key\n got %s\nwant %s", rec.Key, tc.key)
			}
			switch {
			case tc.valueNull:
				if rec.Value != nil {
					t.Errorf("value %q, want null (tombstone)", rec.Value)
				}
			case tc.value != "-" && string(rec.Value) != tc.value:
				t.Errorf("value\n got %s\nwant %s", rec.Value, tc.value)
			}
			if tc.headers != nil {
				var got []string
				for _, h := range rec.Headers {
					v := string(h.Value)
					if h.Value == nil {
						v = "<null>"
					}
					got = append(got, h.Key+"="+v)
				}
				if strings.Join(got, "\n") != strings.Join(tc.headers, "\n") {
					t.Errorf("headers\n got %q\nwant %q", got, tc.headers)
				}
			}
			if (tc.partition == nil) != (rec.Partition == nil) || (tc.partition != nil && *tc.partition != *rec.Partition) {
				t.Errorf("partition %v, want %v", rec.Partition, tc.partition)
			}
			if !tc.ts.IsZero() && !rec.Timestamp.Equal(tc.ts) {
				t.Errorf("timestamp %s, want %s", rec.Timestamp, tc.ts)
			}
			if tc.cfg.CloudEvents.Mode != "" && tc.cfg.CloudEvents.Mode != CloudEventsOff {
				if err := validCloudEvent(rec); err != nil {
					t.Errorf("not a valid CloudEvents 1.0 event: %v", err)
				}
			}
			checkGolden(t, filepath.Join("testdata", "connect", tc.name+".json"), golden{Record: renderConnect(rec)})
		})
	}
}

// renderConnect is the golden form: bytes as text (hex when not UTF-8),
// plus the partition Kafka's Java producer picks for the key bytes over 6
// partitions (or the record's own), which is where a consumer finds it.
func renderConnect(r outboxcdc.Record) *jsonRecord {
	j := render(r)
	switch {
	case r.Partition != nil:
		j.Partition = r.Partition
	case r.Key != nil:
		j.Partition = i32(kafka.JavaPartition(r.Key, 6))
	}
	return j
}

// TestConnectPartitionFollowsKeyBytes: the partition is murmur2 of the
// serialized key, so the same aggregate id lands elsewhere under
// JsonConverter than under StringConverter — which is why the converter
// must match the one Debezium ran with.
func TestConnectPartitionFollowsKeyBytes(t *testing.T) {
	ev := dbzEvent()
	keys := map[string][]byte{}
	for _, c := range []Config{conv("string", "string", "simple"), conv("json", "string", "simple"),
		with(conv("json", "string", "simple"), func(c *Config) { c.Converters.KeySchemas = false })} {
		r, err := NewForTable(c, pgOutbox)
		if err != nil {
			t.Fatal(err)
		}
		rec, err := r.Route(&ev)
		if err != nil {
			t.Fatal(err)
		}
		keys[c.Converters.Key+"/"+map[bool]string{true: "schemas", false: "plain"}[c.Converters.KeySchemas]] = rec.Key
	}
	// Hand-checked: Java's Utils.murmur2 over these exact bytes.
	want := map[string]string{
		"string/schemas": `SO-1001`,
		"json/schemas":   `{"schema":{"type":"string","optional":false},"payload":"SO-1001"}`,
		"json/plain":     `"SO-1001"`,
	}
	parts := map[int32]bool{}
	for k, w := range want {
		if string(keys[k]) != w {
			t.Fatalf("%s key %q, want %q", k, keys[k], w)
		}
		parts[kafka.JavaPartition(keys[k], 12)] = true
	}
	if len(parts) < 2 {
		t.Fatalf("the three key encodings of one aggregate all hash to one partition of 12; pick another id for this test")
	}
}

// TestConnectRefusesTraps: settings whose Debezium result is unusable are
// refused with the reason, not reproduced.
func TestConnectRefusesTraps(t *testing.T) {
	cases := []struct {
		name  string
		cfg   Config
		table *Table
		want  string
	}{
		{"expand under StringConverter", with(conv("string", "string", "simple"), func(c *Config) { c.ExpandJSONPayload = true }), pgOutbox, "Struct{...}"},
		{"envelope under StringConverter", with(conv("string", "string", "simple"), func(c *Config) { c.Envelope = []string{"type"} }), pgOutbox, "Struct{...}"},
		{"envelope with raw value", with(DefaultConfig(), func(c *Config) { c.Envelope = []string{"type"} }), nil, "needs route.converters.value: json"},
		{"bytes under StringConverter", with(conv("string", "string", "simple"), func(c *Config) { c.ColumnNames.Payload = "body" }), pgOutbox, "[B@"},
		{"text under ByteArrayConverter", conv("string", "bytearray", "simple"), pgOutbox, "Invalid schema type for ByteArrayConverter"},
		{"text under BinaryData without delegate", conv("string", "binary", "simple"), pgOutbox, "delegate"},
		{"int64 partition column", with(conv("string", "string", "simple"), func(c *Config) { c.PartitionColumn = "aggregateid" }), myOutbox, "32-bit integer"},
		{"timestamp column of an int", with(conv("string", "string", "simple"), func(c *Config) { c.ColumnNames.Timestamp = "seq" }), pgOutbox, "DATETIME or TIMESTAMP"},
		{"envelope schema needs topic prefix", with(conv("string", "json", "simple"), func(c *Config) { c.Envelope = []string{"type"} }), pgOutbox, "topic_prefix"},
		{"unknown column", with(conv("string", "string", "simple"), func(c *Config) { c.ColumnNames.AggregateID = "nope" }), pgOutbox, `column "nope" is not in table`},
		{"unsupported type", conv("string", "string", "simple"), &Table{Flavor: FlavorPostgres, Schema: "s", Name: "t",
			Columns: []TableColumn{{Name: "aggregateid", Type: "point"}, {Name: "payload", Type: "text"}, {Name: "id", Type: "text"}}}, "has type point"},
		{"numeric without scale", conv("string", "string", "simple"), &Table{Flavor: FlavorPostgres, Schema: "s", Name: "t",
			Columns: []TableColumn{{Name: "aggregateid", Type: "numeric"}, {Name: "payload", Type: "text"}, {Name: "id", Type: "text"}}}, "variable-scale"},
		{"cloudevents with a value converter", with(conv("string", "json", "simple"), func(c *Config) {
			c.CloudEvents = CloudEventsConfig{Mode: CloudEventsStructured, Source: "/x"}
		}), pgOutbox, "leave route.converters.value raw"},
		{"expression default in a schema", conv("json", "string", "simple"), &Table{Flavor: FlavorMySQL, Schema: "s", Name: "t",
			Columns: []TableColumn{{Name: "aggregateid", Type: "varchar(36)", Default: sp("uuid()"), DefaultGenerated: true}, {Name: "payload", Type: "text"}, {Name: "id", Type: "text"}}}, "is an expression"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewForTable(tc.cfg, tc.table)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("NewForTable = %v, want an error containing %q", err, tc.want)
			}
		})
	}
	// Without the table, New says what it needs.
	if _, err := New(conv("json", "json", "simple")); err == nil || !strings.Contains(err.Error(), "column types") {
		t.Fatalf("New without the table: %v", err)
	}
	// With every converted column typed by hand, no table is needed.
	c := with(conv("json", "json", "raw"), func(c *Config) { c.Converters.ColumnTypes = []string{"aggregateid=string", "payload=json?"} })
	if c.NeedsTable() {
		t.Fatal("NeedsTable with every converted column overridden")
	}
	r, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	ev := dbzEvent()
	rec, err := r.Route(&ev)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"schema":{"type":"string","optional":true,"name":"io.debezium.data.Json","version":1},"payload":"{\"orderNo\": \"SO-1001\", \"amount\": 99.5}"}`; string(rec.Value) != want {
		t.Fatalf("value %s, want %s", rec.Value, want)
	}
}

// validCloudEvent checks a record against CloudEvents 1.0's required
// attributes and the Kafka binding ([CE]): specversion "1.0", non-empty
// id and type, a non-empty URI-reference source, an RFC 3339 time,
// attribute names of lower-case letters and digits.
func validCloudEvent(r outboxcdc.Record) error {
	attrs := map[string]string{}
	var structured bool
	for _, h := range r.Headers {
		if h.Key == "content-type" && strings.HasPrefix(string(h.Value), "application/cloudevents+json") {
			structured = true
		}
		if name, ok := strings.CutPrefix(h.Key, "ce_"); ok {
			attrs[name] = string(h.Value)
		}
		if h.Key == "content-type" {
			attrs["datacontenttype"] = string(h.Value)
		}
	}
	if structured {
		var body map[string]any
		if err := jsonUnmarshal(r.Value, &body); err != nil {
			return err
		}
		attrs = map[string]string{}
		for k, v := range body {
			if k == "data" || k == "data_base64" {
				continue
			}
			s, ok := v.(string)
			if !ok {
				return errors.New("attribute " + k + " is not a string")
			}
			attrs[k] = s
		}
	}
	for _, req := range []string{"specversion", "id", "source", "type"} {
		if attrs[req] == "" {
			return errors.New("required attribute " + req + " missing or empty")
		}
	}
	if attrs["specversion"] != "1.0" {
		return errors.New("specversion is not 1.0")
	}
	for k := range attrs {
		if len(k) > 20 || strings.Trim(k, "abcdefghijklmnopqrstuvwxyz0123456789") != "" {
			return errors.New("attribute name " + k + " is not lower-case letters and digits")
		}
	}
	if t, ok := attrs["time"]; ok {
		if _, err := time.Parse(time.RFC3339Nano, t); err != nil {
			return err
		}
	}
	return nil
}

func TestJavaNumberFormats(t *testing.T) {
	// Java's Double.toString / Float.toString (JDK 19+ javadoc: plain for
	// 10^-3 <= |d| < 10^7, else computerized scientific notation) and
	// BigDecimal.toString (javadoc: scientific when the scale is negative
	// or the adjusted exponent is below -6).
	doubles := map[float64]string{
		1: "1.0", 100: "100.0", 99.5: "99.5", 1e7: "1.0E7", 1.5e7: "1.5E7", 9999999: "9999999.0",
		0.001: "0.001", 0.0001: "1.0E-4", 123456789.123: "1.23456789123E8", -2.5: "-2.5",
		math.Copysign(0, -1): "-0.0", 0: "0.0", math.Inf(1): "Infinity", math.NaN(): "NaN", 1e300: "1.0E300", 0.1: "0.1",
	}
	for f, want := range doubles {
		if got := javaDouble(f); got != want {
			t.Errorf("javaDouble(%v) = %s, want %s", f, got, want)
		}
	}
	if got := javaFloat(float32(0.1)); got != "0.1" {
		t.Errorf("javaFloat(0.1) = %s", got)
	}
	decs := []struct {
		unscaled int64
		scale    int32
		want     string
	}{
		{12345, 2, "123.45"}, {1, 7, "1E-7"}, {1, 6, "0.000001"}, {123, -3, "1.23E+5"}, {-150, 2, "-1.50"}, {0, 2, "0.00"}, {5, 0, "5"},
	}
	for _, d := range decs {
		if got := javaBigDecimal(decimal{big.NewInt(d.unscaled), d.scale}); got != d.want {
			t.Errorf("BigDecimal(%d, %d) = %s, want %s", d.unscaled, d.scale, got, d.want)
		}
	}
	// BigInteger.toByteArray: minimal two's complement.
	for n, want := range map[int64]string{0: "00", 127: "7f", 128: "0080", -1: "ff", -128: "80", -129: "ff7f", -150: "ff6a", 255: "00ff"} {
		if got := hex.EncodeToString(twosComplement(big.NewInt(n))); got != want {
			t.Errorf("toByteArray(%d) = %s, want %s", n, got, want)
		}
	}
}

func TestJacksonStringEscapes(t *testing.T) {
	// [JK]: every control character is escaped, others never are.
	for c := 0; c < 0x80; c++ {
		got := string(appendJSONString(nil, string(rune(c))))
		switch {
		case c == '"':
			if got != `"\""` {
				t.Errorf("%q", got)
			}
		case c == '\\':
			if got != `"\\"` {
				t.Errorf("%q", got)
			}
		case c < 0x20:
			short := map[int]string{8: `\b`, 9: `\t`, 10: `\n`, 12: `\f`, 13: `\r`}[c]
			if short == "" {
				short = `\u00` + strings.ToUpper(hex.EncodeToString([]byte{byte(c)}))
			}
			if got != `"`+short+`"` {
				t.Errorf("0x%02x: %s, want %s", c, got, short)
			}
		default:
			if got != `"`+string(rune(c))+`"` {
				t.Errorf("0x%02x escaped: %s", c, got)
			}
		}
	}
	if got := string(appendJSONString(nil, "a\xffb")); got != "\"a\uFFFDb\"" || !utf8.ValidString(got) {
		t.Errorf("invalid UTF-8: %q", got)
	}
}

func TestTopicRegexJavaReplacement(t *testing.T) {
	cases := []struct {
		regex, repl, in, want string
	}{
		{"", "", "Order", "outbox.event.Order"}, // Debezium's defaults [ER]
		{`(.*)`, `t.$1`, "x", "t.x"},
		{`(a)(b)(c)(d)(e)(f)(g)(h)(i)(j)(k)`, `$11-$12`, "abcdefghijk", "k-a2"}, // Java: "$12" is group 1 then "2" when there is no group 12
		{`ord(.*)`, `x$1`, "customer", "customer"},                              // no whole match: the value is the topic
		{`(o)`, `\$$1`, "o", "$o"},
		{`(?<n>\d+)-(?<rest>.*)`, `${rest}.${n}`, "42-orders", "orders.42"},
		{`a|ab`, `X`, "ab", "Xb"}, // matches() takes ab, replaceFirst's find takes a
	}
	for _, c := range cases {
		tr, err := newTopicRegex(c.regex, c.repl)
		if err != nil {
			t.Fatalf("%q %q: %v", c.regex, c.repl, err)
		}
		if got := tr.route(c.in); got != c.want {
			t.Errorf("regex %q repl %q on %q = %q, want %q", c.regex, c.repl, c.in, got, c.want)
		}
	}
	for _, bad := range []struct{ regex, repl, want string }{
		{`(?=x)`, "a", "look-around"},
		{`(a)`, "$2", "no group 2"},
		{`(a)`, "${x}", "no group with name"},
		{`(a)`, `a\`, "escaped"},
	} {
		if _, err := newTopicRegex(bad.regex, bad.repl); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%q %q: %v, want %q", bad.regex, bad.repl, err, bad.want)
		}
	}
}

func TestColumnTypes(t *testing.T) {
	// [DT] Debezium's default mapping (adaptive time precision, precise
	// decimals, bytes for binary, long for BIGINT UNSIGNED).
	cases := []struct {
		flavor, typ string
		nullable    bool
		want        string
	}{
		{FlavorMySQL, "varchar(255)", false, `{"type":"string","optional":false}`},
		{FlavorMySQL, "json", true, `{"type":"string","optional":true,"name":"io.debezium.data.Json","version":1}`},
		{FlavorMariaDB, "longtext", true, `{"type":"string","optional":true}`},
		{FlavorMySQL, "tinyint(4)", false, `{"type":"int8","optional":false}`},
		{FlavorMySQL, "tinyint(3) unsigned", false, `{"type":"int16","optional":false}`},
		{FlavorMySQL, "smallint(5) unsigned", false, `{"type":"int32","optional":false}`},
		{FlavorMySQL, "int(10) unsigned", false, `{"type":"int64","optional":false}`},
		{FlavorMySQL, "bigint(20) unsigned", false, `{"type":"int64","optional":false}`},
		{FlavorMySQL, "datetime", false, `{"type":"int64","optional":false,"name":"io.debezium.time.Timestamp","version":1}`},
		{FlavorMySQL, "datetime(6)", false, `{"type":"int64","optional":false,"name":"io.debezium.time.MicroTimestamp","version":1}`},
		{FlavorMySQL, "timestamp", true, `{"type":"string","optional":true,"name":"io.debezium.time.ZonedTimestamp","version":1}`},
		{FlavorMySQL, "enum('a','b''c')", false, `{"type":"string","optional":false,"name":"io.debezium.data.Enum","version":1,"parameters":{"allowed":"a,b'c"}}`},
		{FlavorMySQL, "blob", true, `{"type":"bytes","optional":true}`},
		{FlavorMySQL, "decimal(10,2)", false, `{"type":"bytes","optional":false,"name":"org.apache.kafka.connect.data.Decimal","version":1,"parameters":{"scale":"2","connect.decimal.precision":"10"}}`},
		{FlavorPostgres, "uuid", false, `{"type":"string","optional":false,"name":"io.debezium.data.Uuid","version":1}`},
		{FlavorPostgres, "jsonb", true, `{"type":"string","optional":true,"name":"io.debezium.data.Json","version":1}`},
		{FlavorPostgres, "timestamp without time zone", false, `{"type":"int64","optional":false,"name":"io.debezium.time.MicroTimestamp","version":1}`},
		{FlavorPostgres, "timestamp(3) without time zone", false, `{"type":"int64","optional":false,"name":"io.debezium.time.Timestamp","version":1}`},
		{FlavorPostgres, "timestamp(6) with time zone", false, `{"type":"string","optional":false,"name":"io.debezium.time.ZonedTimestamp","version":1}`},
		{FlavorPostgres, "bigint", false, `{"type":"int64","optional":false}`},
		{FlavorPostgres, "boolean", true, `{"type":"boolean","optional":true}`},
		{FlavorPostgres, "double precision", true, `{"type":"double","optional":true}`},
		{FlavorPostgres, "real", true, `{"type":"float","optional":true}`},
		{FlavorPostgres, "date", true, `{"type":"int32","optional":true,"name":"io.debezium.time.Date","version":1}`},
	}
	for _, c := range cases {
		ct, err := columnType(c.flavor, &TableColumn{Name: "c", Type: c.typ, Nullable: c.nullable}, "precise")
		if err != nil {
			t.Errorf("%s %s: %v", c.flavor, c.typ, err)
			continue
		}
		if got := string(appendJSONSchema(nil, ct.schema, "", decimalBase64)); got != c.want {
			t.Errorf("%s %s:\n got %s\nwant %s", c.flavor, c.typ, got, c.want)
		}
	}
	// Defaults: Debezium's rules for literals and function placeholders.
	defaults := []struct {
		flavor, typ, def string
		generated        bool
		want             string // the default's JSON, "" for none
	}{
		{FlavorMariaDB, "varchar(10)", "'it''s'", false, `"it's"`},
		{FlavorMariaDB, "int(11)", "0", false, `0`},
		{FlavorMariaDB, "varchar(10)", "NULL", false, ``},
		{FlavorMariaDB, "datetime", "current_timestamp()", false, `0`},
		{FlavorMySQL, "varchar(10)", "abc", false, `"abc"`},
		{FlavorMySQL, "datetime(3)", "CURRENT_TIMESTAMP(3)", true, `0`},
		{FlavorPostgres, "character varying(10)", "'x'::character varying", false, `"x"`},
		{FlavorPostgres, "bigint", "nextval('t_id_seq'::regclass)", false, `0`},
		{FlavorPostgres, "uuid", "gen_random_uuid()", false, `"00000000-0000-0000-0000-000000000000"`},
		{FlavorPostgres, "jsonb", "'{}'::jsonb", false, `"{}"`},
		{FlavorPostgres, "boolean", "true", false, `true`},
		{FlavorPostgres, "timestamp with time zone", "now()", false, `"1970-01-01T00:00:00Z"`},
	}
	for _, d := range defaults {
		ct, err := columnType(d.flavor, &TableColumn{Name: "c", Type: d.typ, Default: sp(d.def), DefaultGenerated: d.generated}, "precise")
		if err != nil {
			t.Fatal(err)
		}
		var got string
		if ct.schema.def != nil {
			b, _ := appendJSONValue(nil, ct.schema, ct.schema.def, false, decimalBase64)
			got = string(b)
		}
		if got != d.want || ct.defaultErr != "" {
			t.Errorf("%s %s default %s: %s (%s), want %s", d.flavor, d.typ, d.def, got, ct.defaultErr, d.want)
		}
	}
}

func BenchmarkRouteConnect(b *testing.B) {
	for _, bc := range []struct {
		name string
		cfg  Config
	}{
		{"string", conv("string", "string", "simple")},
		{"json_schemas", conv("json", "json", "simple")},
		{"json_plain", with(conv("json", "json", "simple"), func(c *Config) { c.Converters.KeySchemas, c.Converters.ValueSchemas = false, false })},
		{"json_headers_schemas", conv("json", "json", "json")},
		{"expand_json", with(conv("string", "json", "simple"), func(c *Config) { c.ExpandJSONPayload = true })},
	} {
		b.Run(bc.name, func(b *testing.B) {
			r, err := NewForTable(bc.cfg, pgOutbox)
			if err != nil {
				b.Fatal(err)
			}
			ev := dbzEvent()
			b.ReportAllocs()
			for b.Loop() {
				if _, err := r.Route(&ev); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
