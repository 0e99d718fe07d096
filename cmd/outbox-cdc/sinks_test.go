package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const mysqlSource = `
source:
  type: mysql
  dsn: "root:secret@tcp(127.0.0.1:3306)/shop"
`

// TestBrokerSinkConfig: each broker's keys sit directly under sink:, take
// their defaults, come from the environment and from *_file secrets, and
// set what route.topic names; Kafka keys are not accepted with them.
func TestBrokerSinkConfig(t *testing.T) {
	dir := t.TempDir()
	pwFile := filepath.Join(dir, "pw")
	os.WriteFile(pwFile, []byte("s3cret\n"), 0o600)

	cfg, err := loadConfig(writeFile(t, mysqlSource+`
sink:
  type: rabbitmq
  url: amqp://127.0.0.1:5672/
  username: app
  password_file: `+pwFile+`
  exchange: events
  ack_timeout: 7s
`), map[string]string{"OUTBOX_CDC_SINK_EXCHANGE_TYPE": "direct"})
	if err != nil {
		t.Fatal(err)
	}
	r := cfg.Sink.RabbitMQ
	if r.Password != "s3cret" || r.Exchange != "events" || r.ExchangeType != "direct" || r.AckTimeout != 7*time.Second || r.MaxInFlight != 1000 {
		t.Fatalf("rabbitmq config %+v", r)
	}
	if cfg.Route.Topic != "{aggregate_type}" {
		t.Fatalf("route.topic default with rabbitmq: %q", cfg.Route.Topic)
	}
	var out bytes.Buffer
	if err := printConfig(&out, cfg); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), "s3cret") || !strings.Contains(out.String(), "exchange: events") || strings.Contains(out.String(), "brokers") {
		t.Fatalf("config print:\n%s", out.String())
	}
	again, err := loadConfig(writeFile(t, out.String()), nil)
	if err != nil {
		t.Fatalf("printed config does not load: %v\n%s", err, out.String())
	}
	if again.Sink.RabbitMQ.Exchange != "events" || again.Sink.RabbitMQ.ExchangeType != "direct" {
		t.Fatalf("round trip: %+v", again.Sink.RabbitMQ)
	}

	cfg, err = loadConfig(writeFile(t, mysqlSource+"sink:\n  type: nats\n  url: nats://u:topsecret@h:4222\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Route.Topic != "outbox.{aggregate_type}.{aggregate_id}" || cfg.Sink.NATS.Stream != "OUTBOX" {
		t.Fatalf("nats defaults: topic %q, %+v", cfg.Route.Topic, cfg.Sink.NATS)
	}
	out.Reset()
	printConfig(&out, cfg)
	if strings.Contains(out.String(), "topsecret") {
		t.Fatalf("url password printed:\n%s", out.String())
	}

	cfg, err = loadConfig("", map[string]string{
		"OUTBOX_CDC_SOURCE_DSN": "root:@tcp(db:3306)/x", "OUTBOX_CDC_SINK_TYPE": "redis",
		"OUTBOX_CDC_SINK_URL": "redis://127.0.0.1:6379/0", "OUTBOX_CDC_SINK_MAX_LEN": "1000",
	})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Sink.Redis.MaxLen != 1000 || cfg.Route.Topic != "outbox:{aggregate_type}" {
		t.Fatalf("redis from env: %+v, topic %q", cfg.Sink.Redis, cfg.Route.Topic)
	}

	cfg, err = loadConfig("", map[string]string{
		"OUTBOX_CDC_SOURCE_DSN": "root:@tcp(db:3306)/x", "OUTBOX_CDC_SINK_TYPE": "sqs",
		"OUTBOX_CDC_SINK_REGION": "eu-west-1", "OUTBOX_CDC_SINK_BODY_ENCODING": "base64",
	})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Sink.SQS.Region != "eu-west-1" || cfg.Sink.SQS.BodyEncoding != "base64" || cfg.Sink.SQS.MaxMessageBytes != 256<<10 ||
		cfg.Route.Topic != "outbox-{aggregate_type}" {
		t.Fatalf("sqs from env: %+v, topic %q", cfg.Sink.SQS, cfg.Route.Topic)
	}

	cfg, err = loadConfig(writeFile(t, mysqlSource+`route:
  topic: "https://hooks.example.com/in/{aggregate_type}"
sink:
  type: http
  mode: batch
  headers:
    Authorization: Bearer t0psecret
`), map[string]string{"OUTBOX_CDC_SINK_MAX_IN_FLIGHT": "4"})
	if err != nil {
		t.Fatal(err)
	}
	h := cfg.http()
	if h.Mode != "batch" || h.Headers["Authorization"] != "Bearer t0psecret" || h.MaxInFlight != 4 || h.Template != "https://hooks.example.com/in/{aggregate_type}" || h.AckTimeout != 10*time.Second {
		t.Fatalf("http config %+v", h)
	}
}

