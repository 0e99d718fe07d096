package wal

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/outbox-cdc/outbox-cdc/backfill"
	"github.com/outbox-cdc/outbox-cdc/source"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
)

// Start settings, used only when Run gets no checkpoint.
const (
	// StartEarliest streams from the slot's confirmed_flush_lsn: everything
	// the slot still retains that was never confirmed. For a slot created by
	// this run that is the slot's consistent point, i.e. transactions that
	// commit after the slot was created; logical decoding can never reach
	// back before a slot existed.
	StartEarliest = "earliest"
	// StartLatest streams from the server's current WAL position
	// (pg_current_wal_lsn() at start), skipping whatever backlog an existing
	// slot retains. For a freshly created slot it is the same as earliest.
	StartLatest = "latest"
	// StartPending publishes the rows a polling relay had not sent
	// (Pending.Where) at the slot's consistent point, then streams; see
	// pending.go.
	StartPending = backfill.StartPending
)

// Config configures the PostgreSQL source. It is assembled by cmd/ from the
// `source:` section of the configuration file.
type Config struct {
	// Common holds dsn, table, tables, start, pending and reconnect, the
	// keys every source has.
	source.Common `yaml:",inline"`
	// Slot is the logical replication slot; default derived from the
	// connector name. Letters, digits and underscores, at most 63.
	Slot string `yaml:"slot"`
	// Publication is the pgoutput publication; default derived from the
	// connector name. Same character set as Slot.
	Publication string `yaml:"publication"`
	// Create creates the slot and the publication when they are missing.
	// false only verifies they exist. A slot is never created while a
	// checkpoint exists.
	Create bool `yaml:"create"`
	// StatusInterval is the period of standby status updates (the flush
	// position confirmed to the slot). Must stay well below
	// WalSenderTimeout. An update sent after nothing arrived for a whole
	// interval asks the server to answer at once (a ping).
	StatusInterval time.Duration `yaml:"status_interval"`
	// WalSenderTimeout is set as wal_sender_timeout on the replication
	// connection (a per-connection setting since PostgreSQL 12): the
	// walsender ends a connection it has not heard from for this long,
	// which frees the slot for a reconnect after a network cut. 0 leaves
	// the server's setting (default 60s).
	WalSenderTimeout time.Duration `yaml:"wal_sender_timeout"`
	// ReceiveTimeout: a replication connection on which nothing arrived for
	// this long while the source was reading is presumed dead (a silent
	// network path); it is closed and the source reconnects from the last
	// transaction it sent. 0 derives it: half the effective
	// wal_sender_timeout (the longest the server may take to answer a ping
	// while it decodes a large transaction) plus max(5s, 2 status
	// intervals).
	ReceiveTimeout time.Duration `yaml:"receive_timeout"`
	// ConnectTimeout bounds connecting (TCP, TLS, authentication) and the
	// server's answer to START_REPLICATION.
	ConnectTimeout time.Duration `yaml:"connect_timeout"`
	// QueryTimeout bounds each metadata step (server settings, publication
	// and slot checks, the lag query, a heartbeat, one pending-backfill
	// read). Creating a slot may wait for transactions open at that moment
	// and is bounded by 5 minutes instead.
	QueryTimeout time.Duration `yaml:"query_timeout"`
	// BufferBytes bounds the decoded transactions held between the
	// replication connection and the pipeline. When it is full the source
	// stops reading the stream (the server holds the WAL) but keeps sending
	// status updates, so the walsender is never timed out.
	BufferBytes int `yaml:"buffer_bytes"`
	// Heartbeat writes a non-transactional logical message periodically.
	Heartbeat HeartbeatConfig `yaml:"heartbeat"`
	// Messages turns transactional logical decoding messages into events.
	Messages MessagesConfig `yaml:"messages"`
	// LagInterval is how often the slot lag metric is refreshed (it is also
	// measured when the connector starts).
	LagInterval time.Duration `yaml:"lag_interval"`
	// FailoverSlot creates the slot as a failover slot (PostgreSQL 17 and
	// later: failover = true, synchronized to standbys that run the slot
	// sync worker, so a promoted standby has it), and makes an existing
	// slot one. A server before 17 is refused. The slot is checked against
	// the checkpoint on every connect like any other (see
	// docs/operations.md, "Failover runbook").
	FailoverSlot bool `yaml:"failover_slot"`
	// RepublishWhere is the source.pending.where the recovery advice gives
	// for re-publishing the rows not known to be delivered; empty: every
	// row ("1 = 1"). Not a configuration key: the command derives it from
	// lifecycle.mark_sent.
	RepublishWhere string `yaml:"-"`
	// TakeOverSlot lets the source end a walsender that still holds the
	// slot (takeover.go). Not a configuration key: the command sets it
	// when ha.enabled, whose lock makes this instance the slot's only
	// rightful reader.
	TakeOverSlot bool `yaml:"-"`
	// ProgressInterval is the least time between two progress lines while
	// the source is behind or publishing pending rows (log.progress_interval,
	// set by the command; 0: outboxcdc.DefaultProgressInterval).
	ProgressInterval time.Duration `yaml:"-"`
}

