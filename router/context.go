package router

import (
	"github.com/google/uuid"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
)

// Debezium's context headers: Debezium 3.2 adds connectorLogicalName,
// taskId and connectorName to every record its connectors produce, 3.2.1
// makes them optional (extended.headers.enabled, default true) and 3.4
// adds runId. The Outbox EventRouter keeps the source record's headers,
// so they come before its id header. Each is a string header (Connect's
// STRING schema, not optional), written by the header converter like any
// other header.
const (
	HeaderConnectorLogicalName = "__debezium.context.connectorLogicalName"
	HeaderTaskID               = "__debezium.context.taskId"
	HeaderConnectorName        = "__debezium.context.connectorName"
	HeaderRunID                = "__debezium.context.runId"
)

// debeziumTaskID is the task id of every Debezium MySQL, MariaDB and
// PostgreSQL connector: they run one task, "0".
const debeziumTaskID = "0"

// ContextHeadersConfig is route.context_headers.
type ContextHeadersConfig struct {
	// Enabled adds Debezium's context headers to every record, before the
	// preset's headers, as Debezium 3.2 and later do by default
	// (extended.headers.enabled): `__debezium.context.connectorLogicalName`,
	// `__debezium.context.taskId` ("0"), `__debezium.context.connectorName`
	// and `__debezium.context.runId`. Off by default: they
	// describe a Debezium task, not the event, and Debezium before 3.2
	// sends none (docs/migration.md).
	Enabled bool `yaml:"enabled"`
	// LogicalName is the value of the
	// `__debezium.context.connectorLogicalName` header: Debezium's
	// topic.prefix. Empty: route.converters.topic_prefix, else the
	// connector name.
	LogicalName string `yaml:"logical_name"`
	// ConnectorName is the value of the `__debezium.context.connectorName`
	// header: the Debezium connector the records replace, mysql, mariadb (Debezium's MariaDB connector)
	// or postgresql. Empty: mysql or postgresql, after source.type.
	ConnectorName string `yaml:"connector_name"`
	// RunID adds the `__debezium.context.runId` header, a random UUID new
	// at every start of the connector, as Debezium 3.4 and later send; off matches Debezium
	// 3.2 and 3.3.
	RunID bool `yaml:"run_id"`
	// RunIDValue is the runId sent; empty: a new one per Router.
	RunIDValue string `yaml:"-"`
}

// contextHeaders returns the context headers, written in the header
// format of conv (nil: raw bytes), or nil when they are off. The values
// are shared by every record.
func (c Config) contextHeaders(conv *connectConv) ([]outboxcdc.Header, error) {
	ch := c.ContextHeaders
	if !ch.Enabled {
		return nil, nil
	}
	if ch.LogicalName == "" {
		return nil, outboxcdc.KeyErrorf("context_headers.logical_name", "", "required with context_headers.enabled: Debezium's topic.prefix")
	}
	if ch.ConnectorName == "" {
		return nil, outboxcdc.KeyErrorf("context_headers.connector_name", "", "required with context_headers.enabled: mysql, mariadb or postgresql")
	}
	kv := [][2]string{
		{HeaderConnectorLogicalName, ch.LogicalName},
		{HeaderTaskID, debeziumTaskID},
		{HeaderConnectorName, ch.ConnectorName},
	}
	if ch.RunID {
		id := ch.RunIDValue
		if id == "" {
			id = uuid.NewString()
		}
		kv = append(kv, [2]string{HeaderRunID, id})
	}
	str := (&cschema{typ: tString}).render()
	out := make([]outboxcdc.Header, 0, len(kv))
	for _, h := range kv {
		v := []byte(h[1])
		if conv != nil && conv.headers != ConvRaw {
			var err error
			if v, err = conv.encodeHeader(str, h[1]); err != nil {
				return nil, outboxcdc.KeyErrorf("context_headers", "", "header %s: %v", h[0], err)
			}
		}
		out = append(out, outboxcdc.Header{Key: h[0], Value: v})
	}
	return out, nil
}

// checkContextHeaderKeys refuses a configured header that a context
// header would repeat.
func (c Config) checkContextHeaderKeys(headers []headerSpec) error {
	if !c.ContextHeaders.Enabled {
		return nil
	}
	for _, h := range headers {
		switch h.key {
		case HeaderConnectorLogicalName, HeaderTaskID, HeaderConnectorName, HeaderRunID:
			return outboxcdc.KeyErrorf("headers", "", "header %q is sent by route.context_headers; give column %q another alias", h.key, h.column)
		}
	}
	return nil
}
