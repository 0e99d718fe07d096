package kafka

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/IBM/sarama"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
	"github.com/outbox-cdc/outbox-cdc/sink"
)

// The Kafka sinks' errors answer the one classification the other sinks
// use: outboxcdc.IsTransient and outboxcdc.Hint, with the cause still
// reachable by errors.Is.
func TestErrorClassification(t *testing.T) {
	for _, tc := range []struct {
		name      string
		err       error
		transient bool
		hint      string
	}{
		{"retryable", &Error{Index: 0, Topic: "t", Err: sarama.ErrNotEnoughReplicas}, true, ""},
		{"too large", &Error{Index: 1, Topic: "t", Err: sarama.ErrMessageSizeTooLarge, Permanent: true}, false, "sink.max_message_bytes"},
		{"not authorized", &Error{Index: 1, Topic: "t", Err: sarama.ErrTopicAuthorizationFailed, Permanent: true}, false, `WRITE and DESCRIBE on topic "t"`},
		{"blocked", &Error{Index: 2, Topic: "t", Permanent: true,
			Err: &TopicBlockedError{Topic: "t", Err: sarama.ErrUnknownTopicOrPartition}}, false, `create topic "t"`},
		{"wrapped", fmt.Errorf("pipeline: %w", &Error{Index: -1, Partition: -1, Err: sink.ErrClosed, Permanent: true}), false, ""},
		{"fenced", &FencedError{TransactionalID: "x", Err: sarama.ErrProducerFenced}, false, "took over"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := outboxcdc.IsTransient(tc.err); got != tc.transient {
				t.Errorf("IsTransient = %v, want %v", got, tc.transient)
			}
			if h := outboxcdc.Hint(tc.err); !strings.Contains(h, tc.hint) || tc.hint == "" && h != "" {
				t.Errorf("Hint = %q, want it to hold %q", h, tc.hint)
			}
			var kerr sarama.KError
			if errors.Is(tc.err, sink.ErrClosed) || errors.As(tc.err, &kerr) {
				return
			}
			t.Errorf("the cause is not reachable from %v", tc.err)
		})
	}
}
