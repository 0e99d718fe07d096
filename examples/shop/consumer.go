package shop

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/outbox-cdc/outbox-cdc/outboxconsumer"
)

// Mode is how a Consumer makes its processing idempotent.
type Mode string

const (
	// ModeDedupe: the processed-messages table in the consumer's
	// transaction (outboxconsumer.Dedupe), and the order check.
	ModeDedupe Mode = "dedupe"
	// ModeRedis: a Redis pre-filter in front of the dedupe table.
	ModeRedis Mode = "redis"
	// ModeMachine: no dedupe table; the order's state alone
	// (outboxconsumer.Machine) ignores what was already applied.
	ModeMachine Mode = "machine"
)

// Fields are the headers the shop's route sends.
func Fields() outboxconsumer.Fields {
	f := outboxconsumer.SeedFields()
	f.Sequence = SequenceHeader
	return f
}

// Consumer keeps a view of the orders (<name>_orders) and a ledger with
// one row per event applied (<name>_ledger): a message applied twice
// would show as two ledger rows with its id.
type Consumer struct {
	db      *sql.DB
	d       outboxconsumer.Dialect
	name    string
	prefix  string
	mode    Mode
	dedupe  *outboxconsumer.Dedupe
	filter  *outboxconsumer.RedisFilter
	order   *outboxconsumer.OrderCheck
	machine *outboxconsumer.Machine
	orders  string
	ledger  string
}

// NewConsumer returns the consumer called name on db ("mysql" or
// "postgres", tables under prefix); rc is the Redis of ModeRedis.
func NewConsumer(db *sql.DB, dialect, prefix, name string, mode Mode, rc *redis.Client) (*Consumer, error) {
	d := outboxconsumer.MySQL
	if dialect == "postgres" {
		d = outboxconsumer.Postgres
	}
	c := &Consumer{db: db, d: d, name: name, prefix: prefix, mode: mode,
		orders: prefix + name + "_orders", ledger: prefix + name + "_ledger"}
	var err error
	switch mode {
	case ModeDedupe, ModeRedis:
		if c.dedupe, err = outboxconsumer.NewDedupe(outboxconsumer.DedupeConfig{Dialect: d, Table: prefix + "processed_message", Consumer: name}); err != nil {
			return nil, err
		}
		if c.order, err = outboxconsumer.NewOrderCheck(outboxconsumer.OrderCheckConfig{Dialect: d, Table: prefix + "aggregate_sequence", Consumer: name}); err != nil {
			return nil, err
		}
		if mode == ModeRedis {
			if rc == nil {
				return nil, errors.New("shop: ModeRedis needs a Redis client")
			}
			c.filter = outboxconsumer.NewRedisFilter(rc, c.dedupe, outboxconsumer.RedisFilterConfig{TTL: time.Hour})
		}
	case ModeMachine:
		c.machine, err = outboxconsumer.NewMachine(outboxconsumer.MachineConfig{Dialect: d, Table: c.orders, KeyColumn: "order_no", StateColumn: "state"},
			outboxconsumer.Transition{Event: Created, From: []string{outboxconsumer.Absent}, To: "CREATED"},
			outboxconsumer.Transition{Event: Paid, From: []string{"CREATED"}, To: "PAID"},
			outboxconsumer.Transition{Event: Shipped, From: []string{"PAID"}, To: "SHIPPED"},
			outboxconsumer.Transition{Event: Cancelled, From: []string{"CREATED", "PAID"}, To: "CANCELLED"})
		if err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("shop: mode %q is not dedupe, redis or machine", mode)
	}
	return c, nil
}

// Setup creates the consumer's tables when missing.
func (c *Consumer) Setup(ctx context.Context) error {
	stmts := []string{
		"CREATE TABLE IF NOT EXISTS " + c.orders + " (order_no VARCHAR(32) PRIMARY KEY, state VARCHAR(16) NOT NULL, amount_cents BIGINT NOT NULL)",
		"CREATE TABLE IF NOT EXISTS " + c.ledger + " (message_id VARCHAR(128) NOT NULL, order_no VARCHAR(32) NOT NULL, event_type VARCHAR(32) NOT NULL)",
	}
	if c.dedupe != nil {
		stmts = append(stmts, c.dedupe.DDL()...)
		stmts = append(stmts, c.order.DDL()...)
	}
	for _, q := range stmts {
		if _, err := c.db.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("shop: %s: %w", q, err)
		}
	}
	return nil
}

func (c *Consumer) ph(q string) string {
	if c.d == outboxconsumer.Postgres {
		n := 0
		out := make([]byte, 0, len(q)+8)
		for i := 0; i < len(q); i++ {
			if q[i] == '?' {
				n++
				out = append(out, fmt.Sprintf("$%d", n)...)
				continue
			}
			out = append(out, q[i])
		}
		return string(out)
	}
	return q
}

