package main

import (
	"cmp"
	"errors"
	"fmt"
	"net"
	"os"
	"reflect"
	"sort"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
	"github.com/outbox-cdc/outbox-cdc/binlog"
	"github.com/outbox-cdc/outbox-cdc/checkpoint"
	"github.com/outbox-cdc/outbox-cdc/ha"
	"github.com/outbox-cdc/outbox-cdc/lifecycle"
	"github.com/outbox-cdc/outbox-cdc/router"
	"github.com/outbox-cdc/outbox-cdc/sink"
	"github.com/outbox-cdc/outbox-cdc/sink/httpsink"
	"github.com/outbox-cdc/outbox-cdc/sink/natsjs"
	"github.com/outbox-cdc/outbox-cdc/sink/rabbitmq"
	"github.com/outbox-cdc/outbox-cdc/sink/redisstream"
	"github.com/outbox-cdc/outbox-cdc/sink/sns"
	"github.com/outbox-cdc/outbox-cdc/sink/sqs"
	"github.com/outbox-cdc/outbox-cdc/wal"
)

// Config is the whole configuration file. Each section's fields belong to
// the package that uses them; this struct only assembles them.
type Config struct {
	// Name identifies the connector: it derives the MySQL server_id, the
	// Postgres slot and publication, the transactional id and the
	// dead-letter topic unless they are set.
	Name       string                   `yaml:"name"`
	Source     SourceConfig             `yaml:"source"`
	Route      router.Config            `yaml:"route"`
	Sink       SinkConfig               `yaml:"sink"`
	Checkpoint CheckpointConfig         `yaml:"checkpoint"`
	Pipeline   outboxcdc.PipelineConfig `yaml:"pipeline"`
	HTTP       HTTPConfig               `yaml:"http"`
	Log        LogConfig                `yaml:"log"`
	HA         ha.Config                `yaml:"ha"`
	// Lifecycle marks delivered rows sent and cleans old ones up.
	Lifecycle lifecycle.Config `yaml:"lifecycle"`
	// Delivery is at-least-once or exactly-once (Kafka transactions and
	// read_committed consumers; see docs/delivery.md).
	Delivery string `yaml:"delivery"`
}

// SourceConfig selects the source; only the chosen type's section is used.
// In the file the type's keys sit directly under source: (source.dsn, ...).
type SourceConfig struct {
	// Type is the source database: mysql (MySQL or MariaDB) or postgres.
	Type     string        `yaml:"type"`
	MySQL    binlog.Config `yaml:"-"`
	Postgres wal.Config    `yaml:"-"`
}

// SinkConfig selects the sink. The Kafka keys sit directly under sink:;
// for another type its own section's keys do (see sinkKinds), and only
// the chosen type's are used.
type SinkConfig struct {
	// Type is the broker: kafka, rabbitmq, nats, redis, sqs, sns, http (webhooks),
	// or stdout (one JSON line per record, for trying things out).
	Type             string `yaml:"type"`
	sink.KafkaConfig `yaml:",inline"`
	sink.TxnConfig   `yaml:",inline"`   // exactly-once only
	RabbitMQ         rabbitmq.Config    `yaml:"-"`
	NATS             natsjs.Config      `yaml:"-"`
	Redis            redisstream.Config `yaml:"-"`
	SQS              sqs.Config         `yaml:"-"`
	SNS              sns.Config         `yaml:"-"`
	HTTP             httpsink.Config    `yaml:"-"`
}

// CheckpointConfig selects the checkpoint store.
type CheckpointConfig struct {
	// Type is the store: file, or table (a row in the source database,
	// for HA); with exactly-once it holds the witness of the progress in
	// Kafka, and kafka means file.
	Type                   string `yaml:"type"`
	checkpoint.FileConfig  `yaml:",inline"`
	checkpoint.TableConfig `yaml:",inline"` // type: table
}

