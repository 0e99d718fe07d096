// Package sns is the Amazon SNS sink: records go out with PublishBatch,
// at most ten to a request, to the topic the rendered route.topic names
// (a topic name, completed to its ARN with sink.region and the account,
// or a whole ARN), and a record counts as delivered only when SNS listed
// its entry as successful. What it shares with the SQS sink (the AWS
// configuration, the message a record becomes, the batch loop with
// per-entry results) is package awsmsg's; the delivery loop (retries,
// per-key order, bounded window) is package broker's; the SDK's own
// retries are off.
//
// # Order
//
// The batches of one topic go out one after the other, each after the
// answer to the previous one. A FIFO topic (its name ends in .fifo) gets
// MessageGroupId = the record key (the aggregate id) and
// MessageDeduplicationId = the row's message id, so SNS keeps each
// aggregate in order towards its FIFO subscriptions and drops a copy sent
// again within its five-minute deduplication window. A failed entry
// holds back the later records of its aggregate, as with SQS. Standard
// topics get neither id: SNS does not keep their order and may deliver a
// message twice.
//
// # Messages
//
// As with SQS: the body is the record value (base64 with
// sink.body_encoding base64; "null" with the attribute outbox_cdc.body
// for a NULL or empty value), the attributes are message_id,
// outbox_cdc.key and the route headers (past the ninth together in
// outbox_cdc.headers). They reach an SQS subscription as message
// attributes with raw message delivery on, else inside the JSON
// envelope SNS wraps the message in.
package sns

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssns "github.com/aws/aws-sdk-go-v2/service/sns"
	"github.com/aws/aws-sdk-go-v2/service/sns/types"
	"github.com/aws/aws-sdk-go-v2/service/sts"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
	"github.com/outbox-cdc/outbox-cdc/sink/awsmsg"
	"github.com/outbox-cdc/outbox-cdc/sink/broker"
)

// Attribute names the sink adds (those of the SQS sink).
const (
	AttrMessageID = awsmsg.AttrMessageID
	AttrKey       = awsmsg.AttrKey
	AttrBody      = awsmsg.AttrBody
	AttrHeaders   = awsmsg.AttrHeaders
)

// service is SNS for messages and error classification.
var service = &awsmsg.Service{
	Name:        "sns",
	AuthHint:    "check the AWS credentials (environment, profile, web identity, instance role) and that they may sns:Publish",
	Missing:     map[string]bool{"NotFound": true, "ResourceNotFound": true},
	MissingHint: "create the topic, or fix route.topic (and sink.region, sink.topic_owner)",
}

// Sink is the SNS sink; it implements outboxcdc.Sink.
type Sink struct {
	*broker.Writer
	cfg Config
	aws aws.Config
	log zerolog.Logger

	mu      sync.Mutex
	account string // the topics' account: sink.topic_owner, else the credentials'
	part    string // its partition
	last    string // a topic ARN that was written to, for Probe
}

// New validates cfg, loads the AWS configuration (region, profile,
// credentials chain: nothing is fetched yet) and returns the sink.
func New(cfg Config, log zerolog.Logger, reg prometheus.Registerer) (*Sink, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s, err := newSink(context.Background(), cfg)
	if err != nil {
		return nil, err
	}
	s.log = log.With().Str("component", "sink").Str("sink", "sns").Logger()
	s.log.Info().Str("region", s.aws.Region).Str("endpoint", outboxcdc.RedactDSN(cfg.Endpoint)).
		Msg("sns sink starting (PublishBatch, per-entry results)")
	w, err := broker.New("sns", cfg.Config.Config, s.dial, s.log, reg)
	if err != nil {
		return nil, err
	}
	s.Writer = w
	return s, nil
}

func newSink(ctx context.Context, cfg Config) (*Sink, error) {
	ac, err := awsmsg.Load(ctx, cfg.Config)
	if err != nil {
		return nil, err
	}
	s := &Sink{cfg: cfg, aws: ac, log: zerolog.Nop()}
	if cfg.TopicOwner != "" {
		s.account, s.part = cfg.TopicOwner, partition(ac.Region)
	}
	return s, nil
}

func (s *Sink) newConn(socks *broker.Sockets) *conn {
	hc := awsmsg.HTTPClient(s.cfg.Config, socks)
	c := &conn{Conn: awsmsg.Conn{Svc: service, AckTimeout: s.cfg.AckTimeout, Socks: socks}, s: s,
		c: awssns.NewFromConfig(s.aws, func(o *awssns.Options) {
			o.HTTPClient, o.Retryer = hc, aws.NopRetryer{}
			if s.cfg.Endpoint != "" {
				o.BaseEndpoint = aws.String(s.cfg.Endpoint)
			}
		}),
		sts: sts.NewFromConfig(s.aws, func(o *sts.Options) {
			o.HTTPClient, o.Retryer = hc, aws.NopRetryer{}
			if s.cfg.Endpoint != "" {
				o.BaseEndpoint = aws.String(s.cfg.Endpoint) // emulators answer STS there
			}
		})}
	return c
}

