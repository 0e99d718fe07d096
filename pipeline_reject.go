package outboxcdc

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// divert replaces record i of b, which the sink rejected with err, by its
// dead-letter record: the first time with the payload, then without it;
// it fails when even that was rejected.
func (p *Pipeline) divert(b *batch, i int, err error) error {
	ev := b.events[i]
	d := b.dead[i]
	switch {
	case d == nil:
		orig := b.records[i]
		d = &deadEntry{orig: &orig, cause: err, class: FailureRejected}
		if b.dead == nil {
			b.dead = map[int]*deadEntry{}
		}
		b.dead[i] = d
	case !d.omitValue:
		d.omitValue = true
		p.log.Warn().Str("origin", ev.Origin).Str("message_id", ev.MessageID).AnErr("error", err).
			Msg("dead-letter record rejected; sending it again without the payload")
	default:
		return fmt.Errorf("outbox row at %s (message id %s): its dead-letter record was rejected too, even without the payload: %w (the row failed with: %v)",
			ev.Origin, idOrNone(ev.MessageID), err, d.cause)
	}
	b.records[i] = p.dead(Failure{Event: ev, Record: d.orig, Err: d.cause, Class: d.class, OmitValue: d.omitValue})
	if d.class == FailureRejected && !d.omitValue {
		p.log.Warn().Str("origin", ev.Origin).Str("message_id", ev.MessageID).Str("class", d.class).
			Str("dlq_topic", b.records[i].Topic).AnErr("error", err).
			Msg("record rejected by the sink: sending the row to the dead-letter topic and writing the batch again")
	}
	return nil
}

// halt writes and checkpoints the whole transactions before record i,
// which the sink rejected, and returns the error that stops the pipeline.
func (p *Pipeline) halt(ctx context.Context, b *batch, i int, cause error, sv *saver) error {
	ev := b.events[i]
	n, end := b.before(i)
	at := "the checkpoint did not move"
	if !end.IsZero() {
		if err := p.write(ctx, b.records[:n], end); err != nil {
			// A sink reports the first rejection it hears of, which need not
			// be the first rejected record (Kafka answers per partition):
			// when an earlier row is rejected too, the halt names that one.
			var re RecordError
			if j, permanent := -1, false; errors.As(err, &re) && !errors.Is(err, ErrOpenWriteAborted) {
				if j, permanent = re.FailedRecord(); permanent && j >= 0 && j < n {
					return p.halt(ctx, b, j, err, sv)
				}
			}
			p.log.Warn().Err(err).Msg("could not write the transactions before the rejected row")
		} else {
			// The writer's error path closes the saver, which saves this.
			sv.put(end, time.Time{}, false, p.messageIDs(b.events[:n]))
			// The rejected row stays undelivered: the lag keeps counting.
			p.lag.writing(ev.CommitTime)
			at = "checkpoint at " + string(end) + ", just before its transaction"
		}
	}
	return fmt.Errorf("outbox row at %s (message id %s) was rejected by the sink: %w; stopping (%s; pipeline.on_error is halt, set it to dlq to send such rows to a dead-letter topic instead)",
		ev.Origin, idOrNone(ev.MessageID), cause, at)
}

func idOrNone(id string) string {
	if id == "" {
		return "(none)"
	}
	return id
}
