package outboxcdc

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// batch is the records of one or more source transactions, and the
// position just past the last whole one. The first records may continue a
// fragmented transaction that began in an earlier batch (cont), and the
// last ones may belong to a transaction whose end has not arrived yet
// (open); a batch never holds a whole transaction followed by the start of
// a fragmented one, so in exactly-once mode a batch is either the end of
// an open write plus whole transactions (end set) or a part of one open
// transaction (end zero).
type batch struct {
	records []Record
	// events[i] is the row records[i] was made from.
	events []*Event
	// pooled are the transactions whose Events slices came from their
	// source's pool: released once the batch is written (recycle), when
	// events and the dead-letter and error paths read them no more.
	pooled []Tx
	// dead holds the records replaced by dead-letter records, by index;
	// nil while there are none.
	dead map[int]*deadEntry
	// marks[j] is where the j-th transaction of the batch ends.
	marks      []txMark
	bytes      int
	txs        int
	end        Position // end of the last whole transaction; zero if none
	commitTime time.Time
	// firstCommit is the commit time of the batch's first transaction
	// that has one (the oldest), for outbox_cdc_lag_seconds while the
	// batch is not checkpointed.
	firstCommit time.Time
	// idle: the last whole transaction is a source's "nothing pending"
	// marker (an end without a commit time, e.g. the Postgres idle
	// advance or a MySQL heartbeat): once checkpointed the lag is 0.
	idle bool
	// cont: records[0] continues a transaction begun in an earlier batch.
	cont bool
	// open: the records from openFrom on belong to a transaction whose
	// last fragment has not arrived.
	open     bool
	openFrom int
}

// empty reports whether b holds nothing to write or checkpoint.
func (b *batch) empty() bool { return len(b.records) == 0 && len(b.marks) == 0 }

// newBatch returns an empty batch, reusing the slices of a written one;
// inTx says it continues a fragmented transaction.
func (p *Pipeline) newBatch(inTx bool) *batch {
	var b *batch
	select {
	case b = <-p.spare:
	default:
		b = &batch{}
	}
	b.cont, b.open = inTx, inTx
	return b
}

// recycle empties a written batch for reuse, dropping its references to the
// rows so their memory can be collected, and gives the transactions'
// Events slices back to their sources. Records do not point into Events
// (Router), so what the sink may still hold is unaffected.
func (p *Pipeline) recycle(b *batch) {
	clear(b.records)
	clear(b.events)
	for i := range b.pooled {
		b.pooled[i].Release()
	}
	clear(b.pooled)
	*b = batch{records: b.records[:0], events: b.events[:0], marks: b.marks[:0], pooled: b.pooled[:0]}
	select {
	case p.spare <- b:
	default:
	}
}

// dropOpen removes the records of the transaction still open at the end of
// b: it cannot be checkpointed in this run.
func (b *batch) dropOpen() (dropped int) {
	if !b.open {
		return 0
	}
	dropped = len(b.records) - b.openFrom
	b.truncate(b.openFrom)
	b.open = false
	return dropped
}

// truncate cuts b back to its first n records.
func (b *batch) truncate(n int) {
	clear(b.records[n:])
	clear(b.events[n:])
	b.records, b.events = b.records[:n], b.events[:n]
	for k := range b.dead {
		if k >= n {
			delete(b.dead, k)
		}
	}
	b.bytes = 0
	for i := range b.records {
		b.bytes += b.records[i].Size()
	}
}

type txMark struct {
	records int // records in the batch up to and including this transaction
	end     Position
}

// deadEntry is a row whose record was replaced by a dead-letter record.
type deadEntry struct {
	orig      *Record // the routed record; nil for a bad row
	cause     error
	class     string
	omitValue bool // the dead-letter record leaves the payload out
}

// before returns the records and end position of the whole transactions
// that precede record i (end is zero when there are none).
func (b *batch) before(i int) (int, Position) {
	n, end := 0, Position("")
	for _, m := range b.marks {
		if m.records > i {
			break
		}
		n, end = m.records, m.end
	}
	return n, end
}

