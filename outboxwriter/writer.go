// Package outboxwriter is the writing end of the transactional outbox: a
// service records its events in the transaction that changes its own rows,
// and the relay (outbox-cdc) delivers them once that transaction commits.
//
//	tx, _ := db.BeginTx(ctx, nil)
//	tx.ExecContext(ctx, "UPDATE orders SET state = 'PAID' WHERE order_no = ?", no)
//	w.Record(ctx, tx, outboxwriter.Event{AggregateType: "ORDER", AggregateID: no,
//		EventType: "ORDER_PAID", Payload: paid})
//	tx.Commit()
//
// What it guarantees:
//
//   - Nothing outside the caller's transaction. Record only runs statements
//     on the transaction it is given, so a rollback leaves no outbox row
//     and a commit makes the business change and its events durable
//     together. The transaction parameters require Commit and Rollback
//     methods, which Record never calls: a *sql.DB or a pool, on which
//     every statement would commit by itself, does not compile.
//   - One message-id policy: UUIDv7 unless the event carries its own id or
//     Config.NewID says otherwise. Version 7 ids grow with time, which
//     keeps the unique index on the message id append-mostly.
//   - One payload serialization: encoding/json (HTML characters not
//     escaped) unless Config.Encode says otherwise; a json.RawMessage is
//     written as it is, after a validity check.
//   - The names the relay reads: a Layout (the seed and Debezium presets,
//     or LayoutFromRoute from the relay's own route configuration) names
//     the table, the role columns and the columns behind each header.
//   - Several events of one call are inserted by one statement (a
//     multi-row INSERT; beyond 500 rows or 4 MiB, one statement per chunk),
//     in the order given, so the relay delivers them in that order.
//   - PostgreSQL without a table: with Config.MessagePrefix each event is
//     a transactional logical decoding message
//     (pg_logical_emit_message(true, prefix, content)), the relay's
//     source.messages.prefix form; it too disappears with a rollback.
//   - Optionally a per-aggregate sequence (Config.Sequence) in a header,
//     numbered in commit order, from which a consumer can tell a gap or a
//     reorder (see outboxconsumer.OrderCheck).
//
// A Writer is immutable after New and safe for concurrent use; the
// transactions it is given are not (database/sql and pgx transactions are
// used from one goroutine at a time).
package outboxwriter

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"sort"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Dialect is the SQL dialect of the database holding the outbox.
type Dialect int

const (
	// MySQL is MySQL or MariaDB (go-sql-driver/mysql).
	MySQL Dialect = iota + 1
	// Postgres is PostgreSQL (pgx, or pgx's database/sql driver).
	Postgres
)

func (d Dialect) String() string {
	switch d {
	case MySQL:
		return "mysql"
	case Postgres:
		return "postgres"
	}
	return fmt.Sprintf("Dialect(%d)", int(d))
}

// Event is one outbox event.
type Event struct {
	// MessageID is the event's unique id, the one consumers dedupe on;
	// empty: Config.NewID makes one (UUIDv7 by default).
	MessageID string
	// AggregateType routes the event (the relay's {aggregate_type}, by
	// default the topic), AggregateID is its record key (one aggregate's
	// events stay in order), EventType names what happened. All three are
	// required.
	AggregateType string
	AggregateID   string
	EventType     string
	// Payload is encoded by Config.Encode (JSON by default); a
	// json.RawMessage is written as it is. A nil Payload is refused: the
	// relay would refuse the row.
	Payload any
	// Headers are the values of further record headers, by the header
	// name consumers see; each must be in Layout.Headers, which says the
	// column. A nil value is SQL NULL; a header left out gets the column's
	// default.
	Headers map[string]any
	// Sequence is the event's number among its aggregate's events
	// (1, 2, ...), written to the header Config.Sequence.Header names.
	// Zero: the writer numbers it when Config.Sequence.Table is set, or
	// writes none. Give it when the aggregate already has a version
	// column incremented in the same transaction.
	Sequence int64
}

// Config configures a Writer.
type Config struct {
	// Dialect of the database: MySQL or Postgres. Required.
	Dialect Dialect
	// Layout names the table and columns. Required (except Table with
	// MessagePrefix).
	Layout Layout
	// MessagePrefix, when set (PostgreSQL only), writes every event as a
	// transactional logical decoding message with this prefix instead of
	// an outbox row; the relay reads them with source.messages.prefix set
	// to the same value. The content is the relay's format (wal.MessageFormat):
	// a JSON object with message_id, aggregate_type, aggregate_id,
	// event_type, payload and each header's column as a member.
	MessagePrefix string
	// NewID returns a new message id; nil: UUIDv7.
	NewID func() (string, error)
	// Encode serializes a payload; nil: encoding/json without HTML
	// escaping. With MessagePrefix the result must be JSON.
	Encode func(v any) ([]byte, error)
	// Sequence, when set, writes each event's per-aggregate sequence.
	Sequence *SequenceConfig
}

