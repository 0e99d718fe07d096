package router

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

var commit = time.Date(2026, 3, 14, 15, 9, 26, 0, time.UTC)

func seedEvent() outboxcdc.Event {
	return outboxcdc.Event{
		MessageID:     "7f1c2a4e-0b6d-4f7e-9a51-3c2d8e9f0a11",
		AggregateType: "ORDER",
		AggregateID:   "SO-20260314-0001",
		EventType:     "ORDER_CREATED",
		Payload:       []byte(`{"orderNo":"SO-20260314-0001","amount":"99.00"}`),
		CommitTime:    commit,
		Origin:        "mariadb-bin.000003:1234 row 0",
	}
}

func withExtra(ev outboxcdc.Event, cols ...outboxcdc.Column) outboxcdc.Event {
	ev.Extra = cols
	return ev
}

func TestRoute(t *testing.T) {
	seed := DefaultConfig()
	deb := Config{Preset: PresetDebezium}
	tests := []struct {
		name string
		cfg  Config
		ev   func() outboxcdc.Event
	}{
		{"seed_default", seed, seedEvent},
		{"debezium_default", deb, func() outboxcdc.Event {
			ev := seedEvent()
			ev.AggregateType, ev.EventType = "customers", "CustomerCreated"
			return ev
		}},
		{"template_event_type", Config{Topic: "shop.{aggregate_type}.{event_type}.v1"}, seedEvent},
		{"debezium_context_headers", Config{Preset: PresetDebezium, ContextHeaders: ContextHeadersConfig{Enabled: true,
			LogicalName: "dbserver1", ConnectorName: "mysql", RunID: true, RunIDValue: "3f0c5c2e-8a51-4d7e-b3a2-6c1d9e8f7a00"}}, seedEvent},
		{"seed_context_headers_no_run_id", Config{ContextHeaders: ContextHeadersConfig{Enabled: true,
			LogicalName: "orders", ConnectorName: "postgresql"}}, seedEvent},
		{"template_literal", Config{Topic: "all-orders"}, seedEvent},
		{"empty_payload_kept", seed, func() outboxcdc.Event {
			ev := seedEvent()
			ev.Payload = []byte{}
			return ev
		}},
		{"empty_event_type_header", seed, func() outboxcdc.Event {
			ev := seedEvent()
			ev.EventType = ""
			return ev
		}},
		{"binary_payload_as_is", seed, func() outboxcdc.Event {
			ev := seedEvent()
			ev.Payload = []byte("\x00\x01  {\"a\" : 1 }\n")
			return ev
		}},
		{"extra_headers_aliases", Config{Headers: []string{"trace_id", "tenant:x-tenant", "created_at:header:ts"}}, func() outboxcdc.Event {
			return withExtra(seedEvent(),
				outboxcdc.Column{Name: "trace_id", Value: []byte("00-4bf92f3577b34da6-01")},
				outboxcdc.Column{Name: "tenant", Value: []byte("acme")},
				outboxcdc.Column{Name: "created_at", Value: []byte("2026-03-14 15:09:26")})
		}},
		{"extra_null_empty_missing", Config{Headers: []string{"null_col", "empty_col", "dropped_col"}}, func() outboxcdc.Event {
			return withExtra(seedEvent(),
				outboxcdc.Column{Name: "null_col", Null: true},
				outboxcdc.Column{Name: "empty_col", Value: nil})
		}},
		{"extra_out_of_order", Config{Headers: []string{"a", "b"}}, func() outboxcdc.Event {
			return withExtra(seedEvent(),
				outboxcdc.Column{Name: "b", Value: []byte("B")},
				outboxcdc.Column{Name: "a", Value: []byte("A")})
		}},
		{"debezium_role_column_headers", Config{Preset: PresetDebezium, Headers: []string{"type:header:eventType", "aggregatetype:header:aggregateType"}}, seedEvent},
		{"column_overrides", Config{
			ColumnNames: ColumnNames{MessageID: "uuid", EventType: "kind"},
			Headers:     []string{"kind:k", "uuid:event_id", "status"},
		}, func() outboxcdc.Event {
			return withExtra(seedEvent(), outboxcdc.Column{Name: "status", Value: []byte("0")})
		}},
		{"bad_empty_message_id", seed, func() outboxcdc.Event {
			ev := seedEvent()
			ev.MessageID = ""
			return ev
		}},
		{"bad_empty_aggregate_id", seed, func() outboxcdc.Event {
			ev := seedEvent()
			ev.AggregateID = ""
			return ev
		}},
		{"bad_null_payload", deb, func() outboxcdc.Event {
			ev := seedEvent()
			ev.Payload = nil
			return ev
		}},
		{"tombstone_null_payload", Config{TombstoneOnEmptyPayload: true}, func() outboxcdc.Event {
			ev := seedEvent()
			ev.Payload = nil
			return ev
		}},
		{"tombstone_empty_payload", Config{Preset: PresetDebezium, TombstoneOnEmptyPayload: true}, func() outboxcdc.Event {
			ev := seedEvent()
			ev.Payload = []byte{}
			return ev
		}},
		{"json_payload_valid", Config{PayloadFormat: PayloadJSON}, seedEvent},
		{"bad_json_payload_invalid", Config{PayloadFormat: PayloadJSON}, func() outboxcdc.Event {
			ev := seedEvent()
			ev.Payload = []byte(`{"orderNo": "SO-1",`)
			return ev
		}},
		{"bad_json_payload_empty", Config{PayloadFormat: PayloadJSON}, func() outboxcdc.Event {
			ev := seedEvent()
			ev.Payload = []byte{}
			return ev
		}},
		{"json_payload_empty_tombstone", Config{PayloadFormat: PayloadJSON, TombstoneOnEmptyPayload: true}, func() outboxcdc.Event {
			ev := seedEvent()
			ev.Payload = []byte{}
			return ev
		}},
		{"bad_empty_routing_value", seed, func() outboxcdc.Event {
			ev := seedEvent()
			ev.AggregateType = ""
			return ev
		}},
		{"bad_illegal_topic_char", seed, func() outboxcdc.Event {
			ev := seedEvent()
			ev.AggregateType = "order/v2"
			return ev
		}},
		{"bad_non_ascii_topic", Config{Topic: "t.{event_type}"}, func() outboxcdc.Event {
			ev := seedEvent()
			ev.EventType = "订单创建"
			return ev
		}},
		{"bad_topic_too_long", seed, func() outboxcdc.Event {
			ev := seedEvent()
			ev.AggregateType = strings.Repeat("x", 240)
			return ev
		}},
		{"bad_invalid_event", seed, func() outboxcdc.Event {
			ev := seedEvent()
			ev.Invalid = "logical message content is not a JSON object (see wal.MessageFormat)"
			ev.Payload = []byte("not json")
			return ev
		}},
		{"bad_topic_dotdot", Config{Topic: "{aggregate_type}"}, func() outboxcdc.Event {
			ev := seedEvent()
			ev.AggregateType = ".."
			return ev
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// The goldens show the commit time; the default (production
			// time, a zero timestamp) is TestRouteTimestamp's.
			tc.cfg.Timestamp = TimestampCommit
			r, err := New(tc.cfg)
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			ev := tc.ev()
			rec, err := r.Route(&ev)
			var got golden
			if err != nil {
				var bad *outboxcdc.BadRowError
				if !errors.As(err, &bad) {
					t.Fatalf("error %v is not a *BadRowError", err)
				}
				if bad.Origin != ev.Origin || bad.MessageID != ev.MessageID {
					t.Errorf("BadRowError names %q/%q, want the event's %q/%q", bad.Origin, bad.MessageID, ev.Origin, ev.MessageID)
				}
				got.Error = err.Error()
			} else {
				got.Record = render(rec)
				if rec.Value != nil && cap(ev.Payload) > 0 && &rec.Value[:1][0] != &ev.Payload[:1][0] {
					t.Error("Value is a copy of the payload, want the payload's bytes")
				}
			}
			checkGolden(t, filepath.Join("testdata", "route", tc.name+".json"), got)
		})
	}
}