// HTTPConfig is the metrics and health endpoint.
type HTTPConfig struct {
	// Listen is the host:port of /metrics, /healthz and /readyz; empty
	// turns the endpoint off. Loopback by default: expose it deliberately.
	Listen string `yaml:"listen"`
	// Auth guards the REST API's changes (restapi.go).
	Auth HTTPAuthConfig `yaml:"auth"`
	// ReadOnly refuses every change through the management API (pause,
	// resume, stop, restart, offsets) with 403: this listener only reads.
	ReadOnly bool `yaml:"read_only"`
	// TLS serves the listener over HTTPS, and with a client CA asks
	// clients for certificates (mutual TLS).
	TLS HTTPTLSConfig `yaml:"tls"`
}

// HTTPTLSConfig is HTTPS on the listener (httptls.go).
type HTTPTLSConfig struct {
	// CertFile is the listener's certificate chain (PEM, the server's
	// certificate first). Set it with key_file to serve HTTPS; the pair is
	// read again when either file changes, so a rotated certificate is
	// served without a restart.
	CertFile string `yaml:"cert_file"`
	// KeyFile is the private key of cert_file (PEM).
	KeyFile string `yaml:"key_file"`
	// ClientCAFile is a PEM bundle of the CAs that sign client
	// certificates. Set, the listener asks every client for a certificate
	// and checks it against these CAs (mutual TLS); see client_auth.
	ClientCAFile string `yaml:"client_ca_file"`
	// ClientAuth says which requests need a client certificate signed by
	// client_ca_file: required (every request, probes and /metrics too;
	// the handshake fails without one) or changes (only the management
	// API's changes, answered 401 without one, so that the kubelet and
	// Prometheus, which present none, keep probing and scraping). Default
	// required when client_ca_file is set.
	ClientAuth string `yaml:"client_auth"`
}

// HTTPAuthConfig is the REST API's authentication.
type HTTPAuthConfig struct {
	// Token, when set, must come with every request of the management API
	// that changes something (pause, resume, stop, restart, offsets
	// PATCH/DELETE) as Authorization: Bearer TOKEN, else 401; reads,
	// /metrics and the probes stay open. Prefer token_file.
	Token string `yaml:"token"`
}

// LogConfig sets the log output.
type LogConfig struct {
	Level  string `yaml:"level"`  // debug | info | warn | error
	Format string `yaml:"format"` // auto | json | console
	// ProgressInterval is the least time between two progress lines while
	// the source is behind (its last transaction read committed 10 s ago
	// or more) or publishing pending rows (source.start: pending). The
	// first line of a catch-up and its "caught up" line are logged at once.
	ProgressInterval time.Duration `yaml:"progress_interval"`
}

func defaultConfig() Config {
	return Config{
		Name:     "outbox-cdc",
		Source:   SourceConfig{Type: binlog.Kind, MySQL: binlog.DefaultConfig(), Postgres: wal.DefaultConfig()},
		Route:    router.DefaultConfig(),
		Delivery: deliveryAtLeastOnce,
		Sink: SinkConfig{Type: "kafka", KafkaConfig: sink.DefaultKafkaConfig(), TxnConfig: sink.DefaultTxnConfig(),
			RabbitMQ: rabbitmq.DefaultConfig(), NATS: natsjs.DefaultConfig(), Redis: redisstream.DefaultConfig(),
			SQS: sqs.DefaultConfig(), SNS: sns.DefaultConfig(), HTTP: httpsink.DefaultConfig()},
		Checkpoint: CheckpointConfig{Type: "file", FileConfig: checkpoint.DefaultFileConfig(), TableConfig: checkpoint.DefaultTableConfig()},
		HA:         ha.DefaultConfig(),
		Lifecycle:  lifecycle.DefaultConfig(),
		Pipeline:   outboxcdc.DefaultPipelineConfig(),
		HTTP:       HTTPConfig{Listen: "127.0.0.1:9464"},
		Log:        LogConfig{Level: "info", Format: "auto", ProgressInterval: outboxcdc.DefaultProgressInterval},
	}
}

