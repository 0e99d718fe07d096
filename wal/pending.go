package wal

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	outboxcdc "github.com/outbox-cdc/outbox-cdc"
	"github.com/outbox-cdc/outbox-cdc/backfill"
)

// Pending backfill (source.start: pending), PostgreSQL.
//
// # The seam
//
// When the slot does not exist yet, it is created on a replication
// connection inside a REPEATABLE READ transaction with
// CREATE_REPLICATION_SLOT ... LOGICAL pgoutput USE_SNAPSHOT, and the pending
// rows are read in that same transaction. The transaction's snapshot is
// then exactly the slot's consistent point P: a transaction is visible in
// it if and only if it committed before P, and streaming from the slot
// decodes exactly the transactions that commit after P. Each pending row is
// read once, each later row is streamed once; no deduplication.
//
// When the slot already exists (created by hand, or by a first attempt that
// crashed before its first checkpoint) or the run resumes from a pending
// checkpoint, there is no snapshot at the stream position P (the slot's
// confirmed position, or the checkpoint's). The rows are then read in a
// fresh REPEATABLE READ snapshot S, and pg_current_wal_insert_lsn() is read
// inside S right after it is taken: L. Every transaction visible in S has
// its commit record before L (a commit is inserted into the WAL before it
// becomes visible). So a streamed transaction that ends after L cannot
// hold a row read in S, and one that ends at or before L may: from those,
// events whose message id was read in S are dropped. The message ids read
// are kept in memory until the stream passes L.
//
// # Restart
//
// Batches end at pending positions (last key published, highest pending
// key of the first snapshot, P); a restart reads the rows with key in
// (last, high] in a fresh snapshot and dedupes as above, so a resumed
// backfill adds no duplicates beyond the usual at-least-once batch. A crash
// after the backfill while the stream is still before L (only in the
// fresh-snapshot case) sends the rows of the overlap again.

// backfillFirst runs the backfill (backfill.Loop) on a first start with
// source.start: pending, or from a pending checkpoint, before streaming.
// It leaves st ready to stream from the stream position, with a
// checkpoint-like start (the slot must then exist: it is never recreated
// behind a backfill).
func (s *Source) backfillFirst(ctx context.Context, st *runState, from outboxcdc.Position, out chan<- outboxcdc.Tx) error {
	if !backfill.IsPending(from) && !(from.IsZero() && s.cfg.Start == backfill.StartPending) {
		return nil
	}
	l := s.rc.Backfill(Kind, s.cfg.Common, s.cfg.ProgressInterval,
		func(p outboxcdc.Position) error {
			_, err := ParsePosition(p)
			return err
		},
		func(ctx context.Context, rs **backfill.State) (backfill.Snapshot, error) {
			snap, err := s.openPending(ctx, st, rs)
			return snap, retryable(err)
		},
		s.saveStart)
	pos, err := l.Run(ctx, from, out)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if err != nil {
		s.setReady(fmt.Errorf("postgres source: pending backfill: %w", err))
		s.log.Debug().Err(err).Msg("pending backfill failed") // returned: the connector logs it once
		return permanent(fmt.Errorf("pending backfill: %w", err))
	}
	lsn, id, _ := ParsePositionIdentity(pos)
	st.checkpoint, st.resume, st.ident = true, lsn, id
	s.ack.Store(uint64(lsn))
	return nil
}

// pendingSnapshot is one attempt's REPEATABLE READ transaction on a
// walsender connection (backfill.Snapshot).
type pendingSnapshot struct {
	s     *Source
	st    *runState
	conn  *pgconn.PgConn
	exec  func(q string) ([]*pgconn.Result, error)
	cols  []string
	extra []string
	table string
	key   string
	// ids are the message ids read, when streamed transactions up to
	// dedupeUpTo may repeat them (a fresh snapshot, see the seam above).
	ids        map[string]struct{}
	dedupeUpTo pglogrepl.LSN
}

