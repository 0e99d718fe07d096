package main

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
)

// TestFaultInvalidConfigExit2BeforeConnecting: every invalid configuration
// makes `run` exit 2 with the offending key (and a hint) on stderr, without
// a connection to the database or the brokers, and without the password.
func TestFaultInvalidConfigExit2BeforeConnecting(t *testing.T) {
	// Both the database and the broker point at this listener: any
	// connection attempt is counted.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var dials atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			dials.Add(1)
			c.Close()
		}
	}()
	addr := ln.Addr().String()
	mysqlOK := fmt.Sprintf("source:\n  type: mysql\n  dsn: \"app:s3cret@tcp(%s)/shop\"\n", addr)
	pgOK := fmt.Sprintf("source:\n  type: postgres\n  dsn: \"postgres://app:s3cret@%s/shop\"\n", addr)
	sinkOK := fmt.Sprintf("sink:\n  type: kafka\n  brokers: [%q]\n", addr)

	cases := []struct {
		name string
		file string
		want []string // all must appear on stderr
	}{
		{"unknown key", mysqlOK + sinkOK + "checkpont:\n  path: x\n",
			[]string{`"checkpont"`, `did you mean "checkpoint"`}},
		{"unknown nested key", mysqlOK + "  tabel: outbox\n" + sinkOK,
			[]string{`"source.tabel"`, `did you mean "source.table"`}},
		{"mysql dsn unparseable", "source:\n  type: mysql\n  dsn: \"app:s3cret@tcp(" + addr + "/shop\"\n" + sinkOK,
			[]string{"source.dsn", "user:pass@tcp(host:3306)/database"}},
		{"mysql dsn without database", "source:\n  type: mysql\n  dsn: \"app:s3cret@tcp(" + addr + ")/\"\n" + sinkOK,
			[]string{"source.dsn", "database"}},
		{"postgres dsn unparseable", "source:\n  type: postgres\n  dsn: \"postgres://app:s3cret@" + addr + ":notaport/shop\"\n" + sinkOK,
			[]string{"source.dsn", "PostgreSQL connection string"}},
		{"mysql table missing", mysqlOK + "  table: \"\"\n" + sinkOK,
			[]string{"source.table", "required"}},
		{"postgres table missing", pgOK + "  table: \"\"\n" + sinkOK,
			[]string{"source.table", "required"}},
		{"broker not host:port", mysqlOK + "sink:\n  type: kafka\n  brokers: [\"kafka\"]\n",
			[]string{"sink.brokers", "host:port"}},
		{"on_error unknown", mysqlOK + sinkOK + "pipeline:\n  on_error: skip\n",
			[]string{"pipeline.on_error", "halt", "dlq"}},
		{"dlq topic illegal", mysqlOK + sinkOK + "pipeline:\n  on_error: dlq\n  dlq_topic: \"dead letters\"\n",
			[]string{"pipeline.dlq_topic", "a-z A-Z 0-9"}},
		{"payload format unknown", mysqlOK + sinkOK + "route:\n  payload_format: xml\n",
			[]string{"route.payload_format", "any", "json"}},
		{"tombstone option not a bool", mysqlOK + sinkOK + "route:\n  tombstone_on_empty_payload: sometimes\n",
			[]string{"tombstone_on_empty_payload"}},
		{"converter unknown", mysqlOK + sinkOK + "route:\n  converters:\n    value: avro\n",
			[]string{"route.converters.value", "raw, string, json, bytearray, binary"}},
		{"expansion under StringConverter", mysqlOK + sinkOK + "route:\n  expand_json_payload: true\n  converters:\n    value: string\n",
			[]string{"route.expand_json_payload", "Struct{...}"}},
		{"topic regex Java-only", mysqlOK + sinkOK + "route:\n  topic_regex: \"(?<=a)b\"\n",
			[]string{"route.topic_regex", "look-around"}},
		{"on_update with lifecycle marking", mysqlOK + sinkOK + "route:\n  on_update: warn\nlifecycle:\n  mark_sent: true\n",
			[]string{"route.on_update", "mark_sent"}},
		{"cloudevents mode unknown", mysqlOK + sinkOK + "route:\n  cloudevents:\n    mode: batch\n",
			[]string{"route.cloudevents.mode"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			start := time.Now()
			code := run([]string{"run", "--config", writeFile(t, c.file)}, &out, &errb)
			if code != 2 {
				t.Fatalf("exit %d, want 2; stderr:\n%s", code, errb.String())
			}
			for _, w := range c.want {
				if !strings.Contains(errb.String(), w) {
					t.Errorf("stderr does not mention %q:\n%s", w, errb.String())
				}
			}
			if strings.Contains(errb.String(), "s3cret") {
				t.Errorf("password printed:\n%s", errb.String())
			}
			if time.Since(start) > 2*time.Second {
				t.Errorf("took %s: something waited on the network", time.Since(start))
			}
		})
	}
	time.Sleep(50 * time.Millisecond) // let a stray connection be accepted
	if n := dials.Load(); n != 0 {
		t.Fatalf("%d connections to the database or broker address before the configuration was rejected", n)
	}
}

