package router

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
)

// Preset names.
const (
	// PresetSeed is the outbox table of the article the project grew from:
	// message_id, aggregate_type, aggregate_id, event_type, payload. Records
	// carry the headers id, event_type and aggregate_type.
	PresetSeed = "seed"
	// PresetDebezium is the table Debezium's Outbox EventRouter expects by
	// default: id, aggregatetype, aggregateid, type, payload. Records carry
	// only the header id, as the EventRouter does by default; add
	// "type:header:eventType" (or similar) to headers for more.
	PresetDebezium = "debezium"
)

// DefaultTopic is Debezium's default naming (route.topic.replacement
// "outbox.event.${routedByValue}" with route.by.field aggregatetype).
const DefaultTopic = "outbox.event.{aggregate_type}"

// Config is the route section of the configuration.
type Config struct {
	// Preset picks the column names and built-in headers: seed | debezium.
	Preset string `yaml:"preset"`
	// Topic is the topic template. Placeholders: {aggregate_type},
	// {event_type}, and the source table's {schema} (or {database}, the
	// same value by its MySQL name) and {table}. Everything else is literal and must be legal in a Kafka
	// topic name.
	Topic string `yaml:"topic"`
	// TopicRegex names the topic as Debezium's route.topic.regex does,
	// instead of Topic: when the regex matches the whole routing value (the
	// aggregate_type column, Debezium's route.by.field), the topic is the
	// value with its first match replaced by TopicReplacement; otherwise
	// the topic is the routing value itself.
	TopicRegex string `yaml:"topic_regex"`
	// TopicReplacement is Debezium's route.topic.replacement: what the
	// first match of TopicRegex is replaced with, with $1, ${name} and \$
	// as in Java.
	TopicReplacement string `yaml:"topic_replacement"`
	// ColumnNames overrides the preset's column name for each role; empty
	// fields keep the preset's name.
	ColumnNames ColumnNames `yaml:"columns"`
	// Headers lists further columns sent as record headers, each
	// "column", "column:alias", "column:header" or "column:header:alias"
	// (the last two are Debezium's table.fields.additional.placement form).
	// A role column may be listed too (e.g. "type:header:eventType").
	Headers []string `yaml:"headers"`
	// Envelope lists columns added to the record value beside the payload,
	// each "column" or "column:alias", as Debezium's
	// table.fields.additional.placement "column:envelope[:alias]" does:
	// the value becomes a struct {payload, alias...}. It needs
	// converters.value: json.
	Envelope []string `yaml:"envelope"`
	// PartitionColumn names an integer column whose value is the record's
	// partition (Debezium's "column:partition" placement); NULL leaves the
	// choice to the key's hash.
	PartitionColumn string `yaml:"partition_column"`
	// PayloadFormat is "any" (the default: the payload bytes are sent as
	// stored, whatever they are, as Debezium's EventRouter does) or "json"
	// (a payload that is not valid JSON makes the row bad, see
	// pipeline.on_error).
	PayloadFormat string `yaml:"payload_format"`
	// TombstoneOnEmptyPayload sends a row whose payload is NULL or empty as
	// a tombstone (null value) with the aggregate id as key and the usual
	// headers, as Debezium's route.tombstone.on.empty.payload does. Off (the
	// default): a NULL payload makes the row bad and an empty payload is
	// sent as an empty value.
	TombstoneOnEmptyPayload bool `yaml:"tombstone_on_empty_payload"`
	// Timestamp chooses the record timestamp: "produce" (the default: the
	// time the connector produces the record, left for the sink to stamp)
	// or "commit" (the source transaction's commit time; second precision
	// on MySQL/MariaDB). Production time is the default because a backlog
	// replayed with commit times older than the topic's retention.ms is
	// deleted by Kafka at once, and brokers with
	// message.timestamp.difference.max.ms (or .before.max.ms) reject such
	// records; it is also what Debezium's EventRouter and Kafka producers
	// set by default. A timestamp column (columns.timestamp) overrides it
	// for the rows where the column is not NULL.
	Timestamp string `yaml:"timestamp"`
	// ExpandJSONPayload parses a JSON text payload into a structure, as
	// Debezium's table.expand.json.payload does (with converters.value:
	// json, the value is the JSON document itself, and with schemas the
	// schema Debezium infers from it).
	ExpandJSONPayload bool `yaml:"expand_json_payload"`
	// ExpandJSONNulls is Debezium's table.json.payload.null.behavior for
	// an expanded payload: ignore (a null field is left out) or
	// optional_bytes (it becomes an optional bytes field).
	ExpandJSONNulls string `yaml:"expand_json_nulls"`
	// ExpandJSONEmptyArrays is Debezium's
	// table.json.payload.empty.array.behavior for an expanded payload:
	// ignore (an empty array is left out) or optional_string (it becomes an
	// array of optional strings).
	ExpandJSONEmptyArrays string `yaml:"expand_json_empty_arrays"`
	// OnUpdate is what an UPDATE of an outbox row does, as Debezium's
	// table.op.invalid.behavior: skip (the default: counted in
	// outbox_cdc_source_skipped_operations_total), warn and error (skipped
	// and logged at that level), fatal (the connector stops at that
	// transaction, having delivered and checkpointed everything before it).
	OnUpdate string `yaml:"on_update"`
	// OnMissingColumn is what happens when a header, envelope, partition or
	// timestamp column is not in a row (the column was dropped): ignore
	// (the default: the header or field is left out) or error (the row is
	// bad), as Debezium's table.field.additional.missing.
	OnMissingColumn string `yaml:"on_missing_column"`
	// Converters reproduce the bytes Kafka Connect's converters write.
	Converters ConvertersConfig `yaml:"converters"`
	// CloudEvents wraps records as CloudEvents 1.0.
	CloudEvents CloudEventsConfig `yaml:"cloudevents"`
	// ContextHeaders adds the __debezium.context.* headers of Debezium 3.2
	// and later.
	ContextHeaders ContextHeadersConfig `yaml:"context_headers"`
	// Tables overrides the columns and the topic of single outbox tables,
	// keyed "schema.table" (MySQL: "database.table"), for a connector
	// reading several tables (source.tables) whose layouts or routes
	// differ. Every other route key applies to every table.
	Tables map[string]TableRoute `yaml:"tables"`
	// Destination is what Topic names and which names are legal: the
	// sink's kind of destination, set by the command from sink.type. nil
	// is Kafka.
	Destination *Destination `yaml:"-"`
}