// HeartbeatConfig: with Interval > 0 the source runs
// SELECT pg_logical_emit_message(false, 'outbox-cdc-heartbeat', ”) on a
// normal connection every Interval, so the WAL of the outbox's database
// moves and the slot's confirmed position can follow it even when the
// outbox is idle (see the idle advance in Source).
type HeartbeatConfig struct {
	// Interval between pg_logical_emit_message heartbeats, which let the
	// slot advance while the outbox is idle; 0 turns them off.
	Interval time.Duration `yaml:"interval"`
}

// MessagesConfig enables the table-less outbox: with Prefix set, messages
// written with pg_logical_emit_message(true, Prefix, '<json>') inside a
// transaction become events of that transaction. See DecodeMessage for the
// JSON format.
type MessagesConfig struct {
	// Prefix of the transactional pg_logical_emit_message messages that
	// are events (a table-less outbox); empty reads none.
	Prefix string `yaml:"prefix"`
	// Prefixes are further prefixes read the same way; an event's table
	// (the {table} of route.topic) is the prefix it was emitted with.
	Prefixes []string `yaml:"prefixes"`
}

// prefixes returns Prefix and Prefixes together.
func (m MessagesConfig) all() []string {
	var out []string
	if m.Prefix != "" {
		out = append(out, m.Prefix)
	}
	for _, p := range m.Prefixes {
		if p != "" && p != m.Prefix {
			out = append(out, p)
		}
	}
	return out
}

// BackoffConfig is a capped exponential backoff (source.Backoff).
type BackoffConfig = source.Backoff

// DefaultConfig returns the defaults; DSN must still be set.
func DefaultConfig() Config {
	return Config{
		Common: source.Common{
			Table:     "public.outbox_message",
			Start:     StartEarliest,
			Pending:   backfill.DefaultConfig(),
			Reconnect: BackoffConfig{Min: 500 * time.Millisecond, Max: 30 * time.Second},
		},
		Create:           true,
		StatusInterval:   2 * time.Second,
		WalSenderTimeout: 20 * time.Second,
		ConnectTimeout:   10 * time.Second,
		QueryTimeout:     30 * time.Second,
		BufferBytes:      8 << 20,
		LagInterval:      10 * time.Second,
	}
}

