package sink

import (
	"context"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"
)

func TestTopicResult(t *testing.T) {
	yes, no := true, false
	topics := []string{"orders", "outbox.event.ORDER", "outbox.event.PAYMENT"}
	for _, tc := range []struct {
		need TopicNeed
		auto *bool
		ok   bool
		want string
	}{
		{TopicNeed{Prefix: "outbox.event."}, &no, true, "2 existing: outbox.event.ORDER, outbox.event.PAYMENT"},
		{TopicNeed{Prefix: "orders", Exact: true}, &no, true, "1 existing: orders"},
		{TopicNeed{Prefix: "order", Exact: true}, &no, false, "auto.create.topics.enable=false"},
		{TopicNeed{Prefix: "events."}, &no, false, "none exists"},
		{TopicNeed{Prefix: "events."}, &yes, true, "created on first write: auto.create.topics.enable=true"},
		{TopicNeed{Prefix: "events."}, nil, true, "not reported"},
	} {
		r := topicResult(tc.need, topics, tc.auto)
		if r.OK != tc.ok || !strings.Contains(r.Detail, tc.want) || (!r.OK && r.Fix == "") {
			t.Errorf("%+v auto=%v: %+v, want ok=%v with %q", tc.need, tc.auto, r, tc.ok, tc.want)
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
