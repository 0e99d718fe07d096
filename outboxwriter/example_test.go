package outboxwriter_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-cdc/outbox-cdc/outboxwriter"
	"github.com/outbox-cdc/outbox-cdc/router"
)

// A service pays an order: the order row changes and the event is
// recorded in one transaction, so either both happen or neither does.
func Example() {
	db, err := sql.Open("mysql", "app:secret@tcp(127.0.0.1:3306)/shop")
	if err != nil {
		log.Fatal(err)
	}
	w, err := outboxwriter.New(outboxwriter.Config{Dialect: outboxwriter.MySQL, Layout: outboxwriter.SeedLayout("outbox_message")})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer tx.Rollback() // a no-op after Commit
	if _, err := tx.ExecContext(ctx, "UPDATE orders SET state = 'PAID' WHERE order_no = ?", "SO-1001"); err != nil {
		log.Fatal(err)
	}
	ids, err := w.Record(ctx, tx, outboxwriter.Event{AggregateType: "ORDER", AggregateID: "SO-1001", EventType: "ORDER_PAID",
		Payload: map[string]any{"order_no": "SO-1001", "amount_cents": 4250}})
	if err != nil {
		log.Fatal(err) // the deferred Rollback undoes the UPDATE too
	}
	if err := tx.Commit(); err != nil {
		log.Fatal(err)
	}
	fmt.Println("recorded", ids[0])
}

// The writer takes its names from the relay's own route configuration:
// the preset, route.columns and route.headers.
func ExampleLayoutFromRoute() {
	route := router.DefaultConfig()
	route.Preset = router.PresetDebezium
	route.Headers = []string{"tenant", "trace_id:traceparent", "type:header:eventType"}
	l, err := outboxwriter.LayoutFromRoute("inventory.outboxevent", route)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(l.MessageID, l.AggregateType, l.AggregateID, l.EventType, l.Payload)
	fmt.Println(l.Headers["tenant"], l.Headers["traceparent"])
	// Output:
	// id aggregatetype aggregateid type payload
	// tenant trace_id
}

// Several events of one transaction go in with one statement, in order;
// with pgx, RecordPgx takes the pgx transaction.
func ExampleWriter_RecordPgx() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://app@127.0.0.1:5432/shop")
	if err != nil {
		log.Fatal(err)
	}
	w, err := outboxwriter.New(outboxwriter.Config{Dialect: outboxwriter.Postgres, Layout: outboxwriter.SeedLayout("public.outbox_message")})
	if err != nil {
		log.Fatal(err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer tx.Rollback(ctx)
	_, err = w.RecordPgx(ctx, tx,
		outboxwriter.Event{AggregateType: "ORDER", AggregateID: "SO-1001", EventType: "ORDER_CREATED", Payload: map[string]int{"amount_cents": 4250}},
		outboxwriter.Event{AggregateType: "PAYMENT", AggregateID: "SO-1001", EventType: "PAYMENT_REQUESTED", Payload: map[string]int{"amount_cents": 4250}},
	)
	if err != nil {
		log.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		log.Fatal(err)
	}
}

// On PostgreSQL the events can skip the table: transactional logical
// decoding messages, read by the relay with source.messages.prefix:
// outbox.
func ExampleConfig_messagePrefix() {
	w, err := outboxwriter.New(outboxwriter.Config{
		Dialect:       outboxwriter.Postgres,
		Layout:        outboxwriter.SeedLayout(""), // the role names; no table
		MessagePrefix: "outbox",
	})
	if err != nil {
		log.Fatal(err)
	}
	_ = w // w.Record(ctx, tx, ...) as with a table
}

// With a sequence, every event carries its number among its order's events
// (the counter table numbers them in commit order), and consumers can tell
// a gap or a reorder (outboxconsumer.OrderCheck). The route sends the
// column: route.headers: [aggregate_seq].
func ExampleConfig_sequence() {
	layout := outboxwriter.SeedLayout("outbox_message")
	layout.Headers = map[string]string{"aggregate_seq": "aggregate_seq"}
	w, err := outboxwriter.New(outboxwriter.Config{
		Dialect:  outboxwriter.MySQL,
		Layout:   layout,
		Sequence: &outboxwriter.SequenceConfig{Header: "aggregate_seq", Table: "outbox_sequence"},
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(outboxwriter.SequenceTableDDL(outboxwriter.MySQL, "outbox_sequence"))
	_ = w
	// Output:
	// CREATE TABLE IF NOT EXISTS `outbox_sequence` (aggregate_type VARCHAR(64) NOT NULL, aggregate_id VARCHAR(128) NOT NULL, seq BIGINT NOT NULL, PRIMARY KEY (aggregate_type, aggregate_id)) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin
}
