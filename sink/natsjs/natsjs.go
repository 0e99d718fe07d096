// Package natsjs is the NATS JetStream sink: every record is published to
// its subject (the rendered route.topic) and counts as delivered only when
// the stream's PubAck names the configured stream. The client's own
// reconnects and per-message retries are off; the delivery loop (retries
// on a new connection, per-key order, bounded window) is package
// broker's.
//
// # Dedupe
//
// Nats-Msg-Id is the row's message id, so JetStream drops a record sent
// again within the stream's duplicate window (2 minutes by default): a
// connector restarted after a crash re-sends what was acknowledged since
// its last checkpoint, and none of it is stored twice when the restart
// comes within the window. Effectively once, within the window. A record
// sent again only to restore its key's order after a failure later in the
// same write gets "<message id>~<n>" so it is stored again (the copies
// stored last are in commit order; a consumer dedupes on the id up to
// "~" and keeps the first copy).
//
// Each message carries: the record value as data; the route's headers (a
// NULL value is left out: NATS headers cannot carry one; a value with a
// line break is refused as a bad record); Nats-Msg-Id; outbox_cdc.key the
// record key; outbox_cdc.timestamp the record timestamp (RFC 3339);
// outbox_cdc.tombstone "true" on a tombstone.
package natsjs

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
	"github.com/outbox-cdc/outbox-cdc/sink"
	"github.com/outbox-cdc/outbox-cdc/tlsconf"
)

// Header keys the sink adds.
const (
	HeaderKey       = "outbox_cdc.key"
	HeaderTimestamp = "outbox_cdc.timestamp"
	HeaderTombstone = "outbox_cdc.tombstone"
)

// Sink is the NATS JetStream sink; it implements outboxcdc.Sink.
type Sink struct {
	*sink.Writer
	cfg Config
	log zerolog.Logger
}