// TestRouteNullVsEmpty pins the NULL/empty distinction that the golden
// JSON also shows: NULL payload is an error, empty payload an empty value.
func TestRouteNullVsEmpty(t *testing.T) {
	r, err := New(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	ev := seedEvent()
	ev.Payload = []byte{}
	rec, err := r.Route(&ev)
	if err != nil || rec.Value == nil || len(rec.Value) != 0 {
		t.Fatalf("empty payload: got %v, %v; want an empty non-nil value", rec.Value, err)
	}
	r, _ = New(Config{Headers: []string{"n", "e"}})
	ev = withExtra(seedEvent(), outboxcdc.Column{Name: "n", Null: true, Value: []byte("ignored")}, outboxcdc.Column{Name: "e"})
	rec, err = r.Route(&ev)
	if err != nil {
		t.Fatal(err)
	}
	hs := rec.Headers[len(rec.Headers)-2:]
	if hs[0].Value != nil || hs[1].Value == nil || len(hs[1].Value) != 0 {
		t.Fatalf("NULL column header %q, empty column header %q: want nil and empty non-nil", hs[0].Value, hs[1].Value)
	}
}

// Appending to a record's key or header value must not overwrite the next
// value sharing the buffer.
func TestRouteValuesDoNotAlias(t *testing.T) {
	r, _ := New(DefaultConfig())
	ev := seedEvent()
	rec, err := r.Route(&ev)
	if err != nil {
		t.Fatal(err)
	}
	_ = append(rec.Key, "XXXX"...)
	for i := range rec.Headers {
		_ = append(rec.Headers[i].Value, "XXXX"...)
	}
	if string(rec.Headers[0].Value) != ev.MessageID || string(rec.Headers[1].Value) != ev.EventType {
		t.Fatalf("headers changed by append: %q", rec.Headers)
	}
}

func TestColumns(t *testing.T) {
	tests := []struct {
		cfg  Config
		want outboxcdc.Columns
	}{
		{DefaultConfig(), outboxcdc.Columns{MessageID: "message_id", AggregateType: "aggregate_type", AggregateID: "aggregate_id", EventType: "event_type", Payload: "payload"}},
		{Config{Preset: PresetDebezium, Headers: []string{"type:header:eventType", "tenant", "trace:header:traceparent", "tenant:t2"}},
			outboxcdc.Columns{MessageID: "id", AggregateType: "aggregatetype", AggregateID: "aggregateid", EventType: "type", Payload: "payload", Extra: []string{"tenant", "trace"}}},
		{Config{ColumnNames: ColumnNames{Payload: "body", AggregateID: "order_no"}},
			outboxcdc.Columns{MessageID: "message_id", AggregateType: "aggregate_type", AggregateID: "order_no", EventType: "event_type", Payload: "body"}},
	}
	for i, tc := range tests {
		r, err := New(tc.cfg)
		if err != nil {
			t.Fatalf("%d: %v", i, err)
		}
		if got := r.Columns(); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%d: Columns() = %+v, want %+v", i, got, tc.want)
		}
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		want string // substring of the error; "" means valid
	}{
		{"default", DefaultConfig(), ""},
		{"zero value is seed", Config{}, ""},
		{"debezium", Config{Preset: PresetDebezium}, ""},
		{"unknown preset", Config{Preset: "kafka-connect"}, `preset: unknown preset "kafka-connect"`},
		{"unknown placeholder", Config{Topic: "outbox.{aggregatetype}"}, "topic: invalid topic template \"outbox.{aggregatetype}\": unknown placeholder {aggregatetype}"},
		{"aggregate_id placeholder", Config{Topic: "o.{aggregate_id}"}, "one Kafka topic per aggregate"},
		{"unclosed", Config{Topic: "o.{aggregate_type"}, "unclosed"},
		{"debezium dollar form", Config{Topic: "outbox.event.${routedByValue}"}, "not Debezium's ${...} form"},
		{"illegal literal", Config{Topic: "outbox/{aggregate_type}"}, `character '/' is not allowed`},
		{"stray brace", Config{Topic: "a.{event_type}}"}, `character '}' is not allowed`},
		{"literal dot", Config{Topic: "."}, "forbidden"},
		{"literal too long", Config{Topic: strings.Repeat("a", 250)}, "249"},
		{"header empty part", Config{Headers: []string{"tenant:"}}, "headers[0]"},
		{"header envelope", Config{Headers: []string{"ok", "tenant:envelope"}}, `headers[1]: "tenant:envelope": envelope placement goes in route.envelope ("tenant")`},
		{"header partition", Config{Headers: []string{"p:partition"}}, `headers[0]: "p:partition": partition placement is route.partition_column: p`},
		{"header other placement", Config{Headers: []string{"p:body:x"}}, `placement "body" is not supported`},
		{"header too many parts", Config{Headers: []string{"a:header:b:c"}}, "too many"},
		{"header clashes with builtin", Config{Headers: []string{"uuid:id"}}, `headers[0]: header "id" is already sent`},
		{"header duplicate", Config{Headers: []string{"a:x", "b:x"}}, `headers[1]: header "x"`},
		{"debezium builtin only id", Config{Preset: PresetDebezium, Headers: []string{"type:event_type"}}, ""},
		{"column spaces", Config{ColumnNames: ColumnNames{Payload: " body"}}, "columns.payload"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if tc.want == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate = %v, want an error containing %q", err, tc.want)
			}
			if _, err := New(tc.cfg); err == nil {
				t.Fatal("New accepted a config Validate refused")
			}
		})
	}
}

