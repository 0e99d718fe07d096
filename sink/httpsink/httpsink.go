// Package httpsink is the HTTP webhook sink: every record is POSTed to
// the URL route.topic renders for it (or, in batch mode, several records
// of one URL in one POST), and counts as delivered only when the receiver
// answered 2xx. The delivery loop (retries with backoff, per-key order
// across retries, the permanent-error path to pipeline.on_error) is
// package broker's; this package is one sink.Conn.
//
// # Order and parallelism
//
// A Send splits its records into lanes: in message mode one lane per
// record key (the aggregate id), in batch mode max_in_flight lanes chosen
// by a hash of the key. A lane's requests go out one at a time, in record
// order; up to max_in_flight lanes send at once. When a request of a lane
// fails, the lane sends no later record of the failed records' keys in
// this attempt: they are marked failed too, so sink.Writer sends them
// again, after the failed one, in order. An aggregate's records therefore
// reach the receiver in commit order, and a record is sent again only
// when its own request failed: a copy arrives twice only when the
// receiver took it but its answer did not come back (a connection lost
// after the body was read, an answer later than sink.ack_timeout).
//
// # Answers
//
// 2xx acknowledges. 408, 429 and 5xx, a connection refused, reset or
// lost, and no answer within sink.ack_timeout are transient: retried,
// after at least the receiver's Retry-After (seconds or an HTTP date,
// capped by sink.retry_after_max). 401, 403 and 407 concern the endpoint,
// not the record: they stop the connector (no row is dead-lettered for
// them). 3xx (redirects are not followed) and every other 4xx are
// permanent for the record: pipeline.on_error applies.
//
// # Signature
//
// With sink.signing_secret_file, each request carries the Standard
// Webhooks headers: webhook-id (the message id; in batch mode an id
// derived from the batch's message ids), webhook-timestamp (Unix seconds
// of this attempt) and webhook-signature, "v1," followed by the base64 of
// HMAC-SHA256(secret, id + "." + timestamp + "." + body).
package httpsink

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/tls"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
	"github.com/outbox-cdc/outbox-cdc/deadpeer"
	"github.com/outbox-cdc/outbox-cdc/sink"
	"github.com/outbox-cdc/outbox-cdc/tlsconf"
)

// HTTP header names the sink sends.
const (
	HeaderWebhookID        = "webhook-id"
	HeaderWebhookTimestamp = "webhook-timestamp"
	HeaderWebhookSignature = "webhook-signature"
	HeaderMessageID        = "Outbox-Message-Id"
	HeaderAggregateID      = "Outbox-Aggregate-Id"
	HeaderEventType        = "Outbox-Event-Type"
	HeaderBatchSize        = "Outbox-Batch-Size"
	// HeaderPrefix precedes each route header's name, with _ written -:
	// the seed preset's aggregate_type arrives as Outbox-Aggregate-Type.
	HeaderPrefix = "Outbox-"
)

// Sink is the HTTP webhook sink; it implements outboxcdc.Sink.
type Sink struct {
	*sink.Writer
	cfg    Config
	secret []byte
	tls    *tls.Config
	log    zerolog.Logger
}

// New validates cfg and returns the sink.
func New(cfg Config, log zerolog.Logger, reg prometheus.Registerer) (*Sink, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	secret, err := cfg.secret()
	if err != nil {
		return nil, outboxcdc.KeyErrorf("signing_secret_file", "", "%v", err)
	}
	tc, err := cfg.tlsConfig()
	if err != nil {
		return nil, err
	}
	s := &Sink{cfg: cfg, secret: secret, tls: tc, log: log.With().Str("component", "sink").Str("sink", "http").Logger()}
	cfg.TLS.Warn(s.log)
	s.log.Info().Str("url_template", redactURL(cfg.Template)).Str("mode", cfg.Mode).Str("body", cfg.Body).
		Bool("signed", secret != nil).Int("max_in_flight", cfg.MaxInFlight).
		Msg("http sink starting (2xx acknowledges; per-aggregate order, aggregates in parallel)")
	w, err := sink.New("http", cfg.Config, s.dial, s.log, reg)
	if err != nil {
		return nil, err
	}
	s.Writer = w
	return s, nil
}

