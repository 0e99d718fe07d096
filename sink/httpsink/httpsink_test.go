package httpsink

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
	"github.com/outbox-cdc/outbox-cdc/sink"
)

// arrival is one request the receiver took (read the whole body of).
type arrival struct {
	id, key, path string
	body          []byte
	header        http.Header
	at            time.Time
}

// receiver is an httptest server that records what arrived; fault, when
// set, decides per request (n counts from 1) whether to answer
// otherwise. It tracks how many requests are open at once, in total and
// per aggregate.
type receiver struct {
	srv *httptest.Server

	mu      sync.Mutex
	got     []arrival
	open    int
	maxOpen int
	perKey  map[string]int
	overlap bool // two requests of one aggregate were open at once
	n       int

	// fault runs after the body is read and recorded (unless it returns
	// record false first... see handle); it writes the answer and reports
	// whether it did.
	fault func(w http.ResponseWriter, r *http.Request, n int, body []byte) (answered, keep bool)
}

func newReceiver(t *testing.T) *receiver {
	rc := &receiver{perKey: map[string]int{}}
	rc.srv = httptest.NewServer(http.HandlerFunc(rc.handle))
	t.Cleanup(rc.srv.Close)
	return rc
}

func (rc *receiver) handle(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodHead {
		return
	}
	key := r.Header.Get(HeaderAggregateID)
	rc.mu.Lock()
	rc.n++
	n := rc.n
	rc.open++
	rc.maxOpen = max(rc.maxOpen, rc.open)
	rc.perKey[key]++
	if rc.perKey[key] > 1 && r.Header.Get(HeaderBatchSize) == "" {
		rc.overlap = true
	}
	fault := rc.fault
	rc.mu.Unlock()
	defer func() {
		rc.mu.Lock()
		rc.open--
		rc.perKey[key]--
		rc.mu.Unlock()
	}()
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	keep := true
	if fault != nil {
		var answered bool
		answered, keep = fault(w, r, n, body)
		if answered && !keep {
			return
		}
	}
	rc.mu.Lock()
	rc.got = append(rc.got, arrival{id: r.Header.Get(HeaderWebhookID), key: key, path: r.URL.Path, body: body, header: r.Header.Clone(), at: time.Now()})
	rc.mu.Unlock()
}

func (rc *receiver) arrivals() []arrival {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]arrival(nil), rc.got...)
}

func (rc *receiver) setFault(f func(w http.ResponseWriter, r *http.Request, n int, body []byte) (bool, bool)) {
	rc.mu.Lock()
	rc.fault = f
	rc.mu.Unlock()
}

// hijack takes the connection from the server and closes it with a reset
// (no answer at all).
func hijack(w http.ResponseWriter) {
	c, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(err)
	}
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetLinger(0)
	}
	c.Close()
}

const testSecret = "0123456789abcdef0123456789abcdef"

