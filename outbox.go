// Package outboxcdc holds the few types the whole data path shares and the
// pipeline that wires a Source, a Router, a Sink and a Checkpointer together.
//
// Data flows one way:
//
//	Source --Tx--> pipeline --Event--> Router --Record--> Sink
//	                  |                                     |
//	                  +---- after every record is acked ----+
//	                  v
//	            Checkpointer.Save(Tx.End), then Source.Ack(Tx.End)
//
// The checkpoint is only ever the end position of a transaction whose
// records the sink has acknowledged, so a restart from it loses nothing and
// never starts inside a transaction.
package outboxcdc

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Position is a source position in text form, "<kind>:<body>". The kind
// names the source that issued it ("mysql", "postgres"); the body is opaque
// to everything but that source. The prefix lets a source refuse a
// checkpoint written by another kind of source.
type Position string

// Kind returns the prefix before the first colon, or "" if there is none.
func (p Position) Kind() string {
	k, _, ok := strings.Cut(string(p), ":")
	if !ok {
		return ""
	}
	return k
}

// Body returns the part after the kind prefix.
func (p Position) Body() string {
	_, b, _ := strings.Cut(string(p), ":")
	return b
}

// IsZero reports whether p is the empty position ("no checkpoint yet").
func (p Position) IsZero() bool { return p == "" }

// MakePosition joins a kind and a body.
func MakePosition(kind, body string) Position { return Position(kind + ":" + body) }

// CheckKind returns an error unless p was issued by a source of the given kind.
func (p Position) CheckKind(kind string) error {
	if p.Kind() != kind {
		return fmt.Errorf("%w: position %q was written by a %q source, this source is %q",
			ErrForeignPosition, string(p), p.Kind(), kind)
	}
	return nil
}

// ErrForeignPosition is wrapped by errors about a checkpoint that belongs to
// another kind of source.
var ErrForeignPosition = errors.New("checkpoint belongs to another source")

// Column is one non-role column of an outbox row, rendered as text (or raw
// bytes for binary columns).
type Column struct {
	Name  string
	Value []byte
	Null  bool
}

// Event is one committed INSERT into the outbox table. Sources fill the role
// fields from the columns a Router's preset names (see Columns); Extra holds
// the other columns the route asked for, in the order it asked for them.
//
// Payload and Extra values are handed on uncopied into Record values and
// headers: a source must not reuse their buffers after sending the Tx. The
// Event structs themselves may be reused once the Tx is released (see
// Tx.Pool), so nothing may keep a pointer to one.
type Event struct {
	MessageID     string
	AggregateType string
	AggregateID   string
	EventType     string
	// Payload is the payload column's bytes exactly as stored; nil means SQL
	// NULL and an empty non-nil slice means an empty value.
	Payload []byte
	Extra   []Column
	// CommitTime is the source transaction's commit time (second precision on
	// MySQL/MariaDB).
	CommitTime time.Time
	// Schema and Table name the outbox table the row was inserted into, as
	// the server names it: Schema is the MySQL/MariaDB database or the
	// Postgres schema. For a Postgres logical decoding message (no table)
	// Schema is empty and Table is the message's prefix. Routes use them
	// for {schema}, {database} and {table} and for per-table overrides.
	Schema string
	Table  string
	// Origin says where the row is in the source ("mariadb-bin.000003:1234 row 2",
	// "LSN 0/16B3748"), for error messages. It is not a resume position.
	Origin string
	// Invalid, when not empty, says why the source could not decode the row
	// into the role fields (a logical decoding message whose content is not
	// a JSON object); Payload then holds the content as stored. The router
	// rejects such an event with a *BadRowError giving this reason, so
	// pipeline.on_error decides what happens to it, as for any bad row.
	Invalid string
}

// Extra column lookup by name; ok is false when the column was not delivered.
func (e *Event) Column(name string) (Column, bool) {
	for _, c := range e.Extra {
		if c.Name == name {
			return c, true
		}
	}
	return Column{}, false
}

// Tx is the outbox events of one committed source transaction and the
// position just past its end. Transactions that touched no outbox row may be
// delivered with no events, so the checkpoint keeps moving on a busy server
// whose outbox is idle.
//
// A transaction too large to hold in memory may arrive in fragments: several
// Tx values in order, every one but the last with More set and End zero.
// The pipeline may write the records of earlier fragments before the last
// arrives, but never checkpoints between fragments, so a restart re-reads
// the whole transaction. A source sends a fragment only once no row in it
// can still be undone: the MySQL binlog can carry rows that a later
// ROLLBACK TO SAVEPOINT, or the ROLLBACK of a transaction that also wrote a
// non-transactional table, takes back.
type Tx struct {
	// Events are the outbox rows; in a fragment at most about
	// MaxFragmentEvents of them and MaxFragmentBytes of payload.
	Events []Event
	// End is the position just past the transaction's end; zero on a
	// fragment with More set.
	End        Position
	CommitTime time.Time
	// More says further fragments of the same source transaction follow.
	More bool
	// Pool, when set, is the source's pool that Events came from: the
	// consumer of the Tx gives the slice back with Release once it reads
	// none of the Events any more, and the source fills it again for a
	// later transaction. A consumer that never releases only costs the
	// source an allocation.
	Pool *EventPool
}

