package router

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
)

// connectConv writes keys, values and headers as Kafka Connect's
// converters write what Debezium's Outbox EventRouter produces
// (debezium/debezium EventRouterDelegate.java): the key is the key
// column's value with that column's schema, the value is the payload
// column's value with its schema (or, with envelope fields, a struct
// {payload, fields...}), the headers carry each column's value with its
// schema.
type connectConv struct {
	key, value, headers                                   string
	keySchemas, valueSchemas, headerSchemas, delegateSchs bool
	delegate                                              string
	decFormat                                             int
	replaceNull                                           bool

	keyType, payloadType *colType
	headerTypes          []*colType // aligned with compiled.headers; nil entries for raw headers
	envTypes             []*colType // aligned with compiled.envelope
	timestampType        *colType   // nil: read the text as a date and time

	// schemaPrefix and schemaSuffix name the envelope's struct schema
	// around the routing value: "<prefix>.<db>.<table>." and ".Value".
	schemaPrefix string

	mu sync.Mutex
	// envSchemas caches the envelope schema per payload schema (or per
	// version), keyed by the payload schema's JSON: EventRouterDelegate
	// caches it the same way, so the routing value in its name is the
	// first one seen since the start for that payload schema.
	envSchemas map[string]*cschema
}

// maxEnvelopeSchemas bounds envSchemas as Debezium bounds its cache.
const maxEnvelopeSchemas = 10000

var errConverter = errors.New("converter")

