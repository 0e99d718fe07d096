package outboxcdc

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// atomicCheckpointer loads from an AtomicSink; its Save is never called
// because the position was written with the records.
type atomicCheckpointer struct{ s AtomicSink }

func (a atomicCheckpointer) Load(ctx context.Context) (Position, error) { return a.s.Load(ctx) }

func (a atomicCheckpointer) Save(context.Context, Position) error {
	return errors.New("atomic sink: Save must not be called")
}

// Witness gives an exactly-once pipeline (no Checkpointer, an AtomicSink)
// a store that mirrors the position the sink commits: it is saved after
// the commits, paced by CheckpointInterval (a failed save is logged, not
// fatal), and is never read to resume.
// It is evidence that the connector ran before. When the sink has no
// committed position at start but the witness holds one (the progress
// topic was deleted, its record expired, or the connector ran
// at-least-once with this store before), Run refuses with an error
// wrapping ErrProgressMissing instead of starting where source.start
// says and skipping what was committed meanwhile; freshStart makes it
// start anyway, as the operator asked. Call before Run.
func (p *Pipeline) Witness(w Checkpointer, freshStart bool) {
	p.witness, p.freshStart = w, freshStart
}

// ErrProgressMissing is wrapped by the error of an exactly-once start that
// finds no committed position although the witness shows that the
// connector committed one before.
var ErrProgressMissing = errors.New("no committed position, but the connector ran before")

// load returns the position to resume from; in exactly-once mode it
// checks the sink's committed position against the witness.
func (p *Pipeline) load(ctx context.Context) (Position, error) {
	from, err := p.cp.Load(ctx)
	if err != nil || p.atomic == nil || p.witness == nil {
		return from, err
	}
	seen, werr := p.witness.Load(ctx)
	what := describeStore(p.witness)
	switch {
	case !from.IsZero():
		if werr != nil {
			p.log.Warn().Err(werr).Str("store", what).Msg("the witness of the committed position cannot be read; rewriting it")
		}
		if werr != nil || seen != from {
			// A connector upgraded from a version without a witness, or
			// one whose witness lags: make the evidence current now, not
			// at the next commit, which on an idle outbox may be far off.
			p.saveWitness(ctx, from)
		}
		return from, nil
	case p.freshStart:
		if werr != nil || !seen.IsZero() {
			p.log.Warn().Str("witness", string(seen)).AnErr("witness_error", werr).Str("store", what).
				Msg("no committed position although the connector ran before: starting where source.start says, as asked (--fresh-start); what was committed since the witness is not sent")
		}
		return from, nil
	case werr != nil:
		return "", Permanent(fmt.Errorf("%w: the sink holds no committed position and the witness (%s) cannot be read (%s), so starting could skip rows",
			ErrProgressMissing, what, Cause(werr)),
			"restore the progress, or start deliberately from a position you choose with `outbox-cdc position set`, or where source.start says with `outbox-cdc run --fresh-start`")
	case !seen.IsZero():
		return "", Permanent(fmt.Errorf("%w: the sink holds no committed position, but %s shows the connector had reached %s (the progress topic was deleted, its record expired, or the connector ran at-least-once before): starting where source.start says would skip every row committed since",
			ErrProgressMissing, what, seen),
			fmt.Sprintf("resume from there with `outbox-cdc position set --to %s` (rows after it may be delivered again), or start fresh deliberately with `outbox-cdc run --fresh-start`", seen))
	}
	return from, nil
}

// saveWitness writes the witness. A failure is logged, not fatal: the
// position itself is committed in the sink, and the witness already
// written (if any) stays as evidence. Several instances without the HA
// lock may share a witness file; their saves can then collide.
func (p *Pipeline) saveWitness(ctx context.Context, pos Position) {
	err := p.witness.Save(ctx, pos)
	if err == nil {
		p.witnessWarned = time.Time{}
		return
	}
	if time.Since(p.witnessWarned) < p.cfg.LogInterval {
		return
	}
	p.witnessWarned = time.Now()
	p.log.Warn().Err(err).Str("store", describeStore(p.witness)).Str("position", string(pos)).
		Msg("cannot write the witness of the committed position; until it is written, a deleted or expired progress record would not be noticed at start")
}

func describeStore(cp Checkpointer) string {
	if s, ok := cp.(fmt.Stringer); ok {
		return s.String()
	}
	return "the checkpoint store"
}
