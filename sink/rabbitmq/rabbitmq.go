// Package rabbitmq is the RabbitMQ sink: every record is published with
// publisher confirms and the mandatory flag to one exchange, with the
// rendered route.topic as the routing key. A record counts as delivered
// only when the broker confirmed it; a nack, an unroutable record (a
// basic.return: no queue bound for its routing key) and a connection lost
// before the confirm are failures, never silent loss. The delivery loop
// (retries, per-key order, bounded window) is package broker's.
//
// Each message carries:
//
//	routing key       the rendered route.topic (dead letters: pipeline.dlq_topic)
//	body              the record value (empty for a tombstone)
//	message_id        the row's message id (consumers dedupe on it)
//	type              the row's event type
//	timestamp         the record timestamp (seconds)
//	content_type      sink.content_type
//	app_id            the connector's name
//	delivery_mode     2 (persistent)
//	headers           the route's headers; a NULL header value is a void
//	                  field, a valid UTF-8 value a long string, other
//	                  bytes a byte array; a repeated key an array;
//	                  outbox_cdc.key the record key (the aggregate id);
//	                  outbox_cdc.tombstone true on a tombstone
package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/rs/zerolog"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
	"github.com/outbox-cdc/outbox-cdc/sink"
	"github.com/outbox-cdc/outbox-cdc/tlsconf"
)

// Header keys the sink adds.
const (
	HeaderKey       = "outbox_cdc.key"
	HeaderTombstone = "outbox_cdc.tombstone"
)

// Sink is the RabbitMQ sink; it implements outboxcdc.Sink.
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
	s := &Sink{cfg: cfg, log: log.With().Str("component", "sink").Str("sink", "rabbitmq").Logger()}
	cfg.TLS.Warn(s.log)
	s.log.Info().Str("url", outboxcdc.RedactDSN(cfg.URL)).Str("exchange", cfg.Exchange).
		Msg("rabbitmq sink starting (publisher confirms, mandatory, persistent)")
	w, err := sink.New("rabbitmq", cfg.Config, s.dial, s.log, reg)
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
	c.DeadLetterTopic, c.AppID = env.DeadLetterTopic, env.Connector
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

// connect opens an AMQP connection with cfg's credentials, TLS, heartbeat
// and dial timeout; its socket is kept in socks (nil: not kept).
// DialConfig takes no context, so it runs aside and is abandoned (and
// closed when it comes up) when ctx ends first.
func connect(ctx context.Context, cfg Config, socks *sink.Sockets) (*amqp.Connection, error) {
	raw, u, err := cfg.dialURL()
	if err != nil {
		return nil, outboxcdc.Permanent(err, "fix sink.url")
	}
	tc, err := cfg.TLS.Build(u.Scheme == "amqps", u.Hostname())
	if err != nil {
		return nil, outboxcdc.Permanent(err, "fix sink.tls")
	}
	dial := amqp.DefaultDial(cfg.DialTimeout)
	if socks != nil {
		tcp := dial
		dial = func(network, addr string) (net.Conn, error) {
			c, err := tcp(network, addr)
			if err != nil {
				return nil, err
			}
			return socks.Track(c), nil
		}
	}
	acfg := amqp.Config{
		Heartbeat:       cfg.Heartbeat,
		TLSClientConfig: tc,
		Dial:            dial,
		Properties:      amqp.Table{"connection_name": "outbox-cdc " + cfg.AppID, "product": "outbox-cdc"},
	}
	type result struct {
		c   *amqp.Connection
		err error
	}
	done := make(chan result, 1)
	go func() {
		c, err := amqp.DialConfig(raw, acfg)
		done <- result{c, err}
	}()
	select {
	case r := <-done:
		if r.err != nil {
			return nil, classifyDial(r.err)
		}
		return r.c, nil
	case <-ctx.Done():
		go func() {
			if r := <-done; r.c != nil {
				r.c.Close()
			}
		}()
		return nil, outboxcdc.Transient(fmt.Errorf("connecting to rabbitmq: %w", ctx.Err()))
	}
}

