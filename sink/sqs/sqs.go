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
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/schemas"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/transport/http/protocol/awsquery"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
	"github.com/outbox-cdc/outbox-cdc/deadpeer"
	"github.com/outbox-cdc/outbox-cdc/sink/broker"
	"github.com/outbox-cdc/outbox-cdc/tlsconf"
)

// Attribute names the sink adds.
const (
	AttrMessageID = "message_id"
	AttrKey       = "outbox_cdc.key"
	AttrBody      = "outbox_cdc.body"
	AttrHeaders   = "outbox_cdc.headers"
)

// MaxAttributes is the most message attributes SQS takes on a message.
const MaxAttributes = 10

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

// New validates cfg, loads the AWS configuration (region, profile,
// credentials chain: nothing is fetched yet) and returns the sink.
func New(cfg Config, log zerolog.Logger, reg prometheus.Registerer) (*Sink, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	ac, err := loadAWS(context.Background(), cfg)
	if err != nil {
		return nil, err
	}
	s := &Sink{cfg: cfg, aws: ac, urls: map[string]string{},
		log: log.With().Str("component", "sink").Str("sink", "sqs").Logger()}
	s.log.Info().Str("region", ac.Region).Str("endpoint", outboxcdc.RedactDSN(cfg.Endpoint)).Str("protocol", cfg.Protocol).
		Msg("sqs sink starting (SendMessageBatch, per-entry results)")
	w, err := broker.New("sqs", cfg.Config, s.dial, s.log, reg)
	if err != nil {
		return nil, err
	}
	s.Writer = w
	return s, nil
}

func loadAWS(ctx context.Context, cfg Config) (aws.Config, error) {
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

// client returns an SQS client whose sockets are kept in socks (nil: not
// kept) and whose requests the SDK does not retry.
func client(cfg Config, ac aws.Config, socks *broker.Sockets) *awssqs.Client {
	d := deadpeer.HTTP.Dialer(cfg.DialTimeout)
	tr := &http.Transport{
		Proxy:               http.ProxyFromEnvironment,
		TLSHandshakeTimeout: cfg.DialTimeout,
		MaxIdleConnsPerHost: 4,
		IdleConnTimeout:     90 * time.Second,
		ForceAttemptHTTP2:   true,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := d.DialContext(ctx, network, addr)
			if err != nil || socks == nil {
				return c, err
			}
			return socks.Track(c), nil
		},
	}
	return awssqs.NewFromConfig(ac, func(o *awssqs.Options) {
		o.HTTPClient = &http.Client{Transport: tr}
		o.Retryer = aws.NopRetryer{}
		if cfg.Endpoint != "" {
			o.BaseEndpoint = aws.String(cfg.Endpoint)
		}
		if cfg.Protocol == ProtocolQuery {
			o.Protocol = awsquery.New(schemas.AmazonSQS)
		}
	})
}