// With, Open and Check make Config a sink.Kind: the command registers it
// as a sink.type (cmd/outbox-cdc/sinks.go).
var _ sink.Kind = Config{}

// With completes the configuration with what the command derives from
// the rest of the connector's.
func (c Config) With(env sink.Env) sink.Kind {
	c.Template, c.Name = env.Template, env.Connector
	return c
}

// Open returns the sink (New).
func (c Config) Open(log zerolog.Logger, reg prometheus.Registerer) (outboxcdc.Sink, error) {
	return sink.Opened(New(c, log, reg))
}

// Check is the package's Check, for outbox-cdc check.
func (c Config) Check(ctx context.Context, _ sink.Env) []outboxcdc.CheckResult {
	return Check(ctx, c)
}

// tlsConfig builds the client TLS settings (nil: TLS only for https://
// URLs, with the system's roots).
func (c Config) tlsConfig() (*tls.Config, error) {
	if !c.TLS.Enabled {
		return nil, nil
	}
	return c.TLS.Build(true, "")
}

// client returns an HTTP client with its own connection pool; redirects
// are not followed (a POST would turn into a GET).
func (c Config) client(tc *tls.Config) *http.Client {
	d := deadpeer.HTTP.Dialer(c.DialTimeout)
	t := &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           d.DialContext,
		TLSClientConfig:       tc.Clone(), // the transport adds to it (NextProtos): one copy each
		TLSHandshakeTimeout:   c.DialTimeout,
		MaxIdleConnsPerHost:   c.MaxInFlight,
		MaxConnsPerHost:       c.MaxInFlight,
		IdleConnTimeout:       90 * time.Second,
		ResponseHeaderTimeout: c.AckTimeout,
		ForceAttemptHTTP2:     true,
	}
	return &http.Client{
		Transport:     t,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

func (s *Sink) dial(ctx context.Context) (sink.Conn, error) {
	return &conn{s: s, c: s.cfg.client(s.tls)}, nil
}

// conn is one HTTP client (connection pool). It fails on the first
// network error, so the next attempt starts on fresh connections.
type conn struct {
	s     *Sink
	c     *http.Client
	fault sink.Fault
}

// Err implements sink.Conn.
func (c *conn) Err() error { return c.fault.Err() }

// Close implements sink.Conn.
func (c *conn) Close() error {
	c.fault.Fail(outboxcdc.Transient(errors.New("http client closed by the sink")))
	c.c.CloseIdleConnections()
	return nil
}

// Probe implements sink.Conn: a HEAD request to the probe URL; any
// answer below 500 means the receiver is there.
func (c *conn) Probe(ctx context.Context) error {
	if err := c.Err(); err != nil {
		return err
	}
	u := c.s.cfg.probeURL()
	if u == "" {
		return nil
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodHead, u, nil)
	if err != nil {
		return outboxcdc.Permanent(err, "fix sink.probe_url")
	}
	c.s.setStatic(req)
	resp, err := c.c.Do(req)
	if err != nil {
		return classifyNet(fmt.Errorf("http: HEAD %s: %w", redactURL(u), err))
	}
	resp.Body.Close()
	if resp.StatusCode >= 500 {
		return outboxcdc.Transient(fmt.Errorf("http: HEAD %s answered %s", redactURL(u), resp.Status))
	}
	return nil
}

// lane is records sent one request at a time, in order.
type lane struct{ msgs []*sink.Msg }

// Send implements sink.Conn.
func (c *conn) Send(ctx context.Context, msgs []*sink.Msg) error {
	cfg := c.s.cfg
	var lanes []*lane
	index := map[string]*lane{}
	for _, m := range msgs {
		k := string(m.Rec.Key)
		if cfg.Mode == ModeBatch {
			h := fnv.New32a()
			h.Write(m.Rec.Key)
			k = strconv.Itoa(int(h.Sum32() % uint32(cfg.MaxInFlight)))
		}
		l := index[k]
		if l == nil {
			l = &lane{}
			index[k] = l
			lanes = append(lanes, l)
		}
		l.msgs = append(l.msgs, m)
	}
	budget := newBudget(cfg.MaxInFlightBytes)
	work := make(chan *lane)
	var wg sync.WaitGroup
	for i := 0; i < min(cfg.MaxInFlight, len(lanes)); i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for l := range work {
				c.sendLane(ctx, l, budget)
			}
		}()
	}
	for _, l := range lanes {
		work <- l
	}
	close(work)
	wg.Wait()
	return ctx.Err()
}

