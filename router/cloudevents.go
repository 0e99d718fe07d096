package router

import (
	"encoding/json"
	"fmt"
	"mime"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
)

// CloudEvents 1.0 (github.com/cloudevents/spec: spec.md, the Kafka protocol
// binding kafka-protocol-binding.md and the JSON format json-format.md):
//
//   - Attributes: specversion "1.0", id = message id, source = configured
//     (a URI-reference), type = event type, subject = aggregate id, time =
//     the commit time (RFC 3339), datacontenttype = configured.
//   - Structured mode: the value is the JSON format, one object with the
//     attributes and the payload as "data" (embedded when the content type
//     is JSON and the payload is JSON, a string when it is text,
//     "data_base64" otherwise); the Kafka header content-type is
//     "application/cloudevents+json; charset=UTF-8".
//   - Binary mode: the value is the payload as stored; each attribute is a
//     "ce_" header holding its value as UTF-8 text, except datacontenttype,
//     which is the content-type header.
//
// In both modes the key stays the aggregate id, so the partition does not
// change, and the route's own headers (id, ...) are kept.
type cloudEvents struct {
	mode        string
	source      string
	contentType string
	jsonData    bool // contentType is JSON: a JSON payload is embedded as is
}

// ceStructuredContentType is the structured mode's content-type header.
const ceStructuredContentType = "application/cloudevents+json; charset=UTF-8"

func (c Config) cloudEvents() (*cloudEvents, error) {
	ce := c.CloudEvents
	switch ce.Mode {
	case "", CloudEventsOff:
		return nil, nil
	case CloudEventsStructured, CloudEventsBinary:
	default:
		return nil, outboxcdc.KeyErrorf("cloudevents.mode", "", "%q is not off, structured or binary", ce.Mode)
	}
	if ce.Source == "" {
		return nil, outboxcdc.KeyErrorf("cloudevents.source", "", "required (a URI-reference naming the producer, e.g. /outbox-cdc/orders)")
	}
	if _, err := url.Parse(ce.Source); err != nil || strings.ContainsAny(ce.Source, " \t\r\n") {
		return nil, outboxcdc.KeyErrorf("cloudevents.source", "", "%q is not a URI-reference", ce.Source)
	}
	ct := ce.DataContentType
	if ct == "" {
		ct = "application/json"
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return nil, outboxcdc.KeyErrorf("cloudevents.data_content_type", "", "%q is not a media type (RFC 2046): %v", ct, err)
	}
	return &cloudEvents{mode: ce.Mode, source: ce.Source, contentType: ct,
		jsonData: mt == "application/json" || strings.HasSuffix(mt, "+json") || mt == "text/json"}, nil
}

// ceTime is the time attribute: RFC 3339 in UTC, fractional seconds only
// when there are any.
func ceTime(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// apply turns a routed record into a CloudEvent. value is the payload as
// stored (nil for a tombstone, which stays a tombstone).
func (ce *cloudEvents) apply(ev *outboxcdc.Event, rec *outboxcdc.Record, payloadColumn string) error {
	if ev.EventType == "" {
		return fmt.Errorf("event type is empty, and a CloudEvent needs a type")
	}
	ts := ceTime(ev.CommitTime)
	if rec.Value != nil && ce.jsonData && !json.Valid(rec.Value) {
		return fmt.Errorf("payload column %s is not valid JSON (%d bytes) but route.cloudevents.data_content_type is %s",
			quote(payloadColumn), len(rec.Value), ce.contentType)
	}
	if ce.mode == CloudEventsBinary {
		hs := make([]outboxcdc.Header, 0, len(rec.Headers)+7)
		hs = append(hs,
			outboxcdc.Header{Key: "ce_specversion", Value: []byte("1.0")},
			outboxcdc.Header{Key: "ce_id", Value: []byte(ev.MessageID)},
			outboxcdc.Header{Key: "ce_source", Value: []byte(ce.source)},
			outboxcdc.Header{Key: "ce_type", Value: []byte(ev.EventType)},
			outboxcdc.Header{Key: "ce_subject", Value: []byte(ev.AggregateID)},
			outboxcdc.Header{Key: "ce_time", Value: []byte(ts)},
			outboxcdc.Header{Key: "content-type", Value: []byte(ce.contentType)},
		)
		rec.Headers = append(hs, rec.Headers...)
		return nil
	}
	if rec.Value == nil {
		return nil
	}
	b := make([]byte, 0, len(rec.Value)+256)
	b = append(b, `{"specversion":"1.0","id":`...)
	b = appendJSONString(b, ev.MessageID)
	b = append(b, `,"source":`...)
	b = appendJSONString(b, ce.source)
	b = append(b, `,"type":`...)
	b = appendJSONString(b, ev.EventType)
	b = append(b, `,"subject":`...)
	b = appendJSONString(b, ev.AggregateID)
	b = append(b, `,"time":`...)
	b = appendJSONString(b, ts)
	b = append(b, `,"datacontenttype":`...)
	b = appendJSONString(b, ce.contentType)
	switch {
	case ce.jsonData:
		b = append(b, `,"data":`...)
		b = append(b, rec.Value...)
	case utf8.Valid(rec.Value):
		b = append(b, `,"data":`...)
		b = appendJSONString(b, string(rec.Value))
	default:
		b = append(b, `,"data_base64":`...)
		b = appendBase64(b, rec.Value)
	}
	rec.Value = append(b, '}')
	rec.Headers = append([]outboxcdc.Header{{Key: "content-type", Value: []byte(ceStructuredContentType)}}, rec.Headers...)
	return nil
}
