package wal

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"time"
	"unsafe"

	"github.com/jackc/pglogrepl"
	"github.com/rs/zerolog"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
)

// pgoutput message bytes (protocol "Logical Replication Message Formats").
const (
	msgBegin    = 'B'
	msgCommit   = 'C'
	msgOrigin   = 'O'
	msgRelation = 'R'
	msgType     = 'Y'
	msgInsert   = 'I'
	msgUpdate   = 'U'
	msgDelete   = 'D'
	msgTruncate = 'T'
	msgMessage  = 'M'
)

const byteaOID = 17

// Role indexes into relation.role.
const (
	roleMessageID = iota
	roleAggregateType
	roleAggregateID
	roleEventType
	rolePayload
	numRoles
)

var roleYAML = [numRoles]string{"message_id", "aggregate_type", "aggregate_id", "event_type", "payload"}

// errProtocol marks a pgoutput stream we cannot make sense of.
var errProtocol = errors.New("unexpected pgoutput message")

// relation is the decoded shape of one relation, rebuilt on every Relation
// message so that ALTER TABLE mid-stream is picked up. Role and extra column
// indexes are resolved here, once, not per row.
type relation struct {
	outbox  bool
	schema  string            // the relation's schema and name
	name    string            // (outbox relations only)
	cols    outboxcdc.Columns // its role columns (route.tables)
	ncols   int
	bytea   []bool
	role    [numRoles]int // column index, -1 when the role is unnamed
	extra   []extraCol    // requested extras that exist, in request order
	missing int           // role whose column is missing, or -1
}

type extraCol struct {
	name string
	idx  int
}

type colRef struct {
	kind byte
	off  int
	n    int
}

// decoder turns pgoutput messages into outbox transactions. It is owned by
// the goroutine reading the replication stream and is rebuilt on every
// connection (pgoutput resends Relation messages on each new stream).
type decoder struct {
	schema, table string
	prefix        string
	// prefixes, when set, replaces prefix: every message prefix read.
	prefixes []string
	// match, when set, replaces schema and table: source.tables.
	match      tableMatcher
	cols       outboxcdc.Columns
	metrics    *outboxcdc.SourceMetrics
	onNonTxMsg func(lsn pglogrepl.LSN)
	log        zerolog.Logger // route.on_update: warn and error

	rels    map[uint32]*relation
	lastID  uint32
	lastRel *relation
	refs    []colRef

	inTx       bool
	final      pglogrepl.LSN // the open transaction's commit LSN (Begin)
	commitTime time.Time
	events     []outboxcdc.Event
	txBytes    int
	pieces     int // fragments of the open transaction handed on
	rowsHint   int // events of the last transaction with any (hold)
	// pool is where events come from (Source.pool); they go out in a Tx
	// with Pool set, and the pipeline gives them back.
	pool *outboxcdc.EventPool

	// skipBelow: a transaction whose commit LSN is below it was handed on
	// before (the stream's start position); skipTx marks the open one so.
	skipBelow pglogrepl.LSN
	skipTx    bool
	// resumeFinal and resumeSent: a transaction of which resumeSent events
	// were handed on as fragments before the connection was lost; the
	// server sends it again from its start, and those events are dropped.
	resumeFinal pglogrepl.LSN
	resumeSent  int
	skipEvents  int
}

func newDecoder(schema, table, prefix string, cols outboxcdc.Columns, m *outboxcdc.SourceMetrics) *decoder {
	return &decoder{
		schema: schema, table: table, prefix: prefix, cols: cols, metrics: m,
		rels: make(map[uint32]*relation),
	}
}

// txOut is what the decoder hands on: a whole transaction at its Commit
// (more false), or the events decoded so far when the open transaction
// reached the fragment bounds (more true, end zero). pgoutput without
// streaming sends a transaction only after it committed, so a fragment is
// never undone.
type txOut struct {
	final      pglogrepl.LSN // the transaction's commit LSN
	end        pglogrepl.LSN // TransactionEndLSN; zero on a fragment
	commitTime time.Time
	events     []outboxcdc.Event
	bytes      int
	more       bool
	// pieces is how many fragments of this transaction were handed on
	// before this one (in this connection).
	pieces int
}