// connect resolves route.converters (nil when every converter is raw).
func (c Config) connect(cc *compiled, table *Table) (*connectConv, error) {
	cv := c.Converters
	key, value, headers := orRaw(cv.Key), orRaw(cv.Value), orRaw(cv.Headers)
	for _, x := range []struct{ key, val string }{{"key", key}, {"value", value}} {
		switch x.val {
		case ConvRaw, ConvString, ConvJSON, ConvByteArray, ConvBinary:
		default:
			return nil, outboxcdc.KeyErrorf("converters."+x.key, "", "%q is not one of raw, string, json, bytearray, binary", x.val)
		}
	}
	switch headers {
	case ConvRaw, HeadersSimple, ConvJSON:
	default:
		return nil, outboxcdc.KeyErrorf("converters.headers", "", "%q is not one of raw, simple, json", headers)
	}
	switch cv.Delegate {
	case "", ConvString, ConvJSON:
	default:
		return nil, outboxcdc.KeyErrorf("converters.delegate", "", "%q is not string or json", cv.Delegate)
	}
	decFormat := decimalBase64
	switch cv.DecimalFormat {
	case "", "base64":
	case "numeric":
		decFormat = decimalNumeric
	default:
		return nil, outboxcdc.KeyErrorf("converters.decimal_format", "", "%q is not base64 or numeric", cv.DecimalFormat)
	}
	switch cv.DecimalHandling {
	case "", "precise", "double", "string":
	default:
		return nil, outboxcdc.KeyErrorf("converters.decimal_handling", "", "%q is not precise, double or string", cv.DecimalHandling)
	}
	over := map[string]*colType{}
	for i, e := range cv.ColumnTypes {
		col, ct, err := parseOverride(e)
		if err != nil {
			return nil, outboxcdc.KeyErrorf(fmt.Sprintf("converters.column_types[%d]", i), "", "%v", err)
		}
		over[col] = ct
	}
	structValue := cc.expand != nil || len(cc.envelope) > 0
	what := "expand_json_payload"
	if cc.expand == nil {
		what = "envelope"
	}
	if cc.ce != nil {
		if value != ConvRaw {
			return nil, outboxcdc.KeyErrorf("cloudevents.mode", "", "%s sets the value's format itself; leave route.converters.value raw", cc.ce.mode)
		}
		if structValue {
			return nil, outboxcdc.KeyErrorf(what, "", "not with route.cloudevents (the CloudEvent's data is the payload as stored)")
		}
	}
	if structValue {
		switch {
		case value == ConvJSON:
		case value == ConvBinary && cv.Delegate == ConvJSON:
		case value == ConvString || (value == ConvBinary && cv.Delegate == ConvString):
			return nil, outboxcdc.KeyErrorf(what, "use route.converters.value: json (with value_schemas: false for plain JSON)",
				"makes the value a Kafka Connect Struct, which StringConverter writes as Java's Struct{...} text, not JSON")
		default:
			return nil, outboxcdc.KeyErrorf(what, "", "makes the value a structure: it needs route.converters.value: json")
		}
	}
	if key == ConvRaw && value == ConvRaw && headers == ConvRaw {
		return nil, nil
	}
	conv := &connectConv{
		key: key, value: value, headers: headers,
		keySchemas: cv.KeySchemas, valueSchemas: cv.ValueSchemas, headerSchemas: cv.HeaderSchemas,
		delegate: cv.Delegate, delegateSchs: cv.DelegateSchemas,
		decFormat: decFormat, replaceNull: cv.ReplaceNullWithDefault,
		envSchemas: map[string]*cschema{},
	}
	// typeOf: the override, else the catalog's type; nil when unknown
	// (Validate without a table).
	typeOf := func(yamlKey, col string) (*colType, error) {
		if ct, ok := over[col]; ok {
			return ct, nil
		}
		if table == nil {
			return nil, nil
		}
		tc, ok := table.Column(col)
		if !ok {
			return nil, fmt.Errorf("%s: column %q is not in table %s.%s (its columns: %s)",
				yamlKey, col, table.Schema, table.Name, strings.Join(table.columnNames(), ", "))
		}
		ct, err := columnType(table.Flavor, tc, cv.DecimalHandling)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", yamlKey, err)
		}
		return ct, nil
	}
	var err error
	n := cc.names
	if key != ConvRaw {
		if conv.keyType, err = typeOf("route.columns.aggregate_id", n.AggregateID); err != nil {
			return nil, err
		}
		if err := conv.writable("route.converters.key", key, n.AggregateID, conv.keyType, false); err != nil {
			return nil, err
		}
	}
	if value != ConvRaw {
		if conv.payloadType, err = typeOf("route.columns.payload", n.Payload); err != nil {
			return nil, err
		}
		if err := conv.writable("route.converters.value", value, n.Payload, conv.payloadType, structValue); err != nil {
			return nil, err
		}
		for i, f := range cc.envelope {
			ct, err := typeOf(fmt.Sprintf("route.envelope[%d]", i), f.column)
			if err != nil {
				return nil, err
			}
			conv.envTypes = append(conv.envTypes, ct)
		}
		if len(cc.envelope) > 0 && value != ConvRaw && conv.valueSchemasOn() {
			if cv.TopicPrefix == "" {
				return nil, outboxcdc.KeyErrorf("converters.topic_prefix", "", "the envelope's schema is named after Debezium's topic.prefix; set it (value_schemas: false needs no name)")
			}
			if table != nil {
				conv.schemaPrefix = cv.TopicPrefix + "." + table.Schema + "." + table.Name + "."
			}
		}
		if cc.version != nil && cc.expand != nil && len(cc.envelope) > 0 {
			return nil, outboxcdc.KeyErrorf("columns.schema_version", "", "not with route.expand_json_payload: Debezium keeps the first payload's schema for each version, so later payloads of another shape stop the connector")
		}
	}
	if headers != ConvRaw {
		conv.headerTypes = make([]*colType, len(cc.headers))
		for i, h := range cc.headers {
			if conv.headerTypes[i], err = typeOf(fmt.Sprintf("route.headers (%q)", h.key), h.column); err != nil {
				return nil, err
			}
		}
	}
	if table != nil {
		if cc.partition != nil {
			ct, err := typeOf("route.partition_column", cc.partition.column)
			if err != nil {
				return nil, err
			}
			if ct != nil && (ct.kind != kInt || ct.schema.typ != tInt32) {
				return nil, outboxcdc.KeyErrorf("partition_column", "", "column %q is %s; Debezium reads the partition as a 32-bit integer (INT/INTEGER)", cc.partition.column, ct.schema.typ)
			}
		}
		if cc.version != nil {
			ct, err := typeOf("route.columns.schema_version", cc.version.column)
			if err != nil {
				return nil, err
			}
			if ct != nil && (ct.kind != kInt || ct.schema.typ != tInt32) {
				return nil, outboxcdc.KeyErrorf("columns.schema_version", "", "column %q is %s; Debezium reads the version as a 32-bit integer (INT/INTEGER)", cc.version.column, ct.schema.typ)
			}
		}
		if cc.timestamp != nil {
			ct, err := typeOf("route.columns.timestamp", cc.timestamp.column)
			if err != nil {
				return nil, err
			}
			if ct != nil && ct.kind != kTimestamp && ct.kind != kZoned {
				return nil, outboxcdc.KeyErrorf("columns.timestamp", "", "column %q is %s; the record timestamp comes from a DATETIME or TIMESTAMP column (Debezium refuses other types too)",
					cc.timestamp.column, ct.schema.typ)
			}
			conv.timestampType = ct
		}
	}
	// A default that cannot be reproduced matters where a JSON converter
	// writes the column: in a schema, or in place of a NULL.
	check := func(yamlKey, col string, ct *colType, conv string, schemas bool) error {
		if ct == nil || ct.defaultErr == "" || conv != ConvJSON {
			return nil
		}
		if schemas || (ct.schema.optional && cv.ReplaceNullWithDefault) {
			return fmt.Errorf("%s: column %q: %s, which outbox-cdc cannot render as Debezium renders it in the schema; "+
				"drop the default, or give the column's type in route.converters.column_types", yamlKey, col, ct.defaultErr)
		}
		return nil
	}
	if err := check("route.converters.key", n.AggregateID, conv.keyType, key, cv.KeySchemas); err != nil {
		return nil, err
	}
	if err := check("route.converters.value", n.Payload, conv.payloadType, conv.effective(value), conv.valueSchemasOn()); err != nil {
		return nil, err
	}
	for i, f := range cc.envelope {
		if i < len(conv.envTypes) {
			if err := check("route.envelope", f.column, conv.envTypes[i], conv.effective(value), conv.valueSchemasOn()); err != nil {
				return nil, err
			}
		}
	}
	for i, h := range cc.headers {
		if i < len(conv.headerTypes) {
			if err := check("route.converters.headers", h.column, conv.headerTypes[i], headers, cv.HeaderSchemas); err != nil {
				return nil, err
			}
		}
	}
	for _, ct := range append(append([]*colType{conv.keyType, conv.payloadType}, conv.envTypes...), conv.headerTypes...) {
		if ct != nil {
			ct.schema.renderWith(decFormat)
		}
	}
	return conv, nil
}

