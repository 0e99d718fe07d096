package sinktest

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outbox-cdc/outbox-cdc/sink/sqs"
	"github.com/outbox-cdc/outbox-cdc/test/testenv"
)

// TestSQS holds the Amazon SQS sink to the contract against goaws (its
// own process per test, built from the module proxy, behind a
// testenv.Proxy), with FIFO queues per aggregate type, read back with
// plain query-protocol requests (receive, then delete). The connector
// speaks its default protocol, AWS JSON 1.0, through testenv's
// translating front. goaws does not
// model SQS's deduplication window, so copies after kill -9 are counted
// as for RabbitMQ (SQS itself would drop them within five minutes).
func TestSQS(t *testing.T) { Run(t, sqsTarget{}) }

type sqsTarget struct{}

func (sqsTarget) Prepare(t *testing.T, o Options) *Setup {
	queues := []string{"st-ORDER.fifo", "st-PAYMENT.fifo", "st-dlq.fifo"}
	var specs []testenv.GoawsQueue
	for _, q := range queues {
		specs = append(specs, testenv.GoawsQueue{Name: q, MaxSize: o.MaxMessageBytes})
	}
	// The connector takes credentials from the default chain: the
	// environment, here (goaws checks no signature).
	for k, v := range map[string]string{"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test",
		"AWS_CONFIG_FILE": "/dev/null", "AWS_SHARED_CREDENTIALS_FILE": "/dev/null", "AWS_EC2_METADATA_DISABLED": "true"} {
		t.Setenv(k, v)
	}
	g := testenv.Goaws(t, specs...)
	// The default protocol (AWS JSON 1.0), through the test's translating
	// front.
	p := testenv.NewProxy(t, strings.TrimPrefix(g.JSONEndpoint, "http://"))
	s := &Setup{
		Topic:    "st-{aggregate_type}.fifo",
		DLQTopic: "st-dlq.fifo",
		Sink: fmt.Sprintf("  type: sqs\n  region: us-east-1\n  endpoint: %q\n  ack_timeout: 5s\n  retry_backoff_max: 1s\n  ready_interval: 500ms\n",
			"http://"+p.Addr()),
		Down: func(*testing.T) { p.Silence(); p.Cut() },
		Up:   func(*testing.T) { p.Heal() },
	}
	if o.MaxMessageBytes > 0 {
		s.Sink += fmt.Sprintf("  max_message_bytes: %d\n", o.MaxMessageBytes)
	}
	var mu sync.Mutex
	var got []Message // Drain deletes what it read: keep it
	s.Read = func(t *testing.T, n int, timeout time.Duration) []Message {
		deadline := time.Now().Add(timeout)
		for {
			mu.Lock()
			for _, q := range queues {
				for _, m := range g.Drain(t, q) {
					got = append(got, sqsMessage(t, q, m))
				}
			}
			out := append([]Message(nil), got...)
			mu.Unlock()
			if len(out) >= n && n > 0 || time.Now().After(deadline) {
				return out
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	return s
}

// sqsMessage is m, read from queue q, as the contract's Message: the
// sink's attributes taken apart (the key, a NULL body, the headers past
// the ninth), for the SQS and SNS targets.
func sqsMessage(t *testing.T, q string, m testenv.SQSMessage) Message {
	msg := Message{Stream: q, Key: m.Attrs[sqs.AttrKey], DedupeID: m.Attrs[sqs.AttrMessageID], Value: m.Body,
		Headers: map[string]string{}}
	if m.Attrs[sqs.AttrBody] != "" {
		msg.Value = ""
	}
	for k, v := range m.Attrs {
		switch k {
		case sqs.AttrKey, sqs.AttrBody:
		case sqs.AttrHeaders:
			var more map[string]string
			if err := json.Unmarshal([]byte(v), &more); err != nil {
				t.Fatalf("%s: %v", k, err)
			}
			for hk, hv := range more {
				msg.Headers[hk] = hv
			}
		default:
			msg.Headers[k] = v
		}
	}
	return msg
}