// queued is a transaction (or fragment) in the queue, with its size.
type queued struct {
	tx   Tx
	size int64
}

// intake moves transactions from the source to the queue while the queue
// holds less than QueueBytes, so that a source sending large fragments
// blocks before the queue holds QueueTransactions of them. It closes
// src.done once the source has returned and everything it sent before
// is queued (or the pipeline stopped reading).
func (p *Pipeline) intake(ctx context.Context, in <-chan Tx, txs chan<- queued, qsem *ByteBudget, src *sourceRun) {
	defer close(src.done)
	defer func() {
		for range in { // until Run returns and in is closed
		}
	}()
	inTx := false // the last transaction taken was a fragment with more to come
	for tx := range in {
		// A pause holds a transaction's first fragment here, unqueued (a
		// stop drops it: nothing of it was written or checkpointed).
		if !inTx && !p.gate.wait(ctx) {
			return
		}
		inTx = tx.More
		q := queued{tx: tx, size: txSize(&tx)}
		if qsem.Acquire(ctx, nil, q.size) != nil {
			return
		}
		select {
		case txs <- q:
		case <-ctx.Done():
			return
		}
	}
}

// txSize estimates the bytes a transaction's rows hold.
func txSize(tx *Tx) int64 {
	n := int64(64)
	for i := range tx.Events {
		ev := &tx.Events[i]
		n += int64(len(ev.Payload)+len(ev.MessageID)+len(ev.AggregateType)+len(ev.AggregateID)+len(ev.EventType)+len(ev.Origin)) + 160
		for _, c := range ev.Extra {
			n += int64(len(c.Name)+len(c.Value)) + 48
		}
	}
	return n
}

// batcher reads transactions, routes their events and hands batches to the
// writer. While the writer is busy it keeps filling the next batch up to
// the bounds, so a backlog makes large writes and an idle stream makes one
// write per transaction. Fragments of a large transaction are handed on as
// the batch fills, without waiting for the transaction's end; a fragmented
// transaction always starts a new batch (see batch).
func (p *Pipeline) batcher(ctx context.Context, txs <-chan queued, qsem *ByteBudget, src *sourceRun, out chan<- *batch) error {
	inTx := false // the last transaction received was a fragment with More
	cur := p.newBatch(inTx)
	take := func(q queued) error {
		qsem.Release(q.size)
		tx := q.tx
		if tx.More && !inTx && len(cur.marks) > 0 {
			// A fragmented transaction begins: the whole ones before it
			// go out on their own, so that no write mixes them with an
			// unfinished transaction.
			out <- cur
			cur = p.newBatch(false)
		}
		if err := p.add(cur, tx); err != nil {
			return err
		}
		if tx.More && !inTx {
			p.log.Debug().Str("origin", firstOrigin(&tx)).Msg("a large source transaction arrives in fragments: its records are written as they come, the checkpoint waits for its end")
		}
		inTx = tx.More
		if p.full(cur) {
			out <- cur // blocks while the writer works: back-pressure to the source
			cur = p.newBatch(inTx)
		}
		return nil
	}
	var final error // set when the source stopped or a row failed
	for final == nil {
		// Wait for a transaction, or, with a non-empty batch, for the writer.
		var q queued
		if cur.empty() {
			select {
			case q = <-txs:
			case <-src.done:
				final = sourceStopped(src.err)
				continue
			case <-ctx.Done():
				final = ctx.Err()
				continue
			}
		} else {
			// What is already queued goes into the batch before the batch
			// goes to the writer: nothing waits for it, and the writes of
			// a backlog are larger.
			select {
			case q = <-txs:
				final = take(q)
				continue
			default:
			}
			select {
			case q = <-txs:
			case out <- cur:
				cur = p.newBatch(inTx)
				continue
			case <-src.done:
				final = sourceStopped(src.err)
				continue
			case <-ctx.Done():
				final = ctx.Err()
				continue
			}
		}
		final = take(q)
	}
	// Transactions already queued are whole, or fragments: take them too
	// (unless a row failed), so a stop checkpoints every whole transaction
	// received.
	var bad *BadRowError
	if !errors.As(final, &bad) {
	drain:
		for {
			select {
			case q := <-txs:
				if err := take(q); err != nil {
					final = err
					break drain
				}
			default:
				break drain
			}
		}
	}
	// A transaction whose end did not arrive cannot be checkpointed in this
	// run: its records are not written now, and the restart reads it again.
	if n := cur.dropOpen(); n > 0 || inTx {
		p.log.Warn().Int("records_not_written", n).Msg("stopping inside a large source transaction: it is not checkpointed; the next start reads it again from its beginning (in at-least-once mode its records written so far are sent again)")
	}
	if !cur.empty() {
		out <- cur
	}
	return final
}