func (s *Sink) dial(ctx context.Context) (broker.Conn, error) {
	c := s.newConn(&broker.Sockets{})
	if err := c.Probe(ctx); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// conn is one SNS client with its own sockets: given up, they are reset.
type conn struct {
	awsmsg.Conn
	s   *Sink
	c   *awssns.Client
	sts *sts.Client
}

// topicARN returns the ARN of the topic route.topic rendered: a whole ARN
// as it is, a name completed with the region and the account.
func (c *conn) topicARN(ctx context.Context, topic string) (string, error) {
	if strings.HasPrefix(topic, "arn:") {
		return topic, nil
	}
	c.s.mu.Lock()
	account, part := c.s.account, c.s.part
	c.s.mu.Unlock()
	if account == "" {
		out, err := awsmsg.Call(ctx, &c.Conn, func(ctx context.Context) (*sts.GetCallerIdentityOutput, error) {
			return c.sts.GetCallerIdentity(ctx, &sts.GetCallerIdentityInput{})
		})
		if err != nil {
			return "", err
		}
		account, part = aws.ToString(out.Account), "aws"
		if p := strings.Split(aws.ToString(out.Arn), ":"); len(p) > 1 && p[1] != "" {
			part = p[1]
		}
		if !awsmsg.IsAccountID(account) {
			return "", broker.NoRecord(outboxcdc.Permanent(errors.New("sns: STS named no account for the credentials"), "set sink.topic_owner"))
		}
		c.s.mu.Lock()
		c.s.account, c.s.part = account, part
		c.s.mu.Unlock()
	}
	return "arn:" + part + ":sns:" + c.s.aws.Region + ":" + account + ":" + topic, nil
}

// Send implements broker.Conn: the records of each topic in batches of at
// most ten entries and max_message_bytes, one batch after the other.
func (c *conn) Send(ctx context.Context, msgs []*broker.Msg) error {
	return c.Conn.Send(ctx, c.s.cfg.Config, msgs, IsFIFO, c.topicARN, c.publishBatch)
}

func (c *conn) publishBatch(ctx context.Context, arn string, msgs []awsmsg.Message) (awsmsg.Answer, error) {
	entries := make([]types.PublishBatchRequestEntry, len(msgs))
	for i, m := range msgs {
		entries[i] = entryOf(m, i)
	}
	out, err := awsmsg.Call(ctx, &c.Conn, func(ctx context.Context) (*awssns.PublishBatchOutput, error) {
		return c.c.PublishBatch(ctx, &awssns.PublishBatchInput{TopicArn: aws.String(arn), PublishBatchRequestEntries: entries})
	})
	if err != nil {
		return awsmsg.Answer{}, err
	}
	c.s.mu.Lock()
	c.s.last = arn
	c.s.mu.Unlock()
	return awsmsg.BatchAnswer(out.Successful, func(e types.PublishBatchResultEntry) string { return aws.ToString(e.Id) },
		out.Failed, func(f types.BatchResultErrorEntry) awsmsg.Failure {
			return awsmsg.Failure{ID: aws.ToString(f.Id), Code: aws.ToString(f.Code), Message: aws.ToString(f.Message), SenderFault: f.SenderFault}
		}), nil
}

func entryOf(m awsmsg.Message, idx int) types.PublishBatchRequestEntry {
	return types.PublishBatchRequestEntry{Id: aws.String(strconv.Itoa(idx)), Message: aws.String(m.Body),
		MessageAttributes: awsmsg.Attributes(m, func(dataType string, str *string, bin []byte) types.MessageAttributeValue {
			return types.MessageAttributeValue{DataType: aws.String(dataType), StringValue: str, BinaryValue: bin}
		}),
		MessageGroupId: awsmsg.OptString(m.GroupID), MessageDeduplicationId: awsmsg.OptString(m.DedupID)}
}

// Probe implements broker.Conn: SNS answers (GetTopicAttributes of a
// topic the sink wrote to, else ListTopics; a refusal for want of
// permission still proves SNS answers, refused credentials do not).
func (c *conn) Probe(ctx context.Context) error {
	if err := c.Err(); err != nil {
		return err
	}
	c.s.mu.Lock()
	last := c.s.last
	c.s.mu.Unlock()
	var err error
	if last != "" {
		_, err = awsmsg.Call(ctx, &c.Conn, func(ctx context.Context) (*awssns.GetTopicAttributesOutput, error) {
			return c.c.GetTopicAttributes(ctx, &awssns.GetTopicAttributesInput{TopicArn: aws.String(last)})
		})
	} else {
		_, err = awsmsg.Call(ctx, &c.Conn, func(ctx context.Context) (*awssns.ListTopicsOutput, error) {
			return c.c.ListTopics(ctx, &awssns.ListTopicsInput{})
		})
	}
	return awsmsg.ProbeErr(ctx, err)
}
