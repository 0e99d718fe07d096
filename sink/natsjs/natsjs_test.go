package natsjs

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
	"github.com/outbox-cdc/outbox-cdc/sink"
	"github.com/outbox-cdc/outbox-cdc/test/testenv"
)

// fixture is a fresh stream capturing "<prefix>.>", deleted at test end.
type fixture struct {
	url, stream, prefix string
	js                  jetstream.JetStream
}

func newFixture(t testing.TB, maxMsgSize int32) *fixture {
	t.Helper()
	u := testenv.NATSURL(t)
	nc, err := nats.Connect(u)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	id := rand.Int64N(1 << 40)
	f := &fixture{url: u, js: js, stream: fmt.Sprintf("TEST_%d", id), prefix: fmt.Sprintf("t%d", id)}
	ctx := context.Background()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: f.stream, Subjects: []string{f.prefix + ".>"},
		Storage: jetstream.MemoryStorage, Duplicates: time.Minute, MaxMsgSize: maxMsgSize}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { js.DeleteStream(context.Background(), f.stream) })
	return f
}

// read returns the stream's messages in stream order.
func (f *fixture) read(t *testing.T) []*jetstream.RawStreamMsg { return f.readFrom(t, 1) }

// readFrom returns the stream's messages from sequence from on.
func (f *fixture) readFrom(t *testing.T, from uint64) []*jetstream.RawStreamMsg {
	t.Helper()
	ctx := context.Background()
	st, err := f.js.Stream(ctx, f.stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out []*jetstream.RawStreamMsg
	for seq := max(from, info.State.FirstSeq); seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, m)
	}
	return out
}

func testConfig(url, stream string) Config {
	c := DefaultConfig()
	c.URL = url
	c.Stream = stream
	c.AckTimeout = 3 * time.Second
	c.DialTimeout = 3 * time.Second
	c.RetryBackoffMin = 50 * time.Millisecond
	c.RetryBackoffMax = 500 * time.Millisecond
	c.ReadyInterval = 200 * time.Millisecond
	c.PingInterval = time.Second
	c.Name = "test"
	return c
}

func records(prefix string, n, keys int) []outboxcdc.Record {
	rs := make([]outboxcdc.Record, n)
	for i := range rs {
		k := fmt.Sprintf("agg-%d", i%keys)
		rs[i] = outboxcdc.Record{
			Topic: prefix + ".ORDER." + k, Key: []byte(k), Value: []byte(fmt.Sprintf(`{"seq":%d}`, i)),
			Headers:   []outboxcdc.Header{{Key: "id", Value: []byte(fmt.Sprintf("m-%d", i))}, {Key: "nullable", Value: nil}},
			Timestamp: time.Unix(1700000000, 0), MessageID: fmt.Sprintf("m-%d", i), EventType: "ORDER_CREATED",
		}
	}
	return rs
}