// Validate checks the configuration. Its errors are *outboxcdc.KeyError
// with keys relative to the source section ("dsn", "tables[0]").
func (c *Config) Validate() error {
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, outboxcdc.KeyErrorf(key, "", format, args...))
	}
	if c.DSN == "" {
		bad("dsn", "required (postgres://user:pass@host:5432/db)")
	} else if _, err := pgconn.ParseConfig(c.DSN); err != nil {
		// The parse error can quote the DSN; do not repeat it.
		bad("dsn", "not a valid PostgreSQL connection string")
	}
	if len(c.Tables) > 0 {
		if c.Table != "" && c.Table != DefaultConfig().Table {
			bad("tables", "set either source.table or source.tables, not both")
		}
		if _, err := parseTables(c.Tables); err != nil {
			errs = append(errs, err)
		}
		if c.Start == StartPending {
			bad("start", "pending reads one table; it cannot be used with source.tables")
		}
	} else if c.Table == "" {
		if len(c.Messages.all()) == 0 {
			bad("table", "required unless source.messages.prefix is set")
		}
	} else if _, _, err := splitTable(c.Table); err != nil {
		bad("table", "%v", err)
	}
	switch c.Start {
	case StartEarliest, StartLatest:
	case StartPending:
		if c.Table == "" && len(c.Tables) == 0 {
			bad("start", "pending needs source.table (the rows to publish are read from it)")
		}
		if err := c.Pending.Validate(); err != nil {
			errs = append(errs, outboxcdc.KeysUnder("pending", err))
		}
	default:
		bad("start", "%q is not earliest, latest or pending", c.Start)
	}
	if c.Slot != "" && !legalName(c.Slot) {
		bad("slot", "%q must be 1-63 lower-case letters, digits or underscores", c.Slot)
	}
	if c.Publication != "" && !legalName(c.Publication) {
		bad("publication", "%q must be 1-63 lower-case letters, digits or underscores", c.Publication)
	}
	if c.StatusInterval <= 0 || c.StatusInterval > 30*time.Second {
		bad("status_interval", "%s must be > 0 and at most 30s (below wal_sender_timeout)", c.StatusInterval)
	}
	if c.WalSenderTimeout != 0 && c.WalSenderTimeout < 3*c.StatusInterval {
		bad("wal_sender_timeout", "%s must be 0 (the server's) or at least 3 status intervals (%s)", c.WalSenderTimeout, 3*c.StatusInterval)
	}
	if c.ReceiveTimeout < 0 {
		bad("receive_timeout", "must be >= 0 (0 = derived from wal_sender_timeout)")
	} else if c.ReceiveTimeout > 0 {
		if c.ReceiveTimeout < 2*c.StatusInterval {
			bad("receive_timeout", "%s must be at least 2 status intervals (%s)", c.ReceiveTimeout, 2*c.StatusInterval)
		}
		if c.WalSenderTimeout > 0 && c.ReceiveTimeout <= c.WalSenderTimeout/2+c.StatusInterval {
			bad("receive_timeout", "%s must exceed half of source.wal_sender_timeout plus source.status_interval (%s): "+
				"while it decodes a large transaction the server answers a ping only every wal_sender_timeout/2",
				c.ReceiveTimeout, c.WalSenderTimeout/2+c.StatusInterval)
		}
	}
	if c.ConnectTimeout <= 0 {
		bad("connect_timeout", "must be > 0")
	}
	if c.QueryTimeout <= 0 {
		bad("query_timeout", "must be > 0")
	}
	if c.BufferBytes <= 0 {
		bad("buffer_bytes", "must be > 0")
	}
	if c.Heartbeat.Interval < 0 {
		bad("heartbeat.interval", "must be >= 0 (0 = off)")
	}
	for _, p := range c.Messages.all() {
		if p == heartbeatPrefix {
			bad("messages.prefix", "%q is reserved for the heartbeat", heartbeatPrefix)
		}
	}
	if c.Reconnect.Min <= 0 || c.Reconnect.Max < c.Reconnect.Min {
		bad("reconnect", "need 0 < min <= max (min %s, max %s)", c.Reconnect.Min, c.Reconnect.Max)
	}
	if c.LagInterval <= 0 {
		bad("lag_interval", "must be > 0")
	}
	return errors.Join(errs...)
}

// splitTable splits "schema.table" (schema defaults to public).
func splitTable(s string) (schema, table string, err error) {
	return source.SplitTable(s, "public", "schema")
}

// legalName reports whether s is usable as a replication slot name (and, by
// our choice, a publication name): [a-z0-9_]{1,63}.
func legalName(s string) bool {
	if len(s) == 0 || len(s) > 63 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

// DeriveName turns a connector name into a legal slot/publication name.
// A name that is legal as it stands (lower-case letters, digits and
// underscores, at most 52 of them) gives "outbox_cdc_" + name, as it always
// did, so deployed slots keep their names. Any other name has to be
// altered to fit (lower-cased, other characters replaced by '_', cut to
// length), and altering can map two connector names to one slot
// ("orders-outbox" and "orders_outbox", or two long names that share a
// prefix); such a name therefore ends in "_" and 8 hex digits of the
// SHA-256 of the connector name as given. An empty name gives "outbox_cdc".
func DeriveName(connector string) string {
	const prefix = "outbox_cdc"
	if connector == "" {
		return prefix
	}
	if clean := prefix + "_" + connector; legalName(clean) {
		return clean
	}
	sum := sha256.Sum256([]byte(connector))
	suffix := "_" + hex.EncodeToString(sum[:4])
	b := alterName(prefix + "_" + connector)
	if len(b) > 63-len(suffix) {
		b = b[:63-len(suffix)]
	}
	return string(b) + suffix
}

// legacyName is the name versions before the hash suffix derived from the
// connector name: altered to fit without a suffix. It differs from
// DeriveName only for names that had to be altered.
func legacyName(connector string) string {
	if connector == "" {
		return "outbox_cdc"
	}
	b := alterName("outbox_cdc_" + connector)
	if len(b) > 63 {
		b = b[:63]
	}
	return string(b)
}

// alterName lower-cases s and replaces every character that is not a
// letter, digit or underscore by '_'.
func alterName(s string) []byte {
	b := make([]byte, 0, len(s))
	for _, r := range strings.ToLower(s) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_' {
			b = append(b, byte(r))
		} else {
			b = append(b, '_')
		}
	}
	return b
}
