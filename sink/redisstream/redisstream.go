// Package redisstream is the Redis Streams sink: every record is appended
// with XADD to the stream whose key is the rendered route.topic, and
// counts as delivered only when the XADD reply (the new entry's id) came
// back. The XADDs of a write go out in pipelines of max_in_flight on one
// connection, one pipeline after the other, so a stream receives its
// records in order. The client's own retries are off; the delivery loop
// (retries on a new connection, per-key order, bounded window) is package
// broker's.
//
// Entry ids are the server's ("*"): an id chosen by the connector would
// have to grow with every record of a stream across restarts, and a record
// re-sent after a lost reply would then be refused as "equal or smaller"
// (indistinguishable from a genuine reorder) or, if such refusals were
// taken as "already there", lost. So a record sent again after a failure
// is stored again: consumers dedupe on the message_id field.
//
// Entry fields, in this order (a NULL is an absent field):
//
//	message_id        the row's message id
//	key               the record key (the aggregate id)
//	value             the record value (absent: a tombstone)
//	timestamp         the record timestamp, Unix milliseconds
//	header.<name>     each route header (a repeated header repeats the field)
package redisstream

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
	"github.com/outbox-cdc/outbox-cdc/sink"
	"github.com/outbox-cdc/outbox-cdc/tlsconf"
)

// Entry field names.
const (
	FieldMessageID    = "message_id"
	FieldKey          = "key"
	FieldValue        = "value"
	FieldTimestamp    = "timestamp"
	FieldHeaderPrefix = "header."
)

// Sink is the Redis Streams sink; it implements outboxcdc.Sink.
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
	if _, err := cfg.options(); err != nil { // reads the certificate files
		return nil, err
	}
	s := &Sink{cfg: cfg, log: log.With().Str("component", "sink").Str("sink", "redis").Logger()}
	cfg.TLS.Warn(s.log)
	s.log.Info().Str("url", outboxcdc.RedactDSN(cfg.URL)).Int64("max_len", cfg.MaxLen).Dur("min_id_age", cfg.MinIDAge).
		Msg("redis sink starting (XADD replies, server-assigned entry ids)")
	w, err := sink.New("redis", cfg.Config, s.dial, s.log, reg)
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
func (c Config) With(sink.Env) sink.Kind {
	return c
}

// Open returns the sink (New).
func (c Config) Open(log zerolog.Logger, reg prometheus.Registerer) (outboxcdc.Sink, error) {
	return sink.Opened(New(c, log, reg))
}

// Check is the package's Check, for outbox-cdc check.
func (c Config) Check(ctx context.Context, env sink.Env) []outboxcdc.CheckResult {
	return Check(ctx, c, env.Fixed...)
}

// connect returns a client that answered PING. Its sockets are kept in
// socks (nil: not kept), which resets them when closed: the client closes
// a connection whose XADDs got no reply in time, and what it still held
// must not reach the server after the records were sent again.
func connect(ctx context.Context, cfg Config, socks *sink.Sockets) (*redis.Client, error) {
	o, err := cfg.options()
	if err != nil {
		return nil, outboxcdc.Permanent(err, "fix sink.url and sink.tls")
	}
	if socks != nil {
		dial := redis.NewDialer(o)
		o.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := dial(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return socks.Track(c), nil
		}
	}
	c := redis.NewClient(o)
	if err := c.Ping(ctx).Err(); err != nil {
		c.Close()
		return nil, classify(fmt.Errorf("redis: %w", err))
	}
	return c, nil
}

func (s *Sink) dial(ctx context.Context) (sink.Conn, error) {
	c, err := connect(ctx, s.cfg, &sink.Sockets{})
	if err != nil {
		return nil, err
	}
	return &conn{cfg: s.cfg, c: c}, nil
}

// classify marks a Redis failure. Server errors are classified by their
// error code (the reply's first word, Redis's own classification) through
// the client's predicates; everything else goes through
// outboxcdc.Network.
func classify(err error) error {
	switch {
	case redis.IsAuthError(err):
		return sink.NoRecord(outboxcdc.Permanent(err, "check sink.username and sink.password (or the credentials in sink.url)"))
	case redis.HasErrorPrefix(err, "NOPERM"):
		return sink.NoRecord(outboxcdc.Permanent(err, "grant the user XADD on the stream keys (ACL: +xadd ~outbox:*)"))
	case redis.HasErrorPrefix(err, "WRONGTYPE"):
		return outboxcdc.Permanent(err, "the key holds another type than a stream: change route.topic or remove the key")
	case redis.IsOOMError(err), redis.IsReadOnlyError(err), redis.IsLoadingError(err), redis.IsMasterDownError(err),
		redis.IsClusterDownError(err), redis.IsTryAgainError(err), redis.HasErrorPrefix(err, "BUSY"):
		return outboxcdc.Transient(err)
	}
	if tlsconf.IsCertificateError(err) {
		return sink.NoRecord(outboxcdc.Permanent(err,
			"set sink.tls.ca_file to the CA that signed the server's certificate, and sink.tls.server_name if it names another host"))
	}
	var re redis.Error
	if errors.As(err, &re) {
		// Another refusal of the command (a syntax or argument error):
		// sending it again cannot help.
		return outboxcdc.Permanent(err, "")
	}
	if n := outboxcdc.Network(err); outboxcdc.IsClassified(n) {
		return n
	}
	return outboxcdc.Transient(err)
}