// TableRoute is one table's entry in route.tables.
type TableRoute struct {
	// Columns overrides the column names for this table, field by field,
	// over the preset's and route.columns' names.
	Columns ColumnNames `yaml:"columns"`
	// Topic, when set, is this table's topic template instead of
	// route.topic (and route.topic_regex).
	Topic string `yaml:"topic"`
}

// forTable returns the configuration of the table key in Tables: c with
// the entry's columns and topic applied, and no Tables.
func (c Config) forTable(key string) Config {
	t := c.Tables[key]
	d := c
	d.Tables = nil
	pick := func(dst *string, v string) {
		if v != "" {
			*dst = v
		}
	}
	pick(&d.ColumnNames.MessageID, t.Columns.MessageID)
	pick(&d.ColumnNames.AggregateType, t.Columns.AggregateType)
	pick(&d.ColumnNames.AggregateID, t.Columns.AggregateID)
	pick(&d.ColumnNames.EventType, t.Columns.EventType)
	pick(&d.ColumnNames.Payload, t.Columns.Payload)
	pick(&d.ColumnNames.Timestamp, t.Columns.Timestamp)
	pick(&d.ColumnNames.SchemaVersion, t.Columns.SchemaVersion)
	if t.Topic != "" {
		d.Topic, d.TopicRegex, d.TopicReplacement = t.Topic, "", ""
	}
	return d
}

// checkTableKey refuses a route.tables key that is not "schema.table".
func checkTableKey(key string) error {
	schema, table, ok := strings.Cut(key, ".")
	if !ok || schema == "" || table == "" || strings.Contains(table, ".") {
		return outboxcdc.KeyErrorf("tables", "", "key %q is not schema.table (MySQL: database.table)", key)
	}
	if strings.ContainsAny(key, "*%") {
		return outboxcdc.KeyErrorf("tables", "", "key %q: name one table, not a pattern", key)
	}
	return nil
}

