package wal

import (
	"encoding/binary"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	outboxcdc "github.com/outbox-cdc/outbox-cdc"
)

func TestValidate(t *testing.T) {
	c := DefaultConfig()
	c.DSN = "postgres://u:secret@127.0.0.1/db"
	if err := c.Validate(); err != nil {
		t.Fatalf("defaults + dsn: %v", err)
	}
	bad := []struct {
		mod  func(*Config)
		want string
	}{
		{func(c *Config) { c.DSN = "" }, "source.dsn"},
		{func(c *Config) { c.Table = "" }, "source.table"},
		{func(c *Config) { c.Table = "a.b.c" }, "source.table"},
		{func(c *Config) { c.Start = "middle" }, "source.start"},
		{func(c *Config) { c.Slot = "Bad-Slot" }, "source.slot"},
		{func(c *Config) { c.Publication = strings.Repeat("p", 64) }, "source.publication"},
		{func(c *Config) { c.StatusInterval = 0 }, "source.status_interval"},
		{func(c *Config) { c.Heartbeat.Interval = -1 }, "source.heartbeat.interval"},
		{func(c *Config) { c.Reconnect.Max = time.Millisecond }, "source.reconnect"},
		{func(c *Config) { c.BufferBytes = 0 }, "source.buffer_bytes"},
	}
	for _, b := range bad {
		c := DefaultConfig()
		c.DSN = "postgres://u:secret@127.0.0.1/db"
		b.mod(&c)
		err := c.Validate()
		if err == nil || !strings.Contains(err.Error(), b.want) {
			t.Errorf("want error naming %s, got %v", b.want, err)
		}
		if err != nil && strings.Contains(err.Error(), "secret") {
			t.Errorf("error leaks the password: %v", err)
		}
	}
	c = DefaultConfig()
	c.DSN = "postgres://u@h/db"
	c.Table = ""
	c.Messages.Prefix = "outbox"
	if err := c.Validate(); err != nil {
		t.Errorf("table-less with prefix: %v", err)
	}
}