// Release gives tx.Events back to tx.Pool (if set), to be zeroed and
// reused: the caller must not read or write any of the Events afterwards,
// nor keep a pointer to one, and must release a Tx once (a copy of it is
// the same Tx). What the Events point to (payloads, strings, Extra) is not
// reused and may stay shared. The pipeline releases a Tx after the records
// made from it were acknowledged.
func (tx *Tx) Release() {
	if tx.Pool != nil {
		tx.Pool.Put(tx.Events)
	}
}

// Fragment bounds: a source holds at most this much of one transaction in
// memory before it sends what it has as a fragment (Tx.More), so the
// connector's memory does not grow with the size of a source transaction.
const (
	MaxFragmentEvents = 4096
	MaxFragmentBytes  = 4 << 20
)

// Header is a Kafka record header. A nil Value is a null header value, an
// empty non-nil one an empty value; sinks keep the difference.
type Header struct {
	Key   string
	Value []byte
}

// Record is what a Sink writes: a Kafka-agnostic message. The sink chooses
// the partition from Key (Java-compatible murmur2 for Kafka).
type Record struct {
	Topic   string
	Key     []byte // nil: null key
	Value   []byte // nil: tombstone
	Headers []Header
	// Timestamp is the record timestamp (route.timestamp); zero means the
	// time the sink produces the record.
	Timestamp time.Time
	// Partition, when set, is the partition to write to (Debezium's
	// "partition" placement of a column); nil lets the sink pick it from
	// Key.
	Partition *int32
	// MessageID and EventType are the row's message id and event type as
	// stored, for sinks whose protocol has a place for them (AMQP
	// message_id and type, JetStream's Nats-Msg-Id, a Redis stream entry
	// field). The Kafka sinks do not use them: the route's headers carry
	// the same.
	MessageID string
	EventType string
	// Warning, when set, says why the route sent the row otherwise than
	// configured, as Debezium does: route.expand_json_payload sent the
	// payload as text because it could not be expanded. The pipeline logs
	// it (rate-limited); sinks ignore it.
	Warning string
}

// Size is an estimate of the record's bytes in memory and on the wire, used
// to bound batches.
func (r *Record) Size() int {
	n := len(r.Topic) + len(r.Key) + len(r.Value) + 32
	for _, h := range r.Headers {
		n += len(h.Key) + len(h.Value) + 8
	}
	return n
}

// Columns names the outbox table's role columns. A Router's preset decides
// them; a Source uses them to fill Event. Extra lists further columns the
// route wants (for headers); a source delivers those it finds.
type Columns struct {
	MessageID     string
	AggregateType string
	AggregateID   string
	EventType     string
	Payload       string
	Extra         []string
	// OnUpdate is what the source does with an UPDATE of an outbox row:
	// "skip" or "" (count it), "warn" or "error" (count it and log at that
	// level), "fatal" (stop with an *UpdateError). See UpdateSeen.
	OnUpdate string
	// Tables overrides the role and extra columns for single tables, keyed
	// "schema.table" (MySQL: "database.table") as route.tables names them;
	// tables not listed use the fields above. See For.
	Tables map[string]Columns
}

// For returns the columns of the table schema.table: its entry in Tables
// when there is one (the exact name first, then one differing only in
// letter case), else c itself without Tables.
func (c *Columns) For(schema, table string) Columns {
	if len(c.Tables) > 0 {
		key := schema + "." + table
		if t, ok := c.Tables[key]; ok {
			return t
		}
		for k, t := range c.Tables {
			if strings.EqualFold(k, key) {
				return t
			}
		}
	}
	d := *c
	d.Tables = nil
	return d
}

// Source delivers committed outbox transactions in commit order.
type Source interface {
	// Run connects and streams, starting just after from (or, when from is
	// zero, where the source's start setting says), sending one Tx per
	// committed source transaction to out in commit order. It reconnects by
	// itself after transient failures, resuming after the last Tx it sent,
	// and never sends a transaction twice or in part. Run returns when ctx is
	// done (with ctx.Err()) or on a permanent error; it is called once, from
	// the pipeline's reader goroutine, and never closes out.
	Run(ctx context.Context, from Position, out chan<- Tx) error
	// Ack says every transaction up to and including the one ending at pos
	// is durably checkpointed, so the server may release it (Postgres
	// confirms it to the slot). It is called from the pipeline's saver
	// goroutine, concurrently with Run, with non-decreasing positions, and
	// must not block.
	Ack(pos Position)
	// Ready returns nil while the source is connected and streaming, or an
	// error saying why not. Safe to call from any goroutine.
	Ready() error
}