// validKeys is every key path the file and the environment may set, given
// the source and sink types.
func validKeys(sourceType, sinkType string) keySet {
	keys := keySet{}
	keysOf(reflect.TypeOf(Config{}), "", keys)
	cfg := defaultConfig()
	if k, ok := sinkKinds[sinkType]; ok && k.config != nil {
		// Another broker's keys replace the Kafka ones under sink.
		for p := range keys {
			if strings.HasPrefix(p, "sink.") && p != "sink.type" {
				delete(keys, p)
			}
		}
		keysOf(reflect.TypeOf(k.config(&cfg.Sink)), "sink", keys)
	}
	if k, ok := sourceKinds[sourceType]; ok {
		keysOf(reflect.TypeOf(k.config(&cfg.Source)), "source", keys)
	} else {
		// Unknown type: accept every source's keys so the type error is the one reported.
		for _, k := range sourceKinds {
			keysOf(reflect.TypeOf(k.config(&cfg.Source)), "source", keys)
		}
	}
	withFileKeys(keys)
	return keys
}

// loadConfig reads the file at path (optional), applies OUTBOX_CDC_*
// environment overrides, decodes strictly and validates every section. Any
// mistake is a *configError. The file must hold one connector (the
// single-connector layout or a connectors: list of one); see
// loadProcessConfig for several.
func loadConfig(path string, env map[string]string) (Config, error) {
	return loadConnectorConfig(path, "", env)
}

// readConfigFile parses the YAML file at path; an empty path is an empty
// document.
func readConfigFile(path string) (yaml.Node, error) {
	var root yaml.Node
	if path != "" {
		raw, err := os.ReadFile(path)
		if err != nil {
			return root, configErrorf("read configuration: %v", err)
		}
		if err := yaml.Unmarshal(raw, &root); err != nil {
			return root, configErrorf("%s: %v", path, err)
		}
	}
	return root, nil
}