// Handle applies one delivered message. An error means it was not applied
// and must be handled again (the examples retry it in place, which keeps
// the broker's order); a duplicate is no error.
func (c *Consumer) Handle(ctx context.Context, m outboxconsumer.Message) error {
	ev, err := decode(m.Value)
	if err != nil {
		return err
	}
	switch c.mode {
	case ModeMachine:
		tx, err := c.db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		if _, err := c.machine.Apply(ctx, outboxconsumer.SQL(tx), m.AggregateID, m.EventType, func(ctx context.Context) error {
			return c.effect(ctx, tx, m, ev)
		}); err != nil {
			return err
		}
		return tx.Commit()
	case ModeRedis:
		_, err = c.filter.Process(ctx, c.db, m, func(ctx context.Context, tx *sql.Tx) error { return c.checked(ctx, tx, m, ev) })
	default:
		_, err = c.dedupe.Process(ctx, c.db, m, func(ctx context.Context, tx *sql.Tx) error { return c.checked(ctx, tx, m, ev) })
	}
	return err
}

// checked runs the order check, which counts a gap or a reorder, then the
// effect (the shop applies a reordered event anyway: its counters say so).
func (c *Consumer) checked(ctx context.Context, tx *sql.Tx, m outboxconsumer.Message, ev OrderEvent) error {
	if _, err := c.order.Check(ctx, outboxconsumer.SQL(tx), m); err != nil {
		return err
	}
	return c.effect(ctx, tx, m, ev)
}

// effect is the business change of one event.
func (c *Consumer) effect(ctx context.Context, tx *sql.Tx, m outboxconsumer.Message, ev OrderEvent) error {
	var q string
	var args []any
	switch m.EventType {
	case Created:
		q, args = "INSERT INTO "+c.orders+" (order_no, state, amount_cents) VALUES (?, 'CREATED', ?)", []any{m.AggregateID, ev.Amount}
	case Paid, Shipped, Cancelled:
		if c.mode != ModeMachine { // the machine sets the state itself
			to := map[string]string{Paid: "PAID", Shipped: "SHIPPED", Cancelled: "CANCELLED"}[m.EventType]
			q, args = "UPDATE "+c.orders+" SET state = ? WHERE order_no = ?", []any{to, m.AggregateID}
		}
	default:
		return fmt.Errorf("shop: unknown event type %q in %s", m.EventType, m)
	}
	if q != "" {
		if _, err := tx.ExecContext(ctx, c.ph(q), args...); err != nil {
			return err
		}
	}
	_, err := tx.ExecContext(ctx, c.ph("INSERT INTO "+c.ledger+" (message_id, order_no, event_type) VALUES (?, ?, ?)"), m.ID, m.AggregateID, m.EventType)
	return err
}

// Stats are what a consumer counted.
type Stats struct {
	// Duplicates are copies skipped: by the dedupe table, by Redis, or
	// by the state machine (repeated and backward moves).
	Duplicates int64
	// Dedupe, Redis, Machine and Order are the kit pieces' own counters
	// (zero for the pieces the mode does not use).
	Dedupe  outboxconsumer.DedupeStats
	Redis   outboxconsumer.RedisFilterStats
	Machine outboxconsumer.MachineStats
	Order   outboxconsumer.OrderStats
}

// Stats returns the counters.
func (c *Consumer) Stats() Stats {
	var s Stats
	if c.dedupe != nil {
		s.Dedupe, s.Order = c.dedupe.Stats(), c.order.Stats()
		s.Duplicates = s.Dedupe.Duplicates
	}
	if c.filter != nil {
		s.Redis = c.filter.Stats()
		s.Duplicates += s.Redis.Hits
	}
	if c.machine != nil {
		s.Machine = c.machine.Stats()
		s.Duplicates = s.Machine.Repeated + s.Machine.Backward
	}
	return s
}

// Ledger returns how many times each message id was applied.
func (c *Consumer) Ledger(ctx context.Context) (map[string]int, error) {
	rows, err := c.db.QueryContext(ctx, "SELECT message_id, COUNT(*) FROM "+c.ledger+" GROUP BY message_id")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var id string
		var n int
		if err := rows.Scan(&id, &n); err != nil {
			return nil, err
		}
		out[id] = n
	}
	return out, rows.Err()
}

// States returns each order's state in the consumer's view.
func (c *Consumer) States(ctx context.Context) (map[string]string, error) {
	rows, err := c.db.QueryContext(ctx, "SELECT order_no, state FROM "+c.orders)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var no, st string
		if err := rows.Scan(&no, &st); err != nil {
			return nil, err
		}
		out[no] = st
	}
	return out, rows.Err()
}

// HandleRetrying calls Handle until it succeeds or ctx ends, waiting a
// little between attempts (a deadlock, the database restarting, an event
// the state machine finds early).
func (c *Consumer) HandleRetrying(ctx context.Context, m outboxconsumer.Message, onRetry func(error)) error {
	for wait := 10 * time.Millisecond; ; wait = min(2*wait, time.Second) {
		err := c.Handle(ctx, m)
		if err == nil {
			return nil
		}
		if onRetry != nil {
			onRetry(err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last error: %v)", ctx.Err(), err)
		case <-time.After(wait):
		}
	}
}
