package outboxwriter

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// Statement bounds: a multi-row statement holds at most maxRows events and
// about maxBytes of payload (MariaDB's max_allowed_packet is 16 MiB by
// default, and both servers take at most 65535 parameters).
const (
	maxRows  = 500
	maxBytes = 4 << 20
)

// chunks splits rows into statements.
func chunks(rows []row, each func([]row) error) error {
	for len(rows) > 0 {
		n, size := 0, 0
		for n < len(rows) && n < maxRows && (n == 0 || size+len(rows[n].payload) <= maxBytes) {
			size += len(rows[n].payload)
			n++
		}
		if err := each(rows[:n]); err != nil {
			return err
		}
		rows = rows[n:]
	}
	return nil
}

// quoteIdent quotes a possibly qualified name, part by part: backticks for
// MySQL, double quotes for PostgreSQL. Names are as the server names them
// (the relay reads them from the server), so quoting keeps their case.
func (d Dialect) quoteIdent(name string) string {
	q := `"`
	if d == MySQL {
		q = "`"
	}
	parts := strings.Split(name, ".")
	for i, p := range parts {
		parts[i] = q + strings.ReplaceAll(p, q, q+q) + q
	}
	return strings.Join(parts, ".")
}

// placeholder returns the n-th (1-based) parameter marker.
func (d Dialect) placeholder(n int) string {
	if d == MySQL {
		return "?"
	}
	return "$" + strconv.Itoa(n)
}

// insert writes rows as one multi-row INSERT per chunk.
func (w *Writer) insert(ctx context.Context, c conn, rows []row) error {
	d, l := w.cfg.Dialect, w.cfg.Layout
	return chunks(rows, func(rows []row) error {
		// The header columns any row of the chunk sets, in a fixed order;
		// a row that does not set one gets the column's DEFAULT.
		var extra []string
		for _, h := range w.headers {
			col := l.Headers[h]
			for _, r := range rows {
				if _, ok := r.headers[col]; ok || (col == w.seqCol && r.seq > 0) {
					extra = append(extra, col)
					break
				}
			}
		}
		var b strings.Builder
		b.WriteString("INSERT INTO ")
		b.WriteString(d.quoteIdent(l.Table))
		b.WriteString(" (")
		for i, col := range append([]string{l.MessageID, l.AggregateType, l.AggregateID, l.EventType, l.Payload}, extra...) {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(d.quoteIdent(col))
		}
		b.WriteString(") VALUES ")
		args := make([]any, 0, len(rows)*(5+len(extra)))
		for i, r := range rows {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteByte('(')
			for j, v := range []any{r.id, r.aggType, r.aggID, r.evType, string(r.payload)} {
				if j > 0 {
					b.WriteString(", ")
				}
				args = append(args, v)
				b.WriteString(d.placeholder(len(args)))
			}
			for _, col := range extra {
				b.WriteString(", ")
				v, ok := r.headers[col]
				if col == w.seqCol {
					v, ok = r.seq, r.seq > 0
				}
				if !ok {
					b.WriteString("DEFAULT")
					continue
				}
				args = append(args, v)
				b.WriteString(d.placeholder(len(args)))
			}
			b.WriteByte(')')
		}
		if err := c.exec(ctx, b.String(), args); err != nil {
			return fmt.Errorf("outboxwriter: insert %d events into %s: %w", len(rows), l.Table, err)
		}
		return nil
	})
}

// emit writes rows as transactional logical decoding messages: one SELECT
// per chunk whose target list the server evaluates left to right, so the
// messages keep the order given.
func (w *Writer) emit(ctx context.Context, c conn, rows []row) error {
	return chunks(rows, func(rows []row) error {
		var b strings.Builder
		b.WriteString("SELECT ")
		args := []any{w.cfg.MessagePrefix}
		for i := range rows {
			content, err := w.messageContent(&rows[i])
			if err != nil {
				return err
			}
			if i > 0 {
				b.WriteString(", ")
			}
			args = append(args, content)
			fmt.Fprintf(&b, "pg_logical_emit_message(true, $1::text, $%d::text)", len(args))
		}
		if err := c.exec(ctx, b.String(), args); err != nil {
			return fmt.Errorf("outboxwriter: emit %d logical decoding messages with prefix %q: %w", len(rows), w.cfg.MessagePrefix, err)
		}
		return nil
	})
}

// messageContent is the JSON object the relay decodes (wal.DecodeMessage):
// the role members under their fixed names, the payload as JSON, and each
// header under its column's name (the relay's extra columns).
func (w *Writer) messageContent(r *row) (string, error) {
	b := make([]byte, 0, len(r.payload)+128)
	str := func(key, v string) {
		k, _ := json.Marshal(key)
		s, _ := json.Marshal(v)
		if len(b) > 1 {
			b = append(b, ',')
		}
		b = append(append(append(b, k...), ':'), s...)
	}
	b = append(b, '{')
	str("message_id", r.id)
	str("aggregate_type", r.aggType)
	str("aggregate_id", r.aggID)
	str("event_type", r.evType)
	b = append(append(b, `,"payload":`...), r.payload...)
	cols := make([]string, 0, len(r.headers)+1)
	for col := range r.headers {
		cols = append(cols, col)
	}
	sort.Strings(cols)
	vals := r.headers
	if r.seq > 0 {
		cols = append(cols, w.seqCol)
		vals = make(map[string]any, len(r.headers)+1)
		for k, v := range r.headers {
			vals[k] = v
		}
		vals[w.seqCol] = r.seq
	}
	for _, col := range cols {
		v, err := json.Marshal(vals[col])
		if err != nil {
			return "", fmt.Errorf("outboxwriter: message %s: header column %q: %w", r.id, col, err)
		}
		k, _ := json.Marshal(col)
		b = append(append(append(append(b, ','), k...), ':'), v...)
	}
	return string(append(b, '}')), nil
}

