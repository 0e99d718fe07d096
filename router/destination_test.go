package router

import (
	"errors"
	"strings"
	"testing"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
)

// subjectLike is a destination with NATS-like rules: {aggregate_id}
// allowed, '.' legal in the template's text but not in a value, and no
// empty token.
var subjectLike = &Destination{
	Noun:        "subject",
	Default:     "outbox.{aggregate_type}.{aggregate_id}",
	AggregateID: true,
	Literal:     func(c byte) bool { return c > ' ' && c != '*' && c != '>' },
	Value:       func(c byte) bool { return c > ' ' && c != '*' && c != '>' && c != '.' },
	Legal:       "printable, no * >",
	Check: func(s string) string {
		if strings.HasPrefix(s, ".") || strings.HasSuffix(s, ".") || strings.Contains(s, "..") {
			return "has an empty token"
		}
		return ""
	},
}

func TestDestinationRules(t *testing.T) {
	ev := func(typ, id string) *outboxcdc.Event {
		return &outboxcdc.Event{MessageID: "m-1", AggregateType: typ, AggregateID: id, EventType: "E", Payload: []byte(`{}`), Origin: "test"}
	}
	r, err := New(Config{Destination: subjectLike})
	if err != nil {
		t.Fatal(err)
	}
	rec, err := r.Route(ev("ORDER", "o:1/2"))
	if err != nil {
		t.Fatal(err)
	}
	if rec.Topic != "outbox.ORDER.o:1/2" || rec.MessageID != "m-1" || rec.EventType != "E" {
		t.Fatalf("record = %+v", rec)
	}
	var bad *outboxcdc.BadRowError
	if _, err := r.Route(ev("ORDER", "a.b")); !errors.As(err, &bad) || !strings.Contains(err.Error(), "'.', which is not allowed in a subject") {
		t.Fatalf("a '.' in a value: %v", err)
	}
	r, err = New(Config{Topic: "x.{event_type}.{aggregate_type}", Destination: subjectLike})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Route(ev("", "1")); !errors.As(err, &bad) {
		t.Fatalf("empty value: %v", err)
	}

	for _, tc := range []struct {
		topic, want string
	}{
		{"a..b", "has an empty token"},
		{"a.*", "'*' is not allowed in a subject"},
		{"{aggregate_id}", ""},
	} {
		err := Config{Topic: tc.topic, Destination: subjectLike}.Validate()
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("topic %q: Validate = %v, want %q", tc.topic, err, tc.want)
		}
	}
	// Kafka (the default) keeps refusing {aggregate_id}.
	if err := (Config{Topic: "o.{aggregate_id}"}).Validate(); err == nil {
		t.Fatal("Kafka accepted {aggregate_id}")
	}
	// Dead letters carry the row's message id and event type too.
	dl := outboxcdc.DeadLetterTo("dlq")(outboxcdc.Failure{Event: ev("ORDER", "1"), Err: errors.New("x"), Class: outboxcdc.FailureBadRow})
	if dl.MessageID != "m-1" || dl.EventType != "E" {
		t.Fatalf("dead letter %+v", dl)
	}
}