func firstOrigin(tx *Tx) string {
	if len(tx.Events) == 0 {
		return ""
	}
	return tx.Events[0].Origin
}

func (p *Pipeline) full(b *batch) bool {
	return len(b.records) >= p.cfg.MaxBatchRecords || b.bytes >= p.cfg.MaxBatchBytes
}

// sourceRun is the outcome of Source.Run: err is set before done is closed.
type sourceRun struct {
	done chan struct{}
	err  error
}

// add routes tx's events into b. A row the router rejects becomes a
// dead-letter record with on_error: dlq; otherwise b is cut back to where
// tx's source transaction began in b (for a fragment: its first fragment
// in this batch), so the batch ends at the last good whole transaction,
// and the error is returned.
func (p *Pipeline) add(b *batch, tx Tx) error {
	if !b.open {
		b.openFrom = len(b.records)
	}
	if b.firstCommit.IsZero() {
		b.firstCommit = tx.CommitTime
	}
	if tx.Pool != nil && cap(tx.Events) > 0 {
		// Kept whatever happens to its records here: a row cut off by
		// truncate is read by nothing once the batch is written.
		b.pooled = append(b.pooled, Tx{Events: tx.Events, Pool: tx.Pool})
	}
	for i := range tx.Events {
		ev := &tx.Events[i]
		rec, err := p.router.Route(ev)
		if err != nil {
			p.metrics.badRows.Inc()
			var bad *BadRowError
			if p.dead == nil || !errors.As(err, &bad) {
				b.truncate(b.openFrom)
				b.open = false
				return err
			}
			rec = p.dead(Failure{Event: ev, Err: err, Class: FailureBadRow})
			if b.dead == nil {
				b.dead = map[int]*deadEntry{}
			}
			b.dead[len(b.records)] = &deadEntry{cause: err, class: FailureBadRow}
			p.log.Warn().Str("origin", ev.Origin).Str("message_id", ev.MessageID).Str("class", FailureBadRow).
				Str("dlq_topic", rec.Topic).AnErr("error", err).Msg("bad outbox row: sending it to the dead-letter topic")
		}
		if rec.Warning != "" {
			p.routeWarning(ev, rec.Warning)
		}
		b.bytes += rec.Size()
		b.records = append(b.records, rec)
		b.events = append(b.events, ev)
	}
	if tx.More {
		b.open = true
		return nil
	}
	b.open = false
	b.marks = append(b.marks, txMark{records: len(b.records), end: tx.End})
	b.txs++
	b.end = tx.End
	if !tx.CommitTime.IsZero() {
		b.commitTime = tx.CommitTime
	}
	// An end without a commit time says the source has nothing pending.
	b.idle = tx.CommitTime.IsZero()
	return nil
}

// routeWarning logs a row the route sent otherwise than configured
// (Record.Warning, e.g. a JSON payload sent as text): the first at once,
// then at most one line per WarnInterval, which counts the rows since the
// previous one. The payload is not logged.
func (p *Pipeline) routeWarning(ev *Event, warning string) {
	ok, suppressed := p.routeWarns.Allow()
	if !ok {
		return
	}
	p.log.Warn().Str("origin", ev.Origin).Str("message_id", ev.MessageID).Int("rows", suppressed+1).Msg(warning)
}

func sourceStopped(err error) error {
	if err == nil {
		return errors.New("source stopped without an error")
	}
	if errors.Is(err, context.Canceled) {
		return err
	}
	return fmt.Errorf("source: %w", err)
}