func (p *pendingSnapshot) Read(_ context.Context, st backfill.State, limit int) ([]backfill.Row, error) {
	cfg := p.s.cfg.Pending
	q := "SELECT " + strings.Join(p.cols, ", ") + " FROM " + p.table + " WHERE (" + cfg.Where + ") AND " + p.key + " > " +
		strconv.FormatInt(st.Last, 10) + " AND " + p.key + " <= " + strconv.FormatInt(st.High, 10) +
		" ORDER BY " + p.key + " LIMIT " + strconv.Itoa(limit)
	res, err := p.exec(q)
	if err != nil {
		return nil, retryable(err)
	}
	batch, err := p.s.pendingRows(res[0], p.extra)
	if err != nil {
		return nil, retryable(err)
	}
	if p.ids != nil {
		for _, r := range batch {
			p.ids[r.Event.MessageID] = struct{}{}
		}
	}
	return batch, nil
}

func (p *pendingSnapshot) Finish(_ context.Context, st backfill.State, total int) error {
	if _, err := p.exec("COMMIT"); err != nil {
		return retryable(err)
	}
	if p.ids != nil {
		p.st.dedupe = &dedupe{upTo: p.dedupeUpTo, ids: p.ids}
	}
	p.s.log.Info().Int("rows", total).Str("stream_lsn", st.Stream).Str("dedupe_up_to", p.dedupeUpTo.String()).
		Msg("pending backfill done; streaming")
	return nil
}

// Count counts the pending rows after st.Last, in the snapshot.
func (p *pendingSnapshot) Count(_ context.Context, st backfill.State) (int64, error) {
	cfg := p.s.cfg.Pending
	res, err := p.exec("SELECT count(*) FROM " + p.table + " WHERE (" + cfg.Where + ") AND " + p.key + " > " +
		strconv.FormatInt(st.Last, 10) + " AND " + p.key + " <= " + strconv.FormatInt(st.High, 10))
	if err != nil {
		return 0, retryable(err)
	}
	if len(res) != 1 || len(res[0].Rows) != 1 || len(res[0].Rows[0]) != 1 {
		return 0, retryable(errors.New("count the pending rows: unexpected answer"))
	}
	n, err := strconv.ParseInt(string(res[0].Rows[0][0]), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("count the pending rows: %q is not a number", res[0].Rows[0][0])
	}
	return n, nil
}

func (p *pendingSnapshot) Close() { closeRepl(p.conn) }