// resume makes the decoder drop what an earlier connection already handed
// on: transactions that commit before from, and the first sent events of
// the transaction committing at final (0: none).
func (d *decoder) resume(from, final pglogrepl.LSN, sent int) {
	d.skipBelow, d.resumeFinal, d.resumeSent = from, final, sent
}

// full reports whether the open transaction reached a fragment bound.
func (d *decoder) full() bool {
	return len(d.events) >= outboxcdc.MaxFragmentEvents || d.txBytes >= outboxcdc.MaxFragmentBytes
}

// hold appends ev to the open transaction. A transaction's first event
// gets room for as many as the last transaction had (rowsHint), so a
// stream of equal transactions takes one slice from the pool for each
// (which the pipeline gives back) instead of growing it by doubling.
func (d *decoder) hold(ev outboxcdc.Event) {
	if len(d.events) == cap(d.events) {
		more := cap(d.events)
		if len(d.events) == 0 {
			more = max(1, min(d.rowsHint, outboxcdc.MaxFragmentEvents))
		}
		d.events = d.pool.Grow(d.events, more)
	}
	d.events = append(d.events, ev)
}

// fragment hands on the events of the open transaction decoded so far.
func (d *decoder) fragment() *txOut {
	out := &txOut{final: d.final, commitTime: d.commitTime, events: d.events, bytes: d.txBytes, more: true, pieces: d.pieces}
	d.events = d.pool.Get(len(out.events))
	d.txBytes = 0
	d.pieces++
	return out
}

// handle decodes one pgoutput message whose WAL position is lsn. It returns
// a non-nil *txOut at a Commit, or when the open transaction fills a
// fragment. Errors are permanent (bad input or a role column gone), except
// errProtocol ones which the caller may retry.
func (d *decoder) handle(data []byte, lsn pglogrepl.LSN) (*txOut, error) {
	if len(data) == 0 {
		return nil, fmt.Errorf("%w: empty message at LSN %s", errProtocol, lsn)
	}
	body := data[1:]
	switch data[0] {
	case msgBegin:
		if len(body) < 20 {
			return nil, fmt.Errorf("%w: short Begin at LSN %s", errProtocol, lsn)
		}
		if d.inTx {
			return nil, fmt.Errorf("%w: Begin inside a transaction at LSN %s", errProtocol, lsn)
		}
		d.inTx = true
		d.final = pglogrepl.LSN(binary.BigEndian.Uint64(body[0:8]))
		d.commitTime = pgTime(body[8:16])
		d.events = nil
		d.txBytes = 0
		d.pieces = 0
		d.skipTx = d.final < d.skipBelow
		d.skipEvents = 0
		if d.resumeFinal != 0 && !d.skipTx {
			if d.final != d.resumeFinal {
				return nil, fmt.Errorf("transaction committed at LSN %s was partly handed on before the connection was lost, "+
					"but the server resumed with the transaction committed at LSN %s instead: the slot was moved by something else "+
					"(pg_replication_slot_advance, another connector on the same slot)", d.resumeFinal, d.final)
			}
			d.skipEvents, d.resumeFinal = d.resumeSent, 0
		}
	case msgCommit:
		if len(body) < 25 {
			return nil, fmt.Errorf("%w: short Commit at LSN %s", errProtocol, lsn)
		}
		if !d.inTx {
			return nil, fmt.Errorf("%w: Commit outside a transaction at LSN %s", errProtocol, lsn)
		}
		skip := d.skipTx
		if n := len(d.events); n > 0 {
			d.rowsHint = n
			if cap(d.events) > 2*n {
				// Room reserved for a larger transaction than this one:
				// not held while the rows wait for delivery.
				small := append(d.pool.Get(n), d.events...)
				d.pool.Put(d.events)
				d.events = small
			}
		}
		c := &txOut{
			final:      d.final,
			end:        pglogrepl.LSN(binary.BigEndian.Uint64(body[9:17])),
			commitTime: pgTime(body[17:25]),
			events:     d.events,
			bytes:      d.txBytes,
			pieces:     d.pieces,
		}
		d.inTx, d.events, d.txBytes, d.pieces, d.skipTx = false, nil, 0, 0, false
		if skip {
			return nil, nil // sent before this connection started
		}
		return c, nil
	case msgRelation:
		var rm pglogrepl.RelationMessage
		if err := decodeSafely(rm.Decode, body); err != nil {
			return nil, fmt.Errorf("%w: Relation at LSN %s: %v", errProtocol, lsn, err)
		}
		d.relation(&rm)
	case msgInsert:
		if err := d.insert(body, lsn); err != nil {
			return nil, err
		}
		if d.inTx && d.full() {
			return d.fragment(), nil
		}
	case msgUpdate, msgDelete:
		if len(body) < 4 {
			return nil, fmt.Errorf("%w: short change at LSN %s", errProtocol, lsn)
		}
		if r := d.lookup(binary.BigEndian.Uint32(body)); r != nil && r.outbox {
			if data[0] == msgUpdate {
				return nil, d.cols.UpdateSeen(&d.log, d.metrics, "LSN "+lsn.String(), 1)
			}
			d.metrics.SkippedOperations.WithLabelValues("delete").Inc()
		}
	case msgTruncate:
		var tm pglogrepl.TruncateMessage
		// relations(4) options(1) relation ids(4 each): check the count
		// before pglogrepl allocates it.
		if len(body) < 9 || uint64(len(body)) < 5+4*uint64(binary.BigEndian.Uint32(body)) {
			return nil, fmt.Errorf("%w: short Truncate at LSN %s", errProtocol, lsn)
		}
		if err := decodeSafely(tm.Decode, body); err != nil {
			return nil, fmt.Errorf("%w: Truncate at LSN %s: %v", errProtocol, lsn, err)
		}
		for _, id := range tm.RelationIDs {
			if r := d.lookup(id); r != nil && r.outbox {
				d.metrics.SkippedOperations.WithLabelValues("truncate").Inc()
			}
		}
	case msgMessage:
		if err := d.message(body, lsn); err != nil {
			return nil, err
		}
		if d.inTx && d.full() {
			return d.fragment(), nil
		}
	case msgOrigin, msgType:
	default:
		// Stream start/stop/commit/abort and two-phase messages only come
		// with options we never set.
		return nil, fmt.Errorf("%w: type %q at LSN %s", errProtocol, data[0], lsn)
	}
	return nil, nil
}