// classifyDial marks a connection failure: refused credentials or vhost
// are permanent, the rest (network, broker starting) transient.
func classifyDial(err error) error {
	var ae *amqp.Error
	if errors.As(err, &ae) {
		switch ae.Code {
		case amqp.AccessRefused, amqp.NotAllowed, amqp.InvalidPath:
			return outboxcdc.Permanent(fmt.Errorf("rabbitmq refused the connection: %w", err),
				"check sink.username, sink.password and the vhost in sink.url, and that the user may access the vhost")
		}
		return outboxcdc.Transient(fmt.Errorf("connecting to rabbitmq: %w", err))
	}
	if tlsconf.IsCertificateError(err) {
		return outboxcdc.Permanent(fmt.Errorf("connecting to rabbitmq: %w", err),
			"set sink.tls.ca_file to the CA that signed the broker's certificate, and sink.tls.server_name if it names another host")
	}
	if n := outboxcdc.Network(err); outboxcdc.IsClassified(n) {
		return fmt.Errorf("connecting to rabbitmq: %w", n)
	}
	// The handshake failed some other way (TLS, protocol): usually a
	// broker still starting or a proxy in the way; retried.
	return outboxcdc.Transient(fmt.Errorf("connecting to rabbitmq: %w", err))
}

// classifyClose marks the error a channel or connection closed with. Only
// the broker's verdicts on what was published are permanent; they concern
// the connection (every record in flight fails with it), not one record.
func classifyClose(e *amqp.Error, cfg Config) error {
	if e == nil {
		return outboxcdc.Transient(errors.New("rabbitmq connection closed"))
	}
	err := fmt.Errorf("rabbitmq closed the channel: %w", e)
	switch e.Code {
	case amqp.NotFound:
		return sink.NoRecord(outboxcdc.Permanent(err,
			fmt.Sprintf("declare exchange %q (and %q for dead letters), or set sink.declare: true", cfg.Exchange, cfg.dlqExchange())))
	case amqp.AccessRefused:
		return sink.NoRecord(outboxcdc.Permanent(err, "grant the user write permission on the exchange in the vhost"))
	case amqp.PreconditionFailed:
		return sink.NoRecord(outboxcdc.Permanent(err,
			"a message larger than the broker's max_message_size is refused this way: keep sink.max_message_bytes at or below it, so such a record is named and pipeline.on_error applies"))
	}
	return outboxcdc.Transient(err)
}

func (s *Sink) dial(ctx context.Context) (sink.Conn, error) {
	socks := &sink.Sockets{}
	c, err := connect(ctx, s.cfg, socks)
	if err != nil {
		return nil, err
	}
	// The steps after the handshake (a channel, the exchanges, confirm
	// mode) wait for the broker without a deadline of their own: the end
	// of ctx (sink.dial_timeout) tears the socket down, which ends them.
	stop := context.AfterFunc(ctx, socks.Abort)
	fail := func(err error) (sink.Conn, error) {
		if !stop() {
			err = outboxcdc.Transient(fmt.Errorf("rabbitmq: the broker did not set the connection up in time: %w", ctx.Err()))
		}
		_ = c.CloseDeadline(time.Now().Add(time.Second))
		socks.Abort()
		return nil, err
	}
	ch, err := c.Channel()
	if err != nil {
		return fail(outboxcdc.Transient(fmt.Errorf("opening a rabbitmq channel: %w", err)))
	}
	closes := ch.NotifyClose(make(chan *amqp.Error, 1))
	if err := s.exchanges(ch, closes); err != nil {
		return fail(err)
	}
	if err := ch.Confirm(false); err != nil {
		return fail(outboxcdc.Transient(fmt.Errorf("rabbitmq: confirm mode: %w", err)))
	}
	if !stop() {
		return fail(nil)
	}
	conn := &conn{
		cfg:      s.cfg,
		c:        c,
		ch:       ch,
		socks:    socks,
		returns:  ch.NotifyReturn(make(chan amqp.Return, s.cfg.MaxInFlight+64)),
		returned: map[string]int{},
	}
	go conn.watch(closes)
	return conn, nil
}

