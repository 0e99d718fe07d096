package kafka

import (
	"errors"
	"net"
	"time"

	"github.com/IBM/sarama"

	"github.com/outbox-cdc/outbox-cdc/deadpeer"
	"github.com/outbox-cdc/outbox-cdc/retry"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
)

// KafkaConfig configures the Kafka sink. The producer is always idempotent
// with acks=all (up to four requests in flight per broker, kept in order by
// their sequence numbers), so records of one partition are written in order
// and never duplicated by the sink's pipelined requests; none of that is
// configurable.
type KafkaConfig struct {
	// Brokers are the bootstrap servers, host:port.
	Brokers []string `yaml:"brokers"`
	// ClientID is sent to the brokers (quotas, logs).
	ClientID string `yaml:"client_id"`
	// KafkaVersion is the oldest broker version the producer may assume, as
	// "2.8.0"; it decides the protocol versions used. At least 0.11.0.
	KafkaVersion string `yaml:"kafka_version"`
	// Compression: none, gzip, snappy, lz4 or zstd (zstd needs 2.1.0+).
	Compression string `yaml:"compression"`
	// MaxMessageBytes is the largest record batch the producer builds and the
	// largest single record it accepts (Java: max.request.size). Keep it at
	// or below the topic's max.message.bytes.
	MaxMessageBytes int `yaml:"max_message_bytes"`
	// Linger is how long the sink holds a write smaller than BatchBytes
	// before sending it, so that under a light load the pipeline gathers
	// the records arriving meanwhile into the next, larger write (fewer
	// requests, at the cost of that much latency). 0 sends every write at
	// once; under load writes are large anyway, because the pipeline gathers
	// the records that arrive while a write is in flight.
	Linger time.Duration `yaml:"linger"`
	// BatchBytes is the size (key, value and header bytes) from which a
	// write is sent without lingering. Used only when Linger > 0.
	BatchBytes int `yaml:"batch_bytes"`
	// MaxInFlightBytes bounds the bytes of the records (topic, key, value
	// and headers) handed to the producer and not yet acknowledged; the
	// pipeline waits while it is reached. A single larger record is still
	// sent, alone.
	MaxInFlightBytes int64 `yaml:"max_in_flight_bytes"`
	// ProduceTimeout is how long a broker may wait for the in-sync replicas
	// before answering a produce request (Java: request.timeout.ms).
	ProduceTimeout time.Duration `yaml:"produce_timeout"`
	// DialTimeout bounds connecting to a broker.
	DialTimeout time.Duration `yaml:"dial_timeout"`
	// RetryBackoffMin is the first wait before a write is tried again
	// while the brokers fail; the wait doubles with each failed attempt.
	RetryBackoffMin time.Duration `yaml:"retry_backoff_min"`
	// RetryBackoffMax caps the wait between two attempts of a write while
	// the brokers fail.
	RetryBackoffMax time.Duration `yaml:"retry_backoff_max"`
	// ReadyInterval is how often an idle sink checks that a broker answers,
	// for /readyz and outbox_cdc_sink_connected.
	ReadyInterval time.Duration `yaml:"ready_interval"`
	// UnwritableTopicTimeout is how long records wait for a topic that does
	// not exist (a cluster without auto-create) or that the connector may
	// not write (topic or cluster authorization) before they fail
	// permanently and pipeline.on_error decides. 0 decides at once.
	UnwritableTopicTimeout time.Duration `yaml:"unwritable_topic_timeout"`
	// TLS and SASL to the brokers (security.go), for every client: the
	// producers, the admin client and the progress reader.
	TLS  TLSConfig  `yaml:"tls"`
	SASL SASLConfig `yaml:"sasl"`
}

// DefaultKafkaConfig returns the defaults; Brokers still has to be set.
func DefaultKafkaConfig() KafkaConfig {
	return KafkaConfig{
		ClientID:         "outbox-cdc",
		KafkaVersion:     "2.8.0",
		Compression:      "none",
		MaxMessageBytes:  1000000,
		Linger:           0,
		BatchBytes:       1 << 20,
		MaxInFlightBytes: 16 << 20,
		ProduceTimeout:   10 * time.Second,
		DialTimeout:      10 * time.Second,
		RetryBackoffMin:  100 * time.Millisecond,
		RetryBackoffMax:  10 * time.Second,
		ReadyInterval:    5 * time.Second,

		UnwritableTopicTimeout: time.Minute,
	}
}

