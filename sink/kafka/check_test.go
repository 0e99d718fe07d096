package kafka

import (
	"context"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
)

// TestTopicResult: a topic family passes only when its topics exist or
// the broker is known to create them; when whether the broker creates
// them is unknown (not reported) or no (for topics of a template not
// created yet) it is a warning, and a missing fixed topic on a broker
// that creates none fails.
func TestTopicResult(t *testing.T) {
	yes, no := true, false
	topics := []string{"orders", "outbox.event.ORDER", "outbox.event.PAYMENT"}
	for _, tc := range []struct {
		need   TopicNeed
		auto   *bool
		status outboxcdc.CheckStatus
		want   string
	}{
		{TopicNeed{Prefix: "outbox.event."}, &yes, outboxcdc.CheckPass, "2 existing: outbox.event.ORDER, outbox.event.PAYMENT"},
		{TopicNeed{Prefix: "outbox.event."}, &no, outboxcdc.CheckWarn, "auto.create.topics.enable=false"},
		{TopicNeed{Prefix: "outbox.event."}, nil, outboxcdc.CheckWarn, "not reported"},
		{TopicNeed{Prefix: "orders", Exact: true}, &no, outboxcdc.CheckPass, "1 existing: orders"},
		{TopicNeed{Prefix: "orders", Exact: true}, nil, outboxcdc.CheckPass, "1 existing: orders"},
		{TopicNeed{Prefix: "order", Exact: true}, &no, outboxcdc.CheckFail, "auto.create.topics.enable=false"},
		{TopicNeed{Prefix: "events."}, &no, outboxcdc.CheckFail, "none exists"},
		{TopicNeed{Prefix: "events."}, &yes, outboxcdc.CheckPass, "created on first write: auto.create.topics.enable=true"},
		{TopicNeed{Prefix: "events."}, nil, outboxcdc.CheckWarn, "not reported"},
	} {
		r := topicResult(tc.need, topics, tc.auto)
		if r.Status != tc.status || r.OK != (tc.status != outboxcdc.CheckFail) || !strings.Contains(r.Detail, tc.want) ||
			(tc.status != outboxcdc.CheckPass && r.Fix == "") {
			t.Errorf("%+v auto=%v: %+v, want %s with %q", tc.need, tc.auto, r, tc.status, tc.want)
		}
	}
}

func TestCheckKafka(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "outbox.event.ORDER"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cfg := DefaultKafkaConfig()
	cfg.Brokers = c.ListenAddrs()
	rs := CheckKafka(context.Background(), cfg, TopicNeed{Prefix: "outbox.event."})
	if len(rs) != 2 || !rs[0].OK || !rs[1].OK || !strings.Contains(rs[1].Detail, "outbox.event.ORDER") {
		t.Fatalf("got %+v", rs)
	}
	cfg.Brokers = []string{"127.0.0.1:1"}
	rs = CheckKafka(context.Background(), cfg, TopicNeed{Prefix: "outbox.event."})
	if len(rs) != 1 || rs[0].OK || rs[0].Name != "kafka.reachable" || rs[0].Fix == "" {
		t.Fatalf("unreachable: %+v", rs)
	}
}