func (s *Sink) dial(ctx context.Context) (broker.Conn, error) {
	socks := &broker.Sockets{}
	c := &conn{s: s, c: client(s.cfg, s.aws, socks), socks: socks}
	if err := c.Probe(ctx); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// authCodes are the API error codes of credentials SQS refuses.
var authCodes = map[string]bool{
	"InvalidClientTokenId": true, "SignatureDoesNotMatch": true, "UnrecognizedClientException": true,
	"ExpiredToken": true, "IncompleteSignature": true, "MissingAuthenticationToken": true, "InvalidSecurity": true,
	"AccessDenied": true, "AccessDeniedException": true, "KMS.AccessDeniedException": true,
}

// transientCodes are the API error codes worth sending again.
var transientCodes = map[string]bool{
	"RequestThrottled": true, "ThrottlingException": true, "Throttling": true, "ServiceUnavailable": true,
	"InternalError": true, "InternalFailure": true, "RequestTimeout": true, "KmsThrottled": true,
	"KMS.ThrottlingException": true, "OverLimit": true,
}

// missingQueueCodes say the queue does not exist.
var missingQueueCodes = map[string]bool{
	"AWS.SimpleQueueService.NonExistentQueue": true, "QueueDoesNotExist": true, "NonExistentQueue": true,
}

// classify marks a failed SQS call: API errors by their code (the
// service's own classification: a server fault is transient), everything
// else through outboxcdc.Network.
func classify(err error) error {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		code := ae.ErrorCode()
		switch {
		case authCodes[code]:
			return broker.NoRecord(outboxcdc.Permanent(err,
				"check the AWS credentials (environment, profile, web identity, instance role) and that they may sqs:SendMessage and sqs:GetQueueUrl"))
		case missingQueueCodes[code]:
			return outboxcdc.Permanent(err, "create the queue, or fix route.topic (and sink.region, sink.queue_owner)")
		case transientCodes[code] || ae.ErrorFault() == smithy.FaultServer:
			return outboxcdc.Transient(err)
		}
		return outboxcdc.Permanent(err, "")
	}
	if tlsconf.IsCertificateError(err) {
		return broker.NoRecord(outboxcdc.Permanent(err, "check sink.endpoint and the system's CA certificates"))
	}
	if n := outboxcdc.Network(err); outboxcdc.IsClassified(n) {
		return n
	}
	return outboxcdc.Transient(err)
}

// conn is one SQS client with its own sockets: given up, they are reset.
type conn struct {
	s     *Sink
	c     *awssqs.Client
	socks *broker.Sockets

	fault broker.Fault // the connection's first failure
}

// Err implements broker.Conn.
func (c *conn) Err() error { return c.fault.Err() }

// call runs one request with sink.ack_timeout. A transport failure (no
// answer) gives the connection up; an answer from SQS does not.
func call[T any](ctx context.Context, c *conn, f func(context.Context) (T, error)) (T, error) {
	cctx, cancel := context.WithTimeout(ctx, c.s.cfg.AckTimeout)
	defer cancel()
	out, err := f(cctx)
	if err == nil || ctx.Err() != nil {
		return out, err
	}
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return out, classify(fmt.Errorf("sqs: %w", err))
	}
	if cctx.Err() != nil {
		err = fmt.Errorf("no answer within sink.ack_timeout (%s): %w", c.s.cfg.AckTimeout, err)
	}
	return out, c.fault.Fail(classify(fmt.Errorf("sqs: %w", err)))
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
	out, err := call(ctx, c, func(ctx context.Context) (*awssqs.GetQueueUrlOutput, error) { return c.c.GetQueueUrl(ctx, in) })
	if err != nil {
		return "", err
	}
	u = aws.ToString(out.QueueUrl)
	c.s.mu.Lock()
	c.s.urls[name], c.s.last = u, u
	c.s.mu.Unlock()
	return u, nil
}

// errHeldBack is the outcome of a record not sent because an earlier
// record of its aggregate failed in this attempt.
var errHeldBack = outboxcdc.Transient(errors.New("sqs: not sent: an earlier record of the same aggregate failed"))

// Send implements broker.Conn: the records of each queue in batches of at
// most ten entries and max_message_bytes, one batch after the other.
func (c *conn) Send(ctx context.Context, msgs []*broker.Msg) error {
	var order []string
	byQueue := map[string][]*broker.Msg{}
	for _, m := range msgs {
		if _, ok := byQueue[m.Rec.Topic]; !ok {
			order = append(order, m.Rec.Topic)
		}
		byQueue[m.Rec.Topic] = append(byQueue[m.Rec.Topic], m)
	}
	for _, q := range order {
		if err := c.sendQueue(ctx, q, byQueue[q]); err != nil {
			return err
		}
	}
	return nil
}

