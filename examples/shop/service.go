// Package shop is the business of the examples: an order service that
// records its events with outboxwriter, and a consumer that applies them
// exactly once with outboxconsumer. The example commands (orders-service,
// consume-*) and the end-to-end tests (test/e2e TestConsumerKit*) run this
// same code.
//
// An order lives CREATED -> PAID -> SHIPPED, or CANCELLED before it
// ships; each step is one transaction that changes the order row and
// records one event, numbered per order (the aggregate_seq header).
package shop

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/outbox-cdc/outbox-cdc/outboxwriter"
	"github.com/outbox-cdc/outbox-cdc/router"
	"github.com/outbox-cdc/outbox-cdc/schema"
)

// Event types, and the state each one leaves.
const (
	Created   = "ORDER_CREATED"
	Paid      = "ORDER_PAID"
	Shipped   = "ORDER_SHIPPED"
	Cancelled = "ORDER_CANCELLED"
)

// SequenceHeader is the header (and outbox column) of each order's event
// number.
const SequenceHeader = "aggregate_seq"

// Route is the relay's route for the shop's outbox: the seed preset with
// the sequence column sent as a header. The relay's configuration says the
// same in YAML (route.preset: seed, route.headers: [aggregate_seq]); the
// service builds its writer from this value, so both ends use one set of
// names.
func Route() router.Config {
	r := router.DefaultConfig()
	r.Headers = []string{SequenceHeader}
	return r
}

// OrderEvent is every event's payload.
type OrderEvent struct {
	OrderNo string `json:"order_no"`
	Amount  int64  `json:"amount_cents,omitempty"`
}

// Service is the order service.
type Service struct {
	db      *sql.DB
	dialect outboxwriter.Dialect
	prefix  string // "" or "schema."
	w       *outboxwriter.Writer
}

// NewService returns the service on db ("mysql" or "postgres"), its tables
// under prefix ("" or "schema.").
func NewService(db *sql.DB, dialect, prefix string) (*Service, error) {
	d := outboxwriter.MySQL
	if dialect == "postgres" {
		d = outboxwriter.Postgres
	}
	layout, err := outboxwriter.LayoutFromRoute(prefix+schema.Table, Route())
	if err != nil {
		return nil, err
	}
	w, err := outboxwriter.New(outboxwriter.Config{Dialect: d, Layout: layout,
		Sequence: &outboxwriter.SequenceConfig{Header: SequenceHeader, Table: prefix + "outbox_sequence"}})
	if err != nil {
		return nil, err
	}
	return &Service{db: db, dialect: d, prefix: prefix, w: w}, nil
}

// Setup creates the orders table, the outbox table (schema/*.sql, plus the
// sequence column) and the sequence counter table, when missing.
func (s *Service) Setup(ctx context.Context) error {
	outbox := s.prefix + schema.Table
	exists := func(table, column string) (bool, error) {
		q := "SELECT COUNT(*) FROM information_schema.columns WHERE table_schema = DATABASE() AND table_name = ? AND (? = '' OR column_name = ?)"
		args := []any{table, column, column}
		if s.dialect == outboxwriter.Postgres {
			q = "SELECT COUNT(*) FROM information_schema.columns WHERE table_schema = $1 AND table_name = $2 AND ($3 = '' OR column_name = $3)"
			sch := strings.TrimSuffix(s.prefix, ".")
			if sch == "" {
				sch = "public"
			}
			args = []any{sch, table, column}
		}
		var n int
		err := s.db.QueryRowContext(ctx, q, args...).Scan(&n)
		return n > 0, err
	}
	stmts := []string{"CREATE TABLE IF NOT EXISTS " + s.prefix + "orders (order_no VARCHAR(32) PRIMARY KEY, state VARCHAR(16) NOT NULL, amount_cents BIGINT NOT NULL)",
		outboxwriter.SequenceTableDDL(s.dialect, s.prefix+"outbox_sequence")}
	if ok, err := exists(schema.Table, ""); err != nil {
		return fmt.Errorf("shop: %w", err)
	} else if !ok {
		if s.dialect == outboxwriter.MySQL {
			stmts = append(stmts, schema.MySQL(outbox))
		} else {
			stmts = append(stmts, schema.Postgres(outbox)...)
		}
	}
	for _, q := range stmts {
		if _, err := s.db.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("shop: %s: %w", q, err)
		}
	}
	if ok, err := exists(schema.Table, SequenceHeader); err != nil {
		return fmt.Errorf("shop: %w", err)
	} else if !ok {
		if _, err := s.db.ExecContext(ctx, "ALTER TABLE "+outbox+" ADD COLUMN "+SequenceHeader+" BIGINT NULL"); err != nil {
			return fmt.Errorf("shop: %w", err)
		}
	}
	return nil
}

// ErrWrongState is returned for a step the order's state does not allow.
var ErrWrongState = errors.New("shop: the order is not in a state that allows this")

// Step runs one business step on an order in one transaction: the order
// row changes and the event is recorded, then the transaction commits, or
// rolls back when commit is false (a declined payment, say: neither the
// change nor the event remains). It returns the event's message id.
func (s *Service) Step(ctx context.Context, orderNo, event string, amount int64, commit bool) (string, error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return "", err
	}
	defer tx.Rollback()
	ph := func(n int) string {
		if s.dialect == outboxwriter.Postgres {
			return fmt.Sprintf("$%d", n)
		}
		return "?"
	}
	var res sql.Result
	switch event {
	case Created:
		res, err = tx.ExecContext(ctx, "INSERT INTO "+s.prefix+"orders (order_no, state, amount_cents) VALUES ("+ph(1)+", 'CREATED', "+ph(2)+")", orderNo, amount)
	default:
		from := map[string]string{Paid: "'CREATED'", Shipped: "'PAID'", Cancelled: "'CREATED', 'PAID'"}[event]
		to := map[string]string{Paid: "PAID", Shipped: "SHIPPED", Cancelled: "CANCELLED"}[event]
		if from == "" {
			return "", fmt.Errorf("shop: unknown event %q", event)
		}
		res, err = tx.ExecContext(ctx, "UPDATE "+s.prefix+"orders SET state = "+ph(1)+" WHERE order_no = "+ph(2)+" AND state IN ("+from+")", to, orderNo)
	}
	if err != nil {
		return "", err
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		return "", ErrWrongState
	}
	payload := OrderEvent{OrderNo: orderNo}
	if event == Created {
		payload.Amount = amount
	}
	ids, err := s.w.Record(ctx, tx, outboxwriter.Event{AggregateType: "ORDER", AggregateID: orderNo, EventType: event, Payload: payload})
	if err != nil {
		return "", err
	}
	if !commit {
		return ids[0], tx.Rollback()
	}
	return ids[0], tx.Commit()
}

// decode reads an event's payload.
func decode(v []byte) (OrderEvent, error) {
	var e OrderEvent
	if err := json.Unmarshal(v, &e); err != nil {
		return e, fmt.Errorf("shop: payload: %w", err)
	}
	return e, nil
}