// Validate checks the configuration; messages name the yaml key under sink.
func (c *KafkaConfig) Validate() error {
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, outboxcdc.KeyErrorf(key, "", format, args...))
	}
	if len(c.Brokers) == 0 {
		bad("brokers", "at least one broker (host:port) is required")
	}
	for _, b := range c.Brokers {
		if host, port, err := net.SplitHostPort(b); err != nil || host == "" || port == "" {
			bad("brokers", "%q is not host:port", b)
		}
	}
	if c.ClientID == "" {
		bad("client_id", "must not be empty")
	}
	if v, err := sarama.ParseKafkaVersion(c.KafkaVersion); err != nil {
		bad("kafka_version", "%q is not a Kafka version such as 2.8.0", c.KafkaVersion)
	} else if !v.IsAtLeast(sarama.V0_11_0_0) {
		bad("kafka_version", "%s is too old: the idempotent producer needs 0.11.0 or later", c.KafkaVersion)
	} else if c.Compression == "zstd" && !v.IsAtLeast(sarama.V2_1_0_0) {
		bad("compression", "zstd needs kafka_version 2.1.0 or later")
	}
	var codec sarama.CompressionCodec
	if err := codec.UnmarshalText([]byte(c.Compression)); err != nil {
		bad("compression", "%q is not one of none, gzip, snappy, lz4, zstd", c.Compression)
	}
	if c.MaxMessageBytes < 1024 || c.MaxMessageBytes > int(sarama.MaxRequestSize) {
		bad("max_message_bytes", "%d is outside 1024..%d", c.MaxMessageBytes, sarama.MaxRequestSize)
	}
	if c.Linger < 0 {
		bad("linger", "must not be negative")
	}
	if c.Linger > 0 && c.BatchBytes <= 0 {
		bad("batch_bytes", "must be positive when linger is set")
	}
	if c.MaxInFlightBytes <= 0 {
		bad("max_in_flight_bytes", "must be positive")
	}
	positive := func(key string, d time.Duration) {
		if d <= 0 {
			bad(key, "must be a positive duration such as 10s")
		}
	}
	positive("produce_timeout", c.ProduceTimeout)
	positive("dial_timeout", c.DialTimeout)
	positive("retry_backoff_min", c.RetryBackoffMin)
	positive("retry_backoff_max", c.RetryBackoffMax)
	positive("ready_interval", c.ReadyInterval)
	if c.UnwritableTopicTimeout < 0 || c.UnwritableTopicTimeout > 24*time.Hour {
		bad("unwritable_topic_timeout", "%v is outside 0..24h", c.UnwritableTopicTimeout)
	}
	if c.RetryBackoffMax < c.RetryBackoffMin {
		bad("retry_backoff_max", "%v is below retry_backoff_min %v", c.RetryBackoffMax, c.RetryBackoffMin)
	}
	c.validateSecurity("sink", bad)
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	sc, err := c.clientConfig() // reads the certificate files: a bad path is a configuration error
	if err != nil {
		return err
	}
	if err := sc.Validate(); err != nil {
		return outboxcdc.KeyErrorf("", "", "kafka settings rejected by the client: %v", err)
	}
	return nil
}

// sarama builds the client configuration. cfg must be valid.
func (c *KafkaConfig) sarama() *sarama.Config {
	s := sarama.NewConfig()
	s.ClientID = c.ClientID
	if v, err := sarama.ParseKafkaVersion(c.KafkaVersion); err == nil {
		s.Version = v
	}
	s.Net.MaxOpenRequests = pipelineDepth
	s.Net.DialTimeout = c.DialTimeout
	s.Net.ReadTimeout = c.stallAfter()
	s.Net.WriteTimeout = c.stallAfter()
	s.Net.KeepAlive = deadpeer.Kafka.Idle // the client takes a period only

	// Only the topics produced to; never the whole cluster's metadata, and
	// creating the client does not contact a broker.
	s.Metadata.Full = false
	s.Metadata.Retry.Max = 0

	// The sink builds its produce requests itself (direct.go): of the
	// producer settings it takes the timeout, the compression and the
	// retries of coordinator requests (exactly-once).
	p := &s.Producer
	p.RequiredAcks = sarama.WaitForAll
	p.Timeout = c.ProduceTimeout
	p.MaxMessageBytes = c.MaxMessageBytes
	_ = p.Compression.UnmarshalText([]byte(c.Compression))
	p.Transaction.Retry.Max = 3
	p.Transaction.Retry.Backoff = c.RetryBackoffMin
	return s
}

// stallAfter is how long records in flight (or a probe) may go without an
// answer before the sink reports the brokers unreachable: the read
// deadline of a produce request.
func (c *KafkaConfig) stallAfter() time.Duration { return c.ProduceTimeout + 10*time.Second }

// retryPolicy is the backoff between a Write's attempts: retry_backoff_min
// doubling up to retry_backoff_max, ±20% jitter; every Write starts at the
// minimum again.
func (c *KafkaConfig) retryPolicy() retry.Policy {
	return retry.Policy{Min: c.RetryBackoffMin, Max: c.RetryBackoffMax, Jitter: 0.2}
}
