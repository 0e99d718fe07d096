package kafka

import (
	"context"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

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
// partitions fails; one whose cleanup.policy cannot be read is a warning.
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
	if r := resultNamed(t, res, "kafka.progress_topic"); r.Status != outboxcdc.CheckPass {
		t.Fatalf("progress topic: %+v", r)
	}
	// The check did not fence the running producer.
	if err := running.WriteAtomic(ctx, recs("events", "after-check"), "mysql:0-1-9"); err != nil {
		t.Fatalf("write after check: %v", err)
	}

	// A broker that refuses DescribeConfigs (no DESCRIBE_CONFIGS ACL):
	// whether the progress topic is compacted is unknown, a warning with
	// the way to settle it, not a pass.
	kc, refusing := testenv.Kafka(t, kfake.SeedTopics(1, "progress"))
	kc.ControlKey(int16(kmsg.DescribeConfigs), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		kc.KeepControl()
		req := kr.(*kmsg.DescribeConfigsRequest)
		resp := req.ResponseKind().(*kmsg.DescribeConfigsResponse)
		for _, rr := range req.Resources {
			r := kmsg.NewDescribeConfigsResponseResource()
			r.ResourceType, r.ResourceName = rr.ResourceType, rr.ResourceName
			r.ErrorCode = 29 // TOPIC_AUTHORIZATION_FAILED
			resp.Resources = append(resp.Resources, r)
		}
		return resp, nil, true
	})
	cfg.Brokers = refusing
	if r := resultNamed(t, CheckTransactional(ctx, cfg, tc, "conn"), "kafka.progress_topic"); r.Status != outboxcdc.CheckWarn || !r.OK ||
		!strings.Contains(r.Detail, "cleanup.policy is not readable") || !strings.Contains(r.Fix, "DESCRIBE_CONFIGS") {
		t.Fatalf("cleanup.policy unreadable: %+v, want a warning", r)
	}

	_, other := testenv.Kafka(t, kfake.SeedTopics(3, "progress"))
	cfg.Brokers = other
	if r := resultNamed(t, CheckTransactional(ctx, cfg, tc, "conn"), "kafka.progress_topic"); r.OK || !strings.Contains(r.Detail, "3 partitions") {
		t.Fatalf("three-partition progress topic: %+v", r)
	}
}