// effective is the converter that writes the value: BinaryDataConverter
// hands non-bytes values to its delegate.
func (cv *connectConv) effective(conv string) string {
	if conv == ConvBinary && cv.payloadType != nil && cv.payloadType.schema.typ != tBytes {
		return cv.delegate
	}
	return conv
}

func (cv *connectConv) valueSchemasOn() bool {
	if cv.value == ConvBinary {
		return cv.delegateSchs
	}
	return cv.valueSchemas
}

// writable refuses a converter that cannot write a column of type ct the
// way a consumer could use: Kafka Connect would fail the task, or write
// garbage.
func (cv *connectConv) writable(yamlKey, conv, col string, ct *colType, structValue bool) error {
	if ct == nil || structValue {
		return nil
	}
	bytes := ct.schema.typ == tBytes && ct.schema.name == ""
	if conv == ConvBinary && !bytes {
		if cv.delegate == "" {
			return fmt.Errorf("%s: binary (BinaryDataConverter) passes only bytes through; column %q is %s: set route.converters.delegate (Debezium's delegate.converter.type) or use string/json",
				yamlKey, col, ct.schema.typ)
		}
		conv = cv.delegate
	}
	switch conv {
	case ConvString:
		if bytes {
			return fmt.Errorf("%s: StringConverter writes a binary column %q as a Java array's identity (\"[B@1b6d3586\"), not its bytes; use bytearray or binary", yamlKey, col)
		}
	case ConvByteArray:
		if !bytes {
			return fmt.Errorf("%s: ByteArrayConverter refuses column %q of type %s (Kafka Connect fails the task with \"Invalid schema type for ByteArrayConverter\"); use string or json",
				yamlKey, col, ct.schema.typ)
		}
	}
	return nil
}

func (t *Table) columnNames() []string {
	names := make([]string, len(t.Columns))
	for i, c := range t.Columns {
		names[i] = c.Name
	}
	return names
}

// encode writes (s, v) with the named converter. A nil schema and value
// is a tombstone (nil). ok is false when the converter rejects the value
// (a NULL in a required column without a default).
func (cv *connectConv) encode(conv string, schemas bool, s *cschema, v any) ([]byte, error) {
	if conv == ConvBinary {
		switch x := v.(type) {
		case []byte:
			if s == nil || s.typ == tBytes {
				return x, nil
			}
		case nil:
			if s == nil || s.typ == tBytes {
				return nil, nil
			}
		}
		conv, schemas = cv.delegate, cv.delegateSchs
	}
	switch conv {
	case ConvByteArray:
		if v == nil {
			return nil, nil
		}
		if b, ok := v.([]byte); ok {
			return b, nil
		}
		return nil, fmt.Errorf("%w: ByteArrayConverter cannot write a %s value", errConverter, s.typ)
	case ConvString:
		if v == nil {
			return nil, nil
		}
		return javaToString(s, v)
	case ConvJSON:
		if s == nil && v == nil {
			return nil, nil
		}
		var b []byte
		if schemas {
			b = append(b, `{"schema":`...)
			if s == nil {
				b = append(b, "null"...)
			} else {
				b = append(b, s.json...)
			}
			b = append(b, `,"payload":`...)
		}
		b, ok := appendJSONValue(b, s, v, cv.replaceNull, cv.decFormat)
		if !ok {
			return nil, fmt.Errorf("%w: JsonConverter refuses a null value for a required field without a default", errConverter)
		}
		if schemas {
			b = append(b, '}')
		}
		return b, nil
	}
	return nil, fmt.Errorf("%w: no converter %q", errConverter, conv)
}

