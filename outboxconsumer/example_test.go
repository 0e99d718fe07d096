package outboxconsumer_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/outbox-cdc/outbox-cdc/outboxconsumer"
)

// A consumer applies each message once: the id is recorded in the
// transaction that applies it, so a duplicate finds it and is skipped, and
// a failure leaves nothing behind (do not acknowledge the message then).
func ExampleDedupe_Process() {
	db, err := sql.Open("mysql", "app:secret@tcp(127.0.0.1:3306)/billing")
	if err != nil {
		log.Fatal(err)
	}
	d, err := outboxconsumer.NewDedupe(outboxconsumer.DedupeConfig{Dialect: outboxconsumer.MySQL, Consumer: "billing"})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	for _, q := range d.DDL() {
		if _, err := db.ExecContext(ctx, q); err != nil {
			log.Fatal(err)
		}
	}
	go d.RunRetention(ctx, db, outboxconsumer.Retention{Keep: 7 * 24 * time.Hour})

	var msg outboxconsumer.Message // from FromKafka, FromAMQP, FromNATS or FromRedisStream
	o, err := d.Process(ctx, db, msg, func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, "INSERT INTO invoices (order_no) VALUES (?)", msg.AggregateID)
		return err
	})
	if err != nil {
		log.Printf("%s not applied, to be delivered again: %v", msg, err)
		return
	}
	fmt.Println(o) // applied, or duplicate
}

// Redis answers most duplicates; the database still decides for every
// message Redis does not know.
func ExampleRedisFilter() {
	db, _ := sql.Open("mysql", "app:secret@tcp(127.0.0.1:3306)/billing")
	d, _ := outboxconsumer.NewDedupe(outboxconsumer.DedupeConfig{Dialect: outboxconsumer.MySQL, Consumer: "billing"})
	f := outboxconsumer.NewRedisFilter(redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"}), d,
		outboxconsumer.RedisFilterConfig{TTL: 24 * time.Hour})
	var msg outboxconsumer.Message
	o, err := f.Process(context.Background(), db, msg, func(ctx context.Context, tx *sql.Tx) error {
		return nil // the business change, in tx
	})
	fmt.Println(o, err)
}

// The order's state decides: a repeated or late event is ignored, an early
// one is refused (retry it), the rest move the order.
func ExampleMachine() {
	m, err := outboxconsumer.NewMachine(outboxconsumer.MachineConfig{Dialect: outboxconsumer.Postgres, Table: "orders", KeyColumn: "order_no", StateColumn: "state"},
		outboxconsumer.Transition{Event: "ORDER_CREATED", From: []string{outboxconsumer.Absent}, To: "CREATED"},
		outboxconsumer.Transition{Event: "ORDER_PAID", From: []string{"CREATED"}, To: "PAID"},
		outboxconsumer.Transition{Event: "ORDER_SHIPPED", From: []string{"PAID"}, To: "SHIPPED"},
	)
	if err != nil {
		log.Fatal(err)
	}
	db, _ := sql.Open("pgx", "postgres://app@127.0.0.1:5432/shop")
	ctx := context.Background()
	var msg outboxconsumer.Message
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer tx.Rollback()
	mv, err := m.Apply(ctx, outboxconsumer.SQL(tx), msg.AggregateID, msg.EventType, func(ctx context.Context) error {
		if msg.EventType == "ORDER_CREATED" {
			_, err := tx.ExecContext(ctx, "INSERT INTO orders (order_no, state) VALUES ($1, 'NEW')", msg.AggregateID)
			return err
		}
		return nil // the business change of the other events
	})
	if errors.Is(err, outboxconsumer.ErrEarly) {
		return // not acknowledged: delivered again, after the event it waits for
	}
	if err != nil {
		log.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		log.Fatal(err)
	}
	fmt.Println(mv) // moved, repeated, backward or conflict
}

// The relay's Kafka record, under Debezium-compatible converters (the id
// header as a JsonConverter envelope, the key as JSON text).
func ExampleFromKafka() {
	m, err := outboxconsumer.FromKafka([]byte(`"SO-1001"`), []byte(`{"amount_cents":4250}`), []outboxconsumer.Header{
		{Key: "id", Value: []byte(`{"schema":{"type":"string","optional":false,"name":"io.debezium.data.Uuid","version":1},"payload":"0190d1f2-7a3b-7c4d-8e5f-0123456789ab"}`)},
		{Key: "eventType", Value: []byte(`"ORDER_PAID"`)},
	}, outboxconsumer.DebeziumFields())
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(m.ID, m.AggregateID, m.EventType)
	// Output: 0190d1f2-7a3b-7c4d-8e5f-0123456789ab SO-1001 ORDER_PAID
}

// A copy the NATS sink sent again to restore its key's order carries
// "~<n>" in Nats-Msg-Id; it is the same event.
func ExampleFromNATS() {
	m, _ := outboxconsumer.FromNATS(map[string][]string{"Nats-Msg-Id": {"m-42~1"}, "outbox_cdc.key": {"SO-1001"}, "event_type": {"ORDER_PAID"}},
		[]byte(`{}`), outboxconsumer.Fields{})
	fmt.Println(m.ID, m.AggregateID, m.EventType)
	// Output: m-42 SO-1001 ORDER_PAID
}

// A Redis stream entry as the relay writes it (go-redis XMessage.Values).
func ExampleFromRedisStream() {
	m, _ := outboxconsumer.FromRedisStream(map[string]any{"message_id": "m-42", "key": "SO-1001", "value": `{}`,
		"header.event_type": "ORDER_PAID", "header.aggregate_seq": "3"}, outboxconsumer.Fields{Sequence: "aggregate_seq"})
	fmt.Println(m.ID, m.AggregateID, m.EventType, m.Sequence)
	// Output: m-42 SO-1001 ORDER_PAID 3
}

// Per-aggregate order from the writer's sequence header: in order, a gap,
// or stale (a later event came first).
func ExampleOrderCheck() {
	o, _ := outboxconsumer.NewOrderCheck(outboxconsumer.OrderCheckConfig{Dialect: outboxconsumer.MySQL, Consumer: "billing"})
	db, _ := sql.Open("mysql", "app:secret@tcp(127.0.0.1:3306)/billing")
	var msg outboxconsumer.Message // Fields.Sequence: "aggregate_seq"
	ctx := context.Background()
	tx, _ := db.BeginTx(ctx, nil)
	defer tx.Rollback()
	r, err := o.Check(ctx, outboxconsumer.SQL(tx), msg)
	if err != nil {
		log.Fatal(err)
	}
	if r.Order != outboxconsumer.InOrder {
		log.Printf("%s: %s", msg, r) // e.g. "gap: 3..4 missing before 5"
	}
}