// decodeSafely runs a pglogrepl Decode method, which indexes into the
// message without bounds checks (a short Relation panics), and turns a
// panic into an error.
func decodeSafely(decode func([]byte) error, body []byte) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("malformed message: %v", r)
		}
	}()
	return decode(body)
}

func (d *decoder) lookup(id uint32) *relation {
	if d.lastRel != nil && d.lastID == id {
		return d.lastRel
	}
	r := d.rels[id]
	if r != nil {
		d.lastID, d.lastRel = id, r
	}
	return r
}

func (d *decoder) relation(rm *pglogrepl.RelationMessage) {
	r := &relation{ncols: len(rm.Columns), missing: -1}
	d.rels[rm.RelationID] = r
	d.lastRel = nil
	if d.match != nil {
		if !d.match.matches(rm.Namespace, rm.RelationName) {
			return
		}
	} else if d.table == "" || rm.Namespace != d.schema || rm.RelationName != d.table {
		return
	}
	r.outbox = true
	r.schema, r.name = rm.Namespace, rm.RelationName
	r.cols = d.cols.For(rm.Namespace, rm.RelationName)
	r.bytea = make([]bool, len(rm.Columns))
	index := func(name string) int {
		for i, c := range rm.Columns {
			if c.Name == name {
				return i
			}
		}
		return -1
	}
	for i, c := range rm.Columns {
		r.bytea[i] = c.DataType == byteaOID
	}
	names := [numRoles]string{r.cols.MessageID, r.cols.AggregateType, r.cols.AggregateID, r.cols.EventType, r.cols.Payload}
	for role, name := range names {
		r.role[role] = -1
		if name == "" {
			continue
		}
		r.role[role] = index(name)
		if r.role[role] < 0 && r.missing < 0 {
			r.missing = role
		}
	}
	for _, name := range r.cols.Extra {
		if i := index(name); i >= 0 {
			r.extra = append(r.extra, extraCol{name: name, idx: i})
		}
	}
}

// originCap is room for "LSN " + "XXXXXXXX/XXXXXXXX".
const originCap = 4 + 17