// StartReporter is implemented by a Source whose Run, given no checkpoint,
// resolves its start setting into a position of its own: the server's
// current or oldest binlog position, the replication slot's position, the
// first position of a pending backfill (the stream position taken with its
// snapshot). The start is a position like any other: until it is durable,
// a restart resolves the setting again, later, and every row committed in
// between is skipped. So the pipeline saves it before it reads a Tx.
type StartReporter interface {
	// ReportStart gives the source the function to call with its resolved
	// start. The pipeline calls ReportStart once, before Run, from the
	// goroutine that calls Run. Run calls report at most once, and only
	// when it was given a zero from: from its own goroutine (the
	// pipeline's reader goroutine), once the start is known and before it
	// sends any Tx, and it sends none until report returns. report returns
	// nil once the position is durable (saved to the checkpoint store; in
	// exactly-once mode committed as a progress record); on an error Run
	// returns it (wrapped), having sent nothing.
	ReportStart(report func(ctx context.Context, start Position) error)
}

// Sink writes records to the destination.
type Sink interface {
	// Write sends records and returns nil only once every one of them is
	// durably acknowledged (for Kafka: acks=all). Records with the same key
	// keep their order. On an error, any subset of the records may have been
	// written; the pipeline stops and the caller restarts from the last
	// checkpoint (at-least-once). Retryable failures (broker down) are
	// retried inside Write until ctx is done; an error returned is permanent
	// or ctx's. Called from one goroutine at a time.
	Write(ctx context.Context, records []Record) error
	// Ready returns nil while the sink can reach its destination.
	Ready() error
	// Close flushes and releases resources.
	Close() error
}

// FencedSink is a Sink that can ask a fence before every request it sends
// to the broker, retries included, so that a write already handed to it
// sends nothing more once the fence refuses (the HA lock's lease expired:
// another instance may be writing). The pipeline checks the same fence
// before each Write; this closes the window inside a Write (a retry after
// a timeout that ran out while the process was frozen). SetFence is called
// once, before the first Write; fence is called from the sink's sending
// goroutines, must be cheap and must not call into the sink.
type FencedSink interface {
	Sink
	SetFence(fence func() error)
}

// AtomicSink is a Sink that can store the source position together with a
// batch of records in one atomic write (a Kafka transaction holding the
// records and a progress record). With it the pipeline needs no separate
// Checkpointer: consumers reading committed data see every row exactly once.
type AtomicSink interface {
	Sink
	// Load returns the position stored by the last committed WriteAtomic,
	// or a zero Position when there is none. Called once, before writing.
	Load(ctx context.Context) (Position, error)
	// WriteAtomic makes records and end visible together or not at all.
	// records may be empty (progress only). An error means nothing of this
	// call became visible (or, if the outcome is unknown, the caller must
	// restart and Load again). A zero end (a batch that stops inside a
	// fragmented transaction, see Tx.More) adds records to the open atomic
	// write; they become visible with the next call whose end is not zero,
	// or not at all. When a call fails after earlier zero-end calls added
	// records, the whole open write is aborted and the error wraps
	// ErrOpenWriteAborted: the caller cannot retry that call alone and must
	// stop; a restart reads the transaction again from the stored position.
	WriteAtomic(ctx context.Context, records []Record, end Position) error
}

// ErrOpenWriteAborted is wrapped by AtomicSink.WriteAtomic errors that
// aborted an open atomic write holding records of earlier calls.
var ErrOpenWriteAborted = errors.New("the open atomic write (records of earlier batches of this source transaction) was aborted")

// Checkpointer stores the position the connector resumes from.
type Checkpointer interface {
	// Load returns the saved position, or a zero Position and nil when none
	// was ever saved. A store that exists but cannot be trusted (corrupt,
	// truncated, unreadable) is an error, never a zero Position.
	Load(ctx context.Context) (Position, error)
	// Save durably stores pos; when it returns nil the position survives a
	// crash of the process and of the machine. Called from the pipeline's
	// saver goroutine, one call at a time; the first save of a connector
	// without a checkpoint (its resolved start, see StartReporter) comes
	// from the reader goroutine, before the saver has anything to save.
	Save(ctx context.Context, pos Position) error
}

// BadRowError is a row the route cannot turn into a record (NULL key, NULL
// message id, ...). It is permanent: the connector stops rather than skip it.
type BadRowError struct {
	Origin    string
	MessageID string
	Reason    string
}

func (e *BadRowError) Error() string {
	id := e.MessageID
	if id == "" {
		id = "(none)"
	}
	return fmt.Sprintf("bad outbox row at %s (message id %s): %s", e.Origin, id, e.Reason)
}
