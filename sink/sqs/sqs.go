// Package sqs is the Amazon SQS sink: records go out with
// SendMessageBatch, at most ten to a request, to the queue the rendered
// route.topic names, and a record counts as delivered only when SQS listed
// its entry as successful. The per-entry results of a batch are the
// records' answers: a failed entry is sent again (transient) or ends the
// write (permanent, pipeline.on_error), while the batch's other entries
// stay delivered. The delivery loop (retries, per-key order, bounded
// window) is package broker's; the SDK's own retries are off.
//
// # Order
//
// The batches of one queue go out one after the other, each after the
// answer to the previous one. A FIFO queue (its name ends in .fifo) gets
// MessageGroupId = the record key (the aggregate id) and
// MessageDeduplicationId = the row's message id, so SQS keeps each
// aggregate in order and drops a copy sent again within its five-minute
// deduplication window. When an entry fails, the later records of its
// aggregate in the same write are not sent (they are held back and sent
// again after it), so a failure never lets a later event of an aggregate
// overtake an earlier one. An entry of the same aggregate that SQS
// accepted in the same batch as the failed one is sent again after it,
// with a distinct deduplication id (the row's id and ".1", ".2"...), as
// package broker restores a key's order. Standard queues get neither id:
// SQS does not keep their order and may deliver a message twice.
//
// # Messages
//
//	body                        the record value (sink.body_encoding base64:
//	                            its base64); a NULL or empty value, which SQS
//	                            cannot carry, is the body "null" with the
//	                            attribute outbox_cdc.body = null | empty
//	MessageGroupId              FIFO: the record key, or its SHA-256 (hex)
//	                            when SQS would refuse it (over 128 characters,
//	                            other characters than ASCII punctuation and
//	                            alphanumerics); "-" for an empty key
//	MessageDeduplicationId      FIFO: the message id, the same way
//	attributes                  message_id, outbox_cdc.key, and
//	                            each route header (String when valid text,
//	                            else Binary; a repeated name keeps its last
//	                            value; a NULL value is left out). SQS takes
//	                            at most 10 attributes a message: the headers
//	                            past the ninth go together into the attribute
//	                            outbox_cdc.headers, a JSON object of name to
//	                            value (a value that is not text under
//	                            "<name>.base64", base64-encoded).
package sqs

import (
	"context"
	"strconv"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/schemas"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go/transport/http/protocol/awsquery"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
	"github.com/outbox-cdc/outbox-cdc/sink/awsmsg"
	"github.com/outbox-cdc/outbox-cdc/sink/broker"
)

// Attribute names the sink adds.
const (
	AttrMessageID = awsmsg.AttrMessageID
	AttrKey       = awsmsg.AttrKey
	AttrBody      = awsmsg.AttrBody
	AttrHeaders   = awsmsg.AttrHeaders
)

// MaxAttributes is the most message attributes SQS takes on a message.
const MaxAttributes = awsmsg.MaxAttributes

// Sink is the SQS sink; it implements outboxcdc.Sink.
type Sink struct {
	*broker.Writer
	cfg Config
	aws aws.Config
	log zerolog.Logger

	mu   sync.Mutex
	urls map[string]string // queue name -> queue URL
	last string            // a queue URL that resolved, for Probe
}

// service is SQS for messages and error classification.
var service = &awsmsg.Service{
	Name:     "sqs",
	AuthHint: "check the AWS credentials (environment, profile, web identity, instance role) and that they may sqs:SendMessage and sqs:GetQueueUrl",
	Missing: map[string]bool{
		"AWS.SimpleQueueService.NonExistentQueue": true, "QueueDoesNotExist": true, "NonExistentQueue": true,
	},
	MissingHint: "create the queue, or fix route.topic (and sink.region, sink.queue_owner)",
}

// New validates cfg, loads the AWS configuration (region, profile,
// credentials chain: nothing is fetched yet) and returns the sink.
func New(cfg Config, log zerolog.Logger, reg prometheus.Registerer) (*Sink, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	ac, err := awsmsg.Load(context.Background(), cfg.Config)
	if err != nil {
		return nil, err
	}
	s := &Sink{cfg: cfg, aws: ac, urls: map[string]string{},
		log: log.With().Str("component", "sink").Str("sink", "sqs").Logger()}
	s.log.Info().Str("region", ac.Region).Str("endpoint", outboxcdc.RedactDSN(cfg.Endpoint)).Str("protocol", cfg.Protocol).
		Msg("sqs sink starting (SendMessageBatch, per-entry results)")
	w, err := broker.New("sqs", cfg.Config.Config, s.dial, s.log, reg)
	if err != nil {
		return nil, err
	}
	s.Writer = w
	return s, nil
}

// client returns an SQS client whose sockets are kept in socks (nil: not
// kept) and whose requests the SDK does not retry.
func client(cfg Config, ac aws.Config, socks *broker.Sockets) *awssqs.Client {
	return awssqs.NewFromConfig(ac, func(o *awssqs.Options) {
		o.HTTPClient = awsmsg.HTTPClient(cfg.Config, socks)
		o.Retryer = aws.NopRetryer{}
		if cfg.Endpoint != "" {
			o.BaseEndpoint = aws.String(cfg.Endpoint)
		}
		if cfg.Protocol == ProtocolQuery {
			o.Protocol = awsquery.New(schemas.AmazonSQS)
		}
	})
}