// New validates cfg and returns the sink. It connects in the background;
// Write waits for the connection.
func New(cfg Config, log zerolog.Logger, reg prometheus.Registerer) (*Sink, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Sink{cfg: cfg, log: log.With().Str("component", "sink").Str("sink", "nats").Logger()}
	cfg.TLS.Warn(s.log)
	s.log.Info().Str("url", outboxcdcRedact(cfg.URL)).Str("stream", cfg.Stream).
		Msg("nats sink starting (JetStream PubAck, Nats-Msg-Id = message id)")
	w, err := sink.New("nats", cfg.Config, s.dial, s.log, reg)
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
	c.Template, c.DeadLetterTopic, c.Name = env.Template, env.DeadLetterTopic, env.Connector
	if c.Template == "" {
		c.Template = DefaultTopic
	}
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

// connect opens a NATS connection without automatic reconnects; its
// socket is kept in socks (nil: not kept), which resets it when closed.
func connect(ctx context.Context, cfg Config, closed func(error), socks *sink.Sockets) (*nats.Conn, error) {
	opts := []nats.Option{
		nats.Name("outbox-cdc " + cfg.Name),
		nats.NoReconnect(),
		nats.Timeout(cfg.DialTimeout),
		nats.PingInterval(cfg.PingInterval),
		nats.MaxPingsOutstanding(2),
		nats.ReconnectBufSize(-1),
	}
	switch {
	case cfg.Username != "":
		opts = append(opts, nats.UserInfo(cfg.Username, cfg.Password))
	case cfg.Token != "":
		opts = append(opts, nats.Token(cfg.Token))
	case cfg.CredsFile != "":
		opts = append(opts, nats.UserCredentials(cfg.CredsFile))
	}
	schemeTLS := strings.HasPrefix(strings.TrimSpace(cfg.URL), "tls://")
	tc, err := cfg.TLS.Build(schemeTLS, "")
	if err != nil {
		return nil, outboxcdc.Permanent(err, "fix sink.tls")
	}
	if tc != nil {
		opts = append(opts, nats.Secure(tc))
	}
	if socks != nil {
		opts = append(opts, nats.SetCustomDialer(dialer{net.Dialer{Timeout: cfg.DialTimeout}, socks}))
	}
	if closed != nil {
		opts = append(opts,
			nats.DisconnectErrHandler(func(_ *nats.Conn, err error) { closed(err) }),
			nats.ClosedHandler(func(*nats.Conn) { closed(nil) }))
	}
	type result struct {
		c   *nats.Conn
		err error
	}
	done := make(chan result, 1)
	go func() {
		c, err := nats.Connect(cfg.URL, opts...)
		done <- result{c, err}
	}()
	select {
	case r := <-done:
		if r.err != nil {
			return nil, classifyConnect(r.err)
		}
		return r.c, nil
	case <-ctx.Done():
		go func() {
			if r := <-done; r.c != nil {
				r.c.Close()
			}
		}()
		return nil, outboxcdc.Transient(fmt.Errorf("connecting to nats: %w", ctx.Err()))
	}
}

// dialer dials as the client would and keeps the socket.
type dialer struct {
	d     net.Dialer
	socks *sink.Sockets
}

func (d dialer) Dial(network, addr string) (net.Conn, error) {
	c, err := d.d.Dial(network, addr)
	if err != nil {
		return nil, err
	}
	return d.socks.Track(c), nil
}

func classifyConnect(err error) error {
	switch {
	case errors.Is(err, nats.ErrAuthorization), errors.Is(err, nats.ErrAuthExpired), errors.Is(err, nats.ErrAuthRevoked):
		return outboxcdc.Permanent(fmt.Errorf("nats refused the connection: %w", err),
			"check sink.username/password, sink.token or sink.creds_file")
	case errors.Is(err, nats.ErrBadSubject), errors.Is(err, nats.ErrInvalidArg):
		return outboxcdc.Permanent(err, "fix sink.url")
	case tlsconf.IsCertificateError(err):
		return outboxcdc.Permanent(fmt.Errorf("nats: %w", err), "set sink.tls.ca_file to the CA that signed the server's certificate, and sink.tls.server_name if it names another host")
	}
	return outboxcdc.Transient(fmt.Errorf("connecting to nats: %w", err))
}

func (s *Sink) dial(ctx context.Context) (sink.Conn, error) {
	c := &conn{cfg: s.cfg}
	nc, err := connect(ctx, s.cfg, c.lost, &sink.Sockets{})
	if err != nil {
		return nil, err
	}
	c.nc = nc
	js, err := jetstream.New(nc,
		jetstream.WithPublishAsyncMaxPending(s.cfg.MaxInFlight+1),
		jetstream.WithPublishAsyncTimeout(s.cfg.AckTimeout))
	if err != nil {
		nc.Close()
		return nil, outboxcdc.Permanent(err, "")
	}
	c.js = js
	st, err := s.stream(ctx, js)
	if err != nil {
		nc.Close()
		return nil, err
	}
	c.subjects = st.Subjects
	c.maxPayload = nc.MaxPayload()
	return c, nil
}

// stream looks the stream up, or creates it with sink.create_stream.
func (s *Sink) stream(ctx context.Context, js jetstream.JetStream) (jetstream.StreamConfig, error) {
	st, err := js.Stream(ctx, s.cfg.Stream)
	if err == nil {
		return st.CachedInfo().Config, nil
	}
	switch {
	case errors.Is(err, jetstream.ErrJetStreamNotEnabled), errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount):
		return jetstream.StreamConfig{}, outboxcdc.Permanent(fmt.Errorf("nats: %w", err),
			"enable JetStream on the server (nats-server -js) and for the account")
	case !errors.Is(err, jetstream.ErrStreamNotFound):
		return jetstream.StreamConfig{}, outboxcdc.Transient(fmt.Errorf("nats: looking up stream %q: %w", s.cfg.Stream, err))
	case !s.cfg.CreateStream:
		return jetstream.StreamConfig{}, outboxcdc.Permanent(fmt.Errorf("nats: stream %q does not exist", s.cfg.Stream),
			"create it with subjects that capture route.topic, or set sink.create_stream: true")
	}
	storage := jetstream.FileStorage
	if s.cfg.StreamStorage == "memory" {
		storage = jetstream.MemoryStorage
	}
	sc := jetstream.StreamConfig{
		Name: s.cfg.Stream, Subjects: s.cfg.subjects(), Storage: storage,
		Replicas: s.cfg.StreamReplicas, Duplicates: s.cfg.DuplicateWindow,
		Description: "outbox events from outbox-cdc " + s.cfg.Name,
	}
	created, err := js.CreateStream(ctx, sc)
	if err != nil {
		var ae *jetstream.APIError
		if errors.As(err, &ae) && ae.Code >= 400 && ae.Code < 500 {
			return jetstream.StreamConfig{}, outboxcdc.Permanent(fmt.Errorf("nats: creating stream %q: %w", s.cfg.Stream, err),
				"fix sink.stream_subjects (they may overlap another stream's) or create the stream yourself")
		}
		return jetstream.StreamConfig{}, outboxcdc.Transient(fmt.Errorf("nats: creating stream %q: %w", s.cfg.Stream, err))
	}
	s.log.Info().Str("stream", s.cfg.Stream).Strs("subjects", sc.Subjects).Dur("duplicate_window", sc.Duplicates).Msg("created the stream")
	return created.CachedInfo().Config, nil
}