// exchanges declares (with sink.declare) or checks the exchanges.
func (s *Sink) exchanges(ch *amqp.Channel, closes chan *amqp.Error) error {
	names := []string{s.cfg.Exchange}
	if d := s.cfg.dlqExchange(); d != s.cfg.Exchange && s.cfg.DeadLetterTopic != "" {
		names = append(names, d)
	}
	for _, name := range names {
		var err error
		if s.cfg.Declare {
			err = ch.ExchangeDeclare(name, s.cfg.ExchangeType, true, false, false, false, nil)
		} else {
			err = ch.ExchangeDeclarePassive(name, s.cfg.ExchangeType, true, false, false, false, nil)
		}
		if err == nil {
			continue
		}
		var ae *amqp.Error
		if errors.As(err, &ae) {
			switch ae.Code {
			case amqp.NotFound:
				return outboxcdc.Permanent(fmt.Errorf("rabbitmq: exchange %q does not exist", name),
					"declare it (durable), or set sink.declare: true to let the connector declare it")
			case amqp.PreconditionFailed:
				return outboxcdc.Permanent(fmt.Errorf("rabbitmq: exchange %q exists with other settings: %w", name, err),
					"make sink.exchange_type match the exchange's type (durable), or use another exchange")
			case amqp.AccessRefused:
				return outboxcdc.Permanent(fmt.Errorf("rabbitmq: exchange %q: %w", name, err),
					"grant the user configure (with sink.declare) and write permission on the exchange")
			case amqp.CommandInvalid:
				return outboxcdc.Permanent(fmt.Errorf("rabbitmq: exchange type %q: %w", s.cfg.ExchangeType, err),
					"x-consistent-hash needs the rabbitmq_consistent_hash_exchange plugin enabled on the broker")
			}
		}
		return outboxcdc.Transient(fmt.Errorf("rabbitmq: exchange %q: %w", name, err))
	}
	return nil
}

// conn is one AMQP connection with one channel in confirm mode.
type conn struct {
	cfg Config
	c   *amqp.Connection
	ch  *amqp.Channel
	// socks is the connection's socket: a connection given up is torn
	// down by closing it (see watch).
	socks *sink.Sockets
	// returns carries the basic.return of unroutable records. The broker
	// sends a record's return before its confirm, and the client hands it
	// over before it resolves the confirm, so it is here by the time the
	// confirm is; returned counts them by message id until then.
	returns  chan amqp.Return
	returned map[string]int

	fault sink.Fault
	// verdict is set when the broker closed the channel or connection
	// with a reason: it has read everything sent before, and the
	// connection is closed the AMQP way.
	verdict atomic.Bool
	closing atomic.Bool // Close started
}

// watch records why the connection fails: the broker's close reason, or
// the failure the delivery loop records (an answer overdue). A connection
// given up other than by the broker's word is torn down at once, so that
// nothing still queued on it goes out (and every wait on it ends).
func (c *conn) watch(closes chan *amqp.Error) {
	select {
	case e := <-closes: // nil when closed without a reason
		if e != nil && e.Server {
			c.verdict.Store(true)
		}
		c.fault.Fail(classifyClose(e, c.cfg))
	case <-c.fault.Lost():
	}
	if !c.verdict.Load() && !c.closing.Load() {
		c.socks.Abort()
	}
}

// Send implements sink.Conn.
func (c *conn) Send(ctx context.Context, msgs []*sink.Msg) error {
	return sink.SendWindow(ctx, c.cfg.Config, &c.fault, "publisher confirm", msgs, c.publish)
}

func (c *conn) publish(m *sink.Msg) (sink.Pending, error) {
	r := m.Rec
	pub := c.publishing(m)
	if err := pub.Headers.Validate(); err != nil {
		m.Err = outboxcdc.Permanent(fmt.Errorf("rabbitmq: headers: %w", err), "")
		return nil, nil
	}
	dc, err := c.ch.PublishWithDeferredConfirm(c.cfg.exchangeOf(r.Topic), r.Topic, true, false, pub)
	if err != nil {
		if c.ch.IsClosed() {
			return nil, c.closeReason()
		}
		return nil, outboxcdc.Transient(fmt.Errorf("rabbitmq: publish: %w", err))
	}
	return confirm{c, m, dc}, nil
}

// confirm is a published record's publisher confirm.
type confirm struct {
	c  *conn
	m  *sink.Msg
	dc *amqp.DeferredConfirmation
}