func newSink(t *testing.T, cfg Config) *Sink {
	t.Helper()
	s, err := New(cfg, zerolog.New(zerolog.NewTestWriter(t)), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestPublishAckedDeduped: every record is stored with Nats-Msg-Id and
// the headers; writing the same records again stores nothing (the
// duplicate window). (Order and acknowledgement: TestContract.)
func TestPublishAckedDeduped(t *testing.T) {
	f := newFixture(t, 0)
	s := newSink(t, testConfig(f.url, f.stream))
	recs := records(f.prefix, 3000, 7)
	recs[3].Timestamp = time.Time{} // route.timestamp produce
	began := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.Write(ctx, recs); err != nil {
		t.Fatal(err)
	}
	if err := s.Write(ctx, recs[:1000]); err != nil {
		t.Fatal(err)
	}
	got := f.read(t)
	if len(got) != len(recs) {
		t.Fatalf("stream holds %d messages, want %d (the second write must be dropped as duplicates)", len(got), len(recs))
	}
	if ts, err := time.Parse(time.RFC3339Nano, got[3].Header.Get(HeaderTimestamp)); err != nil || ts.Before(began) || ts.After(time.Now()) {
		t.Fatalf("a record without a timestamp has %s %q (%v), want the time of production (after %v)", HeaderTimestamp, got[3].Header.Get(HeaderTimestamp), err, began)
	}
	for i, m := range got {
		if m.Header.Get(nats.MsgIdHdr) != fmt.Sprintf("m-%d", i) {
			t.Fatalf("message %d has Nats-Msg-Id %q", i, m.Header.Get(nats.MsgIdHdr))
		}
	}
	m := got[1]
	if m.Subject != f.prefix+".ORDER.agg-1" || string(m.Data) != `{"seq":1}` || m.Header.Get("id") != "m-1" ||
		m.Header.Get(HeaderKey) != "agg-1" || m.Header.Get(HeaderTimestamp) != "2023-11-14T22:13:20Z" {
		t.Fatalf("message %+v", m)
	}
	if _, ok := m.Header["nullable"]; ok {
		t.Fatalf("NULL header sent: %v", m.Header)
	}
}

// TestSubjectNotCaptured: a subject no stream captures is a permanent error
// naming the record (not a retry loop, not a silent drop).
func TestSubjectNotCaptured(t *testing.T) {
	f := newFixture(t, 0)
	s := newSink(t, testConfig(f.url, f.stream))
	recs := records(f.prefix, 20, 3)
	recs[5].Topic = "elsewhere.x"
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err := s.Write(ctx, recs)
	var re outboxcdc.RecordError
	if !errors.As(err, &re) {
		t.Fatalf("Write = %v", err)
	}
	if i, perm := re.FailedRecord(); i != 5 || !perm || !strings.Contains(err.Error(), "no stream captures") {
		t.Fatalf("FailedRecord = %d, %v (%v)", i, perm, err)
	}
}

// TestMissingStream: without create_stream a missing stream is a permanent
// error; with it the stream is created from the template.
func TestMissingStream(t *testing.T) {
	u := testenv.NATSURL(t)
	name := fmt.Sprintf("TEST_MISSING_%d", rand.Int64N(1<<40))
	cfg := testConfig(u, name)
	s := newSink(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err := s.Write(ctx, records("x", 1, 1))
	var be *sink.Error
	if !errors.As(err, &be) || !be.Permanent || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("Write = %v", err)
	}

	prefix := strings.ToLower(name)
	cfg.CreateStream = true
	cfg.StreamStorage = "memory"
	cfg.Template = prefix + ".{aggregate_type}.{aggregate_id}"
	cfg.DeadLetterTopic = prefix + "-dlq"
	s = newSink(t, cfg)
	t.Cleanup(func() {
		nc, err := nats.Connect(u)
		if err == nil {
			js, _ := jetstream.New(nc)
			js.DeleteStream(context.Background(), name)
			nc.Close()
		}
	})
	recs := records(prefix, 3, 1)
	recs[2].Topic = prefix + "-dlq"
	if err := s.Write(ctx, recs); err != nil {
		t.Fatal(err)
	}
}

func TestSubjectsOf(t *testing.T) {
	for in, want := range map[string]string{
		DefaultTopic:              "outbox.*.*",
		"a.b{event_type}x.c":      "a.*.c",
		"events.{aggregate_type}": "events.*",
	} {
		if got := SubjectsOf(in); got != want {
			t.Errorf("SubjectsOf(%q) = %q, want %q", in, got, want)
		}
	}
	if !matches("a.>", "a.b.c") || matches("a.*", "a.b.c") || !matches("a.*.c", "a.x.c") || matches("a.>", "a") {
		t.Fatal("matches")
	}
}

func TestCovers(t *testing.T) {
	for _, tc := range []struct {
		filter, want string
		ok           bool
	}{
		{"outbox.>", "outbox.*.*", true},
		{"outbox.*.*", "outbox.*.*", true},
		{"outbox.*", "outbox.*.*", false},
		{"outbox.ORDER.*", "outbox.*.*", false},
		{"a.b", "a.b", true},
		{">", "x.dlq", true},
		{"a.*", "a.>", false},
	} {
		if got := covers(tc.filter, tc.want); got != tc.ok {
			t.Errorf("covers(%q, %q) = %v", tc.filter, tc.want, got)
		}
	}
}

// TestCheck: check passes when the stream captures the route's subjects and
// the dead-letter subject, and fails naming what it does not capture.
func TestCheck(t *testing.T) {
	f := newFixture(t, 0)
	ctx := context.Background()
	cfg := testConfig(f.url, f.stream)
	cfg.Template = f.prefix + ".{aggregate_type}.{aggregate_id}"
	cfg.DeadLetterTopic = f.prefix + ".dlq"
	for _, r := range Check(ctx, cfg) {
		if !r.OK {
			t.Fatalf("check failed: %+v", r)
		}
	}
	cfg.DeadLetterTopic = "elsewhere.dlq"
	res := Check(ctx, cfg)
	if r := res[len(res)-1]; r.OK || !strings.Contains(r.Detail, "elsewhere.dlq") {
		t.Fatalf("uncaptured dead-letter subject: %+v", r)
	}
	cfg.Stream += "_MISSING"
	res = Check(ctx, cfg)
	if r := res[len(res)-1]; r.OK || !strings.Contains(r.Fix, "create_stream") {
		t.Fatalf("missing stream: %+v", r)
	}
}

// TestTLS: against a private nats-server serving TLS with a throwaway CA
// (the shared server is not reconfigured), the sink connects and
// publishes with sink.tls.ca_file, and without the CA the connection is
// refused permanently (a certificate that does not verify is a
// configuration error, not a retry loop).
func TestTLS(t *testing.T) {
	bin, err := exec.LookPath("nats-server")
	if err != nil {
		testenv.Unavailable(t, "nats-server: %v", err)
	}
	certs := testenv.NewCerts(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	_, port, _ := net.SplitHostPort(addr)
	srv := exec.Command(bin, "-a", "127.0.0.1", "-p", port, "-js", "-sd", t.TempDir(),
		"--tls", "--tlscert", certs.Cert, "--tlskey", certs.Key)
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Process.Kill(); srv.Wait() })
	for i := 0; i < 100; i++ {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			break
		}
		time.Sleep(50 * time.Millisecond)
	}

	cfg := testConfig("tls://"+addr, "TLSTEST")
	cfg.CreateStream, cfg.StreamStorage, cfg.Template = true, "memory", "tls.{aggregate_type}.{aggregate_id}"
	cfg.TLS.Enabled, cfg.TLS.CAFile = true, certs.CA
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	s := newSink(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := s.Write(ctx, records("tls", 10, 2)); err != nil {
		t.Fatalf("Write over TLS: %v", err)
	}

	cfg.TLS = sink.TLS{}
	s = newSink(t, cfg)
	err = s.Write(ctx, records("tls", 1, 1))
	var be *sink.Error
	if !errors.As(err, &be) || !be.Permanent || !strings.Contains(err.Error(), "ca_file") {
		t.Fatalf("Write without the CA = %v, want a permanent certificate error", err)
	}
}

// TestAbandonedConnectionSendsNothingLate: publishes on a connection the
// sink gave up (its path partitioned: the kernel holds them to send
// again) must not reach the server once the path heals, after their
// retried copies and after later rows of their keys. Within the stream's
// duplicate window JetStream would drop them; the partition here outlasts
// the window, and the sink's reset socket (SO_LINGER 0) is what discards
// them.
func TestAbandonedConnectionSendsNothingLate(t *testing.T) {
	f := newFixture(t, 0)
	st, err := f.js.Stream(context.Background(), f.stream)
	if err != nil {
		t.Fatal(err)
	}
	sc := st.CachedInfo().Config
	sc.Duplicates = 200 * time.Millisecond
	if _, err := f.js.UpdateStream(context.Background(), sc); err != nil {
		t.Fatal(err)
	}
	p := testenv.NewProxy(t, testenv.HostOf(t, f.url))
	cfg := testConfig(testenv.WithHost(t, f.url, p.Addr()), f.stream)
	cfg.AckTimeout = time.Second
	s := newSink(t, cfg)
	if err := s.Write(context.Background(), records(f.prefix, 3, 3)); err != nil {
		t.Fatal(err)
	}
	all := records(f.prefix, 300, 10)
	for i := range all {
		all[i].MessageID = fmt.Sprintf("late-%d", i)
	}
	a, b := all[:200], all[200:]
	p.Partition() // the open connection only: the retry's new one passes
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := s.Write(ctx, a); err != nil {
		t.Fatal(err)
	}
	if err := s.Write(ctx, b); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second) // past the duplicate window
	p.Heal()
	time.Sleep(3 * time.Second) // what the old connection held arrives by now, if anything
	var got []testenv.Arrival
	for _, m := range f.read(t) {
		id, _, _ := strings.Cut(m.Header.Get(nats.MsgIdHdr), "~")
		got = append(got, testenv.Arrival{ID: id, Key: m.Header.Get(HeaderKey)})
	}
	rank := map[string]int{}
	for i, r := range all {
		rank[r.MessageID] = i
	}
	o := testenv.OrderOf(got, rank)
	t.Logf("%d messages stored: %+v", len(got), o)
	if o.Late > 0 || o.LastOutOfOrder > 0 {
		t.Fatalf("%d messages stored after a later row of their key (%d keys' last copies out of order)", o.Late, o.LastOutOfOrder)
	}
}
