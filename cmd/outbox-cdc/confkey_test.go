package main

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// TestValidationErrorsNameTheFullKeyOnce: a mistake found by a package's
// Validate (binlog, wal, backfill, router, sink, rabbitmq, nats, pipeline,
// checkpoint, lifecycle, ha) reaches the operator as a *configError whose
// Key is the full path, each problem on its own line starting with its key
// exactly once, and with the key's line in the file when the file sets it.
func TestValidationErrorsNameTheFullKeyOnce(t *testing.T) {
	const (
		mysql  = "source:\n  type: mysql\n  dsn: \"root@tcp(127.0.0.1:3306)/shop\"\n"         // lines 1-3
		kafka  = "sink:\n  type: kafka\n  brokers: [\"127.0.0.1:9092\"]\n"                    // 3 lines
		pg     = "source:\n  type: postgres\n  dsn: \"postgres://app@127.0.0.1:5432/shop\"\n" // lines 1-3
		nodbMy = "source:\n  type: mysql\n  dsn: \"root@tcp(127.0.0.1:3306)/\"\n"
	)
	cases := []struct {
		name  string
		file  string
		keys  []string
		lines []int // 0: the file does not set the key
	}{
		{"binlog dsn", nodbMy + kafka, []string{"source.dsn"}, []int{3}},
		{"binlog two mistakes", mysql + "  table: \"\"\n  gtid: \"yes\"\n" + kafka,
			[]string{"source.table", "source.gtid"}, []int{4, 5}},
		{"wal slot", pg + "  slot: Bad-Slot\n" + kafka, []string{"source.slot"}, []int{4}},
		{"backfill under binlog", mysql + "  start: pending\n  pending:\n    where: \"\"\n" + kafka,
			[]string{"source.pending.where"}, []int{6}},
		{"router table override", mysql + kafka + "route:\n  tables:\n    \"shop.orders\":\n      topic: \"x.{nope}\"\n",
			[]string{`route.tables["shop.orders"].topic`}, []int{10}},
		{"router header", mysql + kafka + "route:\n  headers: [tenant, \"p:partition\"]\n",
			[]string{"route.headers[1]"}, []int{8}},
		{"kafka tls file", mysql + kafka + "  tls:\n    enabled: true\n    ca_file: /nonexistent/ca.pem\n",
			[]string{"sink.tls.ca_file"}, []int{9}},
		{"exactly-once progress topic", mysql + kafka + "  progress_topic: \"bad topic\"\ndelivery: exactly-once\n",
			[]string{"sink.progress_topic"}, []int{7}},
		{"rabbitmq two mistakes", mysql + "sink:\n  type: rabbitmq\n  exchange: \"\"\n",
			[]string{"sink.url", "sink.exchange"}, []int{0, 6}},
		{"nats subject", mysql + "sink:\n  type: nats\n  url: nats://127.0.0.1:4222\n  stream: ORDERS\n  stream_subjects: [\"a.>\", \"b.>.c\"]\n",
			[]string{"sink.stream_subjects[1]"}, []int{8}},
		{"pipeline", mysql + kafka + "pipeline:\n  on_error: skip\n", []string{"pipeline.on_error"}, []int{8}},
		{"checkpoint", mysql + kafka + "checkpoint:\n  path: /var/lib/\n", []string{"checkpoint.path"}, []int{8}},
		{"lifecycle", mysql + kafka + "lifecycle:\n  mark_sent: true\n  cleanup:\n    enabled: true\n    retention: 1s\n",
			[]string{"lifecycle.cleanup.retention"}, []int{11}},
		{"ha", mysql + kafka + "checkpoint:\n  type: table\nha:\n  enabled: true\n  check_interval: 10ms\n",
			[]string{"ha.check_interval"}, []int{11}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := writeFile(t, c.file)
			_, err := loadConfig(path, nil)
			var ce *configError
			if !errors.As(err, &ce) {
				t.Fatalf("not a *configError: %T %v", err, err)
			}
			if ce.Key != c.keys[0] || ce.Line != c.lines[0] {
				t.Errorf("Key %q Line %d, want %q line %d", ce.Key, ce.Line, c.keys[0], c.lines[0])
			}
			got := strings.Split(err.Error(), "\n")
			if len(got) != len(c.keys) {
				t.Fatalf("%d problems, want %d:\n%v", len(got), len(c.keys), err)
			}
			for i, line := range got {
				want := c.keys[i] + ": "
				if c.lines[i] > 0 {
					want = fmt.Sprintf("%s: %s (line %d): ", path, c.keys[i], c.lines[i])
				}
				if !strings.HasPrefix(line, want) {
					t.Errorf("problem %d is %q, want it to start with %q", i, line, want)
				}
				if n := strings.Count(line, c.keys[i]); n != 1 {
					t.Errorf("problem %d names %s %d times: %q", i, c.keys[i], n, line)
				}
			}
		})
	}
}
