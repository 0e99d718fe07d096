package sinktest

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outbox-cdc/outbox-cdc/test/testenv"
)

// TestSNS holds the Amazon SNS sink to the contract against fauxqs (its
// own process per test, from the npm registry, behind a testenv.Proxy):
// FIFO topics per aggregate type, each with a FIFO queue subscription
// (raw message delivery) that is read back (receive, then delete). SNS
// FIFO topics drop a copy published again with the same deduplication
// id within five minutes, and so does the emulator: no duplicate arrives
// after kill -9 (BrokerDedupes); the copies the connector published
// again are counted at the emulator's front and logged.
func TestSNS(t *testing.T) { Run(t, snsTarget{}) }

type snsTarget struct{}

func (snsTarget) Prepare(t *testing.T, o Options) *Setup {
	for k, v := range map[string]string{"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test",
		"AWS_CONFIG_FILE": "/dev/null", "AWS_SHARED_CREDENTIALS_FILE": "/dev/null", "AWS_EC2_METADATA_DISABLED": "true"} {
		t.Setenv(k, v)
	}
	e := testenv.Fauxqs(t)
	var queues []string
	for _, topic := range []string{"st-ORDER.fifo", "st-PAYMENT.fifo", "st-dlq.fifo"} {
		q := strings.TrimSuffix(topic, ".fifo") + "-q.fifo"
		e.Topic(t, topic, false, q)
		queues = append(queues, q)
	}
	t.Cleanup(func() {
		t.Logf("%d PublishBatch entries published again with a deduplication id already published (dropped by FIFO deduplication)", e.Republished())
	})
	p := testenv.NewProxy(t, strings.TrimPrefix(e.Endpoint, "http://"))
	s := &Setup{
		Topic:    "st-{aggregate_type}.fifo",
		DLQTopic: "st-dlq.fifo",
		Sink: fmt.Sprintf("  type: sns\n  region: us-east-1\n  endpoint: %q\n  ack_timeout: 5s\n  retry_backoff_max: 1s\n  ready_interval: 500ms\n",
			"http://"+p.Addr()),
		Down:          func(*testing.T) { p.Silence(); p.Cut() },
		Up:            func(*testing.T) { p.Heal() },
		BrokerDedupes: true,
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
			for i, q := range queues {
				for _, m := range e.Drain(t, q) {
					got = append(got, sqsMessage(t, []string{"st-ORDER.fifo", "st-PAYMENT.fifo", "st-dlq.fifo"}[i], m))
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
