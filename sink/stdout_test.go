package sink

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
	"github.com/outbox-cdc/outbox-cdc/test/testenv"
)

func TestStdoutFormat(t *testing.T) {
	var out bytes.Buffer
	s := NewStdout(&out)
	ts := time.Date(2024, 5, 1, 10, 0, 0, 123000000, time.FixedZone("CEST", 2*3600))
	recs := []outboxcdc.Record{
		{
			Topic: "outbox.event.ORDER", Key: []byte("o-1"), Value: []byte(`{"total":3,"note":"a\"b\n"}`),
			Headers:   []outboxcdc.Header{{Key: "id", Value: []byte("m-1")}, {Key: "event_type", Value: []byte("CREATED")}},
			Timestamp: ts,
		},
		{Topic: "t", Key: nil, Value: nil},
		{Topic: "t", Key: []byte{0xff, 0x00}, Value: []byte{}, Headers: []outboxcdc.Header{{Key: "bin", Value: []byte{0x80}}, {Key: "nil"}}},
		{Topic: "t", Key: []byte("ключ\u2028"), Value: []byte("\x01")},
	}
	if err := s.Write(context.Background(), recs); err != nil {
		t.Fatal(err)
	}
	want := `{"topic":"outbox.event.ORDER","partition":null,"key":"o-1","value":"{\"total\":3,\"note\":\"a\\\"b\\n\"}","headers":{"id":"m-1","event_type":"CREATED"},"timestamp":"2024-05-01T08:00:00.123Z"}
{"topic":"t","partition":null,"key":null,"value":null,"headers":{},"timestamp":null}
{"topic":"t","partition":null,"key":{"base64":"/wA="},"value":"","headers":{"bin":{"base64":"gA=="},"nil":null},"timestamp":null}
{"topic":"t","partition":null,"key":"ключ\u2028","value":"\u0001","headers":{},"timestamp":null}
`
	if got := out.String(); got != want {
		t.Fatalf("got:\n%s\nwant:\n%s", got, want)
	}
	// Every line is valid JSON that decodes back to the bytes.
	for i, line := range strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n") {
		var v struct {
			Topic     string          `json:"topic"`
			Partition *int            `json:"partition"`
			Key       json.RawMessage `json:"key"`
			Value     json.RawMessage `json:"value"`
			Headers   map[string]any  `json:"headers"`
		}
		if err := json.Unmarshal([]byte(line), &v); err != nil {
			t.Fatalf("line %d: %v: %s", i, err, line)
		}
		if v.Topic != recs[i].Topic || v.Partition != nil {
			t.Errorf("line %d: topic %q partition %v", i, v.Topic, v.Partition)
		}
		var s string
		if recs[i].Value != nil && json.Unmarshal(v.Value, &s) == nil && s != string(recs[i].Value) {
			t.Errorf("line %d: value %q, want %q", i, s, recs[i].Value)
		}
	}
	// A record that names its partition shows it.
	out.Reset()
	p := int32(4)
	if err := s.Write(context.Background(), []outboxcdc.Record{{Topic: "t", Key: []byte("k"), Value: []byte("v"), Partition: &p}}); err != nil {
		t.Fatal(err)
	}
	if want := `{"topic":"t","partition":4,"key":"k","value":"v","headers":{},"timestamp":null}` + "\n"; out.String() != want {
		t.Fatalf("placed record: %s, want %s", out.String(), want)
	}
	if err := s.Ready(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("broken pipe") }

func TestStdoutWriteErrorAndFlush(t *testing.T) {
	s := NewStdout(failingWriter{})
	err := s.Write(context.Background(), []outboxcdc.Record{{Topic: "t", Value: []byte("v")}})
	if err == nil || !strings.Contains(err.Error(), "broken pipe") {
		t.Fatalf("want the writer's error, got %v", err)
	}
}

// TestStdoutRepeatedHeaderKey: a header key that repeats is written once,
// with its values in order, so the line has unique keys.
func TestStdoutRepeatedHeaderKey(t *testing.T) {
	var out bytes.Buffer
	s := NewStdout(&out)
	recs := []outboxcdc.Record{{Topic: "t", Headers: []outboxcdc.Header{
		{Key: "a", Value: []byte("1")}, {Key: "b", Value: []byte("x")}, {Key: "a", Value: nil}, {Key: "a", Value: []byte{0x80}}}}}
	if err := s.Write(context.Background(), recs); err != nil {
		t.Fatal(err)
	}
	want := `{"topic":"t","partition":null,"key":null,"value":null,"headers":{"a":["1",null,{"base64":"gA=="}],"b":"x"},"timestamp":null}` + "\n"
	if got := out.String(); got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
	if err := testenv.CheckJSONLines(strings.NewReader(out.String())); err != nil {
		t.Fatal(err)
	}
}