// SequenceConfig numbers each aggregate's events.
type SequenceConfig struct {
	// Header is the header (in Layout.Headers) whose column holds the
	// number; the route lists the column in route.headers so consumers
	// receive it.
	Header string
	// Table, when set, is a counter table (SequenceTableDDL) from which
	// the writer numbers events whose Sequence is zero: one upsert per
	// aggregate per call, in the caller's transaction. The counter's row
	// lock is held until that transaction ends, so the numbers of one
	// aggregate follow its commit order: the relay, which delivers in
	// commit order, delivers them in ascending order. The lock also
	// serializes the transactions that write events of one aggregate. On
	// MySQL/MariaDB, transactions that create the counter of the same new
	// aggregate at once, one of them rolling back, can deadlock; the
	// server rolls one back with error 1213, which the application retries
	// as any deadlock. Empty: every event must carry its own Sequence.
	Table string
}

// Writer records events in the caller's transaction.
type Writer struct {
	cfg     Config
	encode  func(v any) ([]byte, error)
	newID   func() (string, error)
	seqCol  string // the sequence header's column, "" without Sequence
	headers []string
}

// New validates cfg and returns a Writer.
func New(cfg Config) (*Writer, error) {
	switch cfg.Dialect {
	case MySQL, Postgres:
	default:
		return nil, errors.New("outboxwriter: Config.Dialect must be MySQL or Postgres")
	}
	if cfg.MessagePrefix != "" && cfg.Dialect != Postgres {
		return nil, errors.New("outboxwriter: Config.MessagePrefix (logical decoding messages) needs PostgreSQL")
	}
	if err := cfg.Layout.validate(cfg.MessagePrefix == ""); err != nil {
		return nil, err
	}
	w := &Writer{cfg: cfg, encode: cfg.Encode, newID: cfg.NewID}
	if w.encode == nil {
		w.encode = encodeJSON
	}
	if w.newID == nil {
		w.newID = newUUIDv7
	}
	for h := range cfg.Layout.Headers {
		w.headers = append(w.headers, h)
	}
	sort.Strings(w.headers)
	if s := cfg.Sequence; s != nil {
		col, ok := cfg.Layout.Headers[s.Header]
		if !ok {
			return nil, fmt.Errorf("outboxwriter: Config.Sequence.Header %q is not in Layout.Headers (the route must send its column as a header)", s.Header)
		}
		w.seqCol = col
	}
	return w, nil
}

// SQLTx is a database/sql transaction (*sql.Tx), MySQL/MariaDB or
// PostgreSQL. Record never calls Commit or Rollback: they are there so that
// only a transaction fits.
type SQLTx interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	Commit() error
	Rollback() error
}

// PgxTx is a pgx transaction (pgx.Tx, from a *pgx.Conn or a pgxpool.Pool).
// RecordPgx never calls Commit or Rollback: they are there so that only a
// transaction fits.
type PgxTx interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	Commit(ctx context.Context) error
	Rollback(ctx context.Context) error
}

// Record inserts events into the outbox in tx, in order, and returns
// their message ids. Nothing is written unless every event is valid; on an
// error the caller rolls tx back (some statements of the call may have
// run). The events become visible to the relay when tx commits.
func (w *Writer) Record(ctx context.Context, tx SQLTx, events ...Event) ([]string, error) {
	return w.record(ctx, sqlConn{tx}, events)
}

// RecordPgx is Record for a pgx transaction (PostgreSQL).
func (w *Writer) RecordPgx(ctx context.Context, tx PgxTx, events ...Event) ([]string, error) {
	if w.cfg.Dialect != Postgres {
		return nil, errors.New("outboxwriter: RecordPgx needs Config.Dialect Postgres")
	}
	return w.record(ctx, pgxConn{tx}, events)
}

// row is one event ready to write.
type row struct {
	id, aggType, aggID, evType string
	payload                    []byte
	headers                    map[string]any // column -> value
	seq                        int64
}

