package outboxconsumer

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
)

// OrderCheckConfig configures an OrderCheck.
type OrderCheckConfig struct {
	Dialect Dialect
	// Table holds the last sequence applied per aggregate; "" is
	// aggregate_sequence.
	Table string
	// Consumer names this consumer, as DedupeConfig.Consumer.
	Consumer string
	// HoldGaps makes Check return ErrGap for an event that skips numbers,
	// without recording it, so the caller's transaction rolls back and
	// the event is retried until the missing ones arrived (RabbitMQ and
	// Redis can deliver an aggregate's events out of order after a
	// failure). Off: the gap is reported and counted, the event recorded.
	HoldGaps bool
	// StartAnywhere accepts any number as the first one seen for an
	// aggregate (a consumer started after the aggregate's first events
	// were delivered). Off: the first must be 1, and another is a gap.
	StartAnywhere bool
}

// Order is Check's verdict.
type Order int

const (
	// InOrder: the event is the aggregate's next one (last + 1).
	InOrder Order = iota + 1
	// Gap: numbers between the last one and this one have not been seen.
	Gap
	// Stale: the event's number is at or below the last one: a later
	// event was applied first (a reorder), or it is a copy of one already
	// seen (when no Dedupe runs before the check).
	Stale
)

func (o Order) String() string {
	switch o {
	case InOrder:
		return "in order"
	case Gap:
		return "gap"
	case Stale:
		return "stale"
	}
	return "none"
}

// ErrGap is returned (wrapped) by Check with HoldGaps for an event whose
// predecessors have not arrived.
var ErrGap = errors.New("events of this aggregate are missing before this one")

// ErrNoSequence is returned by Check for a message without a sequence.
var ErrNoSequence = errors.New("outboxconsumer: the message carries no sequence (outboxwriter Config.Sequence, and Fields.Sequence here)")

// OrderResult is Check's answer: the verdict, the last number recorded
// before this event (0: none) and this event's.
type OrderResult struct {
	Order     Order
	Last, Got int64
}

func (r OrderResult) String() string {
	switch r.Order {
	case Gap:
		return fmt.Sprintf("gap: %d..%d missing before %d", r.Last+1, r.Got-1, r.Got)
	case Stale:
		return fmt.Sprintf("stale: %d after %d", r.Got, r.Last)
	}
	return r.Order.String()
}

// OrderCheck follows each aggregate's sequence in the consumer's database,
// in the transaction that applies the event, so what it records commits
// or rolls back with the business change and survives restarts and
// rebalances.
//
// What a consumer can know: with a sequence numbered in commit order per
// aggregate (outboxwriter's SequenceConfig.Table does that; an aggregate
// version column incremented in the same transaction does too), a gap and
// a reorder are certain. Without one it cannot tell: message ids, even
// time-ordered UUIDv7, are drawn before the commit on the clock of
// whichever service instance wrote them, so their order is not the commit
// order, and no id says that another one is missing.
type OrderCheck struct {
	cfg   OrderCheckConfig
	table string
	stats struct{ inOrder, gaps, stale atomic.Int64 }
}

// OrderStats are an OrderCheck's counters since New.
type OrderStats struct{ InOrder, Gaps, Stale int64 }

// NewOrderCheck validates cfg.
func NewOrderCheck(cfg OrderCheckConfig) (*OrderCheck, error) {
	if err := cfg.Dialect.valid(); err != nil {
		return nil, err
	}
	if cfg.Consumer == "" || len(cfg.Consumer) > 64 {
		return nil, errors.New("outboxconsumer: OrderCheckConfig.Consumer must be a name of 1 to 64 characters")
	}
	if cfg.Table == "" {
		cfg.Table = "aggregate_sequence"
	}
	return &OrderCheck{cfg: cfg, table: cfg.Dialect.quoteIdent(cfg.Table)}, nil
}

