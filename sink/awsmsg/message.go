package awsmsg

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"unicode/utf8"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
	"github.com/outbox-cdc/outbox-cdc/sink/broker"
)

// Attribute names the sinks add.
const (
	AttrMessageID = "message_id"
	AttrKey       = "outbox_cdc.key"
	AttrBody      = "outbox_cdc.body"
	AttrHeaders   = "outbox_cdc.headers"
)

// MaxAttributes is the most message attributes SQS takes on a message
// (and SNS delivers to an SQS subscription with raw message delivery).
const MaxAttributes = 10

// Attr is one message attribute: DataType String (String set) or Binary.
type Attr struct {
	DataType string
	String   string
	Binary   []byte
}

// Message is what a record becomes: the body, the attributes, and on a
// FIFO queue or topic the group and deduplication ids ("" otherwise).
type Message struct {
	Body    string
	Attrs   map[string]Attr
	GroupID string
	DedupID string
	// Size is the message's size as the service counts it (body and
	// attributes).
	Size int
}

// Build makes the message of m for service svc: body after cfg's
// body_encoding, attributes (message_id, outbox_cdc.key, the route
// headers, the overflow past the tenth in outbox_cdc.headers), and FIFO
// ids when fifo. A record the service would refuse (too large, a payload
// that is not text with body_encoding text) is a permanent error.
func Build(svc string, cfg Config, m *broker.Msg, fifo bool) (Message, error) {
	r := m.Rec
	out := Message{Attrs: map[string]Attr{}}
	attrs := out.Attrs
	switch {
	case len(r.Value) == 0:
		out.Body = "null"
		what := "null"
		if r.Value != nil {
			what = "empty"
		}
		attrs[AttrBody] = Attr{DataType: "String", String: what}
	case cfg.BodyEncoding == BodyBase64:
		out.Body = base64.StdEncoding.EncodeToString(r.Value)
	default:
		if !ValidText(r.Value) {
			return out, outboxcdc.Permanent(fmt.Errorf("%s: the payload is not text the service accepts (UTF-8 without control characters)", svc),
				"set sink.body_encoding: base64 for binary payloads")
		}
		out.Body = string(r.Value)
	}
	if r.MessageID != "" {
		attrs[AttrMessageID] = Attr{DataType: "String", String: r.MessageID}
	}
	if len(r.Key) > 0 {
		attrs[AttrKey] = stringOrBinary(r.Key)
	}
	// At most MaxAttributes: the headers past the last that fits go
	// together into one (AttrHeaders), a JSON object.
	var more map[string]string
	for _, h := range r.Headers {
		if h.Value == nil {
			continue
		}
		if _, ok := attrs[h.Key]; !ok && len(attrs) >= MaxAttributes-1 {
			if more == nil {
				more = map[string]string{}
			}
			if ValidText(h.Value) {
				more[h.Key] = string(h.Value)
			} else {
				more[h.Key+".base64"] = base64.StdEncoding.EncodeToString(h.Value)
			}
			continue
		}
		attrs[h.Key] = stringOrBinary(h.Value)
	}
	if more != nil {
		j, _ := json.Marshal(more)
		attrs[AttrHeaders] = Attr{DataType: "String", String: string(j)}
	}
	out.Size = len(out.Body)
	for k, v := range attrs {
		out.Size += len(k) + len(v.DataType) + len(v.String) + len(v.Binary)
	}
	if out.Size > cfg.MaxMessageBytes {
		return out, outboxcdc.Permanent(fmt.Errorf("%s: message of %d bytes (body and attributes) is larger than sink.max_message_bytes (%d)", svc, out.Size, cfg.MaxMessageBytes),
			"raise sink.max_message_bytes up to the destination's maximum message size, or make the payload smaller")
	}
	if fifo {
		out.GroupID = FIFOID(string(r.Key), "-")
		if r.MessageID != "" {
			id := r.MessageID
			if m.Again > 0 {
				id += "." + strconv.Itoa(m.Again)
			}
			out.DedupID = FIFOID(id, "")
		}
	}
	return out, nil
}