// ConvertersConfig chooses how key, value and header bytes are written. The
// default, "raw", is outbox-cdc's own format: the column bytes as stored.
// The others reproduce Kafka Connect's converters (the settings a Debezium
// connector ran with), which need the outbox table's column types: the
// command reads them from the database at start-up.
type ConvertersConfig struct {
	// Key is Kafka Connect's key.converter: raw | string
	// (StringConverter) | json (JsonConverter) | bytearray
	// (ByteArrayConverter) | binary (Debezium's BinaryDataConverter,
	// which passes bytes through and hands other values to Delegate).
	Key string `yaml:"key"`
	// Value is Kafka Connect's value.converter, with the choices of Key.
	Value string `yaml:"value"`
	// KeySchemas is the key converter's schemas.enable when it is
	// JsonConverter (default true, as in Kafka Connect).
	KeySchemas bool `yaml:"key_schemas"`
	// ValueSchemas is the value converter's schemas.enable when it is
	// JsonConverter (default true, as in Kafka Connect).
	ValueSchemas bool `yaml:"value_schemas"`
	// Delegate is BinaryDataConverter's delegate.converter.type for values
	// that are not bytes: "" (none: such a column is refused), string or
	// json.
	Delegate string `yaml:"delegate"`
	// DelegateSchemas is the delegate converter's schemas.enable.
	DelegateSchemas bool `yaml:"delegate_schemas"`
	// Headers is the header converter: raw | simple (Kafka Connect's
	// SimpleHeaderConverter, its default header.converter) | json
	// (JsonConverter, Debezium Server's default header format).
	Headers string `yaml:"headers"`
	// HeaderSchemas is the json header converter's schemas.enable.
	HeaderSchemas bool `yaml:"header_schemas"`
	// DecimalFormat is JsonConverter's decimal.format: base64 | numeric.
	DecimalFormat string `yaml:"decimal_format"`
	// ReplaceNullWithDefault is JsonConverter's replace.null.with.default.
	ReplaceNullWithDefault bool `yaml:"replace_null_with_default"`
	// DecimalHandling is Debezium's decimal.handling.mode for DECIMAL and
	// NUMERIC columns: precise | double | string.
	DecimalHandling string `yaml:"decimal_handling"`
	// TopicPrefix is Debezium's topic.prefix (database.server.name), which
	// names the value schema when route.envelope lists columns:
	// "<prefix>.<database or schema>.<table>.<routing value>.Value".
	TopicPrefix string `yaml:"topic_prefix"`
	// ColumnTypes overrides a column's Connect type, "column=type" or
	// "column=type?" for a nullable one (types: string, json, uuid, int8,
	// int16, int32, int64, boolean, bytes, float32, float64, timestamp,
	// micro-timestamp, zoned-timestamp). MariaDB keeps JSON as LONGTEXT,
	// so "payload=json" says it was declared JSON.
	ColumnTypes []string `yaml:"column_types"`
}

// Converter names.
const (
	ConvRaw       = "raw"
	ConvString    = "string"
	ConvJSON      = "json"
	ConvByteArray = "bytearray"
	ConvBinary    = "binary"
	// Header formats beside raw and json.
	HeadersSimple = "simple"
)

// CloudEventsConfig is route.cloudevents.
type CloudEventsConfig struct {
	// Mode: off (default) | structured (the value is a CloudEvents JSON
	// object with the payload as data) | binary (the payload is the value,
	// the attributes are ce_ headers).
	Mode string `yaml:"mode"`
	// Source is the CloudEvents source attribute (a URI-reference).
	// Empty: /outbox-cdc/<connector name>.
	Source string `yaml:"source"`
	// DataContentType is the datacontenttype attribute: the payload's media
	// type (default application/json).
	DataContentType string `yaml:"data_content_type"`
}

// CloudEvents modes.
const (
	CloudEventsOff        = "off"
	CloudEventsStructured = "structured"
	CloudEventsBinary     = "binary"
)