// conn is one NATS connection and its JetStream context.
type conn struct {
	cfg        Config
	nc         *nats.Conn
	js         jetstream.JetStream
	subjects   []string
	maxPayload int64

	fault sink.Fault
}

// lost records that the connection dropped (err nil: closed).
func (c *conn) lost(err error) {
	if err == nil {
		err = nats.ErrConnectionClosed
	}
	c.fault.Fail(outboxcdc.Transient(fmt.Errorf("nats connection lost: %w", err)))
}

// Err implements sink.Conn.
func (c *conn) Err() error { return c.fault.Err() }

// Send implements sink.Conn.
func (c *conn) Send(ctx context.Context, msgs []*sink.Msg) error {
	return sink.SendWindow(ctx, c.cfg.Config, &c.fault, "PubAck", msgs, c.publish)
}

func (c *conn) publish(m *sink.Msg) (sink.Pending, error) {
	msg, err := c.message(m)
	if err != nil {
		m.Err = err
		return nil, nil
	}
	opts := []jetstream.PublishOpt{jetstream.WithExpectStream(c.cfg.Stream), jetstream.WithRetryAttempts(0)}
	if id := msgID(m); id != "" {
		opts = append(opts, jetstream.WithMsgID(id))
	}
	f, err := c.js.PublishMsgAsync(msg, opts...)
	if err != nil {
		if errors.Is(err, nats.ErrMaxPayload) {
			m.Err = outboxcdc.Permanent(fmt.Errorf("nats: record larger than the server's max_payload (%d bytes): %w", c.maxPayload, err),
				"raise max_payload on the server, or keep such payloads out of the outbox")
			return nil, nil
		}
		return nil, outboxcdc.Transient(fmt.Errorf("nats: publish: %w", err))
	}
	return pubAck{c, m, f}, nil
}

// msgID is the Nats-Msg-Id of a record: its message id, marked on a copy
// sent again after an acknowledged one (see the package documentation).
func msgID(m *sink.Msg) string {
	if m.Rec.MessageID == "" || m.Again == 0 {
		return m.Rec.MessageID
	}
	return m.Rec.MessageID + "~" + strconv.Itoa(m.Again)
}

// pubAck is a published record's PubAck.
type pubAck struct {
	c *conn
	m *sink.Msg
	f jetstream.PubAckFuture
}

// Await implements sink.Pending.
func (p pubAck) Await(stop <-chan struct{}) bool {
	var ack *jetstream.PubAck
	var err error
	select {
	case ack = <-p.f.Ok():
	case err = <-p.f.Err():
	default:
		select {
		case ack = <-p.f.Ok():
		case err = <-p.f.Err():
		case <-stop:
			return false
		}
	}
	switch {
	case err != nil:
		p.m.Err = p.c.classify(p.m.Rec.Topic, err)
	case ack.Stream != p.c.cfg.Stream:
		p.m.Err = outboxcdc.Permanent(fmt.Errorf("nats: subject %q was stored by stream %q, not %q", p.m.Rec.Topic, ack.Stream, p.c.cfg.Stream),
			"make sink.stream the stream whose subjects capture route.topic")
	default:
		p.m.Duplicate = ack.Duplicate
	}
	return true
}

