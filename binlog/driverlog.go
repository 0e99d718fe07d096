package binlog

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"strings"

	"github.com/go-mysql-org/go-mysql/replication"
	mysqldriver "github.com/go-sql-driver/mysql"
	"github.com/rs/zerolog"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
)

// The drivers' own log lines (go-mysql's replication client logs through
// log/slog, go-sql-driver through its Logger interface, both plain text to
// stderr by default) go through the connector's zerolog logger, so a JSON
// log stays all JSON. Neither carries payloads; go-mysql's syncer
// configuration, which holds the password, is dropped.

// openDB opens the source's database/sql pool with the driver's messages
// going to the source's logger.
func (s *Source) openDB() *sql.DB {
	dc := s.dsn.Clone()
	dc.Logger = SQLDriverLogger(s.baseLog)
	conn, err := mysqldriver.NewConnector(dc)
	if err != nil { // not expected: dc was parsed from the validated DSN
		db, _ := sql.Open("mysql", s.cfg.DSN)
		return db
	}
	return sql.OpenDB(conn)
}

// SQLDriverLogger adapts log to go-sql-driver's Logger: each message is a
// warning with component "mysql-driver". cmd installs it as the driver's
// default (mysql.SetLogger) for the process's other MySQL connections.
func SQLDriverLogger(log zerolog.Logger) mysqldriver.Logger {
	return sqlDriverLogger{log.With().Str("component", "mysql-driver").Logger()}
}

type sqlDriverLogger struct{ log zerolog.Logger }

func (l sqlDriverLogger) Print(v ...any) {
	l.log.Warn().Msg(strings.TrimSpace(fmt.Sprint(v...)))
}

// replicationLogger is the slog logger the binlog syncer writes to: its
// info lines (connecting, closing, rotating) become debug lines, as the
// source logs the same events itself at info. Once closing reports true
// (nil: never) its errors and warnings are debug lines too: the session
// closes the syncer's connection itself then (a stop, or an error the
// source returns), and the syncer's reports of that ("io.ReadFull(header)
// failed ... use of closed network connection", "retry sync is disabled",
// "could not set read deadline") are consequences, not faults.
func replicationLogger(log zerolog.Logger, closing func() bool) *slog.Logger {
	return slog.New(&zerologHandler{log: log.With().Str("component", "binlog-driver").Logger(), closing: closing})
}

// zerologHandler is a slog.Handler writing to a zerolog.Logger.
type zerologHandler struct {
	log     zerolog.Logger
	attrs   []slog.Attr
	prefix  string      // group names joined by "."
	closing func() bool // see replicationLogger
}

// level is the zerolog level of a record at l.
func (h *zerologHandler) level(l slog.Level) zerolog.Level {
	z := zerologLevel(l)
	if z > zerolog.DebugLevel && h.closing != nil && h.closing() {
		return zerolog.DebugLevel
	}
	return z
}

func zerologLevel(l slog.Level) zerolog.Level {
	switch {
	case l >= slog.LevelError:
		return zerolog.ErrorLevel
	case l >= slog.LevelWarn:
		return zerolog.WarnLevel
	}
	return zerolog.DebugLevel
}

func (h *zerologHandler) Enabled(_ context.Context, l slog.Level) bool {
	return h.level(l) >= h.log.GetLevel() && h.level(l) >= zerolog.GlobalLevel()
}

func (h *zerologHandler) Handle(_ context.Context, r slog.Record) error {
	ev := h.log.WithLevel(h.level(r.Level))
	if ev == nil {
		return nil
	}
	keys := outboxcdc.NewLogKeys() // slog allows a key twice; a line of ours does not
	for _, a := range h.attrs {
		addAttr(ev, keys, "", a)
	}
	r.Attrs(func(a slog.Attr) bool {
		addAttr(ev, keys, h.prefix, a)
		return true
	})
	ev.Msg(r.Message)
	return nil
}

func (h *zerologHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	c := *h
	c.attrs = append(append([]slog.Attr(nil), h.attrs...), prefixed(h.prefix, attrs)...)
	return &c
}

func (h *zerologHandler) WithGroup(name string) slog.Handler {
	c := *h
	if c.prefix != "" {
		c.prefix += "."
	}
	c.prefix += name
	return &c
}

func prefixed(prefix string, attrs []slog.Attr) []slog.Attr {
	if prefix == "" {
		return attrs
	}
	out := make([]slog.Attr, len(attrs))
	for i, a := range attrs {
		out[i] = slog.Attr{Key: prefix + "." + a.Key, Value: a.Value}
	}
	return out
}

// addAttr adds a as a field, leaving out anything that may hold a
// password: the syncer's configuration and keys naming one.
func addAttr(ev *zerolog.Event, keys outboxcdc.LogKeys, prefix string, a slog.Attr) {
	a.Value = a.Value.Resolve()
	key := a.Key
	if prefix != "" {
		key = prefix + "." + key
	}
	lk := strings.ToLower(a.Key)
	if lk == "config" || strings.Contains(lk, "password") || strings.Contains(lk, "passwd") {
		return
	}
	if a.Value.Kind() == slog.KindGroup {
		for _, g := range a.Value.Group() {
			addAttr(ev, keys, key, g)
		}
		return
	}
	key = keys.Unique(key)
	switch a.Value.Kind() {
	case slog.KindString:
		ev.Str(key, a.Value.String())
	case slog.KindInt64:
		ev.Int64(key, a.Value.Int64())
	case slog.KindUint64:
		ev.Uint64(key, a.Value.Uint64())
	case slog.KindFloat64:
		ev.Float64(key, a.Value.Float64())
	case slog.KindBool:
		ev.Bool(key, a.Value.Bool())
	case slog.KindDuration:
		ev.Dur(key, a.Value.Duration())
	case slog.KindTime:
		ev.Time(key, a.Value.Time())
	default:
		switch v := a.Value.Any().(type) {
		case replication.BinlogSyncerConfig, *replication.BinlogSyncerConfig:
			return
		case error:
			ev.Str(key, v.Error())
		case fmt.Stringer:
			ev.Str(key, v.String())
		default:
			ev.Str(key, fmt.Sprint(v))
		}
	}
}
