package sink

import (
	"bufio"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
)

// Stdout writes each record as one JSON line, for trying the connector out
// and for piping into other tools:
//
//	{"topic":"outbox.event.ORDER","partition":null,"key":"o-1","value":"{\"total\":3}","headers":{"id":"m-1"},"timestamp":"2024-05-01T10:00:00Z"}
//
// partition is null (no partition is chosen without Kafka) unless the
// record names one (route.partition_column). key, value
// and header values are JSON strings when they are valid UTF-8, null when
// nil, and otherwise an object {"base64":"..."} holding the standard base64
// of the bytes. headers keep the records' order; a repeated header key
// (the router refuses them, a dead letter's added headers could repeat
// one) is written once, at its first place, with an array of its values
// in order, so every line has unique keys. timestamp is RFC 3339 in UTC
// with up to nanoseconds, or null when unset.
type Stdout struct {
	mu  sync.Mutex
	w   *bufio.Writer
	buf []byte
}

// NewStdout returns a sink writing to w (os.Stdout in production). Close
// does not close w.
func NewStdout(w io.Writer) *Stdout {
	return &Stdout{w: bufio.NewWriterSize(w, 64<<10)}
}

// Write writes one line per record and flushes w before returning.
func (s *Stdout) Write(ctx context.Context, records []outboxcdc.Record) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range records {
		if err := ctx.Err(); err != nil {
			return err
		}
		s.buf = appendRecordJSON(s.buf[:0], &records[i])
		if _, err := s.w.Write(s.buf); err != nil {
			return fmt.Errorf("stdout sink: %w", err)
		}
	}
	if err := s.w.Flush(); err != nil {
		return fmt.Errorf("stdout sink: %w", err)
	}
	return nil
}

// Ready always returns nil.
func (s *Stdout) Ready() error { return nil }

// Close flushes buffered output.
func (s *Stdout) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Flush()
}

func appendRecordJSON(b []byte, r *outboxcdc.Record) []byte {
	b = append(b, `{"topic":`...)
	b = appendJSONString(b, validUTF8(r.Topic))
	b = append(b, `,"partition":`...)
	if r.Partition != nil {
		b = strconv.AppendInt(b, int64(*r.Partition), 10)
	} else {
		b = append(b, "null"...)
	}
	b = append(b, `,"key":`...)
	b = appendJSONBytes(b, r.Key)
	b = append(b, `,"value":`...)
	b = appendJSONBytes(b, r.Value)
	b = append(b, `,"headers":{`...)
	for i, h := range r.Headers {
		if slices.ContainsFunc(r.Headers[:i], func(e outboxcdc.Header) bool { return e.Key == h.Key }) {
			continue // written with its key's first place
		}
		if i > 0 {
			b = append(b, ',')
		}
		b = appendJSONString(b, validUTF8(h.Key))
		b = append(b, ':')
		n := 0
		for _, e := range r.Headers[i:] {
			if e.Key == h.Key {
				n++
			}
		}
		if n == 1 {
			b = appendJSONBytes(b, h.Value)
			continue
		}
		b = append(b, '[')
		for _, e := range r.Headers[i:] {
			if e.Key == h.Key {
				if b[len(b)-1] != '[' {
					b = append(b, ',')
				}
				b = appendJSONBytes(b, e.Value)
			}
		}
		b = append(b, ']')
	}
	b = append(b, `},"timestamp":`...)
	if r.Timestamp.IsZero() {
		b = append(b, "null"...)
	} else {
		b = append(b, '"')
		b = r.Timestamp.UTC().AppendFormat(b, time.RFC3339Nano)
		b = append(b, '"')
	}
	return append(b, "}\n"...)
}

// appendJSONBytes writes v as a JSON string when it is valid UTF-8, as null
// when nil, else as {"base64":"..."}.
func appendJSONBytes(b, v []byte) []byte {
	switch {
	case v == nil:
		return append(b, "null"...)
	case utf8.Valid(v):
		return appendJSONString(b, v)
	default:
		b = append(b, `{"base64":"`...)
		b = base64.StdEncoding.AppendEncode(b, v)
		return append(b, `"}`...)
	}
}

func validUTF8(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}

const hexDigits = "0123456789abcdef"

// appendJSONString quotes valid UTF-8 s as a JSON string. Besides what JSON
// requires it escapes U+2028/U+2029, which JavaScript treats as line ends.
func appendJSONString[T string | []byte](b []byte, s T) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		// Non-ASCII bytes pass through (s is valid UTF-8) except the line
		// separators U+2028 and U+2029 (E2 80 A8, E2 80 A9).
		if c == 0xe2 && i+2 < len(s) && s[i+1] == 0x80 && (s[i+2] == 0xa8 || s[i+2] == 0xa9) {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[s[i+2]&0xf])
			i += 3
			start = i
			continue
		}
		i++
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