type golden struct {
	Record *jsonRecord `json:"record,omitempty"`
	Error  string      `json:"error,omitempty"`
}

type jsonRecord struct {
	Topic     string       `json:"topic"`
	Key       *string      `json:"key"`
	Value     *string      `json:"value"`
	Headers   []jsonHeader `json:"headers"`
	Timestamp string       `json:"timestamp"`
	// Partition is the record's partition: its own, or the one Kafka's
	// Java producer picks for the key over 6 partitions (connect goldens).
	Partition *int32 `json:"partition,omitempty"`
	// Warning is why the route sent the row otherwise than configured
	// (Record.Warning), which the pipeline logs.
	Warning string `json:"warning,omitempty"`
}

type jsonHeader struct {
	Key   string  `json:"key"`
	Value *string `json:"value"`
}

// text renders bytes for the golden files: nil is JSON null, valid UTF-8 is
// a string, anything else is marked as hex.
func text(b []byte) *string {
	if b == nil {
		return nil
	}
	s := string(b)
	if !utf8.Valid(b) {
		s = "hex:" + hex.EncodeToString(b)
	}
	return &s
}

func render(r outboxcdc.Record) *jsonRecord {
	j := &jsonRecord{Topic: r.Topic, Key: text(r.Key), Value: text(r.Value), Headers: []jsonHeader{}, Timestamp: r.Timestamp.Format(time.RFC3339Nano),
		Warning: r.Warning}
	for _, h := range r.Headers {
		j.Headers = append(j.Headers, jsonHeader{Key: h.Key, Value: text(h.Value)})
	}
	return j
}

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }

