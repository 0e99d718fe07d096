package outboxconsumer_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/outbox-cdc/outbox-cdc/outboxconsumer"
	"github.com/outbox-cdc/outbox-cdc/test/testenv"
)

// consumerDB is the consumer's own database for one test: an orders table
// and the kit's tables, reached through database/sql or a pgx pool.
type consumerDB struct {
	dialect outboxconsumer.Dialect
	sql     *sql.DB
	pool    *pgxpool.Pool // set: use the pgx variants
	prefix  string
}

func (c *consumerDB) q(s string) string {
	s = strings.ReplaceAll(s, "T.", c.prefix)
	if c.dialect == outboxconsumer.Postgres {
		n := 0
		var b strings.Builder
		for _, r := range s {
			if r == '?' {
				n++
				fmt.Fprintf(&b, "$%d", n)
				continue
			}
			b.WriteRune(r)
		}
		s = b.String()
	}
	return s
}

func forEachConsumerDB(t *testing.T, test func(t *testing.T, c *consumerDB)) {
	for _, kind := range []string{"mysql", "postgres", "pgx"} {
		t.Run(kind, func(t *testing.T) {
			name := testenv.UniqueName(t, "oc")
			c := &consumerDB{}
			if kind == "mysql" {
				c.dialect = outboxconsumer.MySQL
				c.sql, _ = testenv.ScratchMySQL(t, name)
			} else {
				c.dialect, c.prefix = outboxconsumer.Postgres, name+"."
				var dsn string
				c.sql, dsn = testenv.ScratchPostgres(t, name)
				if kind == "pgx" {
					pool, err := pgxpool.New(context.Background(), dsn)
					if err != nil {
						t.Fatal(err)
					}
					t.Cleanup(pool.Close)
					c.pool = pool
				}
			}
			if _, err := c.sql.Exec(c.q("CREATE TABLE T.orders (order_no VARCHAR(32) PRIMARY KEY, state VARCHAR(16) NOT NULL, applied INT NOT NULL DEFAULT 0)")); err != nil {
				t.Fatal(err)
			}
			test(t, c)
		})
	}
}