func (s *Sink) newConn(socks *broker.Sockets) *conn {
	return &conn{Conn: awsmsg.Conn{Svc: service, AckTimeout: s.cfg.AckTimeout, Socks: socks}, s: s, c: client(s.cfg, s.aws, socks)}
}

func (s *Sink) dial(ctx context.Context) (broker.Conn, error) {
	c := s.newConn(&broker.Sockets{})
	if err := c.Probe(ctx); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// classify marks a failed SQS call (awsmsg.Service.Classify).
func classify(err error) error { return service.Classify(err) }

// conn is one SQS client with its own sockets: given up, they are reset.
type conn struct {
	awsmsg.Conn
	s *Sink
	c *awssqs.Client
}

// queueURL resolves a queue name (cached per sink).
func (c *conn) queueURL(ctx context.Context, name string) (string, error) {
	c.s.mu.Lock()
	u, ok := c.s.urls[name]
	c.s.mu.Unlock()
	if ok {
		return u, nil
	}
	in := &awssqs.GetQueueUrlInput{QueueName: aws.String(name)}
	if c.s.cfg.QueueOwner != "" {
		in.QueueOwnerAWSAccountId = aws.String(c.s.cfg.QueueOwner)
	}
	out, err := awsmsg.Call(ctx, &c.Conn, func(ctx context.Context) (*awssqs.GetQueueUrlOutput, error) { return c.c.GetQueueUrl(ctx, in) })
	if err != nil {
		return "", err
	}
	u = aws.ToString(out.QueueUrl)
	c.s.mu.Lock()
	c.s.urls[name], c.s.last = u, u
	c.s.mu.Unlock()
	return u, nil
}

// Send implements broker.Conn: the records of each queue in batches of at
// most ten entries and max_message_bytes, one batch after the other.
func (c *conn) Send(ctx context.Context, msgs []*broker.Msg) error {
	return c.Conn.Send(ctx, c.s.cfg.Config, msgs, IsFIFO, c.queueURL, c.sendBatch)
}

func (c *conn) sendBatch(ctx context.Context, url string, msgs []awsmsg.Message) (awsmsg.Answer, error) {
	entries := make([]types.SendMessageBatchRequestEntry, len(msgs))
	for i, m := range msgs {
		entries[i] = entryOf(m, i)
	}
	out, err := awsmsg.Call(ctx, &c.Conn, func(ctx context.Context) (*awssqs.SendMessageBatchOutput, error) {
		return c.c.SendMessageBatch(ctx, &awssqs.SendMessageBatchInput{QueueUrl: aws.String(url), Entries: entries})
	})
	if err != nil {
		return awsmsg.Answer{}, err
	}
	return awsmsg.BatchAnswer(out.Successful, func(e types.SendMessageBatchResultEntry) string { return aws.ToString(e.Id) },
		out.Failed, func(f types.BatchResultErrorEntry) awsmsg.Failure {
			return awsmsg.Failure{ID: aws.ToString(f.Id), Code: aws.ToString(f.Code), Message: aws.ToString(f.Message), SenderFault: f.SenderFault}
		}), nil
}

// entry builds the batch entry of m with id idx, and its size as SQS
// counts it (body and attributes).
func (c *conn) entry(m *broker.Msg, idx int, fifo bool) (types.SendMessageBatchRequestEntry, int, error) {
	msg, err := awsmsg.Build(service.Name, c.s.cfg.Config, m, fifo)
	if err != nil {
		return types.SendMessageBatchRequestEntry{}, 0, err
	}
	return entryOf(msg, idx), msg.Size, nil
}

func entryOf(m awsmsg.Message, idx int) types.SendMessageBatchRequestEntry {
	return types.SendMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(idx)), MessageBody: aws.String(m.Body),
		MessageAttributes: awsmsg.Attributes(m, func(dataType string, str *string, bin []byte) types.MessageAttributeValue {
			return types.MessageAttributeValue{DataType: aws.String(dataType), StringValue: str, BinaryValue: bin}
		}),
		MessageGroupId: awsmsg.OptString(m.GroupID), MessageDeduplicationId: awsmsg.OptString(m.DedupID)}
}

// Probe implements broker.Conn: SQS answers (GetQueueUrl of a queue the
// sink resolved, else ListQueues; a refusal for want of permission still
// proves SQS answers, refused credentials do not).
func (c *conn) Probe(ctx context.Context) error {
	if err := c.Err(); err != nil {
		return err
	}
	c.s.mu.Lock()
	last := c.s.last
	c.s.mu.Unlock()
	var err error
	if last != "" {
		_, err = awsmsg.Call(ctx, &c.Conn, func(ctx context.Context) (*awssqs.GetQueueAttributesOutput, error) {
			return c.c.GetQueueAttributes(ctx, &awssqs.GetQueueAttributesInput{QueueUrl: aws.String(last),
				AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn}})
		})
	} else {
		_, err = awsmsg.Call(ctx, &c.Conn, func(ctx context.Context) (*awssqs.ListQueuesOutput, error) {
			return c.c.ListQueues(ctx, &awssqs.ListQueuesInput{MaxResults: aws.Int32(1)})
		})
	}
	return awsmsg.ProbeErr(ctx, err)
}
