package outboxconsumer

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Message is one delivered outbox event, as the adapters read it from a
// broker message.
type Message struct {
	// ID is the event's message id: the dedupe key.
	ID string
	// AggregateType is empty when the broker message does not carry it
	// (the debezium preset sends no aggregate type header; the topic
	// usually names it).
	AggregateType string
	// AggregateID is the record key.
	AggregateID string
	// EventType is empty when the message does not carry it.
	EventType string
	// Sequence is the per-aggregate sequence (Fields.Sequence), 0 when
	// the message has none.
	Sequence int64
	// Value is the record value as delivered (the payload, or what the
	// route's converters and CloudEvents made of it); nil for a tombstone.
	Value []byte
	// Headers are the message's headers as text (a repeated header keeps
	// its first value; a null one is left out).
	Headers map[string]string
}

// Fields names the headers the adapters read, as the relay's route sends
// them. The zero value is the seed preset's (see SeedFields).
type Fields struct {
	// ID is the message id header; "" is "id", the header both presets
	// send (AMQP and Redis carry the id in a property or field of its own
	// and read this header only when that is missing).
	ID string
	// AggregateType and EventType are the headers of those roles; "" is
	// the seed preset's "aggregate_type" and "event_type". "-" reads none.
	AggregateType string
	EventType     string
	// Sequence is the header holding the per-aggregate sequence
	// (outboxwriter's SequenceConfig.Header); "" reads none.
	Sequence string
}

// SeedFields are the headers of route.preset seed.
func SeedFields() Fields {
	return Fields{ID: "id", AggregateType: "aggregate_type", EventType: "event_type"}
}

// DebeziumFields are the headers of route.preset debezium: only id (the
// Outbox EventRouter's default); eventType is the usual name of the event
// type header a route adds with "type:header:eventType".
func DebeziumFields() Fields { return Fields{ID: "id", AggregateType: "-", EventType: "eventType"} }

func (f Fields) names() (id, aggType, evType string) {
	id, aggType, evType = f.ID, f.AggregateType, f.EventType
	if id == "" {
		id = "id"
	}
	if aggType == "" {
		aggType = "aggregate_type"
	}
	if evType == "" {
		evType = "event_type"
	}
	return
}

// ErrNoID is returned by the adapters for a message that carries no
// message id where the relay puts it: not an outbox message, or a route
// whose id header is named otherwise (Fields.ID).
var ErrNoID = errors.New("outboxconsumer: the message carries no message id")

// fill sets the role fields from headers (values already as text).
func (m *Message) fill(f Fields, get func(name string) (string, bool)) error {
	_, aggType, evType := f.names()
	if m.AggregateType == "" && aggType != "-" {
		m.AggregateType, _ = get(aggType)
	}
	if m.EventType == "" && evType != "-" {
		m.EventType, _ = get(evType)
	}
	if f.Sequence != "" {
		if s, ok := get(f.Sequence); ok && s != "" {
			n, err := strconv.ParseInt(s, 10, 64)
			if err != nil || n <= 0 {
				return fmt.Errorf("outboxconsumer: message %s: sequence header %q is %q, not a positive integer", m.ID, f.Sequence, s)
			}
			m.Sequence = n
		}
	}
	if m.ID == "" {
		return ErrNoID
	}
	return nil
}

// Header is a Kafka record header. franz-go's kgo.RecordHeader converts
// to it as it is (Header(h)); sarama's *sarama.RecordHeader as
// Header{Key: string(h.Key), Value: h.Value}.
type Header struct {
	Key   string
	Value []byte
}

// FromKafka reads a Kafka record written by the relay: the id from the id
// header, the aggregate id from the key, the other roles from their
// headers. The id, key and role headers are read in each form a route can
// write them: as stored (converters raw, the default, or string, or
// Kafka Connect's SimpleHeaderConverter), as JSON text (JsonConverter
// without schemas: "\"7f1c...\""), or as a JsonConverter envelope with
// schemas ({"schema":...,"payload":"7f1c..."}). With CloudEvents the id
// header is still sent. The value is left as delivered.
func FromKafka(key, value []byte, headers []Header, f Fields) (Message, error) {
	m := Message{Value: value, Headers: make(map[string]string, len(headers))}
	for _, h := range headers {
		if h.Value == nil {
			continue
		}
		if _, dup := m.Headers[h.Key]; !dup {
			m.Headers[h.Key] = connectText(h.Value)
		}
	}
	id, _, _ := f.names()
	m.ID = m.Headers[id]
	m.AggregateID = connectText(key)
	return m, m.fill(f, func(n string) (string, bool) { v, ok := m.Headers[n]; return v, ok })
}

// connectText returns the text a Kafka Connect converter wrote: a
// JsonConverter envelope's payload or a JSON string's content, and any
// other bytes as they are.
func connectText(b []byte) string {
	if len(b) < 2 {
		return string(b)
	}
	switch b[0] {
	case '"':
		var s string
		if json.Unmarshal(b, &s) == nil {
			return s
		}
	case '{':
		var env struct {
			Schema  json.RawMessage `json:"schema"`
			Payload json.RawMessage `json:"payload"`
		}
		if json.Unmarshal(b, &env) == nil && env.Schema != nil && env.Payload != nil {
			p := env.Payload
			if len(p) > 0 && p[0] == '"' {
				var s string
				if json.Unmarshal(p, &s) == nil {
					return s
				}
			}
			if string(p) != "null" && p[0] != '{' && p[0] != '[' {
				return string(p) // a number or a boolean
			}
		}
	}
	return string(b)
}

