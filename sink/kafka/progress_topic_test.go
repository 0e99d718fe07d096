package kafka

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/plain"

	"github.com/outbox-cdc/outbox-cdc/test/testenv"
)

// TestTransactionalRefusesDeleteProgressTopic: a progress topic whose
// cleanup.policy is delete loses the record after retention.ms; the
// connector refuses it and says how to fix it.
func TestTransactionalRefusesDeleteProgressTopic(t *testing.T) {
	_, brokers := testenv.Kafka(t, kfake.SeedTopics(1, "progress")) // kfake's default policy: delete
	s := txnSink(t, brokers, "conn")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err := s.Load(ctx)
	if !errors.Is(err, errProgressLayout) || !strings.Contains(err.Error(), "cleanup.policy=compact") {
		t.Fatalf("Load = %v; want a refusal naming cleanup.policy=compact", err)
	}
}

// TestTransactionalProgressTopicWithoutCreateACL: with least-privilege
// ACLs (no CREATE anywhere) and the progress topic made in advance, the
// connector describes the topic instead of trying to create it, starts and
// commits.
func TestTransactionalProgressTopicWithoutCreateACL(t *testing.T) {
	allow := func(res kmsg.ACLResourceType, name string, ops ...kmsg.ACLOperation) []kfake.ACL {
		var out []kfake.ACL
		for _, op := range ops {
			out = append(out, kfake.ACL{Resource: res, Name: name, Pattern: kmsg.ACLResourcePatternTypeLiteral, Operation: op, Allow: true})
		}
		return out
	}
	var acls []kfake.ACL
	acls = append(acls, allow(kmsg.ACLResourceTypeTopic, "progress", kmsg.ACLOperationRead, kmsg.ACLOperationWrite, kmsg.ACLOperationDescribe, kmsg.ACLOperationDescribeConfigs)...)
	acls = append(acls, allow(kmsg.ACLResourceTypeTopic, "events", kmsg.ACLOperationWrite, kmsg.ACLOperationDescribe)...)
	acls = append(acls, allow(kmsg.ACLResourceTypeTransactionalId, "outbox-cdc-conn", kmsg.ACLOperationWrite, kmsg.ACLOperationDescribe)...)
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.DefaultNumPartitions(1), kfake.SeedTopics(1, "events"),
		kfake.EnableSASL(), kfake.EnableACLs(),
		kfake.Superuser("PLAIN", "admin", "admin-pw"),
		kfake.User("PLAIN", "outbox", "pw", acls...))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	brokers := c.ListenAddrs()
	// The operator creates the progress topic, compacted.
	admin, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.SASL(plain.Auth{User: "admin", Pass: "admin-pw"}.AsMechanism()))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	req := kmsg.NewPtrCreateTopicsRequest()
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = "progress", 1, 1
	cc := kmsg.NewCreateTopicsRequestTopicConfig()
	cc.Name, cc.Value = "cleanup.policy", kmsg.StringPtr("compact")
	rt.Configs = append(rt.Configs, cc)
	req.Topics = append(req.Topics, rt)
	if _, err := req.RequestWith(context.Background(), admin); err != nil {
		t.Fatal(err)
	}

	s := txnSink(t, brokers, "conn", func(k *KafkaConfig, _ *TxnConfig) {
		k.SASL = SASLConfig{Mechanism: "PLAIN", Username: "outbox", Password: "pw", AllowPlaintext: true}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := s.Load(ctx); err != nil {
		t.Fatalf("Load with least-privilege ACLs: %v", err)
	}
	if err := s.WriteAtomic(ctx, recs("events", "1"), "mysql:0-1-1"); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if pos, err := txnSink(t, brokers, "conn", func(k *KafkaConfig, _ *TxnConfig) {
		k.SASL = SASLConfig{Mechanism: "PLAIN", Username: "outbox", Password: "pw", AllowPlaintext: true}
	}).Load(ctx); err != nil || pos != "mysql:0-1-1" {
		t.Fatalf("Load = %q, %v", pos, err)
	}
}