func (c *consumerDB) dedupe(t testing.TB, consumer string) *outboxconsumer.Dedupe {
	t.Helper()
	d, err := outboxconsumer.NewDedupe(outboxconsumer.DedupeConfig{Dialect: c.dialect, Table: c.prefix + "processed_message", Consumer: consumer})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range d.DDL() {
		if _, err := c.sql.Exec(s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
	return d
}

// process runs d.Process (or ProcessPgx) with a handler given the kit's Tx
// and a statement runner.
func (c *consumerDB) process(ctx context.Context, d *outboxconsumer.Dedupe, m outboxconsumer.Message,
	h func(ctx context.Context, tx outboxconsumer.Tx) error) (outboxconsumer.Outcome, error) {
	if c.pool != nil {
		return d.ProcessPgx(ctx, c.pool, m, func(ctx context.Context, tx pgx.Tx) error { return h(ctx, outboxconsumer.Pgx(tx)) })
	}
	return d.Process(ctx, c.sql, m, func(ctx context.Context, tx *sql.Tx) error { return h(ctx, outboxconsumer.SQL(tx)) })
}

func (c *consumerDB) count(t testing.TB, q string, args ...any) int {
	t.Helper()
	var n int
	if err := c.sql.QueryRow(c.q(q), args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestDedupeAppliesOnce: a message is applied once, a duplicate skipped
// without running the handler, a failed handler leaves nothing (its retry
// is applied), and ids differing only in letter case are two ids.
func TestDedupeAppliesOnce(t *testing.T) {
	forEachConsumerDB(t, func(t *testing.T, c *consumerDB) {
		ctx := context.Background()
		d := c.dedupe(t, "billing")
		runs := 0
		apply := func(order string, fail bool) func(ctx context.Context, tx outboxconsumer.Tx) error {
			return func(ctx context.Context, tx outboxconsumer.Tx) error {
				runs++
				if _, err := tx.Exec(ctx, c.q("INSERT INTO T.orders (order_no, state) VALUES (?, 'CREATED')"), order); err != nil {
					return err
				}
				if fail {
					return errors.New("handler failed after its insert")
				}
				return nil
			}
		}
		m := outboxconsumer.Message{ID: "Ab-1", AggregateID: "A-1"}
		for i, want := range []outboxconsumer.Outcome{outboxconsumer.Applied, outboxconsumer.Duplicate, outboxconsumer.Duplicate} {
			o, err := c.process(ctx, d, m, apply("A-1", false))
			if err != nil || o != want {
				t.Fatalf("delivery %d: %v, %v; want %v", i, o, err, want)
			}
		}
		if runs != 1 {
			t.Fatalf("handler ran %d times", runs)
		}
		m2 := outboxconsumer.Message{ID: "aB-1", AggregateID: "A-2"}
		if _, err := c.process(ctx, d, m2, apply("A-2", true)); err == nil {
			t.Fatal("failed handler: no error")
		}
		if n := c.count(t, "SELECT COUNT(*) FROM T.processed_message WHERE message_id = ?", "aB-1"); n != 0 {
			t.Fatalf("a failed handler left its id recorded (%d)", n)
		}
		if o, err := c.process(ctx, d, m2, apply("A-2", false)); err != nil || o != outboxconsumer.Applied {
			t.Fatalf("retry after failure: %v, %v", o, err)
		}
		// Another consumer of the same events has ids of its own.
		other := c.dedupe(t, "shipping")
		if o, err := c.process(ctx, other, m, func(context.Context, outboxconsumer.Tx) error { return nil }); err != nil || o != outboxconsumer.Applied {
			t.Fatalf("other consumer: %v, %v", o, err)
		}
		if n := c.count(t, "SELECT COUNT(*) FROM T.orders"); n != 2 {
			t.Fatalf("%d orders", n)
		}
		if s := d.Stats(); s.Applied != 2 || s.Duplicates != 2 || s.Failed != 1 {
			t.Fatalf("stats %+v", s)
		}
	})
}

// TestDedupeConcurrentCopies: eight copies of one message processed at
// once apply it once; the others wait for the first transaction and
// report a duplicate.
func TestDedupeConcurrentCopies(t *testing.T) {
	forEachConsumerDB(t, func(t *testing.T, c *consumerDB) {
		d := c.dedupe(t, "billing")
		for round := 0; round < 5; round++ {
			m := outboxconsumer.Message{ID: fmt.Sprintf("m-%d", round), AggregateID: fmt.Sprintf("A-%d", round)}
			var wg sync.WaitGroup
			outcomes := make(chan outboxconsumer.Outcome, 8)
			for i := 0; i < 8; i++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					o, err := c.process(context.Background(), d, m, func(ctx context.Context, tx outboxconsumer.Tx) error {
						time.Sleep(5 * time.Millisecond) // hold the id's lock a little
						_, err := tx.Exec(ctx, c.q("INSERT INTO T.orders (order_no, state) VALUES (?, 'CREATED')"), m.AggregateID)
						return err
					})
					if err != nil {
						t.Error(err)
					}
					outcomes <- o
				}()
			}
			wg.Wait()
			close(outcomes)
			applied := 0
			for o := range outcomes {
				if o == outboxconsumer.Applied {
					applied++
				}
			}
			if applied != 1 {
				t.Fatalf("round %d: applied %d times", round, applied)
			}
		}
	})
}

// TestDedupePurge: ids older than keep are deleted in batches, newer ones
// and other consumers' stay.
func TestDedupePurge(t *testing.T) {
	forEachConsumerDB(t, func(t *testing.T, c *consumerDB) {
		ctx := context.Background()
		d, other := c.dedupe(t, "billing"), c.dedupe(t, "shipping")
		nop := func(context.Context, outboxconsumer.Tx) error { return nil }
		for i := 0; i < 7; i++ {
			for _, dd := range []*outboxconsumer.Dedupe{d, other} {
				if _, err := c.process(ctx, dd, outboxconsumer.Message{ID: fmt.Sprintf("old-%d", i)}, nop); err != nil {
					t.Fatal(err)
				}
			}
		}
		age := "processed_at - INTERVAL 2 HOUR"
		if c.dialect == outboxconsumer.Postgres {
			age = "processed_at - INTERVAL '2 hours'"
		}
		if _, err := c.sql.Exec(c.q("UPDATE T.processed_message SET processed_at = " + age)); err != nil {
			t.Fatal(err)
		}
		if _, err := c.process(ctx, d, outboxconsumer.Message{ID: "new"}, nop); err != nil {
			t.Fatal(err)
		}
		var n int64
		var err error
		if c.pool != nil {
			n, err = d.PurgePgx(ctx, c.pool, time.Hour, 3)
		} else {
			n, err = d.Purge(ctx, c.sql, time.Hour, 3)
		}
		if err != nil || n != 7 {
			t.Fatalf("purged %d: %v", n, err)
		}
		if got := c.count(t, "SELECT COUNT(*) FROM T.processed_message WHERE consumer = 'billing'"); got != 1 {
			t.Fatalf("%d billing ids left", got)
		}
		if got := c.count(t, "SELECT COUNT(*) FROM T.processed_message WHERE consumer = 'shipping'"); got != 7 {
			t.Fatalf("%d shipping ids left", got)
		}
		// The retention job runs a purge at once, then on schedule.
		if _, err := c.sql.Exec(c.q("UPDATE T.processed_message SET processed_at = " + age)); err != nil {
			t.Fatal(err)
		}
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan error)
		go func() {
			done <- d.RunRetention(rctx, c.sql, outboxconsumer.Retention{Keep: time.Hour, Every: time.Hour})
		}()
		testenv.Eventually(t, 10*time.Second, "the retention job's first purge", func() bool {
			return c.count(t, "SELECT COUNT(*) FROM T.processed_message WHERE consumer = 'billing'") == 0
		})
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("RunRetention returned %v", err)
		}
	})
}