// insert decodes an Insert into the outbox table into an Event.
//
// One allocation holds a copy of the whole tuple (the receive buffer is
// reused by the next read) plus the Origin text; the role strings are views
// of that copy (it is never written after the event is built) and byte
// values are capped slices of it, so an append by a consumer reallocates
// instead of overwriting a neighbour.
func (d *decoder) insert(body []byte, lsn pglogrepl.LSN) error {
	if len(body) < 7 {
		return fmt.Errorf("%w: short Insert at LSN %s", errProtocol, lsn)
	}
	r := d.lookup(binary.BigEndian.Uint32(body))
	if r == nil {
		return fmt.Errorf("%w: Insert for relation %d before its Relation message at LSN %s",
			errProtocol, binary.BigEndian.Uint32(body), lsn)
	}
	if !r.outbox {
		return nil
	}
	if r.missing >= 0 {
		names := [numRoles]string{r.cols.MessageID, r.cols.AggregateType, r.cols.AggregateID, r.cols.EventType, r.cols.Payload}
		return fmt.Errorf("%w: outbox table %s.%s has no column %q (the %s role) for the row inserted at LSN %s: "+
			"it was dropped or renamed (ALTER TABLE), or the table is new and laid out differently. Restore the column, or change the route "+
			"preset (or give the table its columns in route.tables), then restart; rows are read again from the checkpoint",
			ErrTableLayout, r.schema, r.name, names[r.missing], roleYAML[r.missing], lsn)
	}
	if !d.inTx {
		return fmt.Errorf("%w: Insert outside a transaction at LSN %s", errProtocol, lsn)
	}
	if d.skipTx {
		return nil
	}
	if d.skipEvents > 0 {
		d.skipEvents--
		return nil
	}
	if body[4] != 'N' {
		return fmt.Errorf("%w: Insert tuple type %q at LSN %s", errProtocol, body[4], lsn)
	}
	n := int(binary.BigEndian.Uint16(body[5:7]))
	if n != r.ncols {
		return fmt.Errorf("%w: Insert has %d columns, relation has %d, at LSN %s", errProtocol, n, r.ncols, lsn)
	}
	src := body[7:]
	buf := make([]byte, len(src), len(src)+originCap)
	copy(buf, src)

	refs := d.refs[:0]
	p := 0
	for i := 0; i < n; i++ {
		if p >= len(buf) {
			return fmt.Errorf("%w: truncated Insert at LSN %s", errProtocol, lsn)
		}
		ref := colRef{kind: buf[p]}
		p++
		switch ref.kind {
		case 't', 'b':
			if p+4 > len(buf) {
				return fmt.Errorf("%w: truncated Insert at LSN %s", errProtocol, lsn)
			}
			ref.n = int(binary.BigEndian.Uint32(buf[p:]))
			p += 4
			if ref.n < 0 || p+ref.n > len(buf) {
				return fmt.Errorf("%w: truncated Insert at LSN %s", errProtocol, lsn)
			}
			ref.off = p
			p += ref.n
			if ref.kind == 't' && r.bytea[i] {
				m, err := decodeBytea(buf[ref.off : ref.off+ref.n])
				if err != nil {
					return fmt.Errorf("%w: bytea column %d at LSN %s: %v", errProtocol, i, lsn, err)
				}
				ref.n = m
			}
		case 'n', 'u':
		default:
			return fmt.Errorf("%w: tuple column kind %q at LSN %s", errProtocol, ref.kind, lsn)
		}
		refs = append(refs, ref)
	}
	d.refs = refs

	originStart := len(buf)
	buf = append(buf, "LSN "...)
	buf = appendLSN(buf, lsn)

	bytesOf := func(idx int) []byte {
		if idx < 0 {
			return nil
		}
		ref := refs[idx]
		if ref.kind != 't' && ref.kind != 'b' {
			return nil
		}
		return buf[ref.off : ref.off+ref.n : ref.off+ref.n]
	}
	str := func(idx int) string {
		b := bytesOf(idx)
		if len(b) == 0 {
			return ""
		}
		return unsafe.String(&b[0], len(b))
	}
	ev := outboxcdc.Event{
		MessageID:     str(r.role[roleMessageID]),
		AggregateType: str(r.role[roleAggregateType]),
		AggregateID:   str(r.role[roleAggregateID]),
		EventType:     str(r.role[roleEventType]),
		Payload:       bytesOf(r.role[rolePayload]),
		CommitTime:    d.commitTime,
		Origin:        unsafe.String(&buf[originStart], len(buf)-originStart),
		Schema:        r.schema,
		Table:         r.name,
	}
	if len(r.extra) > 0 {
		ev.Extra = make([]outboxcdc.Column, len(r.extra))
		for i, x := range r.extra {
			v := bytesOf(x.idx)
			ev.Extra[i] = outboxcdc.Column{Name: x.name, Value: v, Null: v == nil}
		}
	}
	d.hold(ev)
	d.txBytes += cap(buf) + eventOverhead
	return nil
}

