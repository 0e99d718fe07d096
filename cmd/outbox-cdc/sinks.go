package main

import (
	"context"
	"fmt"
	"io"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
	"github.com/outbox-cdc/outbox-cdc/router"
	"github.com/outbox-cdc/outbox-cdc/sink"
	"github.com/outbox-cdc/outbox-cdc/sink/httpsink"
	"github.com/outbox-cdc/outbox-cdc/sink/kafka"
	"github.com/outbox-cdc/outbox-cdc/sink/natsjs"
	"github.com/outbox-cdc/outbox-cdc/sink/rabbitmq"
	"github.com/outbox-cdc/outbox-cdc/sink/redisstream"
	"github.com/outbox-cdc/outbox-cdc/sink/sns"
	"github.com/outbox-cdc/outbox-cdc/sink/sqs"
)

// sinkKind is one sink.type: where its keys decode to, what route.topic
// names with it, and how to validate, build and check it. The one place
// that maps sink.type to code.
type sinkKind struct {
	// config returns the struct the type's keys (directly under sink:)
	// decode into; nil for the Kafka keys, which SinkConfig inlines.
	config func(*SinkConfig) any
	// dest is what route.topic names (nil: a Kafka topic).
	dest     *router.Destination
	validate func(Config) error
	build    func(cfg Config, kind string, log zerolog.Logger, reg prometheus.Registerer, stdout io.Writer) (outboxcdc.Sink, error)
	check    func(ctx context.Context, cfg Config) []outboxcdc.CheckResult
}

var sinkKinds = map[string]sinkKind{
	"kafka": {
		validate: func(c Config) error { return c.Sink.KafkaConfig.Validate() },
		build: func(cfg Config, kind string, log zerolog.Logger, reg prometheus.Registerer, _ io.Writer) (outboxcdc.Sink, error) {
			return newKafkaSink(cfg, kind, log, reg) // transactional in exactly-once mode
		},
		check: func(ctx context.Context, cfg Config) []outboxcdc.CheckResult {
			out := kafka.CheckKafka(ctx, cfg.Sink.KafkaConfig, topicNeeds(cfg)...)
			if cfg.Delivery == deliveryExactlyOnce {
				out = append(out, kafka.CheckTransactional(ctx, cfg.Sink.KafkaConfig, cfg.Sink.TxnConfig, cfg.Name)...)
			}
			return out
		},
	},
	"stdout": {
		validate: func(Config) error { return nil },
		build: func(_ Config, _ string, _ zerolog.Logger, _ prometheus.Registerer, stdout io.Writer) (outboxcdc.Sink, error) {
			return sink.NewStdout(stdout), nil
		},
		check: func(context.Context, Config) []outboxcdc.CheckResult {
			return []outboxcdc.CheckResult{outboxcdc.Pass("sink", "sink.type stdout: nothing to connect to")}
		},
	},
	"rabbitmq": registered(rabbitmq.Destination, func(s *SinkConfig) *rabbitmq.Config { return &s.RabbitMQ }),
	"nats":     registered(natsjs.Destination, func(s *SinkConfig) *natsjs.Config { return &s.NATS }),
	"redis":    registered(redisstream.Destination, func(s *SinkConfig) *redisstream.Config { return &s.Redis }),
	"sqs":      registered(sqs.Destination, func(s *SinkConfig) *sqs.Config { return &s.SQS }),
	"sns":      registered(sns.Destination, func(s *SinkConfig) *sns.Config { return &s.SNS }),
	"http":     registered(httpsink.Destination, func(s *SinkConfig) *httpsink.Config { return &s.HTTP }),
}

// registered is the sinkKind of a sink package whose configuration is a
// sink.Kind: its keys decode into *field(&cfg.Sink), route.topic names a
// dest, and validate, build and check are the Kind's, on the
// configuration completed from the rest of the connector's (sinkEnv).
func registered[K sink.Kind](dest *router.Destination, field func(*SinkConfig) *K) sinkKind {
	kind := func(c Config) sink.Kind { return (*field(&c.Sink)).With(c.sinkEnv()) }
	return sinkKind{
		config:   func(s *SinkConfig) any { return field(s) },
		dest:     dest,
		validate: func(c Config) error { return kind(c).Validate() },
		build: func(c Config, _ string, log zerolog.Logger, reg prometheus.Registerer, _ io.Writer) (outboxcdc.Sink, error) {
			return kind(c).Open(log, reg)
		},
		check: func(ctx context.Context, c Config) []outboxcdc.CheckResult { return kind(c).Check(ctx, c.sinkEnv()) },
	}
}

// sinkEnv is what a sink's configuration takes from the rest of the
// connector's.
func (c Config) sinkEnv() sink.Env {
	return sink.Env{Connector: c.Name, Template: c.Route.Topic, DeadLetterTopic: c.deadLetterTopic(), Fixed: c.fixedDestinations()}
}

// sinkTypeNames lists the sink types for messages, from sinkKinds.
func sinkTypeNames() string { return kindNames(sinkKinds) }

// deadLetterTopic is pipeline.dlq_topic when dead letters are on, else "".
func (c Config) deadLetterTopic() string {
	if c.Pipeline.OnError != outboxcdc.OnErrorDLQ {
		return ""
	}
	return c.Pipeline.DLQTopic
}

// http returns the HTTP sink's configuration: the URL template is
// route.topic.
func (c Config) http() httpsink.Config { return c.Sink.HTTP.With(c.sinkEnv()).(httpsink.Config) }

// fixedDestinations are the destinations known before any row: the route
// template (its placeholders left in) and the dead-letter topic.
func (c Config) fixedDestinations() []string {
	t := c.Route.Topic
	if t == "" && c.Route.Destination != nil {
		t = c.Route.Destination.Default
	}
	if c.Route.TopicRegex != "" || c.Route.TopicReplacement != "" {
		t = "{regex}"
	}
	out := []string{t}
	if d := c.deadLetterTopic(); d != "" {
		out = append(out, d)
	}
	return out
}

// validateSink checks the sink section.
func (c Config) validateSink() error {
	k, ok := sinkKinds[c.Sink.Type]
	if !ok {
		return configErrorf("sink.type: unknown sink %q (want %s)", c.Sink.Type, sinkTypeNames())
	}
	if err := k.validate(c); err != nil {
		return sectionError("sink", err)
	}
	return nil
}

// dlqTopicCheck checks pipeline.dlq_topic as a name of dest.
func dlqTopicCheck(dest *router.Destination) func(string) error {
	return func(name string) error {
		if why := dest.Invalid(name); why != "" {
			return fmt.Errorf("%q is not a legal %s: %s", name, dest.Noun, why)
		}
		return nil
	}
}