// errBehind is the outcome of a record not sent because an earlier record
// of its key failed in this attempt.
var errBehind = outboxcdc.Transient(errors.New("not sent: an earlier record of its aggregate failed"))

func (c *conn) sendLane(ctx context.Context, l *lane, budget *budget) {
	cfg := c.s.cfg
	failed := map[string]bool{}
	max := 1
	if cfg.Mode == ModeBatch {
		max = cfg.BatchMaxMessages
	}
	pending := l.msgs
	for len(pending) > 0 {
		if err := c.fault.Err(); err != nil || ctx.Err() != nil {
			if err == nil {
				err = ctx.Err()
			}
			for _, m := range pending {
				m.Err = err
			}
			return
		}
		// The next request: consecutive records of one URL, leaving out
		// those behind a failure of their key.
		var req []*sink.Msg
		var size int64
		rest := pending[:0:0]
		for i, m := range pending {
			if failed[string(m.Rec.Key)] {
				m.Err = errBehind
				continue
			}
			n := int64(m.Rec.Size())
			if len(req) > 0 && (len(req) == max || m.Rec.Topic != req[0].Rec.Topic || size+n > cfg.MaxInFlightBytes) {
				rest = pending[i:]
				break
			}
			req = append(req, m)
			size += n
		}
		pending = rest
		if len(req) == 0 {
			continue
		}
		budget.acquire(size)
		err := c.post(ctx, req)
		budget.release(size)
		for _, m := range req {
			m.Err = err
			if err != nil {
				failed[string(m.Rec.Key)] = true
			}
		}
	}
}

// post sends one request and returns nil for a 2xx answer.
func (c *conn) post(ctx context.Context, msgs []*sink.Msg) error {
	cfg := c.s.cfg
	target := msgs[0].Rec.Topic
	var body []byte
	id := msgs[0].Rec.MessageID
	if cfg.Mode == ModeBatch {
		var b bytes.Buffer
		b.WriteByte('[')
		ids := sha256.New()
		for i, m := range msgs {
			if i > 0 {
				b.WriteByte(',')
			}
			b.Write(Envelope(m.Rec))
			io.WriteString(ids, m.Rec.MessageID+"\n")
		}
		b.WriteByte(']')
		body = b.Bytes()
		id = "batch_" + hex.EncodeToString(ids.Sum(nil)[:16])
	} else if cfg.Body == BodyEnvelope {
		body = Envelope(msgs[0].Rec)
	} else {
		body = msgs[0].Rec.Value
	}
	// A request wholly sent when ctx ends (Close, shutdown) is given its
	// answer, up to ack_timeout: cancelling it would not unsend it, and
	// the receiver would take it after Close returned. One not yet wholly
	// sent is cancelled at once (the receiver never sees a whole body).
	var wrote atomic.Bool
	sendCtx, cancelSend := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelSend()
	stop := context.AfterFunc(ctx, func() {
		if !wrote.Load() {
			cancelSend()
		}
	})
	defer stop()
	rctx, cancel := context.WithTimeout(httptrace.WithClientTrace(sendCtx, &httptrace.ClientTrace{
		WroteRequest: func(httptrace.WroteRequestInfo) { wrote.Store(true) },
	}), cfg.AckTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodPost, target, bytes.NewReader(body))
	if err != nil {
		return outboxcdc.Permanent(fmt.Errorf("http: %q is not a URL: %w", redactURL(target), err), "fix route.topic")
	}
	c.s.setStatic(req)
	if cfg.Body == BodyRaw {
		req.Header.Set("Content-Type", cfg.ContentType)
	} else {
		req.Header.Set("Content-Type", "application/json")
	}
	if cfg.Mode == ModeBatch {
		req.Header.Set(HeaderBatchSize, strconv.Itoa(len(msgs)))
	} else {
		setRecordHeaders(req.Header, msgs[0].Rec)
	}
	if id != "" {
		req.Header.Set(HeaderWebhookID, id)
	}
	if c.s.secret != nil {
		ts := strconv.FormatInt(time.Now().Unix(), 10)
		req.Header.Set(HeaderWebhookTimestamp, ts)
		req.Header.Set(HeaderWebhookSignature, Sign(c.s.secret, id, ts, body))
	}
	resp, err := c.c.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if rctx.Err() != nil {
			err = fmt.Errorf("no answer within sink.ack_timeout (%s): %w", cfg.AckTimeout, err)
		}
		err = classifyNet(fmt.Errorf("http: POST %s: %w", redactURL(target), err))
		if outboxcdc.IsTransient(err) {
			// What the receiver got is unknown; later requests start on
			// fresh connections.
			c.fault.Fail(err)
		}
		return err
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10)) // lets the connection be reused
	resp.Body.Close()
	return c.s.answer(target, resp)
}

