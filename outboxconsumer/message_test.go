package outboxconsumer_test

import (
	"testing"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
	"github.com/outbox-cdc/outbox-cdc/outboxconsumer"
	"github.com/outbox-cdc/outbox-cdc/router"
)

// TestFromKafkaReadsEveryRouteForm: records made by the relay's own router
// under each preset, converter and CloudEvents mode give back the message
// id, aggregate id, event type and sequence.
func TestFromKafkaReadsEveryRouteForm(t *testing.T) {
	const id = "0190d1f2-7a3b-7c4d-8e5f-0123456789ab"
	types := []string{"id=uuid", "aggregateid=string", "aggregatetype=string", "type=string", "payload=json?", "seq=int64?",
		"message_id=string", "aggregate_id=string", "aggregate_type=string", "event_type=string", "aggregate_seq=int64?"}
	cases := []struct {
		name   string
		route  func(c *router.Config)
		fields outboxconsumer.Fields
		debez  bool
	}{
		{"seed raw", func(c *router.Config) { c.Headers = []string{"aggregate_seq"} },
			outboxconsumer.Fields{Sequence: "aggregate_seq"}, false},
		{"debezium raw", func(c *router.Config) {
			c.Preset = router.PresetDebezium
			c.Headers = []string{"type:header:eventType", "seq"}
		},
			outboxconsumer.Fields{ID: "id", AggregateType: "-", EventType: "eventType", Sequence: "seq"}, true},
		{"debezium json with schemas (Debezium Server)", func(c *router.Config) {
			c.Preset = router.PresetDebezium
			c.Headers = []string{"type:header:eventType", "seq"}
			c.Converters = router.ConvertersConfig{Key: "json", Value: "json", Headers: "json", KeySchemas: true, ValueSchemas: true, HeaderSchemas: true, ColumnTypes: types}
		}, outboxconsumer.Fields{ID: "id", AggregateType: "-", EventType: "eventType", Sequence: "seq"}, true},
		{"debezium json without schemas", func(c *router.Config) {
			c.Preset = router.PresetDebezium
			c.Headers = []string{"type:header:eventType", "seq"}
			c.Converters = router.ConvertersConfig{Key: "json", Value: "json", Headers: "json", ColumnTypes: types}
		}, outboxconsumer.Fields{ID: "id", AggregateType: "-", EventType: "eventType", Sequence: "seq"}, true},
		{"debezium string key, simple headers (Kafka Connect defaults)", func(c *router.Config) {
			c.Preset = router.PresetDebezium
			c.Headers = []string{"type:header:eventType", "seq"}
			c.Converters = router.ConvertersConfig{Key: "string", Value: "string", Headers: "simple", ColumnTypes: types}
		}, outboxconsumer.Fields{ID: "id", AggregateType: "-", EventType: "eventType", Sequence: "seq"}, true},
		{"seed cloudevents structured", func(c *router.Config) {
			c.Headers = []string{"aggregate_seq"}
			c.CloudEvents = router.CloudEventsConfig{Mode: "structured", Source: "/orders"}
		}, outboxconsumer.Fields{Sequence: "aggregate_seq"}, false},
		{"seed cloudevents binary", func(c *router.Config) {
			c.Headers = []string{"aggregate_seq"}
			c.CloudEvents = router.CloudEventsConfig{Mode: "binary", Source: "/orders"}
		}, outboxconsumer.Fields{Sequence: "aggregate_seq"}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := router.DefaultConfig()
			tc.route(&c)
			r, err := router.New(c)
			if err != nil {
				t.Fatal(err)
			}
			seqCol := "aggregate_seq"
			if tc.debez {
				seqCol = "seq"
			}
			rec, err := r.Route(&outboxcdc.Event{MessageID: id, AggregateType: "ORDER", AggregateID: "SO-1001", EventType: "ORDER_PAID",
				Payload: []byte(`{"total": 10}`), Extra: []outboxcdc.Column{{Name: seqCol, Value: []byte("42")}}, Origin: "test"})
			if err != nil {
				t.Fatal(err)
			}
			hs := make([]outboxconsumer.Header, len(rec.Headers))
			for i, h := range rec.Headers {
				hs[i] = outboxconsumer.Header{Key: h.Key, Value: h.Value}
			}
			m, err := outboxconsumer.FromKafka(rec.Key, rec.Value, hs, tc.fields)
			if err != nil {
				t.Fatalf("%v (headers %q, key %q)", err, rec.Headers, rec.Key)
			}
			wantType := "ORDER"
			if tc.debez {
				wantType = ""
			}
			if m.ID != id || m.AggregateID != "SO-1001" || m.EventType != "ORDER_PAID" || m.AggregateType != wantType || m.Sequence != 42 {
				t.Fatalf("read %+v from key %q headers %q", m, rec.Key, rec.Headers)
			}
		})
	}
	if _, err := outboxconsumer.FromKafka([]byte("k"), nil, nil, outboxconsumer.Fields{}); err != outboxconsumer.ErrNoID {
		t.Fatalf("a record without id header: %v", err)
	}
	if _, err := outboxconsumer.FromKafka([]byte("k"), nil, []outboxconsumer.Header{{Key: "id", Value: []byte("x")}, {Key: "aggregate_seq", Value: []byte("-1")}},
		outboxconsumer.Fields{Sequence: "aggregate_seq"}); err == nil {
		t.Fatal("a negative sequence accepted")
	}
}