// TestBrokerSinkConfigErrors: mistakes name the key and exit 2 before
// connecting.
func TestBrokerSinkConfigErrors(t *testing.T) {
	for _, tc := range []struct{ name, file, want string }{
		{"kafka key under rabbitmq", "sink:\n  type: rabbitmq\n  url: amqp://h/\n  brokers: [k:9092]\n", `unknown configuration key "sink.brokers"`},
		{"missing url", "sink:\n  type: nats\n", "sink.url: required"},
		{"bad exchange type", "sink:\n  type: rabbitmq\n  url: amqp://h/\n  exchange_type: zigzag\n", "sink.exchange_type"},
		{"exactly-once", "delivery: exactly-once\ncheckpoint:\n  type: kafka\nsink:\n  type: nats\n  url: nats://h:4222\n", "exactly-once needs sink.type kafka"},
		{"aggregate_id on kafka", "route:\n  topic: \"o.{aggregate_id}\"\nsink:\n  type: kafka\n  brokers: [k:9092]\n", "{aggregate_id}"},
		{"wildcard subject", "route:\n  topic: \"o.*.{aggregate_id}\"\nsink:\n  type: nats\n  url: nats://h:4222\n", "not allowed in a NATS subject"},
		{"dlq subject", "pipeline:\n  on_error: dlq\n  dlq_topic: \"a..b\"\nsink:\n  type: nats\n  url: nats://h:4222\n", "pipeline.dlq_topic"},
		{"trim both", "sink:\n  type: redis\n  url: redis://h:6379\n  max_len: 5\n  min_id_age: 1h\n", "sink.max_len"},
		{"sqs protocol", "sink:\n  type: sqs\n  region: us-east-1\n  protocol: soap\n", "sink.protocol"},
		{"sqs queue name", "route:\n  topic: \"a/{aggregate_type}\"\nsink:\n  type: sqs\n  region: us-east-1\n", "SQS queue name"},
		{"sqs aggregate_id", "route:\n  topic: \"q-{aggregate_id}\"\nsink:\n  type: sqs\n  region: us-east-1\n", "{aggregate_id}"},
		{"sqs endpoint", "sink:\n  type: sqs\n  endpoint: 127.0.0.1:4100\n", "sink.endpoint"},
		{"sns topic name", "route:\n  topic: \"a/{aggregate_type}\"\nsink:\n  type: sns\n  region: us-east-1\n", "SNS topic name or ARN"},
		{"sns topic arn", "route:\n  topic: \"arn:aws:sqs:us-east-1:123456789012:q\"\nsink:\n  type: sns\n  region: us-east-1\n", "topic ARN"},
		{"sns topic_owner", "sink:\n  type: sns\n  region: us-east-1\n  topic_owner: abc\n", "sink.topic_owner"},
		{"sns max_message_bytes", "sink:\n  type: sns\n  region: us-east-1\n  max_message_bytes: 1048576\n", "sink.max_message_bytes"},
		{"unknown type", "sink:\n  type: kinesis\n", "want http, kafka, nats, rabbitmq, redis, sns, sqs or stdout"},
		{"http without url", "sink:\n  type: http\n", "route.topic"},
		{"http not a url", "route:\n  topic: \"ftp://h/{aggregate_type}\"\nsink:\n  type: http\n", "http:// or https://"},
		{"http raw batch", "route:\n  topic: \"http://h/{aggregate_type}\"\nsink:\n  type: http\n  mode: batch\n  body: raw\n", "sink.body"},
		{"http secret missing", "route:\n  topic: \"http://h/x\"\nsink:\n  type: http\n  signing_secret_file: /nonexistent/s\n", "sink.signing_secret_file"},
		{"http dlq not a url", "route:\n  topic: \"http://h/x\"\npipeline:\n  on_error: dlq\n  dlq_topic: dead\nsink:\n  type: http\n", "pipeline.dlq_topic"},
		{"missing ca file", "sink:\n  type: redis\n  url: rediss://h:6379\n  tls:\n    enabled: true\n    ca_file: /nonexistent/ca.pem\n", "sink.tls.ca_file"},
		{"tls keys without tls", "sink:\n  type: rabbitmq\n  url: amqp://h/\n  tls:\n    server_name: x\n", "sink.tls.enabled"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			p := writeFile(t, mysqlSource+tc.file)
			if code := run([]string{"run", "--config", p}, &out, &errb); code != 2 || !strings.Contains(errb.String(), tc.want) {
				t.Fatalf("exit %d, stderr %q; want 2 and %q", code, errb.String(), tc.want)
			}
		})
	}
}