func checkGolden(t *testing.T, path string, got golden) {
	t.Helper()
	b, err := json.MarshalIndent(got, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	b = append(b, '\n')
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./router -update to create it)", err)
	}
	if !bytes.Equal(b, want) {
		t.Errorf("%s differs (run with -update after checking the change):\ngot:\n%s\nwant:\n%s", path, b, want)
	}
}

func BenchmarkRoute(b *testing.B) {
	for _, bc := range []struct {
		name string
		cfg  Config
		ev   outboxcdc.Event
	}{
		{"seed", DefaultConfig(), seedEvent()},
		{"debezium", Config{Preset: PresetDebezium}, seedEvent()},
		{"seed_2_extra_headers", Config{Topic: "shop.{aggregate_type}.{event_type}", Headers: []string{"trace_id", "tenant:x-tenant"}},
			withExtra(seedEvent(), outboxcdc.Column{Name: "trace_id", Value: []byte("00-4bf92f3577b34da6-01")}, outboxcdc.Column{Name: "tenant", Value: []byte("acme")})},
		{"literal_topic", Config{Topic: "orders"}, seedEvent()},
	} {
		b.Run(bc.name, func(b *testing.B) {
			r, err := New(bc.cfg)
			if err != nil {
				b.Fatal(err)
			}
			ev := bc.ev
			b.ReportAllocs()
			for b.Loop() {
				if _, err := r.Route(&ev); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestRoutePayloadOptions pins what the golden JSON shows for the payload
// options: a tombstone is a nil value with the key kept, and the JSON check
// only applies with payload_format: json.
func TestRoutePayloadOptions(t *testing.T) {
	cases := []struct {
		name      string
		cfg       Config
		payload   []byte
		tombstone bool
		bad       bool
	}{
		{"null, option off", DefaultConfig(), nil, false, true},
		{"empty, option off", DefaultConfig(), []byte{}, false, false},
		{"null, option on", Config{TombstoneOnEmptyPayload: true}, nil, true, false},
		{"empty, option on", Config{TombstoneOnEmptyPayload: true}, []byte{}, true, false},
		{"not json, any", DefaultConfig(), []byte("plain text"), false, false},
		{"not json, json", Config{PayloadFormat: PayloadJSON}, []byte("plain text"), false, true},
		{"json scalar, json", Config{PayloadFormat: PayloadJSON}, []byte(`"a string"`), false, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, err := New(c.cfg)
			if err != nil {
				t.Fatal(err)
			}
			ev := seedEvent()
			ev.Payload = c.payload
			rec, err := r.Route(&ev)
			if (err != nil) != c.bad {
				t.Fatalf("error %v, want bad=%v", err, c.bad)
			}
			if err != nil {
				return
			}
			if (rec.Value == nil) != c.tombstone {
				t.Fatalf("value %q (nil=%v), want tombstone=%v", rec.Value, rec.Value == nil, c.tombstone)
			}
			if string(rec.Key) != ev.AggregateID {
				t.Fatalf("key %q", rec.Key)
			}
		})
	}
	if _, err := New(Config{PayloadFormat: "xml"}); err == nil || !strings.Contains(err.Error(), "payload_format:") {
		t.Fatalf("payload_format xml: %v", err)
	}
}

// TestTraceContextPassthrough: W3C trace context stored in outbox columns
// reaches the record as traceparent/tracestate headers, byte for byte.
func TestTraceContextPassthrough(t *testing.T) {
	r, err := New(Config{Headers: []string{"traceparent", "tracestate"}})
	if err != nil {
		t.Fatal(err)
	}
	if extra := r.Columns().Extra; len(extra) != 2 || extra[0] != "traceparent" || extra[1] != "tracestate" {
		t.Fatalf("columns asked of the source: %v", extra)
	}
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	ev := seedEvent()
	ev.Extra = []outboxcdc.Column{{Name: "traceparent", Value: []byte(tp)}, {Name: "tracestate", Value: []byte("congo=t61rcWkgMzE")}}
	rec, err := r.Route(&ev)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, h := range rec.Headers {
		got[h.Key] = string(h.Value)
	}
	if got["traceparent"] != tp || got["tracestate"] != "congo=t61rcWkgMzE" {
		t.Fatalf("headers %v", got)
	}
}

// TestRouteTimestamp: route.timestamp picks the record timestamp; the
// default leaves it zero, so the sink stamps the time of production.
func TestRouteTimestamp(t *testing.T) {
	for _, c := range []struct {
		cfg  string
		want time.Time
	}{
		{"", time.Time{}},
		{TimestampProduce, time.Time{}},
		{TimestampCommit, commit},
	} {
		cfg := DefaultConfig()
		if c.cfg != "" {
			cfg.Timestamp = c.cfg
		} else {
			cfg = Config{}
		}
		r, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		ev := seedEvent()
		rec, err := r.Route(&ev)
		if err != nil {
			t.Fatal(err)
		}
		if !rec.Timestamp.Equal(c.want) {
			t.Errorf("route.timestamp %q: record timestamp %v, want %v", c.cfg, rec.Timestamp, c.want)
		}
	}
	// A timestamp column (Debezium's table.field.event.timestamp)
	// overrides route.timestamp either way; a NULL one falls back to it.
	colTime := time.Date(2026, 3, 14, 15, 9, 27, 250e6, time.UTC)
	for _, c := range []struct {
		cfg  string
		null bool
		want time.Time
	}{
		{TimestampProduce, false, colTime},
		{TimestampCommit, false, colTime},
		{TimestampProduce, true, time.Time{}},
		{TimestampCommit, true, commit},
	} {
		cfg := DefaultConfig()
		cfg.Timestamp = c.cfg
		cfg.ColumnNames.Timestamp = "created_at"
		r, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		col := outboxcdc.Column{Name: "created_at", Value: []byte("2026-03-14 15:09:27.25")}
		if c.null {
			col = outboxcdc.Column{Name: "created_at", Null: true}
		}
		ev := withExtra(seedEvent(), col)
		rec, err := r.Route(&ev)
		if err != nil {
			t.Fatal(err)
		}
		if !rec.Timestamp.Equal(c.want) {
			t.Errorf("route.timestamp %q, timestamp column (NULL %v): record timestamp %v, want %v", c.cfg, c.null, rec.Timestamp, c.want)
		}
	}
	if DefaultConfig().Timestamp != TimestampProduce {
		t.Errorf("default route.timestamp is %q", DefaultConfig().Timestamp)
	}
	cfg := DefaultConfig()
	cfg.Timestamp = "event"
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "timestamp:") {
		t.Errorf("Validate = %v", err)
	}
}

// TestContextHeadersRunID: without a run id given, every Router draws a
// new one (a new start of the connector), shared by the routes of all its
// tables; the header is a UUID.
func TestContextHeadersRunID(t *testing.T) {
	cfg := Config{ContextHeaders: ContextHeadersConfig{Enabled: true, LogicalName: "orders", ConnectorName: "mysql", RunID: true},
		Tables: map[string]TableRoute{"shop.other": {Topic: "other"}}}
	runID := func(r *Router, schema, table string) string {
		ev := seedEvent()
		ev.Schema, ev.Table = schema, table
		rec, err := r.Route(&ev)
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range rec.Headers {
			if h.Key == HeaderRunID {
				return string(h.Value)
			}
		}
		t.Fatalf("no %s header in %v", HeaderRunID, rec.Headers)
		return ""
	}
	r1, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r2, _ := New(cfg)
	a, b := runID(r1, "shop", "outbox_message"), runID(r1, "shop", "other")
	if _, err := uuid.Parse(a); err != nil {
		t.Fatalf("runId %q is not a UUID", a)
	}
	if a != b {
		t.Errorf("two tables of one connector send runIds %s and %s", a, b)
	}
	if c := runID(r2, "shop", "outbox_message"); c == a {
		t.Errorf("two starts send the same runId %s", a)
	}
}

func TestContextHeadersConfigErrors(t *testing.T) {
	on := ContextHeadersConfig{Enabled: true, LogicalName: "orders", ConnectorName: "mysql"}
	for _, tc := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"no logical name", Config{ContextHeaders: ContextHeadersConfig{Enabled: true, ConnectorName: "mysql"}}, "context_headers.logical_name"},
		{"no connector name", Config{ContextHeaders: ContextHeadersConfig{Enabled: true, LogicalName: "x"}}, "context_headers.connector_name"},
		{"header repeated", Config{ContextHeaders: on, Headers: []string{"tenant:__debezium.context.taskId"}}, "sent by route.context_headers"},
	} {
		if err := tc.cfg.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Validate = %v, want %q", tc.name, err, tc.want)
		}
	}
	if err := (Config{Headers: []string{"tenant:__debezium.context.taskId"}}).Validate(); err != nil {
		t.Errorf("context headers off: the header name is free, got %v", err)
	}
}