// configFromNode is loadConfig on a parsed document: one connector's keys
// plus http and log. It also returns the keys valid for the connector's
// source and sink types. checkEnv rejects OUTBOX_CDC_* variables that
// match none of them (a connectors: list checks them against every
// connector's keys instead, see loadProcessConfig).
func configFromNode(root *yaml.Node, path string, env map[string]string, checkEnv bool) (Config, keySet, error) {
	cfg := defaultConfig()
	// The source type decides which source keys exist.
	if v, ok := env[envName("source.type")]; ok {
		cfg.Source.Type = v
	} else if n := lookup(root, "source.type"); n != nil {
		cfg.Source.Type = n.Value
	}
	if _, ok := sourceKinds[cfg.Source.Type]; !ok {
		return Config{}, nil, configErrorf("source.type: unknown source %q (want %s)", cfg.Source.Type, sourceTypeNames())
	}
	// So does the sink type: its keys, and what route.topic names.
	if v, ok := env[envName("sink.type")]; ok {
		cfg.Sink.Type = v
	} else if n := lookup(root, "sink.type"); n != nil {
		cfg.Sink.Type = n.Value
	}
	kind, ok := sinkKinds[cfg.Sink.Type]
	if !ok {
		return Config{}, nil, configErrorf("sink.type: unknown sink %q (want %s)", cfg.Sink.Type, sinkTypeNames())
	}
	if kind.dest != nil {
		cfg.Route.Destination, cfg.Route.Topic = kind.dest, kind.dest.Default
		cfg.Pipeline.DLQTopicCheck = dlqTopicCheck(kind.dest)
	}
	keys := validKeys(cfg.Source.Type, cfg.Sink.Type)
	if _, err := applyEnv(root, keys, env); err != nil {
		return Config{}, nil, err
	}
	if checkEnv {
		if err := warnUnknownEnv(env, keys); err != nil {
			return Config{}, nil, err
		}
	}
	if err := checkKeys(root, "", keys); err != nil {
		var ce *configError
		if errors.As(err, &ce) {
			ce.File = path
		}
		return Config{}, nil, err
	}
	if err := resolveFileKeys(root, "", keys, os.ReadFile); err != nil {
		return Config{}, nil, err
	}
	if len(root.Content) > 0 {
		doc := root.Content[0]
		sinkNode := lookup(root, "sink")
		if kind.config != nil && sinkNode != nil {
			// The broker's keys are not the Kafka keys SinkConfig inlines.
			doc = withKeyNode(doc, "sink", onlyKey(sinkNode, "type"))
		}
		if err := decode(doc, &cfg); err != nil {
			return Config{}, nil, err
		}
		if n := lookup(root, "source"); n != nil {
			if err := decodeAt("source", withoutKey(n, "type"), cfg.source().config(&cfg.Source)); err != nil {
				return Config{}, nil, err
			}
		}
		if kind.config != nil && sinkNode != nil {
			if err := decodeAt("sink", withoutKey(sinkNode, "type"), kind.config(&cfg.Sink)); err != nil {
				return Config{}, nil, err
			}
		}
	}
	if cfg.Pipeline.OnError == outboxcdc.OnErrorDLQ && cfg.Pipeline.DLQTopic == "" {
		cfg.Pipeline.DLQTopic = outboxcdc.DefaultDeadLetterTopic(cfg.Name)
	}
	if ce := &cfg.Route.CloudEvents; ce.Mode != "" && ce.Mode != router.CloudEventsOff && ce.Source == "" {
		ce.Source = "/outbox-cdc/" + cfg.Name
	}
	if ch := &cfg.Route.ContextHeaders; ch.Enabled { // route.context_headers' defaults
		if ch.LogicalName == "" {
			ch.LogicalName = cmp.Or(cfg.Route.Converters.TopicPrefix, cfg.Name)
		}
		if ch.ConnectorName == "" {
			ch.ConnectorName = debeziumConnectorName[cfg.Source.Type]
		}
	}
	if err := cfg.Validate(); err != nil {
		return Config{}, nil, withLines(err, root, path)
	}
	return cfg, keys, nil
}

// warnUnknownEnv rejects OUTBOX_CDC_* variables that match no key, which
// are almost always typos. OUTBOX_CDC_TEST_* belong to the test suite.
func warnUnknownEnv(env map[string]string, keys keySet) error {
	known := map[string]bool{}
	for p := range keys {
		known[envName(p)] = true
	}
	var bad []string
	for k := range env {
		if strings.HasPrefix(k, "OUTBOX_CDC_") && !strings.HasPrefix(k, "OUTBOX_CDC_TEST_") && !known[k] {
			bad = append(bad, k)
		}
	}
	if len(bad) == 0 {
		return nil
	}
	sort.Strings(bad)
	byEnv := keySet{}
	for p, t := range keys {
		byEnv[envName(p)] = t
	}
	return configErrorf("environment variable %s matches no configuration key%s", bad[0], didYouMean(bad[0], byEnv))
}

// onlyKey returns a copy of mapping m with key alone.
func onlyKey(m *yaml.Node, key string) *yaml.Node {
	c := *m
	c.Content = nil
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			c.Content = append(c.Content, m.Content[i], m.Content[i+1])
		}
	}
	return &c
}

// withKeyNode returns a copy of mapping m whose key holds v.
func withKeyNode(m *yaml.Node, key string, v *yaml.Node) *yaml.Node {
	c := *m
	c.Content = append([]*yaml.Node(nil), m.Content...)
	for i := 0; i+1 < len(c.Content); i += 2 {
		if c.Content[i].Value == key {
			c.Content[i+1] = v
		}
	}
	return &c
}

func withoutKey(m *yaml.Node, key string) *yaml.Node {
	c := *m
	c.Content = nil
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value != key {
			c.Content = append(c.Content, m.Content[i], m.Content[i+1])
		}
	}
	return &c
}