// Update behaviours (OnUpdate).
const (
	OnUpdateSkip  = "skip"
	OnUpdateWarn  = "warn"
	OnUpdateError = "error"
	OnUpdateFatal = "fatal"
)

// Record timestamp choices (Config.Timestamp).
const (
	TimestampProduce = "produce"
	TimestampCommit  = "commit"
)

// Payload formats.
const (
	PayloadAny  = "any"
	PayloadJSON = "json"
)

// ColumnNames names the outbox table column that plays each role.
type ColumnNames struct {
	// MessageID names the column of the event's unique id (the id header);
	// empty: the preset's (message_id, or id for debezium).
	MessageID string `yaml:"message_id"`
	// AggregateType names the column that routes the record
	// ({aggregate_type} in route.topic); empty: the preset's.
	AggregateType string `yaml:"aggregate_type"`
	// AggregateID names the column whose value is the record key; empty:
	// the preset's.
	AggregateID string `yaml:"aggregate_id"`
	// EventType names the column of the event type ({event_type}); empty:
	// the preset's.
	EventType string `yaml:"event_type"`
	// Payload names the column whose bytes are the record value; empty:
	// the preset's (payload).
	Payload string `yaml:"payload"`
	// Timestamp, when set, names the column whose value is the record
	// timestamp (Debezium's table.field.event.timestamp): a DATETIME or
	// TIMESTAMP column; a NULL value falls back to the commit time.
	Timestamp string `yaml:"timestamp"`
	// SchemaVersion, when set, names an integer column whose value is the
	// value schema's version when route.envelope lists columns and the
	// JSON converter writes schemas (Debezium's
	// table.field.event.schema.version).
	SchemaVersion string `yaml:"schema_version"`
}

// DefaultConfig is the seed preset with Debezium's default topic naming.
func DefaultConfig() Config {
	return Config{Preset: PresetSeed, Topic: DefaultTopic, PayloadFormat: PayloadAny, Timestamp: TimestampProduce,
		OnUpdate: OnUpdateSkip, OnMissingColumn: "ignore",
		ExpandJSONNulls: "ignore", ExpandJSONEmptyArrays: "ignore",
		Converters:     DefaultConvertersConfig(),
		CloudEvents:    CloudEventsConfig{Mode: CloudEventsOff, DataContentType: "application/json"},
		ContextHeaders: ContextHeadersConfig{RunID: true},
	}
}

// DefaultConvertersConfig is raw bytes everywhere, with Kafka Connect's
// defaults for the JSON converter's options.
func DefaultConvertersConfig() ConvertersConfig {
	return ConvertersConfig{Key: ConvRaw, Value: ConvRaw, Headers: ConvRaw,
		KeySchemas: true, ValueSchemas: true, DelegateSchemas: true, HeaderSchemas: true,
		DecimalFormat: "base64", ReplaceNullWithDefault: true, DecimalHandling: "precise"}
}

type preset struct {
	columns ColumnNames
	// roleHeaders are the built-in headers, in order.
	roleHeaders []headerSpec
}

var presets = map[string]preset{
	PresetSeed: {
		columns: ColumnNames{
			MessageID:     "message_id",
			AggregateType: "aggregate_type",
			AggregateID:   "aggregate_id",
			EventType:     "event_type",
			Payload:       "payload",
		},
		roleHeaders: []headerSpec{
			{key: "id", columnRef: columnRef{role: roleMessageID}},
			{key: "event_type", columnRef: columnRef{role: roleEventType}},
			{key: "aggregate_type", columnRef: columnRef{role: roleAggregateType}},
		},
	},
	PresetDebezium: {
		columns: ColumnNames{
			MessageID:     "id",
			AggregateType: "aggregatetype",
			AggregateID:   "aggregateid",
			EventType:     "type",
			Payload:       "payload",
		},
		roleHeaders: []headerSpec{
			{key: "id", columnRef: columnRef{role: roleMessageID}},
		},
	},
}

func (c Config) preset() (preset, error) {
	name := c.Preset
	if name == "" {
		name = PresetSeed
	}
	p, ok := presets[name]
	if !ok {
		return preset{}, outboxcdc.KeyErrorf("preset", "", "unknown preset %q (want %s or %s)", c.Preset, PresetSeed, PresetDebezium)
	}
	return p, nil
}