// classify marks a publish failure.
func (c *conn) classify(subject string, err error) error {
	var ae *jetstream.APIError
	switch {
	case errors.As(err, &ae):
		switch ae.ErrorCode {
		case jetstream.JSErrCodeStreamMessageExceedsMaximum:
			return outboxcdc.Permanent(fmt.Errorf("nats: %w", err), "raise the stream's max_msg_size, or keep such payloads out of the outbox")
		case 10060: // JSStreamNotMatchErr: the subject belongs to another stream
			return outboxcdc.Permanent(fmt.Errorf("nats: subject %q: %w", subject, err),
				"make sink.stream the stream whose subjects capture route.topic")
		}
		if ae.Code >= 500 || ae.Code == 0 || ae.Code == 429 || ae.Code == 503 {
			return outboxcdc.Transient(fmt.Errorf("nats: %w", err))
		}
		// 10077 maximum messages/bytes exceeded (discard new), 10047
		// insufficient resources and other 4xx answers about the stream's
		// state clear up when the stream drains.
		return outboxcdc.Transient(fmt.Errorf("nats: the stream refused the record: %w", err))
	case errors.Is(err, jetstream.ErrNoStreamResponse):
		for _, f := range c.subjects {
			if matches(f, subject) {
				return outboxcdc.Transient(fmt.Errorf("nats: stream %q did not answer for %q: %w", c.cfg.Stream, subject, err))
			}
		}
		return outboxcdc.Permanent(fmt.Errorf("nats: no stream captures subject %q (stream %q has subjects %v)", subject, c.cfg.Stream, c.subjects),
			"add a subject filter capturing it to the stream, or change route.topic; with pipeline.on_error: dlq the row goes to the dead-letter subject instead")
	}
	return c.fault.Fail(outboxcdc.Transient(fmt.Errorf("nats: %w", err)))
}

// message builds the NATS message of a record.
func (c *conn) message(m *sink.Msg) (*nats.Msg, error) {
	r := m.Rec
	h := nats.Header{}
	for _, hd := range r.Headers {
		if bad := strings.IndexAny(hd.Key, " \t\r\n:"); bad >= 0 || hd.Key == "" {
			return nil, outboxcdc.Permanent(fmt.Errorf("nats: header key %q cannot be sent (empty, or holds a space, ':' or a line break)", hd.Key), "rename the header in route.headers")
		}
		if hd.Value == nil {
			continue // NULL: NATS headers have no null
		}
		if strings.ContainsAny(string(hd.Value), "\r\n") {
			return nil, outboxcdc.Permanent(fmt.Errorf("nats: header %q holds a line break, which NATS headers cannot carry", hd.Key), "")
		}
		h[hd.Key] = append(h[hd.Key], string(hd.Value))
	}
	if r.Key != nil {
		if strings.ContainsAny(string(r.Key), "\r\n") {
			return nil, outboxcdc.Permanent(errors.New("nats: the record key holds a line break, which NATS headers cannot carry"), "")
		}
		h[HeaderKey] = []string{string(r.Key)}
	}
	ts := r.Timestamp
	if ts.IsZero() { // route.timestamp produce: the time of production
		ts = time.Now()
	}
	h[HeaderTimestamp] = []string{ts.UTC().Format(time.RFC3339Nano)}
	if r.Value == nil {
		h[HeaderTombstone] = []string{"true"}
	}
	return &nats.Msg{Subject: r.Topic, Data: r.Value, Header: h}, nil
}

// Probe implements sink.Conn: a stream info request.
func (c *conn) Probe(ctx context.Context) error {
	if err := c.Err(); err != nil {
		return err
	}
	if _, err := c.js.Stream(ctx, c.cfg.Stream); err != nil {
		return outboxcdc.Transient(fmt.Errorf("nats: stream %q: %w", c.cfg.Stream, err))
	}
	return nil
}

// Close implements sink.Conn.
func (c *conn) Close() error {
	c.fault.Fail(outboxcdc.Transient(errors.New("nats connection closed by the sink")))
	c.nc.Close()
	return nil
}
