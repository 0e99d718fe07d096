package sqs

import (
	"context"
	"fmt"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
	"github.com/outbox-cdc/outbox-cdc/sink/awsmsg"
)

// Check is the preflight for `outbox-cdc check`: it resolves the AWS
// credentials and, for each queue name that does not depend on a row (a
// template without placeholders, the dead-letter queue), checks that the
// queue exists and that its kind (FIFO or standard) is the one its name
// says. It sends nothing.
func Check(ctx context.Context, cfg Config, queues ...string) []outboxcdc.CheckResult {
	if err := cfg.Validate(); err != nil {
		return []outboxcdc.CheckResult{outboxcdc.Fail("sqs.config", err.Error(), "fix the sink section")}
	}
	ac, err := awsmsg.Load(ctx, cfg.Config)
	if err != nil {
		return []outboxcdc.CheckResult{outboxcdc.Fail("sqs.config", err.Error(), "set sink.region, or the profile's region")}
	}
	creds, err := ac.Credentials.Retrieve(ctx)
	if err != nil {
		return []outboxcdc.CheckResult{outboxcdc.Fail("sqs.credentials", err.Error(),
			"provide AWS credentials: environment, sink.profile, web identity (EKS), or an instance or task role")}
	}
	out := []outboxcdc.CheckResult{outboxcdc.Pass("sqs.credentials", fmt.Sprintf("credentials from %s, region %s", creds.Source, ac.Region))}
	s := &Sink{cfg: cfg, aws: ac, urls: map[string]string{}}
	c := s.newConn(nil)
	// SQS answers (ListQueues): a check of templated queues alone, which
	// is also the HA standby's proof that it reaches the sink, must not
	// pass without a request.
	if err := c.Probe(ctx); err != nil {
		return append(out, outboxcdc.Fail("sqs.reachable", err.Error(), "check sink.region, sink.endpoint and that SQS is reachable from here"))
	}
	out = append(out, outboxcdc.Pass("sqs.reachable", "SQS answers"))
	for _, q := range queues {
		if strings.Contains(q, "{") {
			out = append(out, outboxcdc.Pass("sqs.queue", fmt.Sprintf("queues %q depend on the row; a missing queue is a permanent error when written", q)))
			continue
		}
		u, err := c.queueURL(ctx, q)
		if err != nil {
			fix := outboxcdc.Hint(err)
			if fix == "" {
				fix = "check sink.region, sink.endpoint and that SQS is reachable from here"
			}
			out = append(out, outboxcdc.Fail("sqs.queue", fmt.Sprintf("queue %q: %v", q, err), fix))
			continue
		}
		attrs, err := awsmsg.Call(ctx, &c.Conn, func(ctx context.Context) (*awssqs.GetQueueAttributesOutput, error) {
			return c.c.GetQueueAttributes(ctx, &awssqs.GetQueueAttributesInput{QueueUrl: aws.String(u),
				AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameFifoQueue, types.QueueAttributeNameMaximumMessageSize}})
		})
		if err != nil {
			out = append(out, outboxcdc.Pass("sqs.queue", fmt.Sprintf("queue %q exists (its attributes are not readable: %v)", q, err)))
			continue
		}
		detail := fmt.Sprintf("queue %q exists (standard: unordered, at-least-once)", q)
		if IsFIFO(q) {
			detail = fmt.Sprintf("queue %q exists (FIFO: ordered per aggregate, deduplicated by message id)", q)
		}
		if max := attrs.Attributes[string(types.QueueAttributeNameMaximumMessageSize)]; max != "" && max != fmt.Sprint(cfg.MaxMessageBytes) {
			detail += fmt.Sprintf("; its maximum message size is %s bytes, sink.max_message_bytes %d", max, cfg.MaxMessageBytes)
		}
		out = append(out, outboxcdc.Pass("sqs.queue", detail))
	}
	return out
}