func (c *conn) sendQueue(ctx context.Context, queue string, msgs []*broker.Msg) error {
	fifo := IsFIFO(queue)
	url, err := c.queueURL(ctx, queue)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		for _, m := range msgs {
			m.Err = err
		}
		return nil
	}
	failed := map[string]bool{} // keys with a failed record
	for len(msgs) > 0 {
		if err := c.Err(); err != nil {
			for _, m := range msgs {
				m.Err = err
			}
			return nil
		}
		var batch []*broker.Msg
		var entries []types.SendMessageBatchRequestEntry
		bytes := 0
		n := 0
		for ; n < len(msgs) && len(batch) < MaxBatch; n++ {
			m := msgs[n]
			if failed[string(m.Rec.Key)] {
				m.Err = errHeldBack
				continue
			}
			e, size, err := c.entry(m, len(batch), fifo)
			if err != nil {
				m.Err = err
				failed[string(m.Rec.Key)] = true
				continue
			}
			if len(batch) > 0 && bytes+size > c.s.cfg.MaxMessageBytes {
				break
			}
			bytes += size
			batch = append(batch, m)
			entries = append(entries, e)
		}
		msgs = msgs[n:]
		if len(batch) == 0 {
			continue
		}
		out, err := call(ctx, c, func(ctx context.Context) (*awssqs.SendMessageBatchOutput, error) {
			return c.c.SendMessageBatch(ctx, &awssqs.SendMessageBatchInput{QueueUrl: aws.String(url), Entries: entries})
		})
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			for _, m := range batch {
				m.Err = err
				failed[string(m.Rec.Key)] = true
			}
			continue
		}
		answered := make([]bool, len(batch))
		for _, ok := range out.Successful {
			if i, err := strconv.Atoi(aws.ToString(ok.Id)); err == nil && i >= 0 && i < len(batch) {
				answered[i] = true
			}
		}
		for _, f := range out.Failed {
			i, err := strconv.Atoi(aws.ToString(f.Id))
			if err != nil || i < 0 || i >= len(batch) || answered[i] {
				continue
			}
			answered[i] = true
			e := fmt.Errorf("sqs: entry refused: %s: %s", aws.ToString(f.Code), aws.ToString(f.Message))
			m := batch[i]
			switch {
			case f.SenderFault && !transientCodes[aws.ToString(f.Code)]:
				m.Err = outboxcdc.Permanent(e, "")
			default:
				m.Err = outboxcdc.Transient(e)
			}
			failed[string(m.Rec.Key)] = true
		}
		for i, m := range batch {
			if !answered[i] {
				m.Err = outboxcdc.Transient(errors.New("sqs: the batch answer lists no result for the entry"))
				failed[string(m.Rec.Key)] = true
			}
		}
	}
	return nil
}