// eventOverhead approximates an Event's fixed size for the buffer bound.
const eventOverhead = int(unsafe.Sizeof(outboxcdc.Event{}))

// MessageFormat documents the table-less outbox (source.messages.prefix).
//
// An application writes, inside the transaction that makes the business
// change:
//
//	SELECT pg_logical_emit_message(true, 'outbox', '{"message_id":"m-1",
//	  "aggregate_type":"ORDER","aggregate_id":"42","event_type":"ORDER_CREATED",
//	  "payload":{"total":10}}');
//
// The first argument must be true (transactional): the message is then
// decoded only if and when the transaction commits, in its commit order,
// exactly like an outbox row. The content is one JSON object:
//
//   - message_id, aggregate_type, aggregate_id, event_type: JSON strings
//     (a number is accepted and kept as its JSON text; null or absent is
//     empty, which the router rejects for the key and the message id).
//   - payload: any JSON value; Event.Payload is its JSON text exactly as
//     written (an object stays an object, a string keeps its quotes). null
//     or absent means no payload (nil, like SQL NULL).
//   - any other member is an extra column, delivered when the route asks
//     for it by name: a JSON string as its unquoted text, null as Null,
//     anything else as its JSON text.
//
// The keys are fixed whatever the route's preset. Content that is not a
// JSON object, or whose role members are not strings, becomes an event
// with Invalid set and the content as its payload: the router rejects it
// as a bad row naming the LSN, and pipeline.on_error decides (halt, or the
// dead-letter topic). Non-transactional messages with the prefix are not atomic with any
// transaction; they are counted in
// outbox_cdc_source_skipped_operations_total{op="nontransactional_message"},
// logged and skipped.
const MessageFormat = "json-v1"

func (d *decoder) message(body []byte, lsn pglogrepl.LSN) error {
	if d.prefix == "" && len(d.prefixes) == 0 {
		return nil
	}
	// flags(1) lsn(8) prefix\0 length(4) content
	if len(body) < 14 {
		return fmt.Errorf("%w: short logical message at LSN %s", errProtocol, lsn)
	}
	transactional := body[0]&1 == 1
	msgLSN := pglogrepl.LSN(binary.BigEndian.Uint64(body[1:9]))
	rest := body[9:]
	end := -1
	for i, c := range rest {
		if c == 0 {
			end = i
			break
		}
	}
	if end < 0 || len(rest) < end+5 {
		return fmt.Errorf("%w: malformed logical message at LSN %s", errProtocol, lsn)
	}
	prefix := d.matchPrefix(rest[:end])
	if prefix == "" {
		return nil
	}
	n := int(binary.BigEndian.Uint32(rest[end+1:]))
	content := rest[end+5:]
	if n > len(content) {
		return fmt.Errorf("%w: truncated logical message at LSN %s", errProtocol, lsn)
	}
	content = content[:n]
	if !transactional || !d.inTx {
		d.metrics.SkippedOperations.WithLabelValues("nontransactional_message").Inc()
		if d.onNonTxMsg != nil {
			d.onNonTxMsg(msgLSN)
		}
		return nil
	}
	if d.skipTx {
		return nil
	}
	if d.skipEvents > 0 {
		d.skipEvents--
		return nil
	}
	ev, err := DecodeMessage(content, d.cols.Extra)
	if err != nil {
		// Handed on for the router to reject (pipeline.on_error decides:
		// halt naming the LSN, or dead-letter it), carrying the content as
		// emitted; never a reason to stop the stream itself.
		ev.Invalid = err.Error()
		ev.Payload = bytes.Clone(content)
	}
	ev.CommitTime = d.commitTime
	ev.Table = prefix
	ev.Origin = "LSN " + string(appendLSN(nil, msgLSN)) + " (logical message)"
	d.hold(ev)
	d.txBytes += len(content) + eventOverhead
	return nil
}

