package outboxcdc

import (
	"fmt"
	"strconv"
)

// What the pipeline does with a row it cannot deliver as routed
// (PipelineConfig.OnError).
const (
	// OnErrorHalt stops the connector with the row's message id and source
	// position; the checkpoint stays before the row's transaction. The
	// default: nothing is ever skipped without someone deciding to.
	OnErrorHalt = "halt"
	// OnErrorDLQ writes a dead-letter record for the row (see DeadLetter)
	// in its place and carries on.
	OnErrorDLQ = "dlq"
)

// Failure classes, sent as the outbox_cdc.error.class header.
const (
	// FailureBadRow: the router rejected the row (NULL or empty key or
	// message id, NULL payload, payload not JSON, illegal topic).
	FailureBadRow = "bad_row"
	// FailureRejected: the sink permanently refused the routed record
	// (record too large, invalid topic, not authorized, ...).
	FailureRejected = "rejected"
)

// RecordError is implemented by Sink errors that concern one record of a
// Write. The pipeline uses it to name the row and, with on_error: dlq, to
// replace just that record by a dead-letter record.
type RecordError interface {
	error
	// FailedRecord returns the record's index in the slice given to Write
	// (-1 when the failure concerns no single record) and whether sending
	// the same record again cannot succeed.
	FailedRecord() (index int, permanent bool)
}

// RecordsError is a RecordError that concerns several records of one
// Write in the same way (every record for a topic that cannot be written),
// so the pipeline can handle them all at once. FailedRecords lists their
// indexes, FailedRecord's first.
type RecordsError interface {
	RecordError
	FailedRecords() []int
}

// Failure is one outbox row that could not be delivered as routed.
type Failure struct {
	// Event is the row as the source delivered it.
	Event *Event
	// Record is the routed record; nil when the router rejected the row.
	Record *Record
	// Err says why: a *BadRowError or the sink's error.
	Err error
	// Class is FailureBadRow or FailureRejected.
	Class string
	// OmitValue is set when a dead-letter record carrying the payload was
	// itself rejected (typically: too large); the record must then leave
	// the payload out.
	OmitValue bool
}

// DeadLetter builds the record written instead of a failed row. It is
// called from the pipeline's batching and writing goroutines, one at a
// time, and must not keep f.
type DeadLetter func(f Failure) Record

// Dead-letter header keys.
const (
	HeaderError         = "outbox_cdc.error"
	HeaderErrorClass    = "outbox_cdc.error.class"
	HeaderOrigin        = "outbox_cdc.origin"
	HeaderTopic         = "outbox_cdc.topic"
	HeaderMessageID     = "outbox_cdc.message_id"
	HeaderAggregateType = "outbox_cdc.aggregate_type"
	HeaderAggregateID   = "outbox_cdc.aggregate_id"
	HeaderEventType     = "outbox_cdc.event_type"
	HeaderValueOmitted  = "outbox_cdc.value_omitted_bytes"
)

// DeadLetterTo returns the default DeadLetter: a record on topic keyed by
// the aggregate id (null when empty), whose value is the row's payload as
// stored (null when NULL, or left out when OmitValue), with the routed
// record's headers (if it was routed) followed by:
//
//	outbox_cdc.error                 the error message
//	outbox_cdc.error.class           bad_row | rejected
//	outbox_cdc.origin                the row's place in the source log
//	outbox_cdc.topic                 the topic it was routed to (rejected only)
//	outbox_cdc.message_id, .aggregate_type, .aggregate_id, .event_type
//	                                 the row's role columns as stored
//	outbox_cdc.value_omitted_bytes   payload size, when the value was left out
//
// The timestamp is the time of production (zero), whatever route.timestamp
// says: a dead letter must not be refused or deleted at once for an old
// commit time, which may be the very reason its row failed.
func DeadLetterTo(topic string) DeadLetter {
	return func(f Failure) Record {
		ev := f.Event
		r := Record{Topic: topic, Value: ev.Payload, MessageID: ev.MessageID, EventType: ev.EventType}
		if ev.AggregateID != "" {
			r.Key = []byte(ev.AggregateID)
		}
		n := 8
		if f.Record != nil {
			n += len(f.Record.Headers)
			r.Headers = make([]Header, 0, n)
			r.Headers = append(r.Headers, f.Record.Headers...)
		} else {
			r.Headers = make([]Header, 0, n)
		}
		add := func(k, v string) { r.Headers = append(r.Headers, Header{Key: k, Value: []byte(v)}) }
		add(HeaderError, errorText(f.Err))
		add(HeaderErrorClass, f.Class)
		add(HeaderOrigin, ev.Origin)
		if f.Record != nil {
			add(HeaderTopic, f.Record.Topic)
		}
		add(HeaderMessageID, ev.MessageID)
		add(HeaderAggregateType, ev.AggregateType)
		add(HeaderAggregateID, ev.AggregateID)
		add(HeaderEventType, ev.EventType)
		if f.OmitValue {
			add(HeaderValueOmitted, strconv.Itoa(len(ev.Payload)))
			r.Value = []byte{}
		}
		return r
	}
}

func errorText(err error) string {
	if err == nil {
		return ""
	}
	const max = 1000
	s := err.Error()
	if len(s) > max {
		s = s[:max] + "..."
	}
	return s
}

// DefaultDeadLetterTopic is the dead-letter topic of a connector named name
// when pipeline.dlq_topic is not set.
func DefaultDeadLetterTopic(name string) string { return name + ".dlq" }

// validTopic checks a Kafka topic name: 1..249 characters of a-z A-Z 0-9
// . _ -, and not "." or "..".
func validTopic(t string) error {
	if t == "" || len(t) > 249 {
		return fmt.Errorf("%q must have 1 to 249 characters", t)
	}
	if t == "." || t == ".." {
		return fmt.Errorf("%q is not a legal Kafka topic name", t)
	}
	for _, c := range []byte(t) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("%q holds %q; Kafka topic names allow only a-z A-Z 0-9 . _ -", t, c)
		}
	}
	return nil
}