// columnNames is the preset's names with the overrides applied.
func (c Config) columnNames(p preset) ColumnNames {
	n := p.columns
	pick := func(dst *string, override string) {
		if override != "" {
			*dst = override
		}
	}
	pick(&n.MessageID, c.ColumnNames.MessageID)
	pick(&n.AggregateType, c.ColumnNames.AggregateType)
	pick(&n.AggregateID, c.ColumnNames.AggregateID)
	pick(&n.EventType, c.ColumnNames.EventType)
	pick(&n.Payload, c.ColumnNames.Payload)
	n.Timestamp, n.SchemaVersion = c.ColumnNames.Timestamp, c.ColumnNames.SchemaVersion
	return n
}

func (c Config) topic() string {
	if c.Topic == "" {
		return dest(c.Destination).Default
	}
	return c.Topic
}

// Validate checks the configuration without building a Router. Errors name
// the yaml key at fault. Checks that need the outbox table's column types
// (a converter that cannot write a column's type) run in NewForTable.
func (c Config) Validate() error {
	_, err := c.compile(nil)
	if err != nil {
		return err
	}
	for _, key := range sortedKeys(c.Tables) {
		if err := checkTableKey(key); err != nil {
			return err
		}
		if _, err := c.forTable(key).compile(nil); err != nil {
			return outboxcdc.KeysUnder(fmt.Sprintf("tables[%q]", key), err)
		}
	}
	return nil
}

func sortedKeys(m map[string]TableRoute) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// usesConverters reports whether any converter is not raw.
func (c Config) usesConverters() bool {
	v := c.Converters
	return orRaw(v.Key) != ConvRaw || orRaw(v.Value) != ConvRaw || orRaw(v.Headers) != ConvRaw
}

func orRaw(s string) string {
	if s == "" {
		return ConvRaw
	}
	return s
}

// TypedColumns returns the columns whose database types decide the bytes:
// those a non-raw converter writes. Empty when every converter is raw.
func (c Config) TypedColumns() []string {
	p, err := c.preset()
	if err != nil {
		return nil
	}
	n := c.columnNames(p)
	var cols []string
	add := func(col string) {
		if col != "" && !contains(cols, col) {
			cols = append(cols, col)
		}
	}
	cv := c.Converters
	if orRaw(cv.Key) != ConvRaw {
		add(n.AggregateID)
	}
	if orRaw(cv.Value) != ConvRaw {
		add(n.Payload)
		for _, e := range c.Envelope {
			col, _, _ := strings.Cut(e, ":")
			add(col)
		}
	}
	if orRaw(cv.Headers) != ConvRaw {
		for _, h := range p.roleHeaders {
			add(n.columnOf(h.role))
		}
		for _, e := range c.Headers {
			if col, _, _, err := parseHeaderEntry(e); err == nil {
				add(col)
			}
		}
	}
	add(c.PartitionColumn) // its type is checked: Debezium reads a 32-bit integer
	return cols
}

// NeedsTable reports whether the router needs the outbox table's column
// types (NewForTable): a non-raw converter writes a column that
// converters.column_types does not type.
func (c Config) NeedsTable() bool {
	if !c.usesConverters() {
		return false
	}
	over := map[string]bool{}
	for _, e := range c.Converters.ColumnTypes {
		if col, _, err := parseOverride(e); err == nil {
			over[col] = true
		}
	}
	for _, col := range c.TypedColumns() {
		if !over[col] {
			return true
		}
	}
	return false
}