// matchPrefix returns the configured prefix p is, or "".
func (d *decoder) matchPrefix(p []byte) string {
	if d.prefixes == nil {
		if string(p) == d.prefix {
			return d.prefix
		}
		return ""
	}
	for _, want := range d.prefixes {
		if string(p) == want {
			return want
		}
	}
	return ""
}

// DecodeMessage decodes a logical message's JSON content (see MessageFormat)
// into an Event, with the extra members named in extra.
func DecodeMessage(content []byte, extra []string) (outboxcdc.Event, error) {
	var ev outboxcdc.Event
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(content, &obj); err != nil || obj == nil {
		return ev, fmt.Errorf("logical message content is not a JSON object (see wal.MessageFormat)")
	}
	var errs []error
	field := func(key string) string {
		raw, ok := obj[key]
		if !ok || isNull(raw) {
			return ""
		}
		if raw[0] == '"' {
			var s string
			if err := json.Unmarshal(raw, &s); err != nil {
				errs = append(errs, fmt.Errorf("%s: %v", key, err))
			}
			return s
		}
		if raw[0] == '{' || raw[0] == '[' {
			errs = append(errs, fmt.Errorf("%s must be a string, not %s", key, kindOf(raw)))
			return ""
		}
		return string(raw)
	}
	ev.MessageID = field("message_id")
	ev.AggregateType = field("aggregate_type")
	ev.AggregateID = field("aggregate_id")
	ev.EventType = field("event_type")
	if raw, ok := obj["payload"]; ok && !isNull(raw) {
		ev.Payload = []byte(raw)
	}
	for _, name := range extra {
		raw, ok := obj[name]
		if !ok {
			continue
		}
		c := outboxcdc.Column{Name: name}
		switch {
		case isNull(raw):
			c.Null = true
		case raw[0] == '"':
			var s string
			if err := json.Unmarshal(raw, &s); err != nil {
				errs = append(errs, fmt.Errorf("%s: %v", name, err))
			}
			c.Value = []byte(s)
		default:
			c.Value = []byte(raw)
		}
		ev.Extra = append(ev.Extra, c)
	}
	return ev, errors.Join(errs...)
}

func isNull(raw json.RawMessage) bool { return len(raw) == 0 || string(raw) == "null" }

func kindOf(raw json.RawMessage) string {
	if raw[0] == '{' {
		return "an object"
	}
	return "an array"
}

// decodeBytea decodes bytea's text output in place and returns the new
// length: hex ("\x0a0b", the default bytea_output, which the replication
// connection also requests) or the legacy escape format.
func decodeBytea(b []byte) (int, error) {
	if len(b) >= 2 && b[0] == '\\' && b[1] == 'x' {
		h := b[2:]
		if len(h)%2 != 0 {
			return 0, errors.New("odd hex length")
		}
		for i := 0; i < len(h)/2; i++ {
			hi, ok1 := unhex(h[2*i])
			lo, ok2 := unhex(h[2*i+1])
			if !ok1 || !ok2 {
				return 0, errors.New("bad hex digit")
			}
			b[i] = hi<<4 | lo
		}
		return len(h) / 2, nil
	}
	w := 0
	for r := 0; r < len(b); {
		c := b[r]
		if c != '\\' {
			b[w] = c
			w++
			r++
			continue
		}
		if r+1 < len(b) && b[r+1] == '\\' {
			b[w] = '\\'
			w++
			r += 2
			continue
		}
		if r+3 < len(b) && isOct(b[r+1]) && isOct(b[r+2]) && isOct(b[r+3]) {
			b[w] = (b[r+1]-'0')<<6 | (b[r+2]-'0')<<3 | (b[r+3] - '0')
			w++
			r += 4
			continue
		}
		return 0, errors.New("bad escape sequence")
	}
	return w, nil
}

func unhex(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

func isOct(c byte) bool { return c >= '0' && c <= '7' }

// pgEpoch is 2000-01-01 UTC, the origin of PostgreSQL timestamps.
const pgEpochUnixMicros = 946684800 * 1000000

func pgTime(b []byte) time.Time {
	us := int64(binary.BigEndian.Uint64(b))
	return time.UnixMicro(pgEpochUnixMicros + us)
}
