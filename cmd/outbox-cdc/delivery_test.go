package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
	"github.com/outbox-cdc/outbox-cdc/test/testenv"
)

func TestDeliveryConfig(t *testing.T) {
	base := "name: orders\nsource:\n  type: mysql\n  dsn: \"u:p@tcp(127.0.0.1:3306)/db\"\n  table: outbox\nsink:\n  brokers: [\"127.0.0.1:9092\"]\n"
	load := func(extra string, env map[string]string) (Config, error) {
		p := filepath.Join(t.TempDir(), "c.yaml")
		if err := os.WriteFile(p, []byte(base+extra), 0o600); err != nil {
			t.Fatal(err)
		}
		return loadConfig(p, env)
	}
	cfg, err := load("delivery: exactly-once\ncheckpoint:\n  type: kafka\nha:\n  enabled: true\n  check_interval: 500ms\n",
		map[string]string{"OUTBOX_CDC_SINK_PROGRESS_TOPIC": "orders.progress", "OUTBOX_CDC_SINK_TRANSACTIONAL_ID": "tid-1"})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Delivery != "exactly-once" || cfg.Sink.ProgressTopic != "orders.progress" || cfg.Sink.TransactionalID != "tid-1" ||
		!cfg.HA.Enabled || cfg.HA.CheckInterval != 500*time.Millisecond || cfg.Sink.TransactionTimeout != time.Minute {
		t.Fatalf("decoded %+v %+v %+v", cfg.Delivery, cfg.Sink.TxnConfig, cfg.HA)
	}
	cfg, err = load("checkpoint:\n  type: table\n  table: mydb.cp\n", nil)
	if err != nil || cfg.Checkpoint.Table != "mydb.cp" || cfg.Delivery != "at-least-once" {
		t.Fatalf("table: %+v %v", cfg.Checkpoint, err)
	}
	// Exactly-once keeps the witness of its progress in the table.
	cfg, err = load("delivery: exactly-once\ncheckpoint:\n  type: table\n  table: mydb.cp\n", nil)
	if err != nil || cfg.Checkpoint.Type != "table" {
		t.Fatalf("exactly-once with a table witness: %+v %v", cfg.Checkpoint, err)
	}
	for extra, want := range map[string]string{
		"delivery: twice\n":                                         "delivery:",
		"checkpoint:\n  type: kafka\n":                              "needs delivery: exactly-once",
		"delivery: exactly-once\nsink:\n  type: stdout\n":           "", // duplicate key: any error
		"checkpoint:\n  type: table\n  table: \"a;b\"\n":            "checkpoint.table",
		"ha:\n  enabled: true\n  check_interval: 1ms\n":             "ha.check_interval",
		"ha:\n  enabled: true\n  session_timeout: 1s\n":             "ha.session_timeout",
		"ha:\n  enabled: true\n  check_interval: 5s\n":              "3 × ha.check_interval",
		"ha:\n  enabled: true\n  sink_unreachable_timeout: 5s\n":    "ha.sink_unreachable_timeout: 5s is shorter than sink.produce_timeout (10s)",
		"ha:\n  enabled: true\n  sink_unreachable_timeout: 500ms\n": "ha.sink_unreachable_timeout",
	} {
		_, err := load(extra, nil)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: err = %v, want %q", extra, err, want)
		}
	}
	if _, err := load("", map[string]string{"OUTBOX_CDC_DELIVERY": "exactly-once", "OUTBOX_CDC_SINK_TYPE": "stdout"}); err == nil ||
		!strings.Contains(err.Error(), "sink.type kafka") {
		t.Errorf("stdout exactly-once: %v", err)
	}
}

// TestCheckProgressUnreadableWarns: in exactly-once mode, a progress topic
// check cannot read (here the broker refuses ListOffsets) is a warning
// with what to do, not a pass: the saved position is unknown, so the
// source's position checks judge nothing.
func TestCheckProgressUnreadableWarns(t *testing.T) {
	kc, brokers := testenv.Kafka(t, kfake.SeedTopics(1, "orders.progress"))
	kc.ControlKey(int16(kmsg.ListOffsets), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		kc.KeepControl()
		req := kr.(*kmsg.ListOffsetsRequest)
		resp := req.ResponseKind().(*kmsg.ListOffsetsResponse)
		for _, rt := range req.Topics {
			t := kmsg.NewListOffsetsResponseTopic()
			t.Topic = rt.Topic
			for _, rp := range rt.Partitions {
				p := kmsg.NewListOffsetsResponseTopicPartition()
				p.Partition, p.ErrorCode = rp.Partition, 29 // TOPIC_AUTHORIZATION_FAILED
				t.Partitions = append(t.Partitions, p)
			}
			resp.Topics = append(resp.Topics, t)
		}
		return resp, nil, true
	})
	dir := t.TempDir()
	p := filepath.Join(dir, "c.yaml")
	yaml := "name: orders\nsource:\n  type: mysql\n  dsn: \"u:p@tcp(127.0.0.1:3306)/db\"\n  table: outbox\nsink:\n  brokers: [\"" + brokers[0] + "\"]\n" +
		"  progress_topic: orders.progress\ndelivery: exactly-once\ncheckpoint:\n  type: kafka\n  path: " + filepath.Join(dir, "witness") + "\n"
	if err := os.WriteFile(p, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := loadConfig(p, nil)
	if err != nil {
		t.Fatal(err)
	}
	pos, r := checkCheckpoint(context.Background(), cfg, cfg.Source.Type)
	if !pos.IsZero() || r.Status != outboxcdc.CheckWarn || !r.OK || !strings.Contains(r.Detail, "not readable here") || r.Fix == "" {
		t.Fatalf("unreadable progress topic: %q %+v, want a warning with a fix", pos, r)
	}
}
