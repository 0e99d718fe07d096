// Package awsmsg is what the Amazon SQS and SNS sinks share: the AWS
// configuration (region, profile, credentials chain, endpoint override),
// an HTTP client whose sockets the sink can reset and whose requests the
// SDK does not retry, the classification of AWS error codes, the message
// a record becomes (body, attributes, FIFO group and deduplication ids)
// and the batch loop: at most ten entries a request, per-entry results,
// and a failed entry holding back the later records of its aggregate.
// Each sink keeps only its API calls (SendMessageBatch, PublishBatch) and
// the names of its destinations.
package awsmsg

import (
	"context"
	"errors"
	"net/url"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
	"github.com/outbox-cdc/outbox-cdc/sink/broker"
)

// Config is the part of the sink section the AWS sinks share.
type Config struct {
	// Region is the AWS region of the queues or topics (us-east-1); empty
	// takes the region from the environment (AWS_REGION) or the profile.
	Region string `yaml:"region"`
	// Profile is the named profile of the shared AWS configuration and
	// credentials files; empty: AWS_PROFILE, else the default profile.
	// Credentials come from the usual places, in order: the environment,
	// web identity (EKS service accounts), the shared files, the container
	// or instance role.
	Profile string `yaml:"profile"`
	// Endpoint overrides the service endpoint (a VPC endpoint, an
	// emulator); empty: the region's.
	Endpoint string `yaml:"endpoint"`
	// BodyEncoding is how the payload becomes the message body: text (the
	// payload as it is; it must be UTF-8 text the service accepts, else
	// the record is refused) or base64 (any bytes, such as Avro or
	// Protobuf; consumers decode it).
	BodyEncoding  string `yaml:"body_encoding"`
	broker.Config `yaml:",inline"`
}

// Body encodings.
const (
	BodyText   = "text"
	BodyBase64 = "base64"
)

// MaxBatch is the most entries SendMessageBatch and PublishBatch take.
const MaxBatch = 10

// DefaultConfig returns the defaults with maxBytes as
// max_message_bytes.
func DefaultConfig(maxBytes int) Config {
	c := Config{Config: broker.DefaultConfig(), BodyEncoding: BodyText}
	c.MaxMessageBytes = maxBytes
	c.MaxInFlight = MaxBatch
	return c
}

// Validate checks the shared keys; limit is the service's largest message
// (and batch) in bytes, named in words by service ("SQS").
func (c Config) Validate(service string, limit int) error {
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, outboxcdc.KeyErrorf(key, "", format, args...))
	}
	if c.Endpoint != "" {
		if u, err := url.Parse(c.Endpoint); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			bad("endpoint", "want an http:// or https:// URL such as https://%s.eu-west-1.amazonaws.com", strings.ToLower(service))
		}
	}
	switch c.BodyEncoding {
	case BodyText, BodyBase64:
	default:
		bad("body_encoding", "want text or base64, got %q", c.BodyEncoding)
	}
	if c.MaxMessageBytes > limit {
		bad("max_message_bytes", "%s takes at most %d bytes per message and per batch, got %d", service, limit, c.MaxMessageBytes)
	}
	if err := c.Config.Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// IsAccountID reports whether s is a 12-digit AWS account id.
func IsAccountID(s string) bool {
	if len(s) != 12 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// Load loads the AWS configuration (region, profile, credentials chain:
// nothing is fetched yet).
func Load(ctx context.Context, cfg Config) (aws.Config, error) {
	var opts []func(*awsconfig.LoadOptions) error
	if cfg.Region != "" {
		opts = append(opts, awsconfig.WithRegion(cfg.Region))
	}
	if cfg.Profile != "" {
		opts = append(opts, awsconfig.WithSharedConfigProfile(cfg.Profile))
	}
	ac, err := awsconfig.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return aws.Config{}, outboxcdc.KeyErrorf("profile", "", "loading the AWS configuration: %v", err)
	}
	if ac.Region == "" {
		return aws.Config{}, outboxcdc.KeyErrorf("region", "", "required: set sink.region, AWS_REGION or the profile's region")
	}
	return ac, nil
}
