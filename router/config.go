package router

import (
	"errors"
	"fmt"
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
	// {event_type}. Everything else is literal and must be legal in a Kafka
	// topic name.
	Topic string `yaml:"topic"`
	// ColumnNames overrides the preset's column name for each role; empty
	// fields keep the preset's name.
	ColumnNames ColumnNames `yaml:"columns"`
	// Headers lists further columns sent as record headers, each
	// "column", "column:alias", "column:header" or "column:header:alias"
	// (the last two are Debezium's table.fields.additional.placement form).
	// A role column may be listed too (e.g. "type:header:eventType").
	Headers []string `yaml:"headers"`
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
	// set by default.
	Timestamp string `yaml:"timestamp"`
}

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
	MessageID     string `yaml:"message_id"`
	AggregateType string `yaml:"aggregate_type"`
	AggregateID   string `yaml:"aggregate_id"`
	EventType     string `yaml:"event_type"`
	Payload       string `yaml:"payload"`
}

// DefaultConfig is the seed preset with Debezium's default topic naming.
func DefaultConfig() Config {
	return Config{Preset: PresetSeed, Topic: DefaultTopic, PayloadFormat: PayloadAny, Timestamp: TimestampProduce}
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
			{key: "id", role: roleMessageID},
			{key: "event_type", role: roleEventType},
			{key: "aggregate_type", role: roleAggregateType},
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
			{key: "id", role: roleMessageID},
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
		return preset{}, fmt.Errorf("route.preset: unknown preset %q (want %s or %s)", c.Preset, PresetSeed, PresetDebezium)
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
	return n
}

func (c Config) topic() string {
	if c.Topic == "" {
		return DefaultTopic
	}
	return c.Topic
}

// Validate checks the configuration without building a Router. Errors name
// the yaml key at fault.
func (c Config) Validate() error {
	_, err := c.compile()
	return err
}

// Columns returns the column names a source must deliver: the role columns
// and, in Extra, the non-role columns the headers ask for. Call it on a
// valid Config; on an invalid one it returns what it can.
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
	for _, entry := range c.Headers {
		col, _, _, err := parseHeaderEntry(entry)
		if err != nil || roleOf(n, col) != roleNone || contains(cols.Extra, col) {
			continue
		}
		cols.Extra = append(cols.Extra, col)
	}
	return cols
}

// compiled is everything Route needs, resolved once.
type compiled struct {
	names    ColumnNames
	columns  outboxcdc.Columns
	template template
	headers  []headerSpec
	// json: the payload must be valid JSON; tombstone: a NULL or empty
	// payload becomes a null value; commitTime: the record timestamp is
	// the commit time (else zero: the sink stamps the production time).
	json, tombstone, commitTime bool
}

func (c Config) compile() (*compiled, error) {
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
	} {
		if strings.TrimSpace(f.val) != f.val {
			return nil, fmt.Errorf("route.columns.%s: column name %q has leading or trailing spaces", f.key, f.val)
		}
	}
	tpl, err := parseTemplate(c.topic())
	if err != nil {
		return nil, fmt.Errorf("route.topic: %w", err)
	}
	cols := c.Columns()
	headers := append([]headerSpec(nil), p.roleHeaders...)
	for i, entry := range c.Headers {
		col, key, _, err := parseHeaderEntry(entry)
		if err != nil {
			return nil, fmt.Errorf("route.headers[%d]: %w", i, err)
		}
		for _, h := range headers {
			if h.key == key {
				return nil, fmt.Errorf("route.headers[%d]: header %q is already sent (by the preset or an earlier entry); give %q an alias with %q",
					i, key, col, col+":other_name")
			}
		}
		h := headerSpec{key: key, role: roleOf(names, col), column: col}
		if h.role == roleNone {
			for j, e := range cols.Extra {
				if e == col {
					h.extraIdx = j
				}
			}
		}
		headers = append(headers, h)
	}
	switch c.PayloadFormat {
	case "", PayloadAny, PayloadJSON:
	default:
		return nil, fmt.Errorf("route.payload_format: %q is not %s or %s", c.PayloadFormat, PayloadAny, PayloadJSON)
	}
	switch c.Timestamp {
	case "", TimestampProduce, TimestampCommit:
	default:
		return nil, fmt.Errorf("route.timestamp: %q is not %s or %s", c.Timestamp, TimestampProduce, TimestampCommit)
	}
	return &compiled{names: names, columns: cols, template: tpl, headers: headers,
		json: c.PayloadFormat == PayloadJSON, tombstone: c.TombstoneOnEmptyPayload,
		commitTime: c.Timestamp == TimestampCommit}, nil
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
	if placement != "header" {
		return "", "", "", fmt.Errorf("%q: placement %q is not supported, only header", entry, placement)
	}
	return col, key, placement, nil
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