// Header keys the relay's RabbitMQ and NATS sinks add (sink/rabbitmq,
// sink/natsjs).
const (
	HeaderKey       = "outbox_cdc.key"
	HeaderTombstone = "outbox_cdc.tombstone"
	natsMsgID       = "Nats-Msg-Id"
)

// FromAMQP reads a RabbitMQ message written by the relay: the id from
// the message_id property, the event type from the type property, the
// aggregate id from the outbox_cdc.key header. Pass an amqp091 Delivery's
// fields: FromAMQP(d.MessageId, d.Type, d.Headers, d.Body, f).
func FromAMQP(messageID, eventType string, headers map[string]any, body []byte, f Fields) (Message, error) {
	m := Message{ID: messageID, EventType: eventType, Value: body, Headers: make(map[string]string, len(headers))}
	for k, v := range headers {
		if s, ok := amqpText(v); ok {
			m.Headers[k] = s
		}
	}
	if m.ID == "" {
		id, _, _ := f.names()
		m.ID = m.Headers[id]
	}
	m.AggregateID = m.Headers[HeaderKey]
	if b, ok := headers[HeaderTombstone].(bool); ok && b {
		m.Value = nil
	}
	return m, m.fill(f, func(n string) (string, bool) { v, ok := m.Headers[n]; return v, ok })
}

// amqpText renders an AMQP field value as text: strings and byte arrays
// as they are, numbers and booleans in decimal; a void (NULL) or a table
// is left out, and an array (a repeated header) gives its first value.
func amqpText(v any) (string, bool) {
	switch x := v.(type) {
	case nil:
		return "", false
	case string:
		return x, true
	case []byte:
		return string(x), true
	case bool:
		return strconv.FormatBool(x), true
	case int8, int16, int32, int64, int, uint8, uint16, uint32, uint64:
		return fmt.Sprint(x), true
	case float32, float64:
		return fmt.Sprint(x), true
	case []any:
		for _, e := range x {
			if s, ok := amqpText(e); ok {
				return s, true
			}
		}
	}
	return "", false
}

// FromNATS reads a JetStream message written by the relay: the id from
// the route's id header, else from Nats-Msg-Id (without the "~<n>" that
// marks a copy the relay sent again to restore its key's order: such a
// copy is a duplicate of the same event), the aggregate id from the
// outbox_cdc.key header. Pass FromNATS(msg.Header, msg.Data, f) for a
// nats.Msg, FromNATS(msg.Headers(), msg.Data(), f) for a jetstream.Msg.
func FromNATS(header map[string][]string, data []byte, f Fields) (Message, error) {
	m := Message{Value: data, Headers: make(map[string]string, len(header))}
	for k, vs := range header {
		if len(vs) > 0 {
			m.Headers[k] = vs[0]
		}
	}
	// nats.Header keys are canonical MIME keys when set through Set/Add,
	// but the relay (and JetStream) store them as written.
	get := func(n string) (string, bool) {
		if v, ok := m.Headers[n]; ok {
			return v, true
		}
		for k, v := range m.Headers {
			if strings.EqualFold(k, n) {
				return v, true
			}
		}
		return "", false
	}
	id, _, _ := f.names()
	if v, ok := get(id); ok && v != "" {
		m.ID = v
	} else if v, ok := get(natsMsgID); ok {
		m.ID = trimCopyMark(v)
	}
	m.AggregateID, _ = get(HeaderKey)
	if v, _ := get(HeaderTombstone); v == "true" {
		m.Value = nil
	}
	return m, m.fill(f, get)
}

// trimCopyMark drops a "~<digits>" suffix.
func trimCopyMark(id string) string {
	i := strings.LastIndexByte(id, '~')
	if i <= 0 || i == len(id)-1 {
		return id
	}
	for _, c := range id[i+1:] {
		if c < '0' || c > '9' {
			return id
		}
	}
	return id[:i]
}

// Redis stream entry fields the relay writes (sink/redisstream).
const (
	fieldMessageID = "message_id"
	fieldKey       = "key"
	fieldValue     = "value"
	fieldHeader    = "header."
)

// FromRedisStream reads a Redis stream entry written by the relay: the id
// from the message_id field, the aggregate id from key, the value from
// value (absent: a tombstone), headers from the header.<name> fields. Pass
// a go-redis XMessage's Values.
func FromRedisStream(values map[string]any, f Fields) (Message, error) {
	m := Message{Headers: map[string]string{}}
	text := func(v any) (string, bool) {
		switch x := v.(type) {
		case string:
			return x, true
		case []byte:
			return string(x), true
		}
		return "", false
	}
	for k, v := range values {
		s, ok := text(v)
		if !ok {
			continue
		}
		switch {
		case k == fieldMessageID:
			m.ID = s
		case k == fieldKey:
			m.AggregateID = s
		case k == fieldValue:
			m.Value = []byte(s)
		case strings.HasPrefix(k, fieldHeader):
			m.Headers[k[len(fieldHeader):]] = s
		}
	}
	if m.ID == "" {
		id, _, _ := f.names()
		m.ID = m.Headers[id]
	}
	return m, m.fill(f, func(n string) (string, bool) { v, ok := m.Headers[n]; return v, ok })
}

// String names the message for logs: its id and aggregate, never its
// value.
func (m Message) String() string {
	id := m.ID
	if !utf8.ValidString(id) {
		id = strconv.Quote(id)
	}
	return fmt.Sprintf("message %s (%s %s %s)", id, m.AggregateType, m.AggregateID, m.EventType)
}