// entry builds the batch entry of m with id idx, and its size as SQS
// counts it (body and attributes).
func (c *conn) entry(m *broker.Msg, idx int, fifo bool) (types.SendMessageBatchRequestEntry, int, error) {
	r := m.Rec
	e := types.SendMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(idx))}
	attrs := map[string]types.MessageAttributeValue{}
	body := ""
	switch {
	case len(r.Value) == 0:
		body = "null"
		what := "null"
		if r.Value != nil {
			what = "empty"
		}
		attrs[AttrBody] = types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(what)}
	case c.s.cfg.BodyEncoding == BodyBase64:
		body = base64.StdEncoding.EncodeToString(r.Value)
	default:
		if !validText(r.Value) {
			return e, 0, outboxcdc.Permanent(errors.New("sqs: the payload is not text SQS accepts (UTF-8 without control characters)"),
				"set sink.body_encoding: base64 for binary payloads")
		}
		body = string(r.Value)
	}
	e.MessageBody = aws.String(body)
	if r.MessageID != "" {
		attrs[AttrMessageID] = types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(r.MessageID)}
	}
	if len(r.Key) > 0 {
		attrs[AttrKey] = stringOrBinary(r.Key)
	}
	// SQS takes at most MaxAttributes: the headers past the last that
	// fits go together into one (AttrHeaders), a JSON object.
	var more map[string]string
	for _, h := range r.Headers {
		if h.Value == nil {
			continue
		}
		if _, ok := attrs[h.Key]; !ok && len(attrs) >= MaxAttributes-1 {
			if more == nil {
				more = map[string]string{}
			}
			if validText(h.Value) {
				more[h.Key] = string(h.Value)
			} else {
				more[h.Key+".base64"] = base64.StdEncoding.EncodeToString(h.Value)
			}
			continue
		}
		attrs[h.Key] = stringOrBinary(h.Value)
	}
	if more != nil {
		j, _ := json.Marshal(more)
		attrs[AttrHeaders] = types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(string(j))}
	}
	size := len(body)
	for k, v := range attrs {
		size += len(k) + len(aws.ToString(v.DataType)) + len(aws.ToString(v.StringValue)) + len(v.BinaryValue)
	}
	if size > c.s.cfg.MaxMessageBytes {
		return e, 0, outboxcdc.Permanent(fmt.Errorf("sqs: message of %d bytes (body and attributes) is larger than sink.max_message_bytes (%d)", size, c.s.cfg.MaxMessageBytes),
			"raise sink.max_message_bytes up to the queue's maximum message size, or make the payload smaller")
	}
	e.MessageAttributes = attrs
	if fifo {
		e.MessageGroupId = aws.String(fifoID(string(r.Key), "-"))
		if r.MessageID != "" {
			id := r.MessageID
			if m.Again > 0 {
				id += "." + strconv.Itoa(m.Again)
			}
			e.MessageDeduplicationId = aws.String(fifoID(id, ""))
		}
	}
	return e, size, nil
}

// fifoID returns s as a group or deduplication id: as it is when SQS
// takes it (1 to 128 characters of ASCII alphanumerics and punctuation),
// else its SHA-256 in hex; empty for "" is def.
func fifoID(s, def string) string {
	if s == "" {
		return def
	}
	ok := len(s) <= 128
	for i := 0; ok && i < len(s); i++ {
		ok = s[i] > ' ' && s[i] < 0x7f
	}
	if ok {
		return s
	}
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

// validText reports whether SQS accepts b as a message body or String
// attribute: UTF-8 of #x9 #xA #xD #x20-#xD7FF #xE000-#xFFFD #x10000-#x10FFFF.
func validText(b []byte) bool {
	if !utf8.Valid(b) {
		return false
	}
	for _, r := range string(b) {
		switch {
		case r == 0x9 || r == 0xA || r == 0xD:
		case r >= 0x20 && r <= 0xD7FF, r >= 0xE000 && r <= 0xFFFD, r >= 0x10000:
		default:
			return false
		}
	}
	return true
}

func stringOrBinary(v []byte) types.MessageAttributeValue {
	if len(v) > 0 && validText(v) {
		return types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(string(v))}
	}
	if len(v) == 0 {
		return types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String("")}
	}
	return types.MessageAttributeValue{DataType: aws.String("Binary"), BinaryValue: v}
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
		_, err = call(ctx, c, func(ctx context.Context) (*awssqs.GetQueueAttributesOutput, error) {
			return c.c.GetQueueAttributes(ctx, &awssqs.GetQueueAttributesInput{QueueUrl: aws.String(last),
				AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn}})
		})
	} else {
		_, err = call(ctx, c, func(ctx context.Context) (*awssqs.ListQueuesOutput, error) {
			return c.c.ListQueues(ctx, &awssqs.ListQueuesInput{MaxResults: aws.Int32(1)})
		})
	}
	if err == nil || ctx.Err() != nil {
		return err
	}
	var ae smithy.APIError
	if errors.As(err, &ae) && (!authCodes[ae.ErrorCode()] || strings.Contains(ae.ErrorCode(), "AccessDenied")) {
		return nil // SQS answered (and knows the credentials)
	}
	return err
}

// Close implements broker.Conn.
func (c *conn) Close() error {
	c.fault.Fail(outboxcdc.Transient(errors.New("sqs client closed by the sink")))
	c.socks.Abort()
	return nil
}