func testConfig(t *testing.T, template string) Config {
	c := DefaultConfig()
	c.Template = template
	c.AckTimeout = 3 * time.Second
	c.DialTimeout = 3 * time.Second
	c.RetryBackoffMin = 20 * time.Millisecond
	c.RetryBackoffMax = 200 * time.Millisecond
	c.ReadyInterval = 200 * time.Millisecond
	c.MaxInFlight = 4
	p := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(p, []byte("whsec_"+base64.StdEncoding.EncodeToString([]byte(testSecret))+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c.SigningSecretFile = p
	return c
}

func newSink(t *testing.T, cfg Config) *Sink {
	t.Helper()
	s, err := New(cfg, zerolog.Nop(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func records(base string, n, keys int) []outboxcdc.Record {
	rs := make([]outboxcdc.Record, n)
	for i := range rs {
		rs[i] = outboxcdc.Record{
			Topic: base + "/hooks/ORDER", Key: []byte(fmt.Sprintf("agg-%d", i%keys)), Value: []byte(fmt.Sprintf(`{"seq": %d}`, i)),
			Headers:   []outboxcdc.Header{{Key: "id", Value: []byte(fmt.Sprintf("m-%d", i))}, {Key: "aggregate_type", Value: []byte("ORDER")}},
			Timestamp: time.UnixMilli(1700000000123), MessageID: fmt.Sprintf("m-%d", i), EventType: "ORDER_CREATED",
		}
	}
	return rs
}

func write(t *testing.T, s *Sink, rs []outboxcdc.Record, d time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return s.Write(ctx, rs)
}

// checkArrivals asserts every record of rs arrived, first copies in order
// per aggregate, and returns the number of duplicates.
func checkArrivals(t *testing.T, got []arrival, rs []outboxcdc.Record) int {
	t.Helper()
	idx := map[string]int{}
	for i, r := range rs {
		idx[r.MessageID] = i
	}
	seen := map[string]int{}
	last := map[string]int{}
	dups := 0
	for _, a := range got {
		i, ok := idx[a.id]
		if !ok {
			t.Fatalf("unexpected arrival %q", a.id)
		}
		if seen[a.id]++; seen[a.id] > 1 {
			dups++
			continue
		}
		if p, ok := last[a.key]; ok && i < p {
			t.Fatalf("aggregate %s out of order: %s after record %d", a.key, a.id, p)
		}
		last[a.key] = i
	}
	for _, r := range rs {
		if seen[r.MessageID] == 0 {
			t.Fatalf("%s never arrived (%d arrivals)", r.MessageID, len(got))
		}
	}
	return dups
}

// verify checks a request's Standard Webhooks signature.
func verify(t *testing.T, a arrival) {
	t.Helper()
	m := hmac.New(sha256.New, []byte(testSecret))
	m.Write([]byte(a.id + "." + a.header.Get(HeaderWebhookTimestamp) + "."))
	m.Write(a.body)
	want := "v1," + base64.StdEncoding.EncodeToString(m.Sum(nil))
	if a.header.Get(HeaderWebhookSignature) != want {
		t.Fatalf("signature %q, want %q", a.header.Get(HeaderWebhookSignature), want)
	}
}

// TestHTTPOrderPerAggregateUnderParallelism: an aggregate's records are
// posted one at a time and arrive in order, while different aggregates
// are posted in parallel (never more than max_in_flight at once); every
// request is signed and carries the envelope and the ids as headers.
func TestHTTPOrderPerAggregateUnderParallelism(t *testing.T) {
	rc := newReceiver(t)
	rc.setFault(func(w http.ResponseWriter, r *http.Request, n int, _ []byte) (bool, bool) {
		d := time.Duration(n%3) * time.Millisecond // slow responses, uneven
		if n <= 20 {
			d = 20 * time.Millisecond // long enough for the lanes to overlap on a loaded machine
		}
		time.Sleep(d)
		return false, true
	})
	s := newSink(t, testConfig(t, rc.srv.URL+"/hooks/{aggregate_type}"))
	rs := records(rc.srv.URL, 400, 10)
	if err := write(t, s, rs, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	got := rc.arrivals()
	if dups := checkArrivals(t, got, rs); dups != 0 {
		t.Fatalf("%d duplicates", dups)
	}
	if rc.overlap {
		t.Fatal("two requests of one aggregate were in flight at once")
	}
	if rc.maxOpen > 4 || rc.maxOpen < 2 {
		t.Fatalf("at most %d requests open at once, want 2..4 (max_in_flight 4)", rc.maxOpen)
	}
	a := got[0]
	verify(t, a)
	var env map[string]json.RawMessage
	if err := json.Unmarshal(a.body, &env); err != nil {
		t.Fatal(err)
	}
	i := 0
	fmt.Sscanf(a.id, "m-%d", &i)
	if string(env["payload"]) != fmt.Sprintf(`{"seq": %d}`, i) || string(env["event_type"]) != `"ORDER_CREATED"` ||
		string(env["aggregate_id"]) != `"`+a.key+`"` || string(env["message_id"]) != `"`+a.id+`"` {
		t.Fatalf("envelope %s", a.body)
	}
	if a.header.Get("Outbox-Aggregate-Type") != "ORDER" || a.header.Get(HeaderEventType) != "ORDER_CREATED" ||
		a.header.Get(HeaderMessageID) != a.id || a.header.Get("Content-Type") != "application/json" || a.path != "/hooks/ORDER" {
		t.Fatalf("headers %v path %s", a.header, a.path)
	}
	t.Logf("%d requests, at most %d open at once", len(got), rc.maxOpen)
}

// TestHTTP500StormIsRetried: a receiver answering 500 to its first 30
// requests gets every record in the end, in order per aggregate, none
// twice (a 500 means it did not take the record).
func TestHTTP500StormIsRetried(t *testing.T) {
	rc := newReceiver(t)
	rc.setFault(func(w http.ResponseWriter, r *http.Request, n int, _ []byte) (bool, bool) {
		if n <= 30 {
			w.WriteHeader(http.StatusInternalServerError)
			return true, false
		}
		return false, true
	})
	s := newSink(t, testConfig(t, rc.srv.URL+"/hooks/{aggregate_type}"))
	rs := records(rc.srv.URL, 100, 7)
	if err := write(t, s, rs, 60*time.Second); err != nil {
		t.Fatal(err)
	}
	if dups := checkArrivals(t, rc.arrivals(), rs); dups != 0 {
		t.Fatalf("%d duplicates", dups)
	}
}

// TestHTTP429RetryAfterIsHonoured: a 429 with Retry-After: 1 delays the
// next attempt by at least a second, although the backoff is far shorter.
func TestHTTP429RetryAfterIsHonoured(t *testing.T) {
	rc := newReceiver(t)
	var first atomic.Int64
	rc.setFault(func(w http.ResponseWriter, r *http.Request, n int, _ []byte) (bool, bool) {
		if n == 1 {
			first.Store(time.Now().UnixNano())
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
			return true, false
		}
		return false, true
	})
	s := newSink(t, testConfig(t, rc.srv.URL+"/hooks/{aggregate_type}"))
	rs := records(rc.srv.URL, 1, 1)
	if err := write(t, s, rs, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	got := rc.arrivals()
	checkArrivals(t, got, rs)
	if wait := got[0].at.Sub(time.Unix(0, first.Load())); wait < 950*time.Millisecond {
		t.Fatalf("retried %s after the 429, want at least the 1s of Retry-After", wait)
	}
}

func TestRetryAfterParsing(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, c := range []struct {
		v    string
		want time.Duration
		ok   bool
	}{
		{"3", 3 * time.Second, true},
		{" 0 ", 0, true},
		{"-1", 0, false},
		{"", 0, false},
		{"soon", 0, false},
		{now.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second, true},
		{now.Add(-time.Minute).Format(http.TimeFormat), 0, true},
	} {
		got, ok := RetryAfter(c.v, now)
		if got != c.want || ok != c.ok {
			t.Errorf("RetryAfter(%q) = %s, %v; want %s, %v", c.v, got, ok, c.want, c.ok)
		}
	}
}

// TestHTTPConnectionResetBeforeBody: connections reset before the
// receiver read a request are retried; nothing is lost or doubled.
func TestHTTPConnectionResetBeforeBody(t *testing.T) {
	rc := newReceiver(t)
	var resets atomic.Int32
	rc.srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && resets.Add(1) <= 5 {
			hijack(w)
			return
		}
		rc.handle(w, r)
	})
	s := newSink(t, testConfig(t, rc.srv.URL+"/hooks/{aggregate_type}"))
	rs := records(rc.srv.URL, 50, 5)
	if err := write(t, s, rs, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	if dups := checkArrivals(t, rc.arrivals(), rs); dups != 0 {
		t.Fatalf("%d duplicates", dups)
	}
}

// TestHTTPDropAfterBodyIsADuplicate: a receiver that takes a record and
// then drops the connection without answering gets it again: exactly one
// duplicate per dropped answer, first copies still in order.
func TestHTTPDropAfterBodyIsADuplicate(t *testing.T) {
	rc := newReceiver(t)
	rc.setFault(func(w http.ResponseWriter, r *http.Request, n int, body []byte) (bool, bool) {
		if n%10 == 3 && n < 40 {
			rc.mu.Lock()
			rc.got = append(rc.got, arrival{id: r.Header.Get(HeaderWebhookID), key: r.Header.Get(HeaderAggregateID), body: body, header: r.Header.Clone(), at: time.Now()})
			rc.mu.Unlock()
			hijack(w)
			return true, false
		}
		return false, true
	})
	s := newSink(t, testConfig(t, rc.srv.URL+"/hooks/{aggregate_type}"))
	rs := records(rc.srv.URL, 60, 6)
	if err := write(t, s, rs, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	if dups := checkArrivals(t, rc.arrivals(), rs); dups != 4 {
		t.Fatalf("%d duplicates, want 4 (one per dropped answer)", dups)
	}
}

// TestHTTPSlowAnswerPastTimeoutIsSentAgain: an answer later than
// sink.ack_timeout counts as lost: the record is sent again (a
// duplicate the receiver took twice), the write succeeds.
func TestHTTPSlowAnswerPastTimeoutIsSentAgain(t *testing.T) {
	rc := newReceiver(t)
	rc.setFault(func(w http.ResponseWriter, r *http.Request, n int, _ []byte) (bool, bool) {
		if n == 1 {
			time.Sleep(1500 * time.Millisecond)
		}
		return false, true
	})
	cfg := testConfig(t, rc.srv.URL+"/hooks/{aggregate_type}")
	cfg.AckTimeout = 500 * time.Millisecond
	s := newSink(t, cfg)
	rs := records(rc.srv.URL, 5, 1)
	if err := write(t, s, rs, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond) // a deliberate wait for the slow handler to record its copy
	// One copy; more only if a retry was slower than the timeout too.
	if dups := checkArrivals(t, rc.arrivals(), rs); dups < 1 {
		t.Fatalf("%d duplicates, want the slow one's copy", dups)
	}
}

// TestHTTPPermanentRefusals: a 422 for one record is a permanent error
// naming it (on_error applies); a 401 names no record (the connector
// stops, nothing is dead-lettered for it); 3xx is not followed.
func TestHTTPPermanentRefusals(t *testing.T) {
	for _, c := range []struct {
		code  int
		index int
	}{{422, 3}, {404, 3}, {401, -1}, {403, -1}, {302, 3}} {
		t.Run(fmt.Sprint(c.code), func(t *testing.T) {
			rc := newReceiver(t)
			rc.setFault(func(w http.ResponseWriter, r *http.Request, n int, _ []byte) (bool, bool) {
				if r.Header.Get(HeaderWebhookID) == "m-3" {
					w.Header().Set("Location", "/elsewhere")
					w.WriteHeader(c.code)
					return true, false
				}
				return false, true
			})
			cfg := testConfig(t, rc.srv.URL+"/hooks/{aggregate_type}")
			s := newSink(t, cfg)
			rs := records(rc.srv.URL, 6, 2)
			err := write(t, s, rs, 30*time.Second)
			var be *sink.Error
			if !errors.As(err, &be) || !be.Permanent || be.Index != c.index {
				t.Fatalf("error %v, want a permanent error for record %d", err, c.index)
			}
		})
	}
}

// TestHTTPStalledReceiverBoundedInFlight: while the receiver accepts
// requests and never answers, at most max_in_flight requests are open,
// the write fails with its context, and once the receiver answers again
// a new write delivers everything.
func TestHTTPStalledReceiverBoundedInFlight(t *testing.T) {
	rc := newReceiver(t)
	release := make(chan struct{})
	var stalled atomic.Bool
	stalled.Store(true)
	rc.setFault(func(w http.ResponseWriter, r *http.Request, n int, _ []byte) (bool, bool) {
		if stalled.Load() {
			select {
			case <-release:
			case <-r.Context().Done():
			}
			return true, false
		}
		return false, true
	})
	cfg := testConfig(t, rc.srv.URL+"/hooks/{aggregate_type}")
	cfg.AckTimeout = 300 * time.Millisecond
	s := newSink(t, cfg)
	rs := records(rc.srv.URL, 2000, 50)
	if err := write(t, s, rs, 2*time.Second); err == nil {
		t.Fatal("write succeeded against a stalled receiver")
	}
	rc.mu.Lock()
	maxOpen, n := rc.maxOpen, rc.n
	rc.mu.Unlock()
	if maxOpen > cfg.MaxInFlight {
		t.Fatalf("%d requests open at once, want at most max_in_flight %d", maxOpen, cfg.MaxInFlight)
	}
	stalled.Store(false)
	close(release)
	if err := write(t, s, rs, 60*time.Second); err != nil {
		t.Fatal(err)
	}
	checkArrivals(t, rc.arrivals(), rs)
	t.Logf("stalled: %d requests made, at most %d open at once", n, maxOpen)
}

// TestHTTPBatchMode: batch mode posts JSON arrays of envelopes, at most
// batch_max_messages each, every aggregate in order.
func TestHTTPBatchMode(t *testing.T) {
	rc := newReceiver(t)
	rc.setFault(func(w http.ResponseWriter, r *http.Request, n int, _ []byte) (bool, bool) {
		if n%4 == 2 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return true, false
		}
		return false, true
	})
	cfg := testConfig(t, rc.srv.URL+"/hooks/{aggregate_type}")
	cfg.Mode, cfg.BatchMaxMessages = ModeBatch, 10
	s := newSink(t, cfg)
	rs := records(rc.srv.URL, 200, 9)
	if err := write(t, s, rs, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	var flat []arrival
	for _, a := range rc.arrivals() {
		verify(t, a)
		var envs []struct {
			ID  string `json:"message_id"`
			Key string `json:"aggregate_id"`
		}
		if err := json.Unmarshal(a.body, &envs); err != nil {
			t.Fatalf("batch body %s: %v", a.body, err)
		}
		if len(envs) == 0 || len(envs) > 10 || a.header.Get(HeaderBatchSize) != fmt.Sprint(len(envs)) {
			t.Fatalf("batch of %d (header %s)", len(envs), a.header.Get(HeaderBatchSize))
		}
		for _, e := range envs {
			flat = append(flat, arrival{id: e.ID, key: e.Key})
		}
	}
	if dups := checkArrivals(t, flat, rs); dups != 0 {
		t.Fatalf("%d duplicates", dups)
	}
}

// TestHTTPRawBody: body raw posts the payload as stored, with the
// configured content type and the ids in headers; static headers go too.
func TestHTTPRawBody(t *testing.T) {
	rc := newReceiver(t)
	cfg := testConfig(t, rc.srv.URL+"/hooks/{aggregate_type}")
	cfg.Body, cfg.ContentType = BodyRaw, "application/vnd.test+json"
	cfg.Headers = map[string]string{"Authorization": "Bearer t0ken"}
	s := newSink(t, cfg)
	rs := records(rc.srv.URL, 3, 1)
	if err := write(t, s, rs, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	got := rc.arrivals()
	checkArrivals(t, got, rs)
	for _, a := range got {
		verify(t, a)
		i := 0
		fmt.Sscanf(a.id, "m-%d", &i)
		if string(a.body) != string(rs[i].Value) || a.header.Get("Content-Type") != "application/vnd.test+json" ||
			a.header.Get("Authorization") != "Bearer t0ken" || a.header.Get("Outbox-Id") != a.id {
			t.Fatalf("raw request %q %v", a.body, a.header)
		}
	}
}

// TestHTTPReadyFollowsReceiver: /readyz follows the probe: ready while
// the receiver answers, not ready once it is gone.
func TestHTTPReadyFollowsReceiver(t *testing.T) {
	rc := newReceiver(t)
	s := newSink(t, testConfig(t, rc.srv.URL+"/hooks/{aggregate_type}"))
	waitFor(t, "ready", func() bool { return s.Ready() == nil })
	rc.srv.Close()
	waitFor(t, "not ready", func() bool { return s.Ready() != nil })
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("not %s within 20s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestConfigValidate(t *testing.T) {
	c := DefaultConfig()
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "route.topic") {
		t.Fatalf("no template: %v", err)
	}
	c.Template = "ftp://x/{aggregate_type}"
	if err := c.Validate(); err == nil {
		t.Fatal("ftp accepted")
	}
	c.Template = "https://{aggregate_type}.example.com/in"
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if c.probeURL() != "" {
		t.Fatalf("probe URL %q for a templated host", c.probeURL())
	}
	c.Mode, c.Body = ModeBatch, BodyRaw
	if err := c.Validate(); err == nil {
		t.Fatal("batch with raw accepted")
	}
	c = DefaultConfig()
	c.Template = "http://h/x"
	c.SigningSecretFile = filepath.Join(t.TempDir(), "missing")
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "signing_secret_file") {
		t.Fatalf("missing secret file: %v", err)
	}
}