// TestRedisFilterNeverTrustedAlone: Redis answers the duplicates of ids
// the database committed; a failed handler leaves no key (the retry is
// applied); with Redis dead or restarted empty every message still goes
// to the database, which applies each once.
func TestRedisFilterNeverTrustedAlone(t *testing.T) {
	forEachConsumerDB(t, func(t *testing.T, c *consumerDB) {
		ctx := context.Background()
		rs := testenv.StartPrivateRedis(t)
		rc := redis.NewClient(&redis.Options{Addr: rs.Addr(), MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
		t.Cleanup(func() { rc.Close() })
		d := c.dedupe(t, "billing")
		f := outboxconsumer.NewRedisFilter(rc, d, outboxconsumer.RedisFilterConfig{TTL: time.Hour})
		runs := map[string]int{}
		var fail bool
		proc := func(id string) (outboxconsumer.Outcome, error) {
			m := outboxconsumer.Message{ID: id}
			return f.Do(ctx, m, func(ctx context.Context) (outboxconsumer.Outcome, error) {
				return c.process(ctx, d, m, func(ctx context.Context, tx outboxconsumer.Tx) error {
					if fail {
						return errors.New("handler failed")
					}
					runs[id]++
					_, err := tx.Exec(ctx, c.q("INSERT INTO T.orders (order_no, state) VALUES (?, 'CREATED')"), id)
					return err
				})
			})
		}
		expect := func(id string, want outboxconsumer.Outcome) {
			t.Helper()
			o, err := proc(id)
			if err != nil || o != want {
				t.Fatalf("%s: %v, %v; want %v", id, o, err, want)
			}
		}
		expect("m-1", outboxconsumer.Applied)
		expect("m-1", outboxconsumer.DuplicateCached)
		fail = true
		if _, err := proc("m-2"); err == nil {
			t.Fatal("failed handler: no error")
		}
		fail = false
		expect("m-2", outboxconsumer.Applied) // no key blocked the retry
		rs.Kill()
		expect("m-3", outboxconsumer.Applied)   // Redis down: the database decides
		expect("m-3", outboxconsumer.Duplicate) // and still catches the copy
		rs.Restart()
		expect("m-1", outboxconsumer.Duplicate) // Redis restarted empty: a miss, the database catches it
		expect("m-1", outboxconsumer.DuplicateCached)
		expect("m-4", outboxconsumer.Applied)
		for id, n := range runs {
			if n != 1 {
				t.Fatalf("%s applied %d times", id, n)
			}
		}
		if n := c.count(t, "SELECT COUNT(*) FROM T.orders"); n != 4 {
			t.Fatalf("%d orders, want 4", n)
		}
		if s := f.Stats(); s.Hits != 2 || s.Misses != 2 || s.Errors < 2 {
			t.Fatalf("stats %+v", s)
		}
	})
}

// TestMachineIgnoresRepeatedAndBackwardMoves walks an order's life with
// events repeated, late and early.
func TestMachineIgnoresRepeatedAndBackwardMoves(t *testing.T) {
	forEachConsumerDB(t, func(t *testing.T, c *consumerDB) {
		ctx := context.Background()
		m, err := outboxconsumer.NewMachine(outboxconsumer.MachineConfig{Dialect: c.dialect, Table: c.prefix + "orders", KeyColumn: "order_no", StateColumn: "state"},
			outboxconsumer.Transition{Event: "ORDER_CREATED", From: []string{outboxconsumer.Absent}, To: "CREATED"},
			outboxconsumer.Transition{Event: "ORDER_PAID", From: []string{"CREATED"}, To: "PAID"},
			outboxconsumer.Transition{Event: "ORDER_SHIPPED", From: []string{"PAID"}, To: "SHIPPED"},
			outboxconsumer.Transition{Event: "ORDER_CANCELLED", From: []string{"CREATED", "PAID"}, To: "CANCELLED"},
		)
		if err != nil {
			t.Fatal(err)
		}
		d := c.dedupe(t, "shop") // only for its transactions: every event gets a new id
		n := 0
		step := func(order, event string, insert bool) (outboxconsumer.Move, error) {
			n++
			var mv outboxconsumer.Move
			_, err := c.process(ctx, d, outboxconsumer.Message{ID: fmt.Sprint(n)}, func(ctx context.Context, tx outboxconsumer.Tx) error {
				var err error
				mv, err = m.Apply(ctx, tx, order, event, func(ctx context.Context) error {
					q := "UPDATE T.orders SET applied = applied + 1 WHERE order_no = ?"
					if insert {
						q = "INSERT INTO T.orders (order_no, state, applied) VALUES (?, 'NEW', 1)"
					}
					_, err := tx.Exec(ctx, c.q(q), order)
					return err
				})
				return err
			})
			return mv, err
		}
		for i, s := range []struct {
			event  string
			insert bool
			want   outboxconsumer.Move
			early  bool
		}{
			{"ORDER_PAID", false, 0, true}, // before the order exists
			{"ORDER_CREATED", true, outboxconsumer.Moved, false},
			{"ORDER_CREATED", true, outboxconsumer.Repeated, false},
			{"ORDER_SHIPPED", false, 0, true}, // before it is paid
			{"ORDER_PAID", false, outboxconsumer.Moved, false},
			{"ORDER_SHIPPED", false, outboxconsumer.Moved, false},
			{"ORDER_PAID", false, outboxconsumer.Backward, false},
			{"ORDER_CREATED", true, outboxconsumer.Backward, false},
			{"ORDER_CANCELLED", false, outboxconsumer.Conflict, false},
		} {
			mv, err := step("A-1", s.event, s.insert)
			if s.early {
				if !errors.Is(err, outboxconsumer.ErrEarly) {
					t.Fatalf("step %d %s: %v, %v; want ErrEarly", i, s.event, mv, err)
				}
				continue
			}
			if err != nil || mv != s.want {
				t.Fatalf("step %d %s: %v, %v; want %v", i, s.event, mv, err, s.want)
			}
		}
		var state string
		var applied int
		if err := c.sql.QueryRow(c.q("SELECT state, applied FROM T.orders WHERE order_no = ?"), "A-1").Scan(&state, &applied); err != nil {
			t.Fatal(err)
		}
		if state != "SHIPPED" || applied != 3 {
			t.Fatalf("order is %s after %d effects, want SHIPPED after 3", state, applied)
		}
		if s := m.Stats(); s != (outboxconsumer.MachineStats{Moved: 3, Repeated: 1, Backward: 2, Conflict: 1, Early: 2}) {
			t.Fatalf("stats %+v", s)
		}
		if _, err := step("A-2", "ORDER_CREATED", false); err == nil || !strings.Contains(err.Error(), "inserted no row") {
			t.Fatalf("a creating effect that inserts nothing: %v", err)
		}
		if _, err := step("A-1", "ORDER_REFUNDED", false); !errors.Is(err, outboxconsumer.ErrUnknownEvent) {
			t.Fatalf("unknown event: %v", err)
		}
	})
	if _, err := outboxconsumer.NewMachine(outboxconsumer.MachineConfig{Dialect: outboxconsumer.MySQL, Table: "t", KeyColumn: "k", StateColumn: "s"},
		outboxconsumer.Transition{Event: "OPEN", From: []string{outboxconsumer.Absent, "CLOSED"}, To: "OPEN"},
		outboxconsumer.Transition{Event: "CLOSE", From: []string{"OPEN"}, To: "CLOSED"}); err == nil {
		t.Fatal("a cycle accepted")
	}
}

// TestOrderCheckGapsAndReorders follows one aggregate's sequence.
func TestOrderCheckGapsAndReorders(t *testing.T) {
	forEachConsumerDB(t, func(t *testing.T, c *consumerDB) {
		ctx := context.Background()
		d := c.dedupe(t, "shop")
		newCheck := func(cfg outboxconsumer.OrderCheckConfig) *outboxconsumer.OrderCheck {
			cfg.Dialect, cfg.Table = c.dialect, c.prefix+"aggregate_sequence"
			o, err := outboxconsumer.NewOrderCheck(cfg)
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range o.DDL() {
				if _, err := c.sql.Exec(s); err != nil {
					t.Fatal(err)
				}
			}
			return o
		}
		report, hold := newCheck(outboxconsumer.OrderCheckConfig{Consumer: "report"}), newCheck(outboxconsumer.OrderCheckConfig{Consumer: "hold", HoldGaps: true})
		n := 0
		check := func(o *outboxconsumer.OrderCheck, agg string, seq int64) (outboxconsumer.OrderResult, error) {
			n++
			var r outboxconsumer.OrderResult
			_, err := c.process(ctx, d, outboxconsumer.Message{ID: fmt.Sprint(n), AggregateType: "ORDER", AggregateID: agg, Sequence: seq},
				func(ctx context.Context, tx outboxconsumer.Tx) error {
					var err error
					r, err = o.Check(ctx, tx, outboxconsumer.Message{AggregateType: "ORDER", AggregateID: agg, Sequence: seq})
					return err
				})
			return r, err
		}
		for i, s := range []struct {
			o    *outboxconsumer.OrderCheck
			seq  int64
			want outboxconsumer.Order
			last int64
		}{
			{report, 1, outboxconsumer.InOrder, 0}, {report, 2, outboxconsumer.InOrder, 1}, {report, 4, outboxconsumer.Gap, 2},
			{report, 3, outboxconsumer.Stale, 4}, {report, 4, outboxconsumer.Stale, 4}, {report, 5, outboxconsumer.InOrder, 4},
			{hold, 2, outboxconsumer.Gap, 0}, {hold, 1, outboxconsumer.InOrder, 0}, {hold, 3, outboxconsumer.Gap, 1},
			{hold, 2, outboxconsumer.InOrder, 1}, {hold, 3, outboxconsumer.InOrder, 2},
		} {
			r, err := check(s.o, "A-1", s.seq)
			if s.o == hold && s.want == outboxconsumer.Gap {
				if !errors.Is(err, outboxconsumer.ErrGap) || r.Order != outboxconsumer.Gap || r.Last != s.last {
					t.Fatalf("step %d: %v, %v; want ErrGap after %d", i, r, err, s.last)
				}
				continue
			}
			if err != nil || r.Order != s.want || r.Last != s.last || r.Got != s.seq {
				t.Fatalf("step %d: %+v, %v; want %v after %d", i, r, err, s.want, s.last)
			}
		}
		anywhere := newCheck(outboxconsumer.OrderCheckConfig{Consumer: "late", StartAnywhere: true})
		if r, err := check(anywhere, "A-9", 17); err != nil || r.Order != outboxconsumer.InOrder {
			t.Fatalf("StartAnywhere: %v, %v", r, err)
		}
		if r, err := check(report, "A-9", 17); err != nil || r.Order != outboxconsumer.Gap {
			t.Fatalf("a first number above 1: %v, %v", r, err)
		}
		if s := report.Stats(); s != (outboxconsumer.OrderStats{InOrder: 3, Gaps: 2, Stale: 2}) {
			t.Fatalf("stats %+v", s)
		}
	})
}