func TestDeriveName(t *testing.T) {
	for in, want := range map[string]string{
		"":                      "outbox_cdc",
		"Orders-Prod":           "outbox_cdc_orders_prod",
		"a.b c":                 "outbox_cdc_a_b_c",
		strings.Repeat("x", 80): "outbox_cdc_" + strings.Repeat("x", 52),
	} {
		got := DeriveName(in)
		if got != want || !legalName(got) {
			t.Errorf("DeriveName(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestPosition(t *testing.T) {
	for _, lsn := range []pglogrepl.LSN{0, 1, 0x16B3748, 0xABCDEF0012345678} {
		p := MakePosition(lsn)
		if string(p) != "postgres:"+lsn.String() {
			t.Errorf("MakePosition(%d) = %q, want postgres:%s", lsn, p, lsn)
		}
		back, err := ParsePosition(p)
		if err != nil || back != lsn {
			t.Errorf("ParsePosition(%q) = %v, %v", p, back, err)
		}
	}
	if _, err := ParsePosition("mysql:mariadb-bin.000001:4"); err == nil {
		t.Error("foreign position accepted")
	}
	if _, err := ParsePosition("postgres:zz"); err == nil {
		t.Error("bad LSN accepted")
	}
}

func TestDecodeBytea(t *testing.T) {
	for in, want := range map[string]string{
		`\x`:           "",
		`\x00ff41`:     "\x00\xffA",
		`\x0A0b`:       "\n\x0b",
		`abc`:          "abc",
		`a\\b\001\377`: "a\\b\x01\xff",
	} {
		b := []byte(in)
		n, err := decodeBytea(b)
		if err != nil || string(b[:n]) != want {
			t.Errorf("decodeBytea(%q) = %q, %v; want %q", in, b[:n], err, want)
		}
	}
	for _, in := range []string{`\x0`, `\xzz`, `a\9`} {
		if _, err := decodeBytea([]byte(in)); err == nil {
			t.Errorf("decodeBytea(%q): no error", in)
		}
	}
}

func TestDecodeMessage(t *testing.T) {
	ev, err := DecodeMessage([]byte(`{"message_id":"m1","aggregate_type":"ORDER","aggregate_id":42,
		"event_type":"CREATED","payload":{"a": [1, 2]},"tenant":"acme","n":null,"x":true}`), []string{"tenant", "n", "x", "missing"})
	if err != nil {
		t.Fatal(err)
	}
	if ev.MessageID != "m1" || ev.AggregateType != "ORDER" || ev.AggregateID != "42" || ev.EventType != "CREATED" {
		t.Errorf("roles: %+v", ev)
	}
	if string(ev.Payload) != `{"a": [1, 2]}` {
		t.Errorf("payload %q", ev.Payload)
	}
	if c, ok := ev.Column("tenant"); !ok || string(c.Value) != "acme" {
		t.Errorf("tenant %+v", c)
	}
	if c, ok := ev.Column("n"); !ok || !c.Null {
		t.Errorf("n %+v", c)
	}
	if c, ok := ev.Column("x"); !ok || string(c.Value) != "true" {
		t.Errorf("x %+v", c)
	}
	if _, ok := ev.Column("missing"); ok {
		t.Error("missing column delivered")
	}
	ev, err = DecodeMessage([]byte(`{"message_id":"m2","payload":"text"}`), nil)
	if err != nil || string(ev.Payload) != `"text"` {
		t.Errorf("string payload %q %v", ev.Payload, err)
	}
	ev, err = DecodeMessage([]byte(`{"message_id":"m3","payload":null}`), nil)
	if err != nil || ev.Payload != nil {
		t.Errorf("null payload %q %v", ev.Payload, err)
	}
	for _, bad := range []string{`[1]`, `nope`, `{"message_id":{"a":1}}`, `null`} {
		if _, err := DecodeMessage([]byte(bad), nil); err == nil {
			t.Errorf("DecodeMessage(%s): no error", bad)
		}
	}
}

// Synthetic pgoutput messages for decoder tests and the benchmark.

func relationMsg(id uint32, ns, name string, cols []string, types []uint32) []byte {
	b := []byte{'R'}
	b = binary.BigEndian.AppendUint32(b, id)
	b = append(append(b, ns...), 0)
	b = append(append(b, name...), 0)
	b = append(b, 'd')
	b = binary.BigEndian.AppendUint16(b, uint16(len(cols)))
	for i, c := range cols {
		b = append(b, 0)
		b = append(append(b, c...), 0)
		b = binary.BigEndian.AppendUint32(b, types[i])
		b = binary.BigEndian.AppendUint32(b, 0xFFFFFFFF)
	}
	return b
}

func insertMsg(id uint32, vals []*string) []byte {
	b := []byte{'I'}
	b = binary.BigEndian.AppendUint32(b, id)
	b = append(b, 'N')
	b = binary.BigEndian.AppendUint16(b, uint16(len(vals)))
	for _, v := range vals {
		if v == nil {
			b = append(b, 'n')
			continue
		}
		b = append(b, 't')
		b = binary.BigEndian.AppendUint32(b, uint32(len(*v)))
		b = append(b, *v...)
	}
	return b
}

func beginMsg() []byte {
	b := make([]byte, 21)
	b[0] = 'B'
	return b
}

func commitMsg(end pglogrepl.LSN) []byte {
	b := make([]byte, 26)
	b[0] = 'C'
	binary.BigEndian.PutUint64(b[10:], uint64(end))
	return b
}

func sp(s string) *string { return &s }

var seed = outboxcdc.Columns{
	MessageID: "message_id", AggregateType: "aggregate_type", AggregateID: "aggregate_id",
	EventType: "event_type", Payload: "payload", Extra: []string{"blob", "tenant"},
}

func TestDecoderInsert(t *testing.T) {
	m := outboxcdc.NewSourceMetrics(nil)
	d := newDecoder("public", "outbox", "", seed, m)
	cols := []string{"id", "message_id", "aggregate_type", "aggregate_id", "event_type", "payload", "blob"}
	types := []uint32{20, 1043, 1043, 1043, 1043, 114, byteaOID}
	must := func(c *committed, err error) *committed {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	must(d.handle(relationMsg(7, "public", "outbox", cols, types), 1))
	must(d.handle(relationMsg(8, "public", "other", cols, types), 1))
	must(d.handle(beginMsg(), 2))
	msg := insertMsg(7, []*string{sp("1"), sp("m1"), sp("ORDER"), sp("42"), sp("CREATED"), sp(`{"x":1}`), sp(`\x00ff`)})
	must(d.handle(msg, 0x10))
	for i := range msg {
		msg[i] = 0 // the receive buffer is reused: the event must not alias it
	}
	must(d.handle(insertMsg(8, []*string{sp("2"), sp("m2"), sp("O"), sp("1"), sp("E"), nil, nil}), 0x11))
	must(d.handle(insertMsg(7, []*string{sp("3"), sp("m3"), sp("ORDER"), sp("43"), sp("CREATED"), nil, nil}), 0x12))
	must(d.handle([]byte{'U', 0, 0, 0, 7, 'N'}, 0x13))
	c := must(d.handle(commitMsg(0x100), 0x14))
	if c == nil || c.end != 0x100 || len(c.events) != 2 {
		t.Fatalf("commit: %+v", c)
	}
	e := c.events[0]
	if e.MessageID != "m1" || e.AggregateType != "ORDER" || e.AggregateID != "42" || e.EventType != "CREATED" ||
		string(e.Payload) != `{"x":1}` || e.Origin != "LSN 0/10" {
		t.Errorf("event 0: %+v", e)
	}
	if b, ok := e.Column("blob"); !ok || string(b.Value) != "\x00\xff" {
		t.Errorf("blob %+v", b)
	}
	if _, ok := e.Column("tenant"); ok {
		t.Error("absent column delivered")
	}
	if e2 := c.events[1]; e2.Payload != nil || e2.MessageID != "m3" {
		t.Errorf("event 1: %+v", e2)
	}
	if cap(e.Payload) != len(e.Payload) {
		t.Error("payload slice not capped")
	}

	// A Relation without a role column: the next insert is a clear error.
	must(d.handle(relationMsg(7, "public", "outbox", cols[:4], types[:4]), 0x200))
	must(d.handle(beginMsg(), 0x201))
	_, err := d.handle(insertMsg(7, []*string{sp("4"), sp("m4"), sp("O"), sp("1")}), 0x202)
	if err == nil || !strings.Contains(err.Error(), `"event_type"`) {
		t.Fatalf("want missing role error, got %v", err)
	}
}

func BenchmarkDecodeInsert(b *testing.B) {
	m := outboxcdc.NewSourceMetrics(nil)
	d := newDecoder("public", "outbox", "", seed, m)
	cols := []string{"id", "message_id", "aggregate_type", "aggregate_id", "event_type", "payload"}
	types := []uint32{20, 1043, 1043, 1043, 1043, 3802}
	if _, err := d.handle(relationMsg(7, "public", "outbox", cols, types), 1); err != nil {
		b.Fatal(err)
	}
	payload := `{"order_id": 123456, "customer": "c-42", "total": 99.95, "items": [1, 2, 3]}`
	msg := insertMsg(7, []*string{sp("123456"), sp("0b6c3f7e-3a1f-4f7e-9a57-1c2d3e4f5a6b"), sp("ORDER"), sp("order-123456"), sp("ORDER_CREATED"), &payload})
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if i%100 == 0 {
			if _, err := d.handle(beginMsg(), 1); err != nil {
				b.Fatal(err)
			}
		}
		if _, err := d.handle(msg, pglogrepl.LSN(i)); err != nil {
			b.Fatal(err)
		}
		if i%100 == 99 {
			if _, err := d.handle(commitMsg(pglogrepl.LSN(i)), 1); err != nil {
				b.Fatal(err)
			}
		}
	}
}

func TestCheckWalLevel(t *testing.T) {
	if err := checkWalLevel("logical"); err != nil {
		t.Fatal(err)
	}
	err := checkWalLevel("replica")
	if err == nil || !isPermanent(err) || !strings.Contains(err.Error(), "ALTER SYSTEM SET wal_level = logical") {
		t.Fatalf("got %v", err)
	}
}