// FIFOID returns s as a group or deduplication id: as it is when AWS
// takes it (1 to 128 characters of ASCII alphanumerics and punctuation),
// else its SHA-256 in hex; empty for "" is def.
func FIFOID(s, def string) string {
	if s == "" {
		return def
	}
	ok := len(s) <= 128
	for i := 0; ok && i < len(s); i++ {
		ok = s[i] > ' ' && s[i] < 0x7f
	}
	if ok {
		return s
	}
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

// ValidText reports whether AWS accepts b as a message body or String
// attribute: UTF-8 of #x9 #xA #xD #x20-#xD7FF #xE000-#xFFFD #x10000-#x10FFFF.
func ValidText(b []byte) bool {
	if !utf8.Valid(b) {
		return false
	}
	for _, r := range string(b) {
		switch {
		case r == 0x9 || r == 0xA || r == 0xD:
		case r >= 0x20 && r <= 0xD7FF, r >= 0xE000 && r <= 0xFFFD, r >= 0x10000:
		default:
			return false
		}
	}
	return true
}

func stringOrBinary(v []byte) Attr {
	if len(v) == 0 || ValidText(v) {
		return Attr{DataType: "String", String: string(v)}
	}
	return Attr{DataType: "Binary", Binary: v}
}

// Failure is a batch entry the service refused: its id, code and message,
// and whether the sender is at fault.
type Failure struct {
	ID, Code, Message string
	SenderFault       bool
}

// Answer is a batch's answer: the ids of the accepted entries and the
// refused ones.
type Answer struct {
	Successful []string
	Failed     []Failure
}

// SendBatch sends one batch to dest; entry i of msgs has the id
// strconv.Itoa(i). An error is the whole request's failure.
type SendBatch func(ctx context.Context, dest string, msgs []Message) (Answer, error)

// errHeldBack is the outcome of a record not sent because an earlier
// record of its aggregate failed in this attempt.
var errHeldBack = outboxcdc.Transient(errors.New("not sent: an earlier record of the same aggregate failed"))

// Send implements broker.Conn's Send for c: the records of each
// destination (Rec.Topic, resolved by resolve; the error of resolve is
// the outcome of all its records) in batches of at most ten entries and
// max_message_bytes, one batch after the other, each record's outcome
// its entry's result. When an entry fails, the later records of its
// aggregate are held back.
func (c *Conn) Send(ctx context.Context, cfg Config, msgs []*broker.Msg, isFIFO func(string) bool,
	resolve func(context.Context, string) (string, error), send SendBatch) error {
	var order []string
	byDest := map[string][]*broker.Msg{}
	for _, m := range msgs {
		if _, ok := byDest[m.Rec.Topic]; !ok {
			order = append(order, m.Rec.Topic)
		}
		byDest[m.Rec.Topic] = append(byDest[m.Rec.Topic], m)
	}
	for _, name := range order {
		ms := byDest[name]
		dest, err := resolve(ctx, name)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			for _, m := range ms {
				m.Err = err
			}
			continue
		}
		if err := c.sendDest(ctx, cfg, dest, isFIFO(name), ms, send); err != nil {
			return err
		}
	}
	return nil
}

func (c *Conn) sendDest(ctx context.Context, cfg Config, dest string, fifo bool, msgs []*broker.Msg, send SendBatch) error {
	failed := map[string]bool{} // keys with a failed record
	for len(msgs) > 0 {
		if err := c.Err(); err != nil {
			for _, m := range msgs {
				m.Err = err
			}
			return nil
		}
		var batch []*broker.Msg
		var entries []Message
		bytes := 0
		n := 0
		for ; n < len(msgs) && len(batch) < MaxBatch; n++ {
			m := msgs[n]
			if failed[string(m.Rec.Key)] {
				m.Err = errHeldBack
				continue
			}
			e, err := Build(c.Svc.Name, cfg, m, fifo)
			if err != nil {
				m.Err = err
				failed[string(m.Rec.Key)] = true
				continue
			}
			if len(batch) > 0 && bytes+e.Size > cfg.MaxMessageBytes {
				break
			}
			bytes += e.Size
			batch = append(batch, m)
			entries = append(entries, e)
		}
		msgs = msgs[n:]
		if len(batch) == 0 {
			continue
		}
		out, err := send(ctx, dest, entries)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			for _, m := range batch {
				m.Err = err
				failed[string(m.Rec.Key)] = true
			}
			continue
		}
		answered := make([]bool, len(batch))
		for _, id := range out.Successful {
			if i, err := strconv.Atoi(id); err == nil && i >= 0 && i < len(batch) {
				answered[i] = true
			}
		}
		for _, f := range out.Failed {
			i, err := strconv.Atoi(f.ID)
			if err != nil || i < 0 || i >= len(batch) || answered[i] {
				continue
			}
			answered[i] = true
			e := fmt.Errorf("%s: entry refused: %s: %s", c.Svc.Name, f.Code, f.Message)
			m := batch[i]
			switch {
			case f.SenderFault && !TransientCodes[f.Code]:
				m.Err = outboxcdc.Permanent(e, "")
			default:
				m.Err = outboxcdc.Transient(e)
			}
			failed[string(m.Rec.Key)] = true
		}
		for i, m := range batch {
			if !answered[i] {
				m.Err = outboxcdc.Transient(fmt.Errorf("%s: the batch answer lists no result for the entry", c.Svc.Name))
				failed[string(m.Rec.Key)] = true
			}
		}
	}
	return nil
}

// Attributes returns m's attributes as the SDK's values, each made by mk
// (str is nil for a Binary attribute, bin nil for a String one).
func Attributes[V any](m Message, mk func(dataType string, str *string, bin []byte) V) map[string]V {
	out := make(map[string]V, len(m.Attrs))
	for k, a := range m.Attrs {
		if a.DataType == "Binary" {
			out[k] = mk(a.DataType, nil, a.Binary)
		} else {
			s := a.String
			out[k] = mk(a.DataType, &s, nil)
		}
	}
	return out
}

// OptString is nil for "" (an id a standard destination does not get),
// else &s.
func OptString(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// BatchAnswer is the Answer of a batch from the SDK's result entries: id
// names an accepted entry, failure describes a refused one.
func BatchAnswer[S, F any](ok []S, id func(S) string, failed []F, failure func(F) Failure) Answer {
	var a Answer
	for _, s := range ok {
		a.Successful = append(a.Successful, id(s))
	}
	for _, f := range failed {
		a.Failed = append(a.Failed, failure(f))
	}
	return a
}
