package wal

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	outboxcdc "github.com/outbox-cdc/outbox-cdc"
	"github.com/outbox-cdc/outbox-cdc/backfill"
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
		{func(c *Config) { c.DSN = "" }, "dsn"},
		{func(c *Config) { c.Table = "" }, "table"},
		{func(c *Config) { c.Table = "a.b.c" }, "table"},
		{func(c *Config) { c.Start = "middle" }, "start"},
		{func(c *Config) { c.Slot = "Bad-Slot" }, "slot"},
		{func(c *Config) { c.Publication = strings.Repeat("p", 64) }, "publication"},
		{func(c *Config) { c.StatusInterval = 0 }, "status_interval"},
		{func(c *Config) { c.Heartbeat.Interval = -1 }, "heartbeat.interval"},
		{func(c *Config) { c.Reconnect.Max = time.Millisecond }, "reconnect"},
		{func(c *Config) { c.BufferBytes = 0 }, "buffer_bytes"},
		{func(c *Config) { c.WalSenderTimeout = 3 * time.Second }, "wal_sender_timeout"},
		{func(c *Config) { c.ReceiveTimeout = 3 * time.Second }, "receive_timeout"},
		{func(c *Config) { c.ReceiveTimeout = 11 * time.Second }, "receive_timeout"},
		{func(c *Config) { c.ReceiveTimeout = -1 }, "receive_timeout"},
		{func(c *Config) { c.ConnectTimeout = 0 }, "connect_timeout"},
		{func(c *Config) { c.QueryTimeout = 0 }, "query_timeout"},
	}
	for _, b := range bad {
		c := DefaultConfig()
		c.DSN = "postgres://u:secret@127.0.0.1/db"
		b.mod(&c)
		err := c.Validate()
		if !hasKey(err, b.want) {
			t.Errorf("want an error about key %s, got %v", b.want, err)
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
	hash := func(name string) string {
		sum := sha256.Sum256([]byte(name))
		return "_" + hex.EncodeToString(sum[:4])
	}
	long := strings.Repeat("x", 80)
	for in, want := range map[string]string{
		// Names that are legal as they stand keep the name they always had.
		"":                      "outbox_cdc",
		"orders_outbox":         "outbox_cdc_orders_outbox",
		"billing2":              "outbox_cdc_billing2",
		strings.Repeat("y", 52): "outbox_cdc_" + strings.Repeat("y", 52),
		// Altered names get a hash of the name as given.
		"orders-outbox": "outbox_cdc_orders_outbox" + hash("orders-outbox"),
		"Orders-Prod":   "outbox_cdc_orders_prod" + hash("Orders-Prod"),
		"a.b c":         "outbox_cdc_a_b_c" + hash("a.b c"),
		long:            "outbox_cdc_" + strings.Repeat("x", 43) + hash(long),
	} {
		got := DeriveName(in)
		if got != want || !legalName(got) {
			t.Errorf("DeriveName(%q) = %q, want %q", in, got, want)
		}
	}
	// The collisions of the old derivation are gone.
	seen := map[string]string{}
	for _, in := range []string{"orders-outbox", "orders_outbox", "Orders_Outbox", "orders.outbox",
		strings.Repeat("a", 52) + "1", strings.Repeat("a", 52) + "2", strings.Repeat("a", 52), "", "outbox_cdc"} {
		got := DeriveName(in)
		if prev, ok := seen[got]; ok {
			t.Errorf("%q and %q both derive %q", prev, in, got)
		}
		seen[got] = in
	}
	// legacyName is the old derivation, for the upgrade check.
	for in, want := range map[string]string{
		"orders-outbox": "outbox_cdc_orders_outbox",
		"Orders-Prod":   "outbox_cdc_orders_prod",
		long:            "outbox_cdc_" + strings.Repeat("x", 52),
		"orders_outbox": "outbox_cdc_orders_outbox",
	} {
		if got := legacyName(in); got != want {
			t.Errorf("legacyName(%q) = %q, want %q", in, got, want)
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

// TestPositionIdentity: positions carry the system identifier and the
// timeline; the short form of earlier versions still loads (identity
// unknown), and a pending position carries the identity in its stream
// body without knowing it.
func TestPositionIdentity(t *testing.T) {
	id := Identity{System: 7345678901234567890, Timeline: 3}
	p := id.Position(0x16B3748)
	if p != "postgres:0/16B3748,timeline=3,system=7345678901234567890" {
		t.Fatalf("Position = %q", p)
	}
	lsn, got, err := ParsePositionIdentity(p)
	if err != nil || lsn != 0x16B3748 || got != id {
		t.Fatalf("ParsePositionIdentity(%q) = %s, %+v, %v", p, lsn, got, err)
	}
	if lsn, err := ParsePosition(p); err != nil || lsn != 0x16B3748 {
		t.Fatalf("ParsePosition(%q) = %s, %v", p, lsn, err)
	}
	// The short form: what earlier versions wrote.
	lsn, got, err = ParsePositionIdentity("postgres:0/16B3748")
	if err != nil || lsn != 0x16B3748 || got.Known() {
		t.Fatalf("short form: %s, %+v, %v", lsn, got, err)
	}
	if (Identity{}).Position(5) != MakePosition(5) {
		t.Fatal("the unknown identity does not give the short form")
	}
	// A pending position: the stream body is the whole position body.
	pend := backfill.State{Last: 4, High: 9, Stream: p.Body()}.Encode(Kind)
	if lsn, got, err := ackPosition(pend); err != nil || lsn != 0x16B3748 || got != id {
		t.Fatalf("ackPosition(%q) = %s, %+v, %v", pend, lsn, got, err)
	}
	for _, bad := range []outboxcdc.Position{
		"postgres:0/1,timeline=3",                             // half an identity
		"postgres:0/1,system=5",                               // the other half
		"postgres:0/1,timeline=0,system=5",                    // timeline 0
		"postgres:0/1,timeline=x,system=5",                    // not a number
		"postgres:0/1,timeline=1,system=0",                    // system 0
		"postgres:0/1,timeline=1,system=5,timeline=2",         // twice
		"postgres:0/1,timeline=1,system=5,slot=a",             // unknown field
		"postgres:0/1,",                                       // empty field
		"postgres:0/1,timeline=1,system=99999999999999999999", // beyond 64 bits
	} {
		if _, _, err := ParsePositionIdentity(bad); err == nil {
			t.Errorf("ParsePositionIdentity(%q) accepted", bad)
		}
	}
}

func TestParseTimelineHistory(t *testing.T) {
	h, err := parseTimelineHistory([]byte("1\t0/3000060\tno recovery target specified\n\n# a comment\n2\t0/5A00028\tno recovery target specified\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := []timelineSwitch{{1, 0x3000060}, {2, 0x5A00028}}
	if fmt.Sprint(h) != fmt.Sprint(want) {
		t.Fatalf("history %v, want %v", h, want)
	}
	// A history that skips timelines (a promotion of a standby of a
	// standby whose timeline 2 was abandoned) is fine.
	if h, err := parseTimelineHistory([]byte("1\t0/3000060\treason\n4\t0/6000000\treason\n")); err != nil || len(h) != 2 {
		t.Fatalf("gapped history: %v, %v", h, err)
	}
	for _, bad := range []string{"1\n", "x\t0/1\tr\n", "1\tzz\tr\n", "2\t0/5\tr\n1\t0/6\tr\n", "1\t0/6\tr\n2\t0/5\tr\n"} {
		if _, err := parseTimelineHistory([]byte(bad)); err == nil {
			t.Errorf("history %q accepted", bad)
		}
	}
}

// TestPlace: the judgement of every connect, on the histories a failover
// makes.
func TestPlace(t *testing.T) {
	const sys = 7345678901234567890
	tl := func(n int32) Identity { return Identity{System: sys, Timeline: n} }
	// Timeline 1 ended at 0/5000000 (timeline 2 began there), timeline 2
	// at 0/9000000; the server is on timeline 3, flushed to 0/C000000.
	hist := []timelineSwitch{{1, 0x5000000}, {2, 0x9000000}}
	srv, flushed := tl(3), pglogrepl.LSN(0xC000000)
	for _, tt := range []struct {
		name     string
		lsn      pglogrepl.LSN
		claimed  Identity
		problem  string // "" on the history
		common   pglogrepl.LSN
		fork     pglogrepl.LSN
		hist     []timelineSwitch
		srvTL    Identity
		flushed_ pglogrepl.LSN
	}{
		{name: "same timeline", lsn: 0xB000000, claimed: tl(3), common: 0xB000000},
		{name: "same timeline at the flush position", lsn: flushed, claimed: tl(3), common: flushed},
		{name: "same timeline, ahead of the WAL", lsn: 0xD000000, claimed: tl(3), problem: "ahead of this server's WAL", common: flushed},
		{name: "earlier timeline before its fork", lsn: 0x4FFFFFF, claimed: tl(1), common: 0x4FFFFFF, fork: 0x5000000},
		{name: "earlier timeline at its fork", lsn: 0x5000000, claimed: tl(1), common: 0x5000000, fork: 0x5000000},
		{name: "earlier timeline past its fork", lsn: 0x5000001, claimed: tl(1), problem: "past the point 0/5000000", common: 0x5000000, fork: 0x5000000},
		{name: "parent timeline past its fork", lsn: 0x9100000, claimed: tl(2), problem: "past the point 0/9000000", common: 0x9000000, fork: 0x9000000},
		{name: "parent timeline before its fork", lsn: 0x8000000, claimed: tl(2), common: 0x8000000, fork: 0x9000000},
		{name: "later timeline", lsn: 0x1000, claimed: tl(4), problem: "later than this server's timeline 3"},
		{name: "a timeline not in the history", lsn: 0x1000, claimed: tl(2), hist: []timelineSwitch{{1, 0x5000000}}, problem: "not in this server's history (timelines 1, 3)"},
		{name: "another system", lsn: 0x1000, claimed: Identity{System: 42, Timeline: 3}, problem: "system 42, this server is system 7345678901234567890"},
		{name: "short form", lsn: 0xB000000, common: 0xB000000},
		{name: "short form, ahead of the WAL", lsn: 0xD000000, problem: "ahead of this server's WAL", common: flushed},
		{name: "timeline 1 server", lsn: 0x100, claimed: tl(1), srvTL: tl(1), flushed_: 0x200, common: 0x100},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h, s, f := hist, srv, flushed
			if tt.hist != nil {
				h = tt.hist
			}
			if tt.srvTL.Known() {
				s, f, h = tt.srvTL, tt.flushed_, nil
			}
			got := place(tt.lsn, tt.claimed, s, f, h)
			if (tt.problem == "") != (got.problem == "") || !strings.Contains(got.problem, tt.problem) {
				t.Errorf("problem %q, want one containing %q", got.problem, tt.problem)
			}
			if got.common != tt.common || got.fork != tt.fork {
				t.Errorf("common %s fork %s, want %s and %s", got.common, got.fork, tt.common, tt.fork)
			}
		})
	}
}

// TestFailoverSlotVersionGate: failover slots are created only where the
// server has them (PostgreSQL 17); before 17 the key is refused, never
// silently ignored.
func TestFailoverSlotVersionGate(t *testing.T) {
	for _, tt := range []struct {
		version  int
		failover bool
		sql, cmd string
	}{
		{150020, false, `SELECT lsn::text FROM pg_create_logical_replication_slot($1, 'pgoutput')`, `CREATE_REPLICATION_SLOT "s" LOGICAL pgoutput USE_SNAPSHOT`},
		{170000, false, `SELECT lsn::text FROM pg_create_logical_replication_slot($1, 'pgoutput')`, `CREATE_REPLICATION_SLOT "s" LOGICAL pgoutput USE_SNAPSHOT`},
		{170000, true, `SELECT lsn::text FROM pg_create_logical_replication_slot($1, 'pgoutput', false, false, true)`, `CREATE_REPLICATION_SLOT "s" LOGICAL pgoutput (SNAPSHOT 'use', FAILOVER true)`},
		{180001, true, `SELECT lsn::text FROM pg_create_logical_replication_slot($1, 'pgoutput', false, false, true)`, `CREATE_REPLICATION_SLOT "s" LOGICAL pgoutput (SNAPSHOT 'use', FAILOVER true)`},
		{160004, true, "", ""},
	} {
		sql, err1 := createSlotSQL(tt.version, tt.failover)
		cmd, err2 := createSlotCommand("s", tt.version, tt.failover)
		if sql != tt.sql || cmd != tt.cmd || (tt.sql == "") != (err1 != nil) || (tt.cmd == "") != (err2 != nil) {
			t.Errorf("version %d failover %v: %q, %v; %q, %v", tt.version, tt.failover, sql, err1, cmd, err2)
		}
		err := checkFailoverVersion(tt.failover, tt.version, "x")
		if want := tt.failover && tt.version < 170000; (err != nil) != want || (err != nil && (!isPermanent(err) || !strings.Contains(err.Error(), "PostgreSQL 17"))) {
			t.Errorf("version %d failover %v: checkFailoverVersion = %v", tt.version, tt.failover, err)
		}
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

func beginMsg() []byte { return beginAt(0) }

// beginAt is a Begin of the transaction committing at final.
func beginAt(final pglogrepl.LSN) []byte {
	b := make([]byte, 21)
	b[0] = 'B'
	binary.BigEndian.PutUint64(b[1:], uint64(final))
	return b
}

func commitMsg(end pglogrepl.LSN) []byte {
	b := make([]byte, 26)
	b[0] = 'C'
	binary.BigEndian.PutUint64(b[10:], uint64(end))
	return b
}

// messageMsg is a transactional logical decoding message.
func messageMsg(lsn pglogrepl.LSN, prefix, content string) []byte {
	b := []byte{'M', 1}
	b = binary.BigEndian.AppendUint64(b, uint64(lsn))
	b = append(append(b, prefix...), 0)
	b = binary.BigEndian.AppendUint32(b, uint32(len(content)))
	return append(b, content...)
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
	must := func(c *txOut, err error) *txOut {
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
	if !errors.Is(err, ErrTableLayout) {
		t.Fatalf("want ErrTableLayout for the missing role column, got %v", err)
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
	if !errors.Is(err, ErrServerSettings) || !isPermanent(err) {
		t.Fatalf("got %v", err)
	}
}

// fragmentDecoder is a decoder for the outbox table "public.outbox" with
// the seed columns, its Relation already seen.
func fragmentDecoder(t *testing.T) *decoder {
	t.Helper()
	d := newDecoder("public", "outbox", "ob", seed, outboxcdc.NewSourceMetrics(nil))
	cols := []string{"id", "message_id", "aggregate_type", "aggregate_id", "event_type", "payload"}
	types := []uint32{20, 1043, 1043, 1043, 1043, 114}
	if _, err := d.handle(relationMsg(7, "public", "outbox", cols, types), 1); err != nil {
		t.Fatal(err)
	}
	return d
}

func rowMsg(i int, payload string) []byte {
	id := fmt.Sprintf("m%d", i)
	return insertMsg(7, []*string{sp(fmt.Sprint(i)), sp(id), sp("ORDER"), sp("a"), sp("E"), &payload})
}

// feed decodes one transaction (committing at final, ending at end) of n
// rows with the payload and returns what the decoder handed on.
func feed(t *testing.T, d *decoder, final, end pglogrepl.LSN, n int, payload string) []*txOut {
	t.Helper()
	var out []*txOut
	take := func(o *txOut, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		if o != nil {
			out = append(out, o)
		}
	}
	take(d.handle(beginAt(final), final))
	for i := 0; i < n; i++ {
		take(d.handle(rowMsg(i, payload), final))
	}
	take(d.handle(commitMsg(end), final))
	return out
}

// A transaction larger than the fragment bounds is handed on in
// fragments: each within the bounds, in order, the last one carrying the
// end, together exactly the transaction's rows.
func TestDecoderFragments(t *testing.T) {
	check := func(t *testing.T, outs []*txOut, n int, end pglogrepl.LSN) {
		t.Helper()
		next := 0
		for i, o := range outs {
			last := i == len(outs)-1
			if o.more == last || (o.end != 0) != last || (last && o.end != end) {
				t.Fatalf("piece %d of %d: more %v end %s", i, len(outs), o.more, o.end)
			}
			if len(o.events) > outboxcdc.MaxFragmentEvents || o.bytes > outboxcdc.MaxFragmentBytes+64<<10 {
				t.Fatalf("piece %d: %d events, %d bytes: over the bounds", i, len(o.events), o.bytes)
			}
			if o.pieces != i || o.final != 0x1000 {
				t.Fatalf("piece %d: pieces %d final %s", i, o.pieces, o.final)
			}
			for _, ev := range o.events {
				if ev.MessageID != fmt.Sprintf("m%d", next) {
					t.Fatalf("piece %d: %s, want m%d", i, ev.MessageID, next)
				}
				next++
			}
		}
		if next != n {
			t.Fatalf("%d events handed on, want %d", next, n)
		}
	}
	t.Run("by count", func(t *testing.T) {
		outs := feed(t, fragmentDecoder(t), 0x1000, 0x2000, 10000, `{}`)
		if len(outs) != 3 {
			t.Fatalf("%d pieces, want 3", len(outs))
		}
		check(t, outs, 10000, 0x2000)
	})
	t.Run("by bytes", func(t *testing.T) {
		big := `"` + strings.Repeat("x", 50<<10) + `"`
		outs := feed(t, fragmentDecoder(t), 0x1000, 0x2000, 300, big)
		if len(outs) < 3 {
			t.Fatalf("%d pieces, want at least 3 for 15 MB", len(outs))
		}
		check(t, outs, 300, 0x2000)
	})
	t.Run("exact multiple", func(t *testing.T) {
		outs := feed(t, fragmentDecoder(t), 0x1000, 0x2000, 2*outboxcdc.MaxFragmentEvents, `{}`)
		if len(outs) != 3 || len(outs[2].events) != 0 {
			t.Fatalf("%d pieces; the last, empty, one carries the end", len(outs))
		}
		check(t, outs, 2*outboxcdc.MaxFragmentEvents, 0x2000)
	})
	t.Run("small stays whole", func(t *testing.T) {
		outs := feed(t, fragmentDecoder(t), 0x1000, 0x2000, 10, `{}`)
		if len(outs) != 1 || outs[0].more || outs[0].pieces != 0 {
			t.Fatalf("%+v", outs)
		}
	})
}

// After a reconnect the server sends a partly handed-on transaction again
// from its start: the events already handed on are dropped, and
// transactions that committed before the start are dropped whole.
func TestDecoderResume(t *testing.T) {
	d := fragmentDecoder(t)
	d.resume(0x1000, 0x3000, 5000)
	if outs := feed(t, d, 0x0800, 0x0900, 100, `{}`); len(outs) != 0 {
		t.Fatalf("a transaction before the start was handed on: %d pieces", len(outs))
	}
	outs := feed(t, d, 0x3000, 0x4000, 10000, `{}`)
	var ids []string
	for _, o := range outs {
		for _, ev := range o.events {
			ids = append(ids, ev.MessageID)
		}
	}
	if len(ids) != 5000 || ids[0] != "m5000" || ids[4999] != "m9999" || outs[len(outs)-1].end != 0x4000 {
		t.Fatalf("resumed: %d events from %v", len(ids), ids[:1])
	}
	// The next transaction is whole again.
	if outs := feed(t, d, 0x5000, 0x6000, 3, `{}`); len(outs) != 1 || len(outs[0].events) != 3 {
		t.Fatalf("after: %+v", outs)
	}

	// A server that resumes with another transaction than the partial one.
	d = fragmentDecoder(t)
	d.resume(0x1000, 0x3000, 10)
	if _, err := d.handle(beginAt(0x3500), 0x3500); err == nil || !strings.Contains(err.Error(), "partly handed on") {
		t.Fatalf("want an error about the partial transaction, got %v", err)
	}
}

// A logical message whose content cannot be decoded is handed on as an
// event the router rejects, with its content, not as a stream error.
func TestDecoderInvalidMessage(t *testing.T) {
	d := fragmentDecoder(t)
	if _, err := d.handle(beginAt(0x10), 0x10); err != nil {
		t.Fatal(err)
	}
	for i, content := range []string{`not json`, `[1,2]`, `{"message_id":"m9","aggregate_id":{"x":1}}`, `{"message_id":"ok","aggregate_id":"1"}`} {
		if _, err := d.handle(messageMsg(pglogrepl.LSN(0x20+i), "ob", content), 0x20); err != nil {
			t.Fatalf("%s: %v", content, err)
		}
	}
	c, err := d.handle(commitMsg(0x100), 0x30)
	if err != nil || c == nil || len(c.events) != 4 {
		t.Fatalf("commit %+v %v", c, err)
	}
	for i, ev := range c.events[:3] {
		if ev.Invalid == "" || !strings.Contains(ev.Origin, "logical message") || ev.Payload == nil {
			t.Errorf("event %d: %+v", i, ev)
		}
	}
	if string(c.events[0].Payload) != "not json" || c.events[2].MessageID != "m9" || !strings.Contains(c.events[2].Invalid, "aggregate_id") {
		t.Errorf("invalid events: %+v", c.events[:3])
	}
	if c.events[3].Invalid != "" || c.events[3].MessageID != "ok" {
		t.Errorf("valid event: %+v", c.events[3])
	}
}

func TestReceiveTimeout(t *testing.T) {
	c := DefaultConfig()
	if got := c.receiveTimeout(20 * time.Second); got != 15*time.Second {
		t.Errorf("defaults: %s, want 15s", got)
	}
	if got := c.receiveTimeout(60 * time.Second); got != 35*time.Second {
		t.Errorf("server's 60s: %s, want 35s", got)
	}
	c.StatusInterval = 10 * time.Second
	if got := c.receiveTimeout(60 * time.Second); got != 50*time.Second {
		t.Errorf("slow status: %s, want 50s", got)
	}
	c.ReceiveTimeout = 40 * time.Second
	if got := c.receiveTimeout(60 * time.Second); got != 40*time.Second {
		t.Errorf("set: %s", got)
	}
}

// A transaction's events are allocated for as many as the last
// transaction had, and a transaction smaller than that room is handed on
// without the spare room (it would be held until the rows are delivered).
func TestDecoderEventsSizedByLastTransaction(t *testing.T) {
	d := newDecoder("public", "outbox", "", seed, outboxcdc.NewSourceMetrics(nil))
	cols := []string{"id", "message_id", "aggregate_type", "aggregate_id", "event_type", "payload"}
	types := []uint32{20, 1043, 1043, 1043, 1043, 3802}
	if _, err := d.handle(relationMsg(7, "public", "outbox", cols, types), 1); err != nil {
		t.Fatal(err)
	}
	payload := `{"n": 1}`
	msg := insertMsg(7, []*string{sp("1"), sp("m-1"), sp("ORDER"), sp("o-1"), sp("CREATED"), &payload})
	tx := func(rows, room int, lsn pglogrepl.LSN) *txOut {
		t.Helper()
		if _, err := d.handle(beginMsg(), lsn); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < rows; i++ {
			if _, err := d.handle(msg, lsn); err != nil {
				t.Fatal(err)
			}
			if i == 0 && cap(d.events) < room {
				t.Fatalf("the first event has room for %d, want %d (the last transaction's size)", cap(d.events), room)
			}
		}
		c, err := d.handle(commitMsg(lsn), lsn)
		if err != nil || c == nil {
			t.Fatalf("commit: %v %v", c, err)
		}
		return c
	}
	tx(300, 1, 10)
	// Room for 300, rounded up to the allocator's size class; grown by
	// doubling it would be 512.
	if c := tx(300, 300, 20); len(c.events) != 300 || cap(c.events) >= 400 {
		t.Fatalf("equal transaction: %d events in room for %d, want 300 in one allocation for 300", len(c.events), cap(c.events))
	}
	if c := tx(3, 300, 30); len(c.events) != 3 || cap(c.events) > 6 {
		t.Fatalf("small transaction after a large one: %d events in room for %d, want the spare room dropped", len(c.events), cap(c.events))
	}
}

// hasKey reports whether err holds an *outboxcdc.KeyError about key.
func hasKey(err error, key string) bool {
	for _, ke := range outboxcdc.KeyErrors(err) {
		if ke.Key == key {
			return true
		}
	}
	return false
}