// javaToString is StringConverter: value.toString() in UTF-8.
func javaToString(s *cschema, v any) ([]byte, error) {
	switch x := v.(type) {
	case string:
		return []byte(x), nil
	case int64, bool, float64, decimal:
		b, _ := simpleHeaderText(nil, s, v, false)
		return b, nil
	}
	return nil, fmt.Errorf("%w: StringConverter cannot write this value as text", errConverter)
}

// encodeHeader writes one header value in the configured header format.
func (cv *connectConv) encodeHeader(s *cschema, v any) ([]byte, error) {
	switch cv.headers {
	case HeadersSimple:
		if v == nil {
			return nil, nil
		}
		b, ok := simpleHeaderText(nil, s, v, false)
		if !ok {
			return nil, fmt.Errorf("%w: SimpleHeaderConverter cannot write this value", errConverter)
		}
		return b, nil
	case ConvJSON:
		return cv.encode(ConvJSON, cv.headerSchemas, s, v)
	}
	return nil, fmt.Errorf("%w: no header format %q", errConverter, cv.headers)
}

// envelopeSchema returns the struct schema of an envelope value.
func (cv *connectConv) envelopeSchema(payload *cschema, envelope []envelopeField, routing string, version int, versioned bool) *cschema {
	cacheKey := string(payload.json)
	if versioned {
		cacheKey = "v" + strconv.Itoa(version)
	}
	cv.mu.Lock()
	defer cv.mu.Unlock()
	if s, ok := cv.envSchemas[cacheKey]; ok {
		return s
	}
	s := &cschema{typ: tStruct, name: cv.schemaPrefix + routing + ".Value"}
	if cv.schemaPrefix == "" {
		s.name = ""
	}
	if versioned {
		s.version = version
	}
	s.fields = append(s.fields, cfield{name: "payload", schema: payload})
	for i, f := range envelope {
		s.fields = append(s.fields, cfield{name: f.alias, schema: cv.envTypes[i].schema})
	}
	s.renderWith(cv.decFormat)
	if len(cv.envSchemas) >= maxEnvelopeSchemas {
		clear(cv.envSchemas)
	}
	cv.envSchemas[cacheKey] = s
	return s
}

// routeConnect is Route under route.converters.
func (r *Router) routeConnect(ev *outboxcdc.Event) (outboxcdc.Record, error) {
	c, cv := r.c, r.c.conv
	var value []byte
	var warning string
	if cv.value == ConvRaw {
		value = ev.Payload
		switch {
		case len(value) == 0 && c.tombstone:
			value = nil
		case value == nil:
			return outboxcdc.Record{}, r.nullPayload(ev)
		case c.json && !json.Valid(value):
			return outboxcdc.Record{}, r.notJSON(ev, value)
		}
	} else {
		v, why, err := r.connectValue(ev)
		if err != nil {
			return outboxcdc.Record{}, err
		}
		value, warning = v, why
	}
	topic, err := r.topic(ev)
	if err != nil {
		return outboxcdc.Record{}, err
	}
	key := []byte(ev.AggregateID)
	if cv.key != ConvRaw {
		kv, err := cv.keyType.parseText(key)
		if err != nil {
			return outboxcdc.Record{}, r.typeChanged(ev, c.names.AggregateID, err)
		}
		if key, err = cv.encode(cv.key, cv.keySchemas, cv.keyType.schema, kv); err != nil {
			return outboxcdc.Record{}, r.bad(ev, "key: "+err.Error())
		}
	}
	headers := make([]outboxcdc.Header, 0, len(c.context)+len(c.headers))
	headers = append(headers, c.context...)
	for i := range c.headers {
		h := &c.headers[i]
		v, null, ok := columnText(ev, &h.columnRef)
		if !ok {
			if c.missingIsError {
				return outboxcdc.Record{}, r.missing(ev, "header", h.column)
			}
			continue
		}
		if cv.headers == ConvRaw {
			if null {
				v = nil
			}
			headers = append(headers, outboxcdc.Header{Key: h.key, Value: v})
			continue
		}
		ct := cv.headerTypes[i]
		var hv any
		if !null {
			if hv, err = ct.parseText(v); err != nil {
				return outboxcdc.Record{}, r.typeChanged(ev, h.column, err)
			}
		}
		b, err := cv.encodeHeader(ct.schema, hv)
		if err != nil {
			return outboxcdc.Record{}, r.bad(ev, "header "+quote(h.key)+": "+err.Error())
		}
		headers = append(headers, outboxcdc.Header{Key: h.key, Value: b})
	}
	rec := outboxcdc.Record{Topic: topic, Key: key, Value: value, Headers: headers, Warning: warning}
	if err := r.finish(ev, &rec); err != nil {
		return outboxcdc.Record{}, err
	}
	return rec, nil
}