// conn is one client (a small pool; pipelines use one connection each).
type conn struct {
	cfg Config
	c   *redis.Client

	fault sink.Fault // the connection's first failure
}

// Err implements sink.Conn.
func (c *conn) Err() error { return c.fault.Err() }

// Send implements sink.Conn: pipelines of at most max_in_flight XADDs
// and max_in_flight_bytes, one after the other.
func (c *conn) Send(ctx context.Context, msgs []*sink.Msg) error {
	for len(msgs) > 0 {
		n, bytes := 0, int64(0)
		for n < len(msgs) && n < c.cfg.MaxInFlight {
			size := int64(msgs[n].Rec.Size())
			if n > 0 && bytes+size > c.cfg.MaxInFlightBytes {
				break
			}
			bytes += size
			n++
		}
		chunk := msgs[:n]
		msgs = msgs[n:]
		if err := c.pipeline(ctx, chunk); err != nil {
			return err
		}
		if err := c.Err(); err != nil {
			for _, m := range msgs {
				m.Err = err
			}
			return nil
		}
	}
	return nil
}

func (c *conn) pipeline(ctx context.Context, chunk []*sink.Msg) error {
	minID := ""
	if c.cfg.MinIDAge > 0 {
		minID = strconv.FormatInt(time.Now().Add(-c.cfg.MinIDAge).UnixMilli(), 10)
	}
	p := c.c.Pipeline()
	cmds := make([]*redis.StringCmd, len(chunk))
	for i, m := range chunk {
		cmds[i] = p.XAdd(ctx, c.args(m.Rec, minID))
	}
	pctx, cancel := context.WithTimeout(ctx, c.cfg.AckTimeout)
	defer cancel()
	_, _ = p.Exec(pctx)
	if err := ctx.Err(); err != nil {
		return err
	}
	for i, m := range chunk {
		err := cmds[i].Err()
		if err == nil {
			continue
		}
		var re redis.Error
		if !errors.As(err, &re) {
			// The connection failed: which XADDs ran is unknown; the
			// connection is given up and the records sent again.
			if pctx.Err() != nil {
				err = fmt.Errorf("no XADD reply within sink.ack_timeout (%s): %w", c.cfg.AckTimeout, err)
			}
			err = c.fault.Fail(outboxcdc.Transient(fmt.Errorf("redis: %w", err)))
		} else {
			err = classify(fmt.Errorf("redis: XADD %q: %w", m.Rec.Topic, err))
		}
		m.Err = err
	}
	return nil
}

// args builds the XADD of a record.
func (c *conn) args(r *outboxcdc.Record, minID string) *redis.XAddArgs {
	v := make([]interface{}, 0, 8+2*len(r.Headers))
	if r.MessageID != "" {
		v = append(v, FieldMessageID, r.MessageID)
	}
	if r.Key != nil {
		v = append(v, FieldKey, r.Key)
	}
	if r.Value != nil {
		v = append(v, FieldValue, r.Value)
	}
	ts := r.Timestamp
	if ts.IsZero() { // route.timestamp produce: the time of production
		ts = time.Now()
	}
	v = append(v, FieldTimestamp, strconv.FormatInt(ts.UnixMilli(), 10))
	for _, h := range r.Headers {
		if h.Value != nil {
			v = append(v, FieldHeaderPrefix+h.Key, h.Value)
		}
	}
	if len(v) == 0 {
		v = append(v, FieldValue, []byte{}) // XADD needs a field
	}
	a := &redis.XAddArgs{Stream: r.Topic, ID: "*", Values: v, Approx: !c.cfg.ExactTrim}
	switch {
	case c.cfg.MaxLen > 0:
		a.MaxLen = c.cfg.MaxLen
	case minID != "":
		a.MinID = minID
	default:
		a.Approx = false
	}
	return a
}

// Probe implements sink.Conn.
func (c *conn) Probe(ctx context.Context) error {
	if err := c.Err(); err != nil {
		return err
	}
	if err := c.c.Ping(ctx).Err(); err != nil {
		return classify(fmt.Errorf("redis: %w", err))
	}
	return nil
}

// Close implements sink.Conn.
func (c *conn) Close() error {
	c.fault.Fail(outboxcdc.Transient(errors.New("redis connection closed by the sink")))
	return c.c.Close()
}
