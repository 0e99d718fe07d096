package sqs

import (
	"errors"
	"strings"

	"github.com/outbox-cdc/outbox-cdc/router"
	"github.com/outbox-cdc/outbox-cdc/sink/awsmsg"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
)

// Config is the sink section for sink.type: sqs.
type Config struct {
	// Region, profile, endpoint (an emulator such as
	// http://127.0.0.1:4100), body encoding and the delivery keys.
	awsmsg.Config `yaml:",inline"`
	// Protocol is the wire protocol of the SQS API: json (AWS JSON 1.0,
	// what SQS and the AWS SDKs speak today) or query (the older AWS query
	// protocol with XML answers, for emulators that speak only it).
	Protocol string `yaml:"protocol"`
	// QueueOwner is the AWS account id that owns the queues when it is not
	// the account of the credentials (a queue shared across accounts).
	QueueOwner string `yaml:"queue_owner"`
}

// Body encodings and protocols.
const (
	BodyText   = awsmsg.BodyText
	BodyBase64 = awsmsg.BodyBase64

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
const MaxBatch = awsmsg.MaxBatch

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{Config: awsmsg.DefaultConfig(256 << 10), Protocol: ProtocolJSON} // SQS's long-standing message size limit
}

// Validate checks the configuration without connecting.
func (c Config) Validate() error {
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, outboxcdc.KeyErrorf(key, "", format, args...))
	}
	if err := c.Config.Validate("SQS", 1<<20); err != nil {
		errs = append(errs, err)
	}
	switch c.Protocol {
	case ProtocolJSON, ProtocolQuery:
	default:
		bad("protocol", "want json or query, got %q", c.Protocol)
	}
	if c.QueueOwner != "" && !awsmsg.IsAccountID(c.QueueOwner) {
		bad("queue_owner", "want a 12-digit AWS account id, got %q", c.QueueOwner)
	}
	return errors.Join(errs...)
}