// Await implements sink.Pending.
func (f confirm) Await(stop <-chan struct{}) bool {
	select {
	case <-f.dc.Done():
	default:
		select {
		case <-f.dc.Done():
		case <-stop:
			return false
		}
	}
	c := f.c
	c.drainReturns()
	switch {
	case f.dc.Acked():
		if n := c.returned[f.m.Rec.MessageID]; n > 0 {
			c.returned[f.m.Rec.MessageID] = n - 1
			f.m.Err = outboxcdc.Permanent(
				fmt.Errorf("unroutable: exchange %q has no queue bound for routing key %q", c.cfg.exchangeOf(f.m.Rec.Topic), f.m.Rec.Topic),
				"bind a queue for this routing key (or change route.topic); with pipeline.on_error: dlq the row goes to the dead-letter routing key instead")
		}
	case c.ch.IsClosed():
		f.m.Err = c.closeReason()
	default:
		f.m.Err = outboxcdc.Transient(errors.New("rabbitmq nacked the record (a queue with overflow reject-publish is full, or the broker failed to store it)"))
	}
	return true
}

func (c *conn) drainReturns() {
	for {
		select {
		case r, ok := <-c.returns:
			if !ok { // closed with the channel
				return
			}
			c.returned[r.MessageId]++
		default:
			return
		}
	}
}

// closeReason returns why the closed channel closed, waiting briefly for
// watch to record it.
func (c *conn) closeReason() error {
	t := time.NewTimer(time.Second)
	defer t.Stop()
	select {
	case <-c.fault.Lost():
		return c.fault.Err()
	case <-t.C:
		return c.fault.Fail(classifyClose(nil, c.cfg))
	}
}

// Err implements sink.Conn.
func (c *conn) Err() error {
	if err := c.fault.Err(); err != nil {
		return err
	}
	if c.c.IsClosed() || c.ch.IsClosed() {
		return c.closeReason()
	}
	return nil
}

// Probe implements sink.Conn: a passive declare of the exchange on a
// channel of its own (a failure closes only that channel).
func (c *conn) Probe(ctx context.Context) error {
	if err := c.Err(); err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() {
		ch, err := c.c.Channel()
		if err != nil {
			done <- outboxcdc.Transient(err)
			return
		}
		defer ch.Close()
		err = ch.ExchangeDeclarePassive(c.cfg.Exchange, c.cfg.ExchangeType, true, false, false, false, nil)
		if err != nil {
			err = fmt.Errorf("exchange %q: %w", c.cfg.Exchange, err)
		}
		done <- err
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return outboxcdc.Transient(errors.New("rabbitmq did not answer a probe"))
	}
}

// Close implements sink.Conn. A connection in use, or closed by the
// broker with a reason, is closed the AMQP way (waiting at most a second
// for close-ok); one given up otherwise (an answer overdue, the socket
// lost) only has its socket closed: a silent peer would not answer
// close-ok, and nothing still queued on it may go out later.
func (c *conn) Close() error {
	failed := c.fault.Err() != nil && !c.verdict.Load()
	c.closing.Store(true)
	c.fault.Fail(outboxcdc.Transient(errors.New("rabbitmq connection closed by the sink")))
	if failed || c.c.IsClosed() {
		c.socks.Abort()
		return nil
	}
	_ = c.c.CloseDeadline(time.Now().Add(time.Second))
	return nil
}

// publishing builds the AMQP message of a record.
func (c *conn) publishing(m *sink.Msg) amqp.Publishing {
	r := m.Rec
	p := amqp.Publishing{
		ContentType:  c.cfg.ContentType,
		DeliveryMode: amqp.Persistent,
		MessageId:    r.MessageID,
		Type:         r.EventType,
		AppId:        c.cfg.AppID,
		Body:         r.Value,
	}
	p.Timestamp = r.Timestamp
	if p.Timestamp.IsZero() { // route.timestamp produce: the time of production
		p.Timestamp = time.Now()
	}
	h := make(amqp.Table, len(r.Headers)+2)
	for _, hd := range r.Headers {
		v := headerValue(hd.Value)
		if prev, ok := h[hd.Key]; ok {
			arr, isArr := prev.([]interface{})
			if !isArr {
				arr = []interface{}{prev}
			}
			h[hd.Key] = append(arr, v)
			continue
		}
		h[hd.Key] = v
	}
	if r.Key != nil {
		h[HeaderKey] = headerValue(r.Key)
	}
	if r.Value == nil {
		h[HeaderTombstone] = true
	}
	p.Headers = h
	return p
}

// headerValue is a header's AMQP field value: nil (void) for NULL, a
// string for valid UTF-8, else the bytes.
func headerValue(v []byte) interface{} {
	switch {
	case v == nil:
		return nil
	case utf8.Valid(v):
		return string(v)
	default:
		return v
	}
}