func (w *Writer) record(ctx context.Context, c conn, events []Event) ([]string, error) {
	if len(events) == 0 {
		return nil, nil
	}
	rows := make([]row, len(events))
	for i := range events {
		if err := w.prepare(&events[i], &rows[i]); err != nil {
			return nil, fmt.Errorf("outboxwriter: event %d: %w", i, err)
		}
	}
	if w.cfg.Sequence != nil {
		if err := w.number(ctx, c, rows); err != nil {
			return nil, err
		}
	}
	var err error
	if w.cfg.MessagePrefix != "" {
		err = w.emit(ctx, c, rows)
	} else {
		err = w.insert(ctx, c, rows)
	}
	if err != nil {
		return nil, err
	}
	ids := make([]string, len(rows))
	for i := range rows {
		ids[i] = rows[i].id
	}
	return ids, nil
}

// prepare checks ev and fills r.
func (w *Writer) prepare(ev *Event, r *row) error {
	for _, f := range []struct{ name, v string }{
		{"AggregateType", ev.AggregateType}, {"AggregateID", ev.AggregateID}, {"EventType", ev.EventType},
	} {
		if f.v == "" {
			return fmt.Errorf("%s is empty", f.name)
		}
	}
	if ev.Payload == nil {
		return errors.New("Payload is nil (give json.RawMessage(\"{}\") for an empty object)")
	}
	if ev.Sequence < 0 {
		return fmt.Errorf("Sequence %d is negative", ev.Sequence)
	}
	if ev.Sequence > 0 && w.cfg.Sequence == nil {
		return errors.New("Sequence is set but Config.Sequence is not")
	}
	if ev.Sequence == 0 && w.cfg.Sequence != nil && w.cfg.Sequence.Table == "" {
		return errors.New("Sequence is zero and Config.Sequence.Table is not set to number it")
	}
	r.id = ev.MessageID
	if r.id == "" {
		id, err := w.newID()
		if err != nil {
			return fmt.Errorf("new message id: %w", err)
		}
		if id == "" {
			return errors.New("Config.NewID returned an empty id")
		}
		r.id = id
	}
	r.aggType, r.aggID, r.evType, r.seq = ev.AggregateType, ev.AggregateID, ev.EventType, ev.Sequence
	var err error
	if raw, ok := ev.Payload.(json.RawMessage); ok {
		if !json.Valid(raw) {
			return errors.New("Payload is a json.RawMessage that is not valid JSON")
		}
		r.payload = raw
	} else if r.payload, err = w.encode(ev.Payload); err != nil {
		return fmt.Errorf("encode payload: %w", err)
	}
	if w.cfg.MessagePrefix != "" && !json.Valid(r.payload) {
		return errors.New("the encoded payload is not JSON, which a logical decoding message needs")
	}
	for h, v := range ev.Headers {
		col, ok := w.cfg.Layout.Headers[h]
		if !ok {
			return fmt.Errorf("header %q is not in Layout.Headers: the relay would not send it (add its column to route.headers and the layout)", h)
		}
		if col == w.seqCol {
			return fmt.Errorf("header %q is the sequence; set Event.Sequence", h)
		}
		if r.headers == nil {
			r.headers = make(map[string]any, len(ev.Headers))
		}
		r.headers[col] = v
	}
	return nil
}

func encodeJSON(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte{'\n'}), nil
}

func newUUIDv7() (string, error) {
	u, err := uuid.NewV7()
	if err != nil {
		return "", err
	}
	return u.String(), nil
}

// conn is the transaction Record writes through.
type conn interface {
	exec(ctx context.Context, q string, args []any) error
	// query runs q and calls scan once per row.
	query(ctx context.Context, q string, args []any, scan func(func(dest ...any) error) error) error
}

type sqlConn struct{ tx SQLTx }

func (c sqlConn) exec(ctx context.Context, q string, args []any) error {
	_, err := c.tx.ExecContext(ctx, q, args...)
	return err
}

func (c sqlConn) query(ctx context.Context, q string, args []any, scan func(func(dest ...any) error) error) error {
	rows, err := c.tx.QueryContext(ctx, q, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := scan(rows.Scan); err != nil {
			return err
		}
	}
	return rows.Err()
}

type pgxConn struct{ tx PgxTx }

func (c pgxConn) exec(ctx context.Context, q string, args []any) error {
	_, err := c.tx.Exec(ctx, q, args...)
	return err
}

func (c pgxConn) query(ctx context.Context, q string, args []any, scan func(func(dest ...any) error) error) error {
	rows, err := c.tx.Query(ctx, q, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := scan(rows.Scan); err != nil {
			return err
		}
	}
	return rows.Err()
}