// connectValue builds and writes the record value as the EventRouter and
// the value converter do. warning says why the payload was not expanded
// although route.expand_json_payload is on (Record.Warning).
func (r *Router) connectValue(ev *outboxcdc.Event) (value []byte, warning string, err error) {
	c, cv := r.c, r.c.conv
	pt := cv.payloadType
	if ev.Payload == nil {
		if c.tombstone {
			return nil, warning, nil
		}
		return nil, "", r.nullPayload(ev)
	}
	if c.json && !json.Valid(ev.Payload) {
		return nil, "", r.notJSON(ev, ev.Payload)
	}
	pv, err := pt.parseText(ev.Payload)
	if err != nil {
		return nil, "", r.typeChanged(ev, c.names.Payload, err)
	}
	ps := pt.schema
	expanded := false
	if c.expand != nil && pt.kind == kString {
		s, v, fallback, err := c.expand.expand(c.names.Payload, pv.(string))
		if err != nil {
			return nil, "", r.bad(ev, "payload column "+quote(c.names.Payload)+": "+err.Error())
		}
		if fallback == "" {
			ps, pv, expanded = s, v, true
		} else {
			warning = "JSON expansion failed (" + fallback + "): the payload is sent as text, as Debezium does"
		}
	}
	// EventRouterDelegate: payload == null || payload.toString().trim().isEmpty().
	if c.tombstone && !expanded {
		if s, isString := pv.(string); isString && javaTrim(s) == "" {
			return nil, warning, nil
		}
	}
	if len(c.envelope) == 0 {
		b, err := cv.encode(cv.value, cv.valueSchemas, ps, pv)
		if err != nil {
			return nil, "", r.bad(ev, "value: "+err.Error())
		}
		return b, warning, nil
	}
	version, versioned := 0, c.version != nil
	if versioned {
		v, null, ok := columnText(ev, c.version)
		if ok && !null {
			n, err := strconv.ParseInt(string(v), 10, 32)
			if err != nil {
				return nil, "", r.bad(ev, "schema version column "+quote(c.version.column)+" holds "+quote(string(v))+", not a 32-bit integer")
			}
			version = int(n)
		}
	}
	if ps.json == nil {
		ps.render()
	}
	s := cv.envelopeSchema(ps, c.envelope, ev.AggregateType, version, versioned)
	st := &cstruct{schema: s, values: make([]any, len(s.fields))}
	st.values[0] = pv
	for i := range c.envelope {
		f := &c.envelope[i]
		v, null, ok := columnText(ev, &f.columnRef)
		if !ok {
			return nil, "", r.bad(ev, "envelope column "+quote(f.column)+" is not in the row: the table changed since the start; restart the connector so it reads the columns again")
		}
		if null {
			continue
		}
		fv, err := cv.envTypes[i].parseText(v)
		if err != nil {
			return nil, "", r.typeChanged(ev, f.column, err)
		}
		st.values[i+1] = fv
	}
	b, err := cv.encode(cv.value, cv.valueSchemas, s, st)
	if err != nil {
		return nil, "", r.bad(ev, "value: "+err.Error())
	}
	return b, warning, nil
}

func (r *Router) typeChanged(ev *outboxcdc.Event, col string, err error) error {
	return r.bad(ev, "column "+quote(col)+": "+err.Error()+
		" (its type is read at start; after an ALTER TABLE restart the connector)")
}

// javaTrim is Java's String.trim: it strips characters up to U+0020 at
// both ends.
func javaTrim(s string) string {
	i, j := 0, len(s)
	for i < j && s[i] <= ' ' {
		i++
	}
	for j > i && s[j-1] <= ' ' {
		j--
	}
	return s[i:j]
}