// openPending opens the snapshot the pending rows are read in. *rs is nil
// on a first start and is set as soon as the stream position is known.
func (s *Source) openPending(ctx context.Context, st *runState, rs **backfill.State) (_ *pendingSnapshot, err error) {
	meta, err := s.connectMeta(ctx)
	if err != nil {
		return nil, err
	}
	defer closeMeta(meta)
	setup, cancel := context.WithTimeout(ctx, s.cfg.QueryTimeout)
	defer cancel()
	version, err := s.preflight(setup, meta)
	if err != nil {
		return nil, s.timedOut(setup, "read the server settings", err)
	}
	if err := s.ensurePublication(setup, meta, *rs != nil); err != nil {
		return nil, s.timedOut(setup, "check the publication", err)
	}
	si, err := querySlot(setup, meta, s.cfg.Slot)
	if err != nil {
		return nil, s.timedOut(setup, "look up the replication slot", err)
	}
	extra, err := s.pendingExtra(setup, meta)
	if err != nil {
		return nil, s.timedOut(setup, "look up the extra columns", err)
	}
	cancel()
	conn, err := s.connectReplication(ctx) // a walsender connection also runs SQL; text output as pgoutput's
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			closeRepl(conn)
		}
	}()
	cfg := s.cfg.Pending
	exec := func(q string) ([]*pgconn.Result, error) {
		qctx, cancel := context.WithTimeout(ctx, s.cfg.QueryTimeout)
		defer cancel()
		res, err := conn.Exec(qctx, q).ReadAll()
		if err == nil {
			for _, r := range res {
				if r.Err != nil {
					return nil, r.Err
				}
			}
		}
		if err != nil {
			if pgCode(err) == "42601" || pgCode(err) == "42703" || pgCode(err) == "42883" {
				return nil, permanent(fmt.Errorf("source.pending.where %q or source.pending.key %q does not work on %s: %w", cfg.Where, cfg.Key, s.cfg.Table, err))
			}
			return nil, s.timedOut(qctx, "pending backfill query", classify(err))
		}
		return res, nil
	}
	// The stream position of a first start carries the server's identity,
	// as every position does (identity.go).
	srv, err := s.identify(ctx, conn)
	if err != nil {
		return nil, err
	}
	if _, err := exec("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"); err != nil {
		return nil, err
	}
	var dedupeUpTo pglogrepl.LSN
	var fresh *backfill.State // a first start's state, until its high key is known
	switch {
	case *rs == nil && si == nil:
		if !s.cfg.Create {
			return nil, permanent(mark(ErrSlot, fmt.Errorf("replication slot %q does not exist and source.create is false; source.start: pending creates it to read the pending rows at its consistent point", s.cfg.Slot)))
		}
		create, err := createSlotCommand(s.cfg.Slot, version, s.cfg.FailoverSlot)
		if err != nil {
			return nil, permanent(err)
		}
		cctx, ccancel := context.WithTimeout(ctx, slotCreateTimeout)
		res, err := pglogrepl.ParseCreateReplicationSlot(conn.Exec(cctx, create))
		ccancel()
		if err != nil {
			return nil, classify(fmt.Errorf("create replication slot %q with a snapshot: %w", s.cfg.Slot, err))
		}
		cp, err := pglogrepl.ParseLSN(res.ConsistentPoint)
		if err != nil {
			return nil, fmt.Errorf("create replication slot %q: consistent point %q: %w", s.cfg.Slot, res.ConsistentPoint, err)
		}
		fresh = &backfill.State{Last: -1 << 63, Stream: string(srv.id.appendBody(nil, cp))}
		s.log.Info().Str("consistent_lsn", res.ConsistentPoint).Msg("created replication slot (pgoutput); reading the pending rows in its snapshot")
	default:
		if *rs == nil {
			fresh = &backfill.State{Last: -1 << 63, Stream: string(srv.id.appendBody(nil, si.confirmed))}
			s.log.Info().Str("confirmed_flush_lsn", si.confirmed.String()).
				Msg("pending backfill: the slot exists, so the rows are read in a fresh snapshot and rows the stream repeats are skipped")
		}
		// The first statement takes the snapshot; the insert position read
		// after it bounds every commit visible in it.
		res, err := exec("SELECT pg_current_wal_insert_lsn()::text")
		if err != nil {
			return nil, err
		}
		if dedupeUpTo, err = pglogrepl.ParseLSN(string(res[0].Rows[0][0])); err != nil {
			return nil, err
		}
	}
	table := pgx.Identifier{s.schema, s.table}.Sanitize()
	key := pgx.Identifier{cfg.Key}.Sanitize()
	if fresh != nil {
		res, err := exec("SELECT max(" + key + ")::text FROM " + table + " WHERE (" + cfg.Where + ")")
		if err != nil {
			return nil, err
		}
		fresh.High = -1 << 63
		if v := res[0].Rows[0][0]; v != nil {
			if fresh.High, err = strconv.ParseInt(string(v), 10, 64); err != nil {
				return nil, permanent(fmt.Errorf("source.pending.key %s must be an integer column", cfg.Key))
			}
		}
		*rs = fresh
	}
	s.log.Info().Int64("after_key", (*rs).Last).Int64("high_key", (*rs).High).Str("stream_lsn", (*rs).Stream).
		Str("where", cfg.Where).Msg("pending backfill: publishing the pending rows, then streaming")

	cols := []string{key}
	for _, n := range []string{s.cols.MessageID, s.cols.AggregateType, s.cols.AggregateID, s.cols.EventType, s.cols.Payload} {
		cols = append(cols, pgx.Identifier{n}.Sanitize())
	}
	for _, n := range extra {
		cols = append(cols, pgx.Identifier{n}.Sanitize())
	}
	snap := &pendingSnapshot{s: s, st: st, conn: conn, exec: exec, cols: cols, extra: extra, table: table, key: key, dedupeUpTo: dedupeUpTo}
	if dedupeUpTo != 0 {
		snap.ids = map[string]struct{}{}
	}
	// Connected and reading: no longer "connecting", not yet streaming.
	s.setReady(errors.New("postgres source: publishing pending rows (source.start: pending)"))
	return snap, nil
}