// TestDLQTopicDefaultsToName: on_error: dlq without dlq_topic writes to
// "<name>.dlq".
func TestDLQTopicDefaultsToName(t *testing.T) {
	cfg, err := loadConfig(writeFile(t, minimal+"name: shop-outbox\npipeline:\n  on_error: dlq\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Pipeline.DLQTopic != "shop-outbox.dlq" || cfg.Pipeline.OnError != outboxcdc.OnErrorDLQ {
		t.Fatalf("pipeline %+v", cfg.Pipeline)
	}
	cfg, err = loadConfig(writeFile(t, minimal), map[string]string{"OUTBOX_CDC_PIPELINE_ON_ERROR": "dlq", "OUTBOX_CDC_PIPELINE_DLQ_TOPIC": "dead"})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Pipeline.DLQTopic != "dead" {
		t.Fatalf("dlq_topic %q", cfg.Pipeline.DLQTopic)
	}
}

// TestConfigTypeErrorNamesKeyLineAndForm: a value of the wrong type is a
// *configError whose Key is the full key path and Line its line, and whose
// message says what the key takes, not yaml's "cannot unmarshal !!int".
func TestConfigTypeErrorNamesKeyLineAndForm(t *testing.T) {
	cases := []struct {
		name, file, key string
		line            int
		want            []string
	}{
		{"int for a duration", minimal + "pipeline:\n  shutdown_timeout: 5\n", "pipeline.shutdown_timeout", 9,
			[]string{`"5" is not a duration`, `as "5s"`}},
		{"int for a source duration", strings.Replace(minimal, "/shop\"\n", "/shop\"\n  read_timeout: 30\n", 1),
			"source.read_timeout", 5, []string{`as "30s"`}},
		{"word for a number", minimal + "pipeline:\n  max_batch_records: lots\n", "pipeline.max_batch_records", 9,
			[]string{`"lots" is not a whole number`}},
		{"word for a bool", minimal + "ha:\n  enabled: sometimes\n", "ha.enabled", 9,
			[]string{"true or false"}},
		{"scalar for a section", minimal + "lifecycle:\n  cleanup: yes\n", "lifecycle.cleanup", 9,
			[]string{"a section of keys"}},
		{"unknown key", minimal + "pipeline:\n  max_batch_record: 5\n", "pipeline.max_batch_record", 9,
			[]string{"unknown configuration key", `did you mean "pipeline.max_batch_records"`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := loadConfig(writeFile(t, c.file), nil)
			var ce *configError
			if !errors.As(err, &ce) {
				t.Fatalf("not a *configError: %T %v", err, err)
			}
			if ce.Key != c.key || ce.Line != c.line {
				t.Errorf("key %q line %d, want %q line %d (%v)", ce.Key, ce.Line, c.key, c.line, err)
			}
			for _, w := range append(c.want, c.key) {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%q does not say %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "unmarshal") || strings.Contains(err.Error(), "!!") {
				t.Errorf("yaml's wording leaks: %q", err)
			}
		})
	}
}