// DDL returns the CREATE TABLE of the sequence table.
func (o *OrderCheck) DDL() []string {
	bin := ""
	tail := ""
	if o.cfg.Dialect == MySQL {
		bin, tail = " CHARACTER SET utf8mb4 COLLATE utf8mb4_bin", " ENGINE=InnoDB DEFAULT CHARSET=utf8mb4"
	}
	return []string{"CREATE TABLE IF NOT EXISTS " + o.table + " (consumer VARCHAR(64)" + bin + " NOT NULL, " +
		"aggregate_type VARCHAR(64)" + bin + " NOT NULL, aggregate_id VARCHAR(128)" + bin + " NOT NULL, seq BIGINT NOT NULL, " +
		"PRIMARY KEY (consumer, aggregate_type, aggregate_id))" + tail}
}

// Stats returns the counters.
func (o *OrderCheck) Stats() OrderStats {
	return OrderStats{InOrder: o.stats.inOrder.Load(), Gaps: o.stats.gaps.Load(), Stale: o.stats.stale.Load()}
}

// Check compares msg.Sequence with the last number recorded for its
// aggregate (msg.AggregateType, msg.AggregateID) and records it when it is
// higher (unless HoldGaps holds a gap). A stale event is never recorded:
// the number only grows. Call it in the transaction that applies msg,
// after Dedupe.Mark, and decide from the verdict whether to apply it.
// The aggregate's row is locked until the transaction ends, so two events
// of one aggregate are checked one after the other.
func (o *OrderCheck) Check(ctx context.Context, tx Tx, msg Message) (OrderResult, error) {
	if msg.Sequence <= 0 {
		return OrderResult{}, ErrNoSequence
	}
	d := o.cfg.Dialect
	key := []any{o.cfg.Consumer, msg.AggregateType, msg.AggregateID}
	// The aggregate's row is made first (seq 0: none seen) and then
	// locked: a locking read of a missing row would take a gap lock on
	// MySQL, and two first events of different aggregates would then
	// deadlock on their inserts.
	ensure := "INSERT INTO " + o.table + " (consumer, aggregate_type, aggregate_id, seq) VALUES (?, ?, ?, 0) ON CONFLICT DO NOTHING"
	if d == MySQL {
		ensure = "INSERT INTO " + o.table + " (consumer, aggregate_type, aggregate_id, seq) VALUES (?, ?, ?, 0) ON DUPLICATE KEY UPDATE seq = seq"
	}
	if _, err := tx.Exec(ctx, d.bind(ensure), key...); err != nil {
		return OrderResult{}, wrapf(err, "record the sequence of %s", msg.AggregateID)
	}
	var last int64
	if _, err := tx.QueryRow(ctx, d.bind("SELECT seq FROM "+o.table+" WHERE consumer = ? AND aggregate_type = ? AND aggregate_id = ? FOR UPDATE"),
		key, &last); err != nil {
		return OrderResult{}, wrapf(err, "read the sequence of %s", msg.AggregateID)
	}
	r := OrderResult{Last: last, Got: msg.Sequence}
	switch {
	case msg.Sequence <= last:
		r.Order = Stale
		o.stats.stale.Add(1)
		return r, nil
	case msg.Sequence == last+1 || (last == 0 && o.cfg.StartAnywhere):
		r.Order = InOrder
	default:
		r.Order = Gap
		if o.cfg.HoldGaps {
			o.stats.gaps.Add(1)
			return r, fmt.Errorf("outboxconsumer: %s: %w (%s)", msg, ErrGap, r)
		}
	}
	if _, err := tx.Exec(ctx, d.bind("UPDATE "+o.table+" SET seq = ? WHERE consumer = ? AND aggregate_type = ? AND aggregate_id = ?"),
		append([]any{msg.Sequence}, key...)...); err != nil {
		return OrderResult{}, wrapf(err, "record the sequence of %s", msg.AggregateID)
	}
	if r.Order == Gap {
		o.stats.gaps.Add(1)
	} else {
		o.stats.inOrder.Add(1)
	}
	return r, nil
}
