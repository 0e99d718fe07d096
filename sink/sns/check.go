package sns

import (
	"context"
	"fmt"
	"strings"

	awssns "github.com/aws/aws-sdk-go-v2/service/sns"

	"github.com/aws/aws-sdk-go-v2/aws"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
	"github.com/outbox-cdc/outbox-cdc/sink/awsmsg"
)

// Check is the preflight for `outbox-cdc check`: it resolves the AWS
// credentials and, for each topic that does not depend on a row (a
// template without placeholders, the dead-letter topic), checks that the
// topic exists, that its kind (FIFO or standard) is the one its name
// says, and says how many subscriptions it has (SNS accepts what is
// published to a topic without subscriptions, and it reaches no one). It
// publishes nothing.
func Check(ctx context.Context, cfg Config, topics ...string) []outboxcdc.CheckResult {
	if err := cfg.Validate(); err != nil {
		return []outboxcdc.CheckResult{outboxcdc.Fail("sns.config", err.Error(), "fix the sink section")}
	}
	s, err := newSink(ctx, cfg)
	if err != nil {
		return []outboxcdc.CheckResult{outboxcdc.Fail("sns.config", err.Error(), "set sink.region, or the profile's region")}
	}
	creds, err := s.aws.Credentials.Retrieve(ctx)
	if err != nil {
		return []outboxcdc.CheckResult{outboxcdc.Fail("sns.credentials", err.Error(),
			"provide AWS credentials: environment, sink.profile, web identity (EKS), or an instance or task role")}
	}
	out := []outboxcdc.CheckResult{outboxcdc.Pass("sns.credentials", fmt.Sprintf("credentials from %s, region %s", creds.Source, s.aws.Region))}
	c := s.newConn(nil)
	// SNS answers (ListTopics): a check of templated topics alone, which
	// is also the HA standby's proof that it reaches the sink, must not
	// pass without a request.
	if err := c.Probe(ctx); err != nil {
		return append(out, outboxcdc.Fail("sns.reachable", err.Error(), "check sink.region, sink.endpoint and that SNS is reachable from here"))
	}
	out = append(out, outboxcdc.Pass("sns.reachable", "SNS answers"))
	for _, t := range topics {
		if strings.Contains(t, "{") {
			out = append(out, outboxcdc.Pass("sns.topic", fmt.Sprintf("topics %q depend on the row; a missing topic is a permanent error when written", t)))
			continue
		}
		arn, err := c.topicARN(ctx, t)
		if err != nil {
			out = append(out, outboxcdc.Fail("sns.topic", fmt.Sprintf("topic %q: the account of the credentials: %v", t, err),
				"set sink.topic_owner, or name the topic by its ARN in route.topic"))
			continue
		}
		attrs, err := awsmsg.Call(ctx, &c.Conn, func(ctx context.Context) (*awssns.GetTopicAttributesOutput, error) {
			return c.c.GetTopicAttributes(ctx, &awssns.GetTopicAttributesInput{TopicArn: aws.String(arn)})
		})
		if err != nil {
			fix := outboxcdc.Hint(err)
			if fix == "" {
				fix = "check sink.region, sink.endpoint and that SNS is reachable from here"
			}
			out = append(out, outboxcdc.Fail("sns.topic", fmt.Sprintf("topic %s: %v", arn, err), fix))
			continue
		}
		a := attrs.Attributes
		if fifo := a["FifoTopic"] == "true"; fifo != IsFIFO(t) {
			out = append(out, outboxcdc.Fail("sns.topic", fmt.Sprintf("topic %s: FifoTopic is %q", arn, a["FifoTopic"]),
				"a FIFO topic's name ends in .fifo; fix route.topic"))
			continue
		}
		detail := fmt.Sprintf("topic %s exists (standard: unordered, at-least-once)", arn)
		if IsFIFO(t) {
			detail = fmt.Sprintf("topic %s exists (FIFO: ordered per aggregate, deduplicated by message id)", arn)
		}
		if n := a["SubscriptionsConfirmed"]; n == "0" {
			detail += "; it has no confirmed subscription: what is published now reaches no one"
		} else if n != "" {
			detail += fmt.Sprintf("; %s confirmed subscriptions", n)
		}
		out = append(out, outboxcdc.Pass("sns.topic", detail))
	}
	return out
}