// answer classifies a response.
func (s *Sink) answer(target string, resp *http.Response) error {
	code := resp.StatusCode
	if code >= 200 && code < 300 {
		return nil
	}
	err := fmt.Errorf("http: POST %s answered %s", redactURL(target), resp.Status)
	switch {
	case code == http.StatusRequestTimeout || code == http.StatusTooManyRequests || code >= 500:
		err = outboxcdc.Transient(err)
		if d, ok := RetryAfter(resp.Header.Get("Retry-After"), time.Now()); ok {
			return sink.RetryAfter(err, min(d, s.cfg.RetryAfterMax))
		}
		return err
	case code == http.StatusUnauthorized || code == http.StatusForbidden || code == http.StatusProxyAuthRequired:
		return sink.NoRecord(outboxcdc.Permanent(err, "check the credentials in sink.headers and the receiver's access rules"))
	case code >= 300 && code < 400:
		return outboxcdc.Permanent(err, "redirects are not followed: set route.topic to the URL the receiver redirects to ("+redactURL(resp.Header.Get("Location"))+")")
	}
	return outboxcdc.Permanent(err, "the receiver refused the record; its logs say why")
}

// RetryAfter parses a Retry-After value: delay seconds or an HTTP date.
func RetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		if n < 0 {
			return 0, false
		}
		return time.Duration(min(n, 1<<30)) * time.Second, true
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	return max(t.Sub(now), 0), true
}

// classifyNet marks a failed round trip.
func classifyNet(err error) error {
	if tlsconf.IsCertificateError(err) {
		return sink.NoRecord(outboxcdc.Permanent(err,
			"set sink.tls.ca_file to the CA that signed the receiver's certificate, and sink.tls.server_name if it names another host"))
	}
	var ue *url.Error
	if errors.As(err, &ue) && ue.Timeout() {
		return outboxcdc.Transient(err)
	}
	if n := outboxcdc.Network(err); outboxcdc.IsClassified(n) {
		return n
	}
	// Whatever else failed on the way (a TLS alert, a protocol error):
	// worth another try on a new connection.
	return outboxcdc.Transient(err)
}

// setStatic sets the headers every request carries.
func (s *Sink) setStatic(req *http.Request) {
	ua := "outbox-cdc"
	if s.cfg.Name != "" {
		ua += " (" + s.cfg.Name + ")"
	}
	req.Header.Set("User-Agent", ua)
	for k, v := range s.cfg.Headers {
		req.Header.Set(k, v)
	}
}

// setRecordHeaders puts the record's ids and route headers in h; values
// an HTTP header cannot carry are left out (the envelope has them).
func setRecordHeaders(h http.Header, r *outboxcdc.Record) {
	set := func(k string, v []byte) {
		if validHeaderValue(v) {
			h.Set(k, string(v))
		}
	}
	for _, rh := range r.Headers {
		if rh.Value != nil && validHeaderName(rh.Key) {
			set(HeaderPrefix+strings.ReplaceAll(rh.Key, "_", "-"), rh.Value)
		}
	}
	if r.MessageID != "" {
		set(HeaderMessageID, []byte(r.MessageID))
	}
	if r.Key != nil {
		set(HeaderAggregateID, r.Key)
	}
	if r.EventType != "" {
		set(HeaderEventType, []byte(r.EventType))
	}
}

