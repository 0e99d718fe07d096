package sink

import (
	"context"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
	"github.com/outbox-cdc/outbox-cdc/test/testenv"
)

func resultNamed(t *testing.T, res []outboxcdc.CheckResult, name string) outboxcdc.CheckResult {
	t.Helper()
	for _, r := range res {
		if r.Name == name {
			return r
		}
	}
	t.Fatalf("no %s result in %+v", name, res)
	return outboxcdc.CheckResult{}
}

// TestCheckTransactional: the coordinator is found without fencing a
// running transactional producer, and a progress topic with several
// partitions fails.
func TestCheckTransactional(t *testing.T) {
	ctx := context.Background()
	_, brokers := testenv.Kafka(t)
	running := txnSink(t, brokers, "conn")
	if _, err := running.Load(ctx); err != nil {
		t.Fatal(err)
	}
	cfg := DefaultKafkaConfig()
	cfg.Brokers = brokers
	tc := DefaultTxnConfig()
	tc.ProgressTopic = "progress"
	res := CheckTransactional(ctx, cfg, tc, "conn")
	if r := resultNamed(t, res, "kafka.transactional_id"); !r.OK || !strings.Contains(r.Detail, "outbox-cdc-conn") {
		t.Fatalf("transactional id: %+v", r)
	}
	if r := resultNamed(t, res, "kafka.progress_topic"); !r.OK {
		t.Fatalf("progress topic: %+v", r)
	}
	// The check did not fence the running producer.
	if err := running.WriteAtomic(ctx, recs("events", "after-check"), "mysql:0-1-9"); err != nil {
		t.Fatalf("write after check: %v", err)
	}

	_, other := testenv.Kafka(t, kfake.SeedTopics(3, "progress"))
	cfg.Brokers = other
	if r := resultNamed(t, CheckTransactional(ctx, cfg, tc, "conn"), "kafka.progress_topic"); r.OK || !strings.Contains(r.Detail, "3 partitions") {
		t.Fatalf("three-partition progress topic: %+v", r)
	}
}
