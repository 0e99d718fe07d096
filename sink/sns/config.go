package sns

import (
	"errors"
	"strings"

	"github.com/outbox-cdc/outbox-cdc/router"
	"github.com/outbox-cdc/outbox-cdc/sink/awsmsg"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
)

// Config is the sink section for sink.type: sns.
type Config struct {
	// Region, profile, endpoint (an emulator), body encoding and the
	// delivery keys, as with sink.type: sqs.
	awsmsg.Config `yaml:",inline"`
	// TopicOwner is the AWS account id of the topics that route.topic
	// names by name; empty: the account of the credentials (asked of STS
	// once). A route.topic that is a whole topic ARN needs neither.
	TopicOwner string `yaml:"topic_owner"`
}

// Limit is SNS's largest message, and largest PublishBatch (all entries
// together), in bytes.
const Limit = 256 << 10

// DefaultTopic is the topic name template when route.topic is not set.
const DefaultTopic = "outbox-{aggregate_type}"

// MaxName is the longest SNS topic name.
const MaxName = 256

// Destination is what route.topic names with this sink: an SNS topic
// name (1 to 256 characters of a-z A-Z 0-9 - _, a FIFO topic's ending in
// .fifo), or a whole topic ARN (arn:aws:sns:REGION:ACCOUNT:NAME).
var Destination = &router.Destination{
	Noun:        "SNS topic name or ARN",
	Default:     DefaultTopic,
	AggregateID: false,
	MaxLen:      MaxName + 100, // the ARN's prefix
	Literal:     func(c byte) bool { return nameByte(c) || c == ':' },
	Value:       nameByte,
	Legal:       "a-z A-Z 0-9 - _ (a FIFO topic's name ends in .fifo), or a topic ARN arn:PARTITION:sns:REGION:ACCOUNT:NAME",
	Check:       checkTopic,
}

func nameByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.'
}

func checkTopic(s string) string {
	name := s
	if strings.HasPrefix(s, "arn:") {
		p := strings.Split(s, ":")
		if len(p) != 6 || p[1] == "" || p[2] != "sns" || p[3] == "" || !awsmsg.IsAccountID(p[4]) {
			return "is not a topic ARN arn:PARTITION:sns:REGION:ACCOUNT:NAME"
		}
		name = p[5]
	} else if strings.IndexByte(s, ':') >= 0 {
		return "has a colon but is not a topic ARN (arn:aws:sns:REGION:ACCOUNT:NAME)"
	}
	if name == "" || len(name) > MaxName {
		return "has a topic name that is empty or longer than 256 characters"
	}
	if i := strings.IndexByte(name, '.'); i >= 0 && name[i:] != ".fifo" {
		return "has a dot that is not the .fifo suffix, which SNS forbids"
	}
	return ""
}

// IsFIFO reports whether the topic named by name or ARN is a FIFO topic
// (SNS requires FIFO topic names to end in .fifo).
func IsFIFO(topic string) bool { return strings.HasSuffix(topic, ".fifo") }

// DefaultConfig returns the defaults.
func DefaultConfig() Config { return Config{Config: awsmsg.DefaultConfig(Limit)} }

// Validate checks the configuration without connecting.
func (c Config) Validate() error {
	var errs []error
	if err := c.Config.Validate("SNS", Limit); err != nil {
		errs = append(errs, err)
	}
	if c.TopicOwner != "" && !awsmsg.IsAccountID(c.TopicOwner) {
		errs = append(errs, outboxcdc.KeyErrorf("topic_owner", "", "want a 12-digit AWS account id, got %q", c.TopicOwner))
	}
	return errors.Join(errs...)
}

// partition is the AWS partition of region.
func partition(region string) string {
	switch {
	case strings.HasPrefix(region, "cn-"):
		return "aws-cn"
	case strings.HasPrefix(region, "us-gov-"):
		return "aws-us-gov"
	}
	return "aws"
}
