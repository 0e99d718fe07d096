package outboxconsumer_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/outbox-cdc/outbox-cdc/outboxconsumer"
	"github.com/outbox-cdc/outbox-cdc/test/testenv"
)

// BenchmarkIdempotency measures what each kit piece costs per message on
// the local MariaDB and Redis (docs/consumers.md, "Trade-offs"): a new
// message through the dedupe table, a duplicate through the table, a
// duplicate answered by the Redis pre-filter, a new message through the
// filter, and a repeated event stopped by the state machine. The handler
// does nothing else. Run:
//
//	go test -run '^$' -bench BenchmarkIdempotency -benchtime 2000x ./outboxconsumer
func BenchmarkIdempotency(b *testing.B) {
	ctx := context.Background()
	db, _ := testenv.ScratchMySQL(b, testenv.UniqueName(b, "ocb"))
	c := &consumerDB{dialect: outboxconsumer.MySQL, sql: db}
	if _, err := db.Exec("CREATE TABLE orders (order_no VARCHAR(32) PRIMARY KEY, state VARCHAR(16) NOT NULL, applied INT NOT NULL DEFAULT 0)"); err != nil {
		b.Fatal(err)
	}
	d := c.dedupe(b, "bench")
	rc := redis.NewClient(&redis.Options{Addr: testenv.HostOf(b, testenv.RedisURL(b))})
	b.Cleanup(func() { rc.Close() })
	f := outboxconsumer.NewRedisFilter(rc, d, outboxconsumer.RedisFilterConfig{Prefix: testenv.UniqueName(b, "ocb") + ":"})
	nop := func(context.Context, outboxconsumer.Tx) error { return nil }
	run := func(b *testing.B, id func(i int) string, filtered bool) {
		for i := 0; i < b.N; i++ {
			m := outboxconsumer.Message{ID: id(i)}
			var err error
			if filtered {
				_, err = f.Do(ctx, m, func(ctx context.Context) (outboxconsumer.Outcome, error) { return c.process(ctx, d, m, nop) })
			} else {
				_, err = c.process(ctx, d, m, nop)
			}
			if err != nil {
				b.Fatal(err)
			}
		}
	}
	round := 0
	fresh := func(string) func(int) string {
		round++
		r := round
		return func(i int) string { return fmt.Sprintf("r%d-%d", r, i) }
	}
	b.Run("dedupe-new", func(b *testing.B) { run(b, fresh(""), false) })
	b.Run("dedupe-duplicate", func(b *testing.B) { run(b, func(int) string { return "r1-0" }, false) })
	b.Run("redis-new", func(b *testing.B) { run(b, fresh(""), true) })
	b.Run("redis-duplicate", func(b *testing.B) {
		run(b, func(int) string { return "r1-0" }, true) // the first call makes the key
	})
	m, err := outboxconsumer.NewMachine(outboxconsumer.MachineConfig{Dialect: outboxconsumer.MySQL, Table: "orders", KeyColumn: "order_no", StateColumn: "state"},
		outboxconsumer.Transition{Event: "CREATED", From: []string{outboxconsumer.Absent}, To: "CREATED"})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := db.Exec("INSERT INTO orders (order_no, state) VALUES ('A-1', 'CREATED')"); err != nil {
		b.Fatal(err)
	}
	b.Run("machine-repeated", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := m.Apply(ctx, outboxconsumer.SQL(tx), "A-1", "CREATED", func(context.Context) error { return nil }); err != nil {
				b.Fatal(err)
			}
			if err := tx.Commit(); err != nil {
				b.Fatal(err)
			}
		}
	})
}