// pendingExtra lists the route's extra columns the table has.
func (s *Source) pendingExtra(ctx context.Context, meta *pgx.Conn) ([]string, error) {
	var out []string
	for _, n := range s.cols.Extra {
		var ok bool
		err := meta.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM information_schema.columns WHERE table_schema = $1 AND table_name = $2 AND column_name = $3)`,
			s.schema, s.table, n).Scan(&ok)
		if err != nil {
			return nil, classify(err)
		}
		if ok {
			out = append(out, n)
		}
	}
	return out, nil
}

// pendingRows turns text-format result rows into events, as the decoder
// does for pgoutput's text tuples (bytea columns decoded from hex).
func (s *Source) pendingRows(res *pgconn.Result, extra []string) ([]backfill.Row, error) {
	bytea := make([]bool, len(res.FieldDescriptions))
	for i, f := range res.FieldDescriptions {
		bytea[i] = f.DataTypeOID == byteaOID
	}
	val := func(row [][]byte, i int) ([]byte, error) {
		v := row[i]
		if v == nil {
			return nil, nil
		}
		v = append([]byte{}, v...)
		if bytea[i] {
			n, err := decodeBytea(v)
			if err != nil {
				return nil, fmt.Errorf("bytea column %s: %w", res.FieldDescriptions[i].Name, err)
			}
			v = v[:n]
		}
		return v, nil
	}
	out := make([]backfill.Row, 0, len(res.Rows))
	for _, row := range res.Rows {
		k, err := strconv.ParseInt(string(row[0]), 10, 64)
		if err != nil {
			return nil, permanent(fmt.Errorf("source.pending.key %s must be an integer column (got %q)", s.cfg.Pending.Key, row[0]))
		}
		var f [5][]byte
		for i := range f {
			if f[i], err = val(row, 1+i); err != nil {
				return nil, err
			}
		}
		ev := outboxcdc.Event{
			MessageID: string(f[0]), AggregateType: string(f[1]), AggregateID: string(f[2]), EventType: string(f[3]),
			Payload: f[4],
			Origin:  fmt.Sprintf("pending backfill %s.%s %s=%d", s.schema, s.table, s.cfg.Pending.Key, k),
		}
		for j, name := range extra {
			v, err := val(row, 6+j)
			if err != nil {
				return nil, err
			}
			ev.Extra = append(ev.Extra, outboxcdc.Column{Name: name, Value: v, Null: v == nil})
		}
		out = append(out, backfill.Row{Key: k, Event: ev})
	}
	return out, nil
}

// dedupe drops streamed events that the backfill already published: those
// of transactions committing before upTo whose message id was read. (A
// transaction visible in the snapshot ended at or before upTo; one whose
// commit record merely starts before it was not visible, and its ids were
// not read, so filtering it drops nothing.) Fragments carry no end, so the
// commit LSN decides. Used by the forwarding goroutine only.
type dedupe struct {
	upTo    pglogrepl.LSN
	ids     map[string]struct{}
	skipped int
}

// filter drops the already published events of tx, whose source
// transaction commits at final (0 for an idle-advance Tx, which has none).
func (d *dedupe) filter(tx outboxcdc.Tx, final pglogrepl.LSN) outboxcdc.Tx {
	if d == nil || d.ids == nil || len(tx.Events) == 0 {
		return tx
	}
	if final >= d.upTo {
		d.ids = nil // past the overlap: free the set
		return tx
	}
	kept := tx.Events[:0]
	for _, ev := range tx.Events {
		if _, dup := d.ids[ev.MessageID]; dup {
			d.skipped++
			continue
		}
		kept = append(kept, ev)
	}
	tx.Events = kept
	return tx
}

// ackLSN is the LSN a position confirms: a pending position confirms its
// stream position (the slot holds everything after it).
func ackLSN(pos outboxcdc.Position) (pglogrepl.LSN, error) {
	lsn, _, err := ackPosition(pos)
	return lsn, err
}

// ackPosition is ackLSN with the identity the position names.
func ackPosition(pos outboxcdc.Position) (pglogrepl.LSN, Identity, error) {
	if backfill.IsPending(pos) {
		st, err := backfill.Parse(pos, Kind)
		if err != nil {
			return 0, Identity{}, err
		}
		pos = st.StreamPosition(Kind)
	}
	return ParsePositionIdentity(pos)
}