// Columns returns the column names a source must deliver: the role columns
// and, in Extra, the non-role columns the headers, envelope, partition,
// timestamp and schema version ask for, plus what to do with UPDATEs. Call
// it on a valid Config; on an invalid one it returns what it can.
func (c Config) Columns() outboxcdc.Columns {
	p, err := c.preset()
	if err != nil {
		p = presets[PresetSeed]
	}
	n := c.columnNames(p)
	cols := outboxcdc.Columns{
		MessageID:     n.MessageID,
		AggregateType: n.AggregateType,
		AggregateID:   n.AggregateID,
		EventType:     n.EventType,
		Payload:       n.Payload,
	}
	if c.OnUpdate != OnUpdateSkip {
		cols.OnUpdate = c.OnUpdate
	}
	add := func(col string) {
		if col == "" || roleOf(n, col) != roleNone || contains(cols.Extra, col) {
			return
		}
		cols.Extra = append(cols.Extra, col)
	}
	for _, entry := range c.Headers {
		if col, _, _, err := parseHeaderEntry(entry); err == nil {
			add(col)
		}
	}
	for _, entry := range c.Envelope {
		if col, _, err := parseEnvelopeEntry(entry); err == nil {
			add(col)
		}
	}
	add(c.PartitionColumn)
	add(n.Timestamp)
	add(n.SchemaVersion)
	if len(c.Tables) > 0 {
		cols.Tables = make(map[string]outboxcdc.Columns, len(c.Tables))
		for key := range c.Tables {
			cols.Tables[key] = c.forTable(key).Columns()
		}
	}
	return cols
}

// compiled is everything Route needs, resolved once.
type compiled struct {
	names    ColumnNames
	columns  outboxcdc.Columns
	dest     *Destination
	template template
	regex    *topicRegex // set: Debezium's regex routing instead of template
	headers  []headerSpec
	// context are the context headers, already written, sent before the
	// others (route.context_headers).
	context []outboxcdc.Header
	// json: the payload must be valid JSON; tombstone: a NULL or empty
	// payload becomes a null value.
	json, tombstone bool
	// commitTime: the record timestamp is the commit time (else zero: the
	// sink stamps the production time), unless the timestamp column says.
	commitTime     bool
	envelope       []envelopeField
	partition      *columnRef
	timestamp      *columnRef
	version        *columnRef
	missingIsError bool
	expand         *expandOptions
	conv           *connectConv // nil: every converter raw
	ce             *cloudEvents // nil: CloudEvents off
}

// columnRef locates a column of a row: a role's value, or an extra column
// (sources deliver Extra in the order Columns lists it, so extraIdx is
// tried before a search).
type columnRef struct {
	column   string
	role     role
	extraIdx int
}

type envelopeField struct {
	columnRef
	alias string
}

func (c Config) ref(names ColumnNames, cols outboxcdc.Columns, col string) *columnRef {
	r := &columnRef{column: col, role: roleOf(names, col)}
	if r.role == roleNone {
		for j, e := range cols.Extra {
			if e == col {
				r.extraIdx = j
			}
		}
	}
	return r
}

