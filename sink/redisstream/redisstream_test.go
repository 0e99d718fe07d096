package redisstream

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
	"github.com/outbox-cdc/outbox-cdc/test/testenv"
)

// fixture is a key prefix on the local Redis; its keys are deleted at
// test end.
type fixture struct {
	url, prefix string
	c           *redis.Client
}

func newFixture(t testing.TB) *fixture {
	t.Helper()
	u := testenv.RedisURL(t)
	o, err := redis.ParseURL(u)
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{url: u, c: redis.NewClient(o), prefix: fmt.Sprintf("test:%d:", rand.Int64N(1<<40))}
	t.Cleanup(func() {
		ctx := context.Background()
		keys, _ := f.c.Keys(ctx, f.prefix+"*").Result()
		if len(keys) > 0 {
			f.c.Del(ctx, keys...)
		}
		f.c.Close()
	})
	return f
}

func (f *fixture) read(t *testing.T, key string) []redis.XMessage {
	t.Helper()
	ms, err := f.c.XRange(context.Background(), key, "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	return ms
}

func testConfig(url string) Config {
	c := DefaultConfig()
	c.URL = url
	c.AckTimeout = 3 * time.Second
	c.DialTimeout = 3 * time.Second
	c.RetryBackoffMin = 50 * time.Millisecond
	c.RetryBackoffMax = 500 * time.Millisecond
	c.ReadyInterval = 200 * time.Millisecond
	return c
}

func records(prefix string, n, keys int) []outboxcdc.Record {
	rs := make([]outboxcdc.Record, n)
	for i := range rs {
		k := fmt.Sprintf("agg-%d", i%keys)
		rs[i] = outboxcdc.Record{
			Topic: prefix + "ORDER", Key: []byte(k), Value: []byte(fmt.Sprintf(`{"seq":%d}`, i)),
			Headers:   []outboxcdc.Header{{Key: "id", Value: []byte(fmt.Sprintf("m-%d", i))}, {Key: "nullable", Value: nil}},
			Timestamp: time.UnixMilli(1700000000123), MessageID: fmt.Sprintf("m-%d", i), EventType: "ORDER_CREATED",
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

// TestXAddFields: every record is appended with the documented fields;
// max_len trims. (Order and acknowledgement: TestContract.)
func TestXAddFields(t *testing.T) {
	f := newFixture(t)
	s := newSink(t, testConfig(f.url))
	recs := records(f.prefix, 300, 7)
	recs[2].Value = nil             // a tombstone
	recs[3].Timestamp = time.Time{} // route.timestamp produce
	began := time.Now().UnixMilli()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.Write(ctx, recs); err != nil {
		t.Fatal(err)
	}
	got := f.read(t, f.prefix+"ORDER")
	if len(got) != len(recs) {
		t.Fatalf("%d entries, want %d", len(got), len(recs))
	}
	if ms, err := strconv.ParseInt(fmt.Sprint(got[3].Values[FieldTimestamp]), 10, 64); err != nil || ms < began || ms > time.Now().UnixMilli() {
		t.Fatalf("a record without a timestamp has field %s %v, want the time of production (after %d)", FieldTimestamp, got[3].Values[FieldTimestamp], began)
	}
	v := got[1].Values
	if v[FieldKey] != "agg-1" || v[FieldValue] != `{"seq":1}` || v[FieldTimestamp] != "1700000000123" || v["header.id"] != "m-1" {
		t.Fatalf("entry %v", v)
	}
	if _, ok := v["header.nullable"]; ok {
		t.Fatalf("NULL header sent: %v", v)
	}
	if _, ok := got[2].Values[FieldValue]; ok {
		t.Fatalf("tombstone has a value: %v", got[2].Values)
	}

	cfg := testConfig(f.url)
	cfg.MaxLen = 100
	cfg.ExactTrim = true
	s2 := newSink(t, cfg)
	if err := s2.Write(ctx, recs[:10]); err != nil {
		t.Fatal(err)
	}
	if n := len(f.read(t, f.prefix+"ORDER")); n != 100 {
		t.Fatalf("after MAXLEN = 100: %d entries", n)
	}
}

// TestWrongTypeIsPermanent: a key of another type refuses XADD; the error
// names the record.
func TestWrongTypeIsPermanent(t *testing.T) {
	f := newFixture(t)
	if err := f.c.Set(context.Background(), f.prefix+"PAYMENT", "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	s := newSink(t, testConfig(f.url))
	recs := records(f.prefix, 10, 2)
	recs[4].Topic = f.prefix + "PAYMENT"
	err := s.Write(context.Background(), recs)
	var re outboxcdc.RecordError
	if !errors.As(err, &re) {
		t.Fatalf("Write = %v", err)
	}
	if i, perm := re.FailedRecord(); i != 4 || !perm || !strings.Contains(err.Error(), "WRONGTYPE") {
		t.Fatalf("FailedRecord = %d, %v (%v)", i, perm, err)
	}
}

// TestBadPassword: refused credentials are permanent.
func TestBadPassword(t *testing.T) {
	f := newFixture(t)
	cfg := testConfig(f.url)
	cfg.Username, cfg.Password = "nobody", "wrong-password"
	s := newSink(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := s.Write(ctx, records(f.prefix, 1, 1))
	var re outboxcdc.RecordError
	if !errors.As(err, &re) || strings.Contains(err.Error(), "wrong-password") {
		t.Fatalf("Write = %v", err)
	}
	if _, perm := re.FailedRecord(); !perm {
		t.Fatalf("not permanent: %v", err)
	}
}

// TestCheck: a fixed stream key holding another type fails check; a free
// one or a template passes.
func TestCheck(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	if err := f.c.Set(ctx, f.prefix+"taken", "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	res := Check(ctx, testConfig(f.url), f.prefix+"{aggregate_type}", f.prefix+"free", f.prefix+"taken")
	if len(res) != 4 || !res[0].OK || !res[1].OK || !res[2].OK || res[3].OK || !strings.Contains(res[3].Detail, "string") {
		t.Fatalf("check: %+v", res)
	}
}

// TestAbandonedConnectionSendsNothingLate: XADDs on a connection the
// client gave up (its path partitioned: the kernel holds them to send
// again) must not reach the server once the path heals, after their
// retried copies and after later rows of their keys. The sink's sockets
// are reset when closed (SO_LINGER 0), which discards what they hold.
func TestAbandonedConnectionSendsNothingLate(t *testing.T) {
	f := newFixture(t)
	p := testenv.NewProxy(t, testenv.HostOf(t, f.url))
	cfg := testConfig(testenv.WithHost(t, f.url, p.Addr()))
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
	p.Heal()
	time.Sleep(3 * time.Second) // what the old connection held arrives by now, if anything
	var got []testenv.Arrival
	for _, m := range f.read(t, f.prefix+"ORDER") {
		got = append(got, testenv.Arrival{ID: m.Values[FieldMessageID].(string), Key: m.Values[FieldKey].(string)})
	}
	rank := map[string]int{}
	for i, r := range all {
		rank[r.MessageID] = i
	}
	o := testenv.OrderOf(got, rank)
	t.Logf("%d entries: %+v", len(got), o)
	if o.Late > 0 || o.LastOutOfOrder > 0 {
		t.Fatalf("%d entries arrived after a later row of their key (%d keys' last copies out of order): the abandoned connection's XADDs reached the server", o.Late, o.LastOutOfOrder)
	}
}
