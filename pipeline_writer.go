package outboxcdc

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
)

// writer writes each batch and hands its end position to the saver, which
// saves it and then acks the source. Saving runs beside the next write, so
// a checkpoint fsync never delays records; under load the saver coalesces
// several batches into one save. The checkpoint still never passes an
// unacknowledged record: a position reaches the saver only after every
// record before it was acknowledged.
func (p *Pipeline) writer(ctx context.Context, batches <-chan *batch) error {
	sv := p.startSaver(ctx)
	for {
		var b *batch
		select {
		case next, ok := <-batches:
			if !ok {
				return sv.close()
			}
			b = next
			if err := p.abortedErr(); err != nil {
				return errors.Join(err, sv.close())
			}
		case <-sv.fail:
			// A save failed: stop now, even if no further batch comes.
			return sv.close()
		}
		start := time.Now()
		p.lag.writing(b.firstCommit)
		if err := p.deliver(ctx, b, sv); err != nil {
			// Save what was acknowledged before the failure.
			if serr := sv.close(); serr != nil {
				return errors.Join(err, serr)
			}
			return err
		}
		if len(b.records) > 0 {
			p.metrics.writeSeconds.Observe(time.Since(start).Seconds())
			p.metrics.records.Add(float64(len(b.records)))
			p.metrics.batchRecords.Observe(float64(len(b.records)))
		}
		for _, d := range b.dead {
			p.metrics.deadLetters.WithLabelValues(d.class).Inc()
		}
		p.trackOpen(b)
		// A batch that only continues an open transaction has no end: its
		// message ids wait in the saver for the transaction's end.
		sv.put(b.end, b.commitTime, b.idle, p.messageIDs(b.events))
		p.recycle(b)
	}
}

// trackOpen keeps the gauge of records written for a source transaction
// whose end has not arrived. Called from the writer goroutine.
func (p *Pipeline) trackOpen(b *batch) {
	switch {
	case len(b.marks) > 0 && b.open:
		p.openRecords = len(b.records) - b.openFrom
	case len(b.marks) > 0:
		p.openRecords = 0
	case b.open:
		p.openRecords += len(b.records)
	}
	p.metrics.openRecords.Set(float64(p.openRecords))
}

// messageIDs lists the batch's message ids for the checkpoint observer.
func (p *Pipeline) messageIDs(events []*Event) []string {
	if p.observer == nil || len(events) == 0 {
		return nil
	}
	ids := make([]string, len(events))
	for i, ev := range events {
		ids[i] = ev.MessageID
	}
	return ids
}

// write hands records to the sink; in exactly-once mode together with end.
// Nothing is issued once the pipeline is aborted or the fence refuses.
func (p *Pipeline) write(ctx context.Context, records []Record, end Position) error {
	if len(records) > 0 || (p.atomic != nil && !end.IsZero()) {
		if err := p.writeAllowed(); err != nil {
			return Permanent(err, "")
		}
	}
	switch {
	case p.atomic != nil:
		if end.IsZero() && len(records) == 0 {
			return nil
		}
		if err := p.atomic.WriteAtomic(ctx, records, end); err != nil {
			if end.IsZero() {
				return fmt.Errorf("atomic write of %d records inside a source transaction that is still open: %w", len(records), err)
			}
			return fmt.Errorf("atomic write of %d records with position %s: %w", len(records), end, err)
		}
	case len(records) > 0:
		if err := p.sink.Write(ctx, records); err != nil {
			return fmt.Errorf("sink write of %d records (after checkpoint, up to %s): %w", len(records), end, err)
		}
	}
	return nil
}

// deliver writes b until every record is acknowledged. When the sink
// rejects one record permanently (a RecordError), with on_error: dlq that
// record is replaced by a dead-letter record and the whole batch is written
// again: records before it that were already acknowledged are then sent a
// second time (at-least-once; per key the last copies keep commit order).
// If the dead-letter record is rejected too, it is tried once more without
// the payload, then the pipeline halts. With on_error: halt, the whole
// transactions before the rejected row are written and checkpointed, and
// the error names the row.
func (p *Pipeline) deliver(ctx context.Context, b *batch, sv *saver) error {
	for {
		err := p.write(ctx, b.records, b.end)
		if err == nil {
			return nil
		}
		var re RecordError
		if !errors.As(err, &re) {
			return err
		}
		if errors.Is(err, ErrOpenWriteAborted) {
			// The records of the transaction's earlier batches went with
			// the aborted write: neither a dead letter nor the
			// transactions before the row can be committed without them.
			if i, _ := re.FailedRecord(); i >= 0 && i < len(b.records) {
				ev := b.events[i]
				return fmt.Errorf("outbox row at %s (message id %s), inside a source transaction larger than one batch, was rejected by the sink: %w; stopping without committing any part of that transaction (exactly-once cannot replace a row once the open Kafka transaction holding the rows before it was aborted): fix the cause and restart, which reads the transaction again",
					ev.Origin, idOrNone(ev.MessageID), err)
			}
			return err
		}
		i, permanent := re.FailedRecord()
		if !permanent || i < 0 || i >= len(b.records) || ctx.Err() != nil {
			return err
		}
		failed := []int{i}
		var multi RecordsError
		if errors.As(err, &multi) {
			failed = failed[:0]
			for _, j := range multi.FailedRecords() {
				if j >= 0 && j < len(b.records) {
					failed = append(failed, j)
				}
			}
			slices.Sort(failed)
			failed = slices.Compact(failed)
			if len(failed) == 0 {
				return err
			}
		}
		if p.dead == nil {
			return p.halt(ctx, b, failed[0], err, sv)
		}
		for _, j := range failed {
			if derr := p.divert(b, j, err); derr != nil {
				return derr
			}
		}
	}
}
