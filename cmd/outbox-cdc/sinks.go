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
			out := sink.CheckKafka(ctx, cfg.Sink.KafkaConfig, topicNeeds(cfg)...)
			if cfg.Delivery == deliveryExactlyOnce {
				out = append(out, sink.CheckTransactional(ctx, cfg.Sink.KafkaConfig, cfg.Sink.TxnConfig, cfg.Name)...)
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
	"rabbitmq": {
		config:   func(s *SinkConfig) any { return &s.RabbitMQ },
		dest:     rabbitmq.Destination,
		validate: func(c Config) error { return c.rabbitMQ().Validate() },
		build: func(cfg Config, _ string, log zerolog.Logger, reg prometheus.Registerer, _ io.Writer) (outboxcdc.Sink, error) {
			return rabbitmq.New(cfg.rabbitMQ(), log, reg)
		},
		check: func(ctx context.Context, cfg Config) []outboxcdc.CheckResult {
			return rabbitmq.Check(ctx, cfg.rabbitMQ())
		},
	},
	"nats": {
		config:   func(s *SinkConfig) any { return &s.NATS },
		dest:     natsjs.Destination,
		validate: func(c Config) error { return c.nats().Validate() },
		build: func(cfg Config, _ string, log zerolog.Logger, reg prometheus.Registerer, _ io.Writer) (outboxcdc.Sink, error) {
			return natsjs.New(cfg.nats(), log, reg)
		},
		check: func(ctx context.Context, cfg Config) []outboxcdc.CheckResult { return natsjs.Check(ctx, cfg.nats()) },
	},
	"redis": {
		config:   func(s *SinkConfig) any { return &s.Redis },
		dest:     redisstream.Destination,
		validate: func(c Config) error { return c.Sink.Redis.Validate() },
		build: func(cfg Config, _ string, log zerolog.Logger, reg prometheus.Registerer, _ io.Writer) (outboxcdc.Sink, error) {
			return redisstream.New(cfg.Sink.Redis, log, reg)
		},
		check: func(ctx context.Context, cfg Config) []outboxcdc.CheckResult {
			return redisstream.Check(ctx, cfg.Sink.Redis, cfg.fixedDestinations()...)
		},
	},
	"sqs": {
		config:   func(s *SinkConfig) any { return &s.SQS },
		dest:     sqs.Destination,
		validate: func(c Config) error { return c.Sink.SQS.Validate() },
		build: func(cfg Config, _ string, log zerolog.Logger, reg prometheus.Registerer, _ io.Writer) (outboxcdc.Sink, error) {
			return sqs.New(cfg.Sink.SQS, log, reg)
		},
		check: func(ctx context.Context, cfg Config) []outboxcdc.CheckResult {
			return sqs.Check(ctx, cfg.Sink.SQS, cfg.fixedDestinations()...)
		},
	},
	"sns": {
		config:   func(s *SinkConfig) any { return &s.SNS },
		dest:     sns.Destination,
		validate: func(c Config) error { return c.Sink.SNS.Validate() },
		build: func(cfg Config, _ string, log zerolog.Logger, reg prometheus.Registerer, _ io.Writer) (outboxcdc.Sink, error) {
			return sns.New(cfg.Sink.SNS, log, reg)
		},
		check: func(ctx context.Context, cfg Config) []outboxcdc.CheckResult {
			return sns.Check(ctx, cfg.Sink.SNS, cfg.fixedDestinations()...)
		},
	},
	"http": {
		config:   func(s *SinkConfig) any { return &s.HTTP },
		dest:     httpsink.Destination,
		validate: func(c Config) error { return c.http().Validate() },
		build: func(cfg Config, _ string, log zerolog.Logger, reg prometheus.Registerer, _ io.Writer) (outboxcdc.Sink, error) {
			return httpsink.New(cfg.http(), log, reg)
		},
		check: func(ctx context.Context, cfg Config) []outboxcdc.CheckResult { return httpsink.Check(ctx, cfg.http()) },
	},
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

// rabbitMQ and nats return the sink's configuration with the values the
// command derives from the rest of it.
func (c Config) rabbitMQ() rabbitmq.Config {
	r := c.Sink.RabbitMQ
	r.DeadLetterTopic, r.AppID = c.deadLetterTopic(), c.Name
	return r
}

func (c Config) nats() natsjs.Config {
	n := c.Sink.NATS
	n.Template, n.DeadLetterTopic, n.Name = c.Route.Topic, c.deadLetterTopic(), c.Name
	if n.Template == "" {
		n.Template = natsjs.DefaultTopic
	}
	return n
}

// http returns the HTTP sink's configuration: the URL template is
// route.topic.
func (c Config) http() httpsink.Config {
	h := c.Sink.HTTP
	h.Template, h.Name = c.Route.Topic, c.Name
	return h
}

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
