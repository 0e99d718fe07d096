package rabbitmq

import (
	"errors"
	"fmt"
	"net/url"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outbox-cdc/outbox-cdc/router"
	"github.com/outbox-cdc/outbox-cdc/sink"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
)

// Config is the sink section for sink.type: rabbitmq.
type Config struct {
	// URL is the AMQP URI, amqp://host:5672/vhost or amqps://... for TLS.
	// Credentials in it are allowed, but prefer username and
	// password(_file).
	URL string `yaml:"url"`
	// Username overrides the user name in the URL.
	Username string `yaml:"username"`
	// Password overrides the password in the URL (prefer password_file).
	Password string `yaml:"password"`
	// Exchange is the exchange every record is published to, with the
	// rendered route.topic as the routing key. It must exist, unless
	// Declare is set.
	Exchange string `yaml:"exchange"`
	// ExchangeType is the type Declare declares the exchange with: topic
	// (the default), direct, fanout, headers, or x-consistent-hash (the
	// rabbitmq_consistent_hash_exchange plugin) with route.topic
	// "{aggregate_id}" for per-aggregate order across several queues.
	ExchangeType string `yaml:"exchange_type"`
	// Declare declares the exchange (durable) at start when it does not
	// exist. Queues and bindings are the consumers' business: a record no
	// queue is bound for is an error, never dropped.
	Declare bool `yaml:"declare"`
	// DLQExchange is where dead-letter records (pipeline.on_error: dlq)
	// go, with pipeline.dlq_topic as the routing key. Empty: the
	// exchange of the other records.
	DLQExchange string `yaml:"dlq_exchange"`
	// ContentType is the content_type property of every message (the
	// payload's media type); empty leaves it unset.
	ContentType string `yaml:"content_type"`
	// Heartbeat is the AMQP heartbeat interval: a connection silent for
	// about three of them is given up.
	Heartbeat time.Duration `yaml:"heartbeat"`
	// TLS to the broker (also on with an amqps:// URL).
	TLS         sink.TLS `yaml:"tls"`
	sink.Config `yaml:",inline"`

	// DeadLetterTopic is pipeline.dlq_topic, set by the command: records
	// with this Topic are dead letters and go to DLQExchange.
	DeadLetterTopic string `yaml:"-"`
	// AppID is the app_id property and the connection name: the
	// connector's name, set by the command.
	AppID string `yaml:"-"`
}

// DefaultTopic is the routing key template when route.topic is not set.
const DefaultTopic = "{aggregate_type}"

// Destination is what route.topic names with this sink: the routing key,
// an AMQP short string of at most 255 bytes (any bytes).
var Destination = &router.Destination{
	Noun:        "RabbitMQ routing key",
	Default:     DefaultTopic,
	AggregateID: true,
	MaxLen:      255,
	Legal:       "any bytes",
}

// DefaultConfig returns the defaults; URL still has to be set.
func DefaultConfig() Config {
	c := Config{
		Exchange:     "outbox",
		ExchangeType: "topic",
		ContentType:  "application/json",
		Heartbeat:    10 * time.Second,
		Config:       sink.DefaultConfig(),
	}
	c.MaxMessageBytes = 16 << 20 // RabbitMQ 4's max_message_size default; 3.x allows 128 MiB
	return c
}

// Validate checks the configuration without connecting.
func (c Config) Validate() error {
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, outboxcdc.KeyErrorf(key, "", format, args...))
	}
	if c.URL == "" {
		bad("url", "required: amqp://host:5672/vhost (or amqps:// for TLS)")
	} else if u, err := url.Parse(c.URL); err != nil || (u.Scheme != "amqp" && u.Scheme != "amqps") || u.Host == "" {
		bad("url", "want amqp://host:port/vhost or amqps://host:port/vhost")
	} else if _, err := amqp.ParseURI(c.URL); err != nil {
		bad("url", "%v", err)
	}
	if len(c.Exchange) > 255 {
		bad("exchange", "longer than 255 bytes")
	}
	if c.Exchange == "" {
		bad("exchange", "required: the default exchange routes by queue name only and cannot be declared; name an exchange")
	}
	if len(c.DLQExchange) > 255 {
		bad("dlq_exchange", "longer than 255 bytes")
	}
	switch c.ExchangeType {
	case "topic", "direct", "fanout", "headers", "x-consistent-hash":
	default:
		bad("exchange_type", "%q is not one of topic, direct, fanout, headers, x-consistent-hash", c.ExchangeType)
	}
	if c.Password != "" && c.Username == "" {
		bad("username", "required with sink.password")
	}
	if c.Heartbeat < time.Second {
		bad("heartbeat", "must be at least 1s, got %s", c.Heartbeat)
	}
	if err := c.TLS.Validate(); err != nil {
		errs = append(errs, outboxcdc.KeysUnder("tls", err))
	} else if err := c.TLS.Load(); err != nil {
		errs = append(errs, err) // Build names the key under tls
	}
	if err := c.Config.Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// dlqExchange is the exchange of dead-letter records.
func (c Config) dlqExchange() string {
	if c.DLQExchange != "" {
		return c.DLQExchange
	}
	return c.Exchange
}

// exchangeOf returns the exchange a record with routing key topic goes to.
func (c Config) exchangeOf(topic string) string {
	if c.DeadLetterTopic != "" && topic == c.DeadLetterTopic {
		return c.dlqExchange()
	}
	return c.Exchange
}

// dialURL is URL with Username and Password applied.
func (c Config) dialURL() (string, *url.URL, error) {
	u, err := url.Parse(c.URL)
	if err != nil {
		return "", nil, fmt.Errorf("sink.url: %w", err)
	}
	if c.Username != "" {
		u.User = url.UserPassword(c.Username, c.Password)
	}
	return u.String(), u, nil
}