// compile resolves the configuration; table (nil when not known) gives
// the column types the converters need.
func (c Config) compile(table *Table) (*compiled, error) {
	p, err := c.preset()
	if err != nil {
		return nil, err
	}
	names := c.columnNames(p)
	for _, f := range []struct{ key, val string }{
		{"message_id", names.MessageID},
		{"aggregate_type", names.AggregateType},
		{"aggregate_id", names.AggregateID},
		{"event_type", names.EventType},
		{"payload", names.Payload},
		{"timestamp", names.Timestamp},
		{"schema_version", names.SchemaVersion},
	} {
		if strings.TrimSpace(f.val) != f.val {
			return nil, outboxcdc.KeyErrorf("columns."+f.key, "", "column name %q has leading or trailing spaces", f.val)
		}
	}
	cc := &compiled{names: names, dest: dest(c.Destination)}
	if c.TopicRegex != "" || c.TopicReplacement != "" {
		if c.Topic != "" && c.Topic != cc.dest.Default {
			return nil, outboxcdc.KeyErrorf("topic_regex", "", "set either route.topic or route.topic_regex/topic_replacement, not both")
		}
		if cc.regex, err = newTopicRegex(c.TopicRegex, c.TopicReplacement); err != nil {
			return nil, err
		}
	} else if cc.template, err = parseTemplate(c.topic(), cc.dest); err != nil {
		return nil, outboxcdc.KeyErrorf("topic", "", "%v", err)
	}
	cols := c.Columns()
	cc.columns = cols
	headers := append([]headerSpec(nil), p.roleHeaders...)
	for i, entry := range c.Headers {
		col, key, _, err := parseHeaderEntry(entry)
		if err != nil {
			return nil, outboxcdc.KeyErrorf(fmt.Sprintf("headers[%d]", i), "", "%v", err)
		}
		for _, h := range headers {
			if h.key == key {
				return nil, outboxcdc.KeyErrorf(fmt.Sprintf("headers[%d]", i), "", "header %q is already sent (by the preset or an earlier entry); give %q an alias with %q",
					key, col, col+":other_name")
			}
		}
		headers = append(headers, headerSpec{key: key, columnRef: *c.ref(names, cols, col)})
	}
	for i := range headers {
		if headers[i].column == "" {
			headers[i].column = names.columnOf(headers[i].role)
		}
	}
	cc.headers = headers
	if err := c.checkContextHeaderKeys(headers); err != nil {
		return nil, err
	}
	for i, entry := range c.Envelope {
		col, alias, err := parseEnvelopeEntry(entry)
		if err != nil {
			return nil, outboxcdc.KeyErrorf(fmt.Sprintf("envelope[%d]", i), "", "%v", err)
		}
		if alias == "payload" {
			return nil, outboxcdc.KeyErrorf(fmt.Sprintf("envelope[%d]", i), "give it another alias", "%q: the field name payload is taken by the payload itself", entry)
		}
		for _, f := range cc.envelope {
			if f.alias == alias {
				return nil, outboxcdc.KeyErrorf(fmt.Sprintf("envelope[%d]", i), "", "field %q is already in the envelope; give %q another alias", alias, col)
			}
		}
		cc.envelope = append(cc.envelope, envelopeField{columnRef: *c.ref(names, cols, col), alias: alias})
	}
	if c.PartitionColumn != "" {
		if strings.TrimSpace(c.PartitionColumn) != c.PartitionColumn {
			return nil, outboxcdc.KeyErrorf("partition_column", "", "column name %q has leading or trailing spaces", c.PartitionColumn)
		}
		cc.partition = c.ref(names, cols, c.PartitionColumn)
	}
	if names.Timestamp != "" {
		cc.timestamp = c.ref(names, cols, names.Timestamp)
	}
	if names.SchemaVersion != "" {
		cc.version = c.ref(names, cols, names.SchemaVersion)
	}
	switch c.PayloadFormat {
	case "", PayloadAny, PayloadJSON:
	default:
		return nil, outboxcdc.KeyErrorf("payload_format", "", "%q is not %s or %s", c.PayloadFormat, PayloadAny, PayloadJSON)
	}
	cc.json, cc.tombstone = c.PayloadFormat == PayloadJSON, c.TombstoneOnEmptyPayload
	switch c.Timestamp {
	case "", TimestampProduce, TimestampCommit:
	default:
		return nil, outboxcdc.KeyErrorf("timestamp", "", "%q is not %s or %s", c.Timestamp, TimestampProduce, TimestampCommit)
	}
	cc.commitTime = c.Timestamp == TimestampCommit
	switch c.OnUpdate {
	case "", OnUpdateSkip, OnUpdateWarn, OnUpdateError, OnUpdateFatal:
	default:
		return nil, outboxcdc.KeyErrorf("on_update", "", "%q is not one of skip, warn, error, fatal", c.OnUpdate)
	}
	switch c.OnMissingColumn {
	case "", "ignore":
	case "error":
		cc.missingIsError = true
	default:
		return nil, outboxcdc.KeyErrorf("on_missing_column", "", "%q is not ignore or error", c.OnMissingColumn)
	}
	if cc.expand, err = c.expandOptions(); err != nil {
		return nil, err
	}
	if cc.ce, err = c.cloudEvents(); err != nil {
		return nil, err
	}
	if cc.conv, err = c.connect(cc, table); err != nil {
		return nil, err
	}
	if cc.context, err = c.contextHeaders(cc.conv); err != nil {
		return nil, err
	}
	return cc, nil
}