// Validate checks every section; the first section with problems is
// returned as a *configError naming the full key (see sectionError).
func (c Config) Validate() error {
	if strings.TrimSpace(c.Name) == "" {
		return configErrorf("name: must not be empty")
	}
	src, ok := sourceKinds[c.Source.Type]
	if !ok {
		return configErrorf("source.type: unknown source %q (want %s)", c.Source.Type, sourceTypeNames())
	}
	if err := src.validate(c); err != nil {
		return sectionError("source", err)
	}
	if err := c.Route.Validate(); err != nil {
		return sectionError("route", err)
	}
	if err := c.validateTables(); err != nil {
		return err
	}
	if err := c.validateSink(); err != nil {
		return err
	}
	switch c.Checkpoint.Type {
	case "file":
		if err := c.Checkpoint.FileConfig.Validate(); err != nil {
			return sectionError("checkpoint", err)
		}
	case "table", "kafka":
		// validateDelivery
	default:
		return configErrorf("checkpoint.type: unknown checkpoint store %q (want file, table or kafka)", c.Checkpoint.Type)
	}
	if err := c.validateDelivery(); err != nil {
		return err
	}
	if err := c.validateStepDown(); err != nil { // stepdown.go
		return err
	}
	if err := c.Lifecycle.Validate(); err != nil {
		return sectionError("lifecycle", err)
	}
	if c.Lifecycle.MarkSent && c.Route.OnUpdate != "" && c.Route.OnUpdate != router.OnUpdateSkip {
		return configErrorf("route.on_update: %s would trip on the connector's own lifecycle.mark_sent UPDATEs of the outbox table; use one or the other", c.Route.OnUpdate)
	}
	if err := c.Pipeline.Validate(); err != nil {
		return sectionError("pipeline", err)
	}
	if c.HTTP.Listen != "" {
		if _, _, err := net.SplitHostPort(c.HTTP.Listen); err != nil {
			return configErrorf("http.listen: %q is not host:port (%v)", c.HTTP.Listen, err)
		}
	}
	if err := c.HTTP.TLS.validate(); err != nil {
		return err
	}
	switch c.Log.Level {
	case "debug", "info", "warn", "error":
	default:
		return configErrorf("log.level: %q is not one of debug, info, warn, error", c.Log.Level)
	}
	switch c.Log.Format {
	case "auto", "json", "console":
	default:
		return configErrorf("log.format: %q is not one of auto, json, console", c.Log.Format)
	}
	if c.Log.ProgressInterval < time.Second {
		return configErrorf("log.progress_interval: %s is below the least, 1s", c.Log.ProgressInterval)
	}
	return nil
}

func (c Config) String() string {
	return fmt.Sprintf("source=%s sink=%s checkpoint=%s", c.Source.Type, c.Sink.Type, c.Checkpoint.Type)
}

// sourceTables is source.tables of the chosen source type.
func (c Config) sourceTables() []string {
	if k, ok := sourceKinds[c.Source.Type]; ok {
		return k.tables(c)
	}
	return nil
}

// validateTables refuses what works on one outbox table only when
// source.tables names several.
func (c Config) validateTables() error {
	if len(c.sourceTables()) == 0 {
		if len(c.Route.Tables) > 0 {
			return configErrorf("route.tables: per-table routes need source.tables")
		}
		return nil
	}
	if c.Route.NeedsTable() {
		return configErrorf("route.converters: with source.tables the converters cannot read one outbox table's column types; " +
			"give every converted column's type in route.converters.column_types")
	}
	if c.Lifecycle.Enabled() {
		return configErrorf("lifecycle: marks and cleans up one outbox table; it cannot be used with source.tables")
	}
	return nil
}

// debeziumConnectorName is the connectorName context header of the
// Debezium connector each source type replaces (route.context_headers);
// Debezium's MariaDB connector says mariadb, set by hand.
var debeziumConnectorName = map[string]string{binlog.Kind: "mysql", wal.Kind: "postgresql"}