// TestOtherBrokerAdapters: the fields the RabbitMQ, NATS and Redis sinks
// write (see sink/rabbitmq, sink/natsjs, sink/redisstream) are read back;
// a NATS copy marked "~<n>" has the original id.
func TestOtherBrokerAdapters(t *testing.T) {
	f := outboxconsumer.Fields{Sequence: "aggregate_seq"}
	check := func(t *testing.T, m outboxconsumer.Message, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		if m.ID != "m-1" || m.AggregateID != "A-1" || m.AggregateType != "ORDER" || m.EventType != "ORDER_PAID" || m.Sequence != 3 || string(m.Value) != `{"n":1}` {
			t.Fatalf("read %+v", m)
		}
	}
	t.Run("rabbitmq", func(t *testing.T) {
		m, err := outboxconsumer.FromAMQP("m-1", "ORDER_PAID", map[string]any{"id": "m-1", "event_type": "ORDER_PAID", "aggregate_type": "ORDER",
			"aggregate_seq": "3", "outbox_cdc.key": "A-1", "tenant": nil}, []byte(`{"n":1}`), f)
		check(t, m, err)
		m, _ = outboxconsumer.FromAMQP("m-1", "", map[string]any{"outbox_cdc.key": "A-1", "outbox_cdc.tombstone": true}, []byte{}, outboxconsumer.Fields{})
		if m.Value != nil {
			t.Fatalf("tombstone read as %q", m.Value)
		}
	})
	t.Run("nats", func(t *testing.T) {
		h := map[string][]string{"Nats-Msg-Id": {"m-1~2"}, "event_type": {"ORDER_PAID"}, "aggregate_type": {"ORDER"},
			"aggregate_seq": {"3"}, "outbox_cdc.key": {"A-1"}, "outbox_cdc.timestamp": {"2026-01-01T00:00:00Z"}}
		m, err := outboxconsumer.FromNATS(h, []byte(`{"n":1}`), f)
		check(t, m, err)
		h["id"] = []string{"m-1"}
		h["Nats-Msg-Id"] = []string{"other"}
		m, err = outboxconsumer.FromNATS(h, []byte(`{"n":1}`), f)
		check(t, m, err)
	})
	t.Run("redis", func(t *testing.T) {
		m, err := outboxconsumer.FromRedisStream(map[string]any{"message_id": "m-1", "key": "A-1", "value": `{"n":1}`, "timestamp": "1",
			"header.id": "m-1", "header.event_type": "ORDER_PAID", "header.aggregate_type": "ORDER", "header.aggregate_seq": "3"}, f)
		check(t, m, err)
	})
}