// SequenceTableDDL is the CREATE TABLE of the counter table that
// SequenceConfig.Table names, in the dialect.
func SequenceTableDDL(d Dialect, table string) string {
	q := d.quoteIdent(table)
	if d == MySQL {
		// Binary collation: the record key is compared byte for byte, so
		// "a-1" and "A-1" are two aggregates with two counters.
		return "CREATE TABLE IF NOT EXISTS " + q + " (aggregate_type VARCHAR(64) NOT NULL, aggregate_id VARCHAR(128) NOT NULL, " +
			"seq BIGINT NOT NULL, PRIMARY KEY (aggregate_type, aggregate_id)) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin"
	}
	return "CREATE TABLE IF NOT EXISTS " + q + " (aggregate_type VARCHAR(64) NOT NULL, aggregate_id VARCHAR(128) NOT NULL, " +
		"seq BIGINT NOT NULL, PRIMARY KEY (aggregate_type, aggregate_id))"
}

// number gives every row whose seq is zero the next numbers of its
// aggregate from the counter table: one upsert adding each aggregate's
// count, in a fixed order of aggregates (so two calls lock counters in the
// same order), then the new values.
func (w *Writer) number(ctx context.Context, c conn, rows []row) error {
	type agg struct{ typ, id string }
	count := map[agg]int64{}
	var aggs []agg
	for _, r := range rows {
		if r.seq > 0 {
			continue
		}
		a := agg{r.aggType, r.aggID}
		if count[a] == 0 {
			aggs = append(aggs, a)
		}
		count[a]++
	}
	if len(aggs) == 0 {
		return nil
	}
	sort.Slice(aggs, func(i, j int) bool {
		if aggs[i].typ != aggs[j].typ {
			return aggs[i].typ < aggs[j].typ
		}
		return aggs[i].id < aggs[j].id
	})
	d := w.cfg.Dialect
	table := d.quoteIdent(w.cfg.Sequence.Table)
	var b strings.Builder
	args := make([]any, 0, 3*len(aggs))
	b.WriteString("INSERT INTO " + table + " (aggregate_type, aggregate_id, seq) VALUES ")
	for i, a := range aggs {
		if i > 0 {
			b.WriteString(", ")
		}
		args = append(args, a.typ, a.id, count[a])
		fmt.Fprintf(&b, "(%s, %s, %s)", d.placeholder(len(args)-2), d.placeholder(len(args)-1), d.placeholder(len(args)))
	}
	last := map[agg]int64{}
	scan := func(s func(dest ...any) error) error {
		var a agg
		var v int64
		if err := s(&a.typ, &a.id, &v); err != nil {
			return err
		}
		last[a] = v
		return nil
	}
	var err error
	if d == Postgres {
		b.WriteString(" ON CONFLICT (aggregate_type, aggregate_id) DO UPDATE SET seq = " + table + ".seq + EXCLUDED.seq RETURNING aggregate_type, aggregate_id, seq")
		err = c.query(ctx, b.String(), args, scan)
	} else {
		b.WriteString(" ON DUPLICATE KEY UPDATE seq = seq + VALUES(seq)")
		if err = c.exec(ctx, b.String(), args); err == nil {
			// The rows are locked by this transaction, which reads its
			// own writes.
			var q strings.Builder
			q.WriteString("SELECT aggregate_type, aggregate_id, seq FROM " + table + " WHERE (aggregate_type, aggregate_id) IN (")
			for i := range aggs {
				if i > 0 {
					q.WriteString(", ")
				}
				q.WriteString("(?, ?)")
			}
			q.WriteString(")")
			sel := make([]any, 0, 2*len(aggs))
			for _, a := range aggs {
				sel = append(sel, a.typ, a.id)
			}
			err = c.query(ctx, q.String(), sel, scan)
		}
	}
	if err != nil {
		return fmt.Errorf("outboxwriter: number events in %s: %w", w.cfg.Sequence.Table, err)
	}
	// Each aggregate's new value is the number of its last event here.
	next := map[agg]int64{}
	for a, v := range last {
		next[a] = v - count[a] + 1
	}
	for i := range rows {
		if rows[i].seq > 0 {
			continue
		}
		a := agg{rows[i].aggType, rows[i].aggID}
		n, ok := next[a]
		if !ok {
			return fmt.Errorf("outboxwriter: the counter of %s/%s was not returned by %s", a.typ, a.id, w.cfg.Sequence.Table)
		}
		rows[i].seq = n
		next[a] = n + 1
	}
	return nil
}
