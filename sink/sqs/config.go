package sqs

import (
	"errors"
	"net/url"
	"strings"

	"github.com/outbox-cdc/outbox-cdc/router"
	"github.com/outbox-cdc/outbox-cdc/sink"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
)

// Config is the sink section for sink.type: sqs.
type Config struct {
	// Region is the AWS region of the queues (us-east-1); empty takes the
	// region from the environment (AWS_REGION) or the profile.
	Region string `yaml:"region"`
	// Profile is the named profile of the shared AWS configuration and
	// credentials files; empty: AWS_PROFILE, else the default profile.
	// Credentials come from the usual places, in order: the environment,
	// web identity (EKS service accounts), the shared files, the container
	// or instance role.
	Profile string `yaml:"profile"`
	// Endpoint overrides the SQS endpoint (a VPC endpoint, an emulator
	// such as http://127.0.0.1:4100); empty: the region's.
	Endpoint string `yaml:"endpoint"`
	// Protocol is the wire protocol of the SQS API: json (AWS JSON 1.0,
	// what SQS and the AWS SDKs speak today) or query (the older AWS query
	// protocol with XML answers, for emulators that speak only it).
	Protocol string `yaml:"protocol"`
	// QueueOwner is the AWS account id that owns the queues when it is not
	// the account of the credentials (a queue shared across accounts).
	QueueOwner string `yaml:"queue_owner"`
	// BodyEncoding is how the payload becomes the message body: text (the
	// payload as it is; it must be UTF-8 text that SQS accepts, else the
	// record is refused) or base64 (any bytes, such as Avro or Protobuf;
	// consumers decode it).
	BodyEncoding string `yaml:"body_encoding"`
	sink.Config  `yaml:",inline"`
}

// Body encodings and protocols.
const (
	BodyText   = "text"
	BodyBase64 = "base64"

	ProtocolJSON  = "json"
	ProtocolQuery = "query"
)

// DefaultTopic is the queue name template when route.topic is not set.
const DefaultTopic = "outbox-{aggregate_type}"

// Destination is what route.topic names with this sink: an SQS queue
// name, 1 to 80 characters of a-z A-Z 0-9 - _, and a FIFO queue's name
// ends in .fifo.
var Destination = &router.Destination{
	Noun:        "SQS queue name",
	Default:     DefaultTopic,
	AggregateID: false,
	MaxLen:      80,
	Literal:     queueByte,
	Value:       queueByte,
	Legal:       "a-z A-Z 0-9 - _ (a FIFO queue's name ends in .fifo)",
	Check: func(s string) string {
		if i := strings.IndexByte(s, '.'); i >= 0 && s[i:] != ".fifo" {
			return "has a dot that is not the .fifo suffix, which SQS forbids"
		}
		return ""
	},
}

func queueByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.'
}

// IsFIFO reports whether the queue named name is a FIFO queue (SQS
// requires FIFO queue names to end in .fifo).
func IsFIFO(name string) bool { return strings.HasSuffix(name, ".fifo") }

// MaxBatch is the most entries SendMessageBatch takes.
const MaxBatch = 10

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	c := Config{Config: sink.DefaultConfig(), Protocol: ProtocolJSON, BodyEncoding: BodyText}
	c.MaxMessageBytes = 256 << 10 // SQS's long-standing message size limit
	c.MaxInFlight = MaxBatch
	return c
}

// Validate checks the configuration without connecting.
func (c Config) Validate() error {
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, outboxcdc.KeyErrorf(key, "", format, args...))
	}
	if c.Endpoint != "" {
		if u, err := url.Parse(c.Endpoint); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			bad("endpoint", "want an http:// or https:// URL such as https://sqs.eu-west-1.amazonaws.com")
		}
	}
	switch c.Protocol {
	case ProtocolJSON, ProtocolQuery:
	default:
		bad("protocol", "want json or query, got %q", c.Protocol)
	}
	switch c.BodyEncoding {
	case BodyText, BodyBase64:
	default:
		bad("body_encoding", "want text or base64, got %q", c.BodyEncoding)
	}
	if c.QueueOwner != "" && strings.Trim(c.QueueOwner, "0123456789") != "" {
		bad("queue_owner", "want a 12-digit AWS account id, got %q", c.QueueOwner)
	}
	if c.MaxMessageBytes > 1<<20 {
		bad("max_message_bytes", "SQS takes at most 1 MiB (1048576) per message and per batch, got %d", c.MaxMessageBytes)
	}
	if err := c.Config.Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