func (c Config) expandOptions() (*expandOptions, error) {
	o := &expandOptions{}
	switch c.ExpandJSONNulls {
	case "", "ignore":
	case "optional_bytes":
		o.nullsAsBytes = true
	default:
		return nil, outboxcdc.KeyErrorf("expand_json_nulls", "", "%q is not ignore or optional_bytes", c.ExpandJSONNulls)
	}
	switch c.ExpandJSONEmptyArrays {
	case "", "ignore":
	case "optional_string":
		o.emptyArraysAsStrings = true
	default:
		return nil, outboxcdc.KeyErrorf("expand_json_empty_arrays", "", "%q is not ignore or optional_string", c.ExpandJSONEmptyArrays)
	}
	if !c.ExpandJSONPayload {
		return nil, nil
	}
	return o, nil
}

// parseHeaderEntry splits "col", "col:alias", "col:header" or
// "col:header:alias" into the column and the header key.
func parseHeaderEntry(entry string) (col, key string, placement string, err error) {
	parts := strings.Split(entry, ":")
	for _, p := range parts {
		if p == "" || strings.TrimSpace(p) != p {
			return "", "", "", fmt.Errorf("%q: want column, column:alias or column:header[:alias] with no empty parts or spaces", entry)
		}
	}
	col, key, placement = parts[0], parts[0], "header"
	switch len(parts) {
	case 1:
	case 2:
		switch parts[1] {
		case "header":
		case "envelope", "partition":
			placement = parts[1]
		default:
			key = parts[1]
		}
	case 3:
		placement, key = parts[1], parts[2]
	default:
		return "", "", "", fmt.Errorf("%q: too many ':' (want column, column:alias or column:header[:alias])", entry)
	}
	switch placement {
	case "header":
	case "envelope":
		return "", "", "", fmt.Errorf("%q: envelope placement goes in route.envelope (%q)", entry, strings.TrimSuffix(col+":"+key, ":"+col))
	case "partition":
		return "", "", "", fmt.Errorf("%q: partition placement is route.partition_column: %s", entry, col)
	default:
		return "", "", "", fmt.Errorf("%q: placement %q is not supported, only header", entry, placement)
	}
	return col, key, placement, nil
}

// parseEnvelopeEntry splits "col" or "col:alias" (also Debezium's
// "col:envelope[:alias]").
func parseEnvelopeEntry(entry string) (col, alias string, err error) {
	parts := strings.Split(entry, ":")
	for _, p := range parts {
		if p == "" || strings.TrimSpace(p) != p {
			return "", "", fmt.Errorf("%q: want column or column:alias with no empty parts or spaces", entry)
		}
	}
	if len(parts) >= 2 && parts[1] == "envelope" {
		parts = append(parts[:1], parts[2:]...)
	}
	switch len(parts) {
	case 1:
		return parts[0], parts[0], nil
	case 2:
		return parts[0], parts[1], nil
	}
	return "", "", fmt.Errorf("%q: want column or column:alias", entry)
}

func roleOf(n ColumnNames, col string) role {
	switch col {
	case n.MessageID:
		return roleMessageID
	case n.AggregateType:
		return roleAggregateType
	case n.AggregateID:
		return roleAggregateID
	case n.EventType:
		return roleEventType
	case n.Payload:
		return rolePayload
	}
	return roleNone
}

// columnOf is the column that plays role r.
func (n ColumnNames) columnOf(r role) string {
	switch r {
	case roleMessageID:
		return n.MessageID
	case roleAggregateType:
		return n.AggregateType
	case roleAggregateID:
		return n.AggregateID
	case roleEventType:
		return n.EventType
	case rolePayload:
		return n.Payload
	}
	return ""
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// errTemplate is wrapped by every topic template error.
var errTemplate = errors.New("invalid topic template")

// PresetHeaders lists the headers route.preset adds to every record, in
// order, as "header=column" with the column names in effect (route.columns
// applied). `config print` shows them.
func (c Config) PresetHeaders() ([]string, error) {
	p, err := c.preset()
	if err != nil {
		return nil, err
	}
	cols := c.columnNames(p)
	out := make([]string, 0, len(p.roleHeaders))
	for _, h := range p.roleHeaders {
		col := h.column
		if h.role != roleNone {
			col = cols.columnOf(h.role)
		}
		out = append(out, h.key+"="+col)
	}
	return out, nil
}