func validHeaderValue(v []byte) bool {
	if !utf8.Valid(v) {
		return false
	}
	for _, c := range v {
		if c < 0x20 && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}

// Envelope is the JSON object a record is sent as with body: envelope:
//
//	{"message_id": "...", "aggregate_id": "...", "event_type": "...",
//	 "destination": "<the URL>", "timestamp": "<RFC 3339>",
//	 "headers": {"<route header>": "<value>", ...},
//	 "payload": <the payload>}
//
// A payload that is valid JSON is embedded as it is, byte for byte;
// another is "payload_base64" instead; a NULL payload is "payload": null.
// A NULL key is "aggregate_id": null; empty ids and event type are left
// out.
func Envelope(r *outboxcdc.Record) []byte {
	var b bytes.Buffer
	str := func(k, v string) {
		if b.Len() > 1 {
			b.WriteByte(',')
		}
		kb, _ := json.Marshal(k)
		vb, _ := json.Marshal(v)
		b.Write(kb)
		b.WriteByte(':')
		b.Write(vb)
	}
	b.WriteByte('{')
	if r.MessageID != "" {
		str("message_id", r.MessageID)
	}
	if r.Key == nil {
		b.WriteString(`"aggregate_id":null`)
	} else {
		str("aggregate_id", string(r.Key))
	}
	if r.EventType != "" {
		str("event_type", r.EventType)
	}
	str("destination", r.Topic)
	ts := r.Timestamp
	if ts.IsZero() {
		ts = time.Now()
	}
	str("timestamp", ts.UTC().Format(time.RFC3339Nano))
	hs := map[string]string{}
	for _, h := range r.Headers {
		if h.Value != nil {
			hs[h.Key] = string(h.Value)
		}
	}
	hb, _ := json.Marshal(hs)
	b.WriteString(`,"headers":`)
	b.Write(hb)
	switch {
	case r.Value == nil:
		b.WriteString(`,"payload":null`)
	case json.Valid(r.Value):
		b.WriteString(`,"payload":`)
		b.Write(bytes.TrimSpace(r.Value))
	default:
		str("payload_base64", base64.StdEncoding.EncodeToString(r.Value))
	}
	b.WriteByte('}')
	return b.Bytes()
}

// Sign returns the webhook-signature value for id, ts and body.
func Sign(secret []byte, id, ts string, body []byte) string {
	m := hmac.New(sha256.New, secret)
	io.WriteString(m, id+"."+ts+".")
	m.Write(body)
	return "v1," + base64.StdEncoding.EncodeToString(m.Sum(nil))
}

// parseSecret reads a secret file's bytes: whsec_<base64> is the decoded
// key, anything else the bytes without trailing newlines.
func parseSecret(b []byte) ([]byte, error) {
	s := strings.TrimRight(string(b), "\r\n")
	if rest, ok := strings.CutPrefix(s, "whsec_"); ok {
		k, err := base64.StdEncoding.DecodeString(rest)
		if err != nil {
			return nil, fmt.Errorf("a whsec_ secret must be base64 after the prefix: %v", err)
		}
		s = string(k)
	}
	if len(s) < 16 {
		return nil, errors.New("the secret is shorter than 16 bytes")
	}
	return []byte(s), nil
}

// redactURL drops the user info and the query (either may hold a
// credential) from u for messages.
func redactURL(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		if i := strings.IndexAny(u, "?#"); i >= 0 {
			return u[:i]
		}
		return u
	}
	p.User, p.RawQuery, p.Fragment = nil, "", ""
	return p.String()
}

// budget bounds the bytes of the requests in flight; one request larger
// than the whole budget still goes, alone.
type budget struct {
	mu   sync.Mutex
	cond *sync.Cond
	max  int64
	used int64
}

func newBudget(max int64) *budget {
	b := &budget{max: max}
	b.cond = sync.NewCond(&b.mu)
	return b
}

func (b *budget) acquire(n int64) {
	b.mu.Lock()
	for b.used > 0 && b.used+n > b.max {
		b.cond.Wait()
	}
	b.used += n
	b.mu.Unlock()
}

func (b *budget) release(n int64) {
	b.mu.Lock()
	b.used -= n
	b.mu.Unlock()
	b.cond.Broadcast()
}
