package e2e

import (
	"fmt"
	"math/rand"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outbox-cdc/outbox-cdc/test/testenv"
)

// The same scenarios run against each source database: the contract every
// source keeps.

// TestDelivery: 1-row and multi-row transactions arrive once, in order per
// aggregate, with the right topic, key, headers, value and partition; a
// rolled-back transaction, UPDATE/DELETE and other tables produce nothing.
func TestDelivery(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		_, brokers := testenv.Kafka(t)
		c := testenv.Start(t, b.config(t, connName(t, "e2e-delivery-"+b.kind), brokers))
		cons := newConsumer(t, brokers, `outbox\.event\..*`)

		var want []string
		b.insertTx(t, []row{{"m-1", "ORDER", "A-1", "ORDER_CREATED", `{"n": 1}`}}, true)
		want = append(want, "m-1")
		b.insertTx(t, []row{
			{"m-2", "ORDER", "A-2", "ORDER_CREATED", `{"n": 2}`},
			{"m-3", "PAYMENT", "A-2", "PAYMENT_REQUESTED", `{"n": 3}`},
			{"m-4", "ORDER", "A-1", "ORDER_PAID", `{"n": 4}`},
		}, true)
		want = append(want, "m-2", "m-3", "m-4")
		b.insertTx(t, []row{{"m-rolled-back", "ORDER", "A-3", "ORDER_CREATED", `{}`}}, false)
		for _, q := range []string{
			"UPDATE " + b.table() + " SET status = 1",
			"DELETE FROM " + b.table() + " WHERE message_id = 'm-1'",
		} {
			if _, err := b.db.Exec(q); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := b.db.Exec(b.insertOrder, "not-an-event"); err != nil {
			t.Fatal(err)
		}
		b.insertTx(t, []row{{"m-5", "ORDER", "A-1", "ORDER_SHIPPED", `{"n": 5}`}}, true)
		want = append(want, "m-5")

		got := cons.waitFor(t, len(want), 20*time.Second)
		got = append(got, cons.quiet(t, 500*time.Millisecond)[len(got):]...)
		checkDelivery(t, got, want, 3, true)
		byID := map[string]consumed{}
		for _, r := range got {
			byID[r.Headers["id"]] = r
		}
		r := byID["m-3"]
		if r.Topic != "outbox.event.PAYMENT" || r.Key != "A-2" || r.Value != `{"n": 3}` ||
			r.Headers["event_type"] != "PAYMENT_REQUESTED" || r.Headers["aggregate_type"] != "PAYMENT" {
			t.Fatalf("record for m-3 is %+v", r)
		}
		if byID["m-1"].Topic != "outbox.event.ORDER" {
			t.Fatalf("record for m-1 is %+v", byID["m-1"])
		}
		if err := c.Stop(10 * time.Second); err != nil {
			t.Fatalf("SIGTERM exit: %v", err)
		}
	})
}

// writer commits transactions of 1..5 outbox rows over a few aggregates
// until done, and remembers the message ids it committed, in commit order.
type writer struct {
	mu   sync.Mutex
	ids  []string
	done chan struct{}
}

func startWriter(t *testing.T, b *backend, prefix string, txs int, pause time.Duration) *writer {
	w := &writer{done: make(chan struct{})}
	rnd := rand.New(rand.NewSource(1))
	go func() {
		defer close(w.done)
		n := 0
		for i := 0; i < txs; i++ {
			rows := make([]row, 1+rnd.Intn(5))
			for j := range rows {
				n++
				agg := fmt.Sprintf("agg-%d", rnd.Intn(7))
				rows[j] = row{fmt.Sprintf("%s-%d", prefix, n), "ORDER", agg, "E", fmt.Sprintf(`{"seq": %d}`, n)}
			}
			b.insertTx(t, rows, true)
			w.mu.Lock()
			for _, r := range rows {
				w.ids = append(w.ids, r.id)
			}
			w.mu.Unlock()
			time.Sleep(pause)
		}
	}()
	return w
}

func (w *writer) wait() []string {
	<-w.done
	return w.ids
}

// TestHardKillLosesNothing kills the connector with SIGKILL several times
// while rows are being committed, restarts it from its checkpoint, and
// checks that every committed row arrives, in order per aggregate.
func TestHardKillLosesNothing(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		_, brokers := testenv.Kafka(t)
		cfg := b.config(t, connName(t, "e2e-hardkill-"+b.kind), brokers)
		c := testenv.Start(t, cfg)
		cons := newConsumer(t, brokers, `outbox\.event\..*`)
		w := startWriter(t, b, "hk", 400, 2*time.Millisecond)
		for i := 0; i < 3; i++ {
			time.Sleep(time.Duration(150+rand.Intn(200)) * time.Millisecond)
			c.Kill()
			time.Sleep(100 * time.Millisecond) // rows committed while it is down
			c = testenv.Start(t, cfg)
		}
		want := w.wait()
		got := cons.waitFor(t, len(want), 30*time.Second)
		got = append(got, cons.quiet(t, 500*time.Millisecond)[len(got):]...)
		checkDelivery(t, got, want, 3, false)
		if err := c.Stop(10 * time.Second); err != nil {
			t.Fatalf("SIGTERM exit: %v", err)
		}
	})
}

// TestSigtermNoDuplicates stops the connector with SIGTERM under load; it
// must exit 0, and a restart must send nothing twice.
func TestSigtermNoDuplicates(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		_, brokers := testenv.Kafka(t)
		cfg := b.config(t, connName(t, "e2e-sigterm-"+b.kind), brokers)
		c := testenv.Start(t, cfg)
		cons := newConsumer(t, brokers, `outbox\.event\..*`)
		w := startWriter(t, b, "st", 300, time.Millisecond)
		for i := 0; i < 2; i++ {
			time.Sleep(200 * time.Millisecond)
			if err := c.Stop(15 * time.Second); err != nil {
				t.Fatalf("SIGTERM exit: %v\n%s", err, c.Log())
			}
			if !strings.Contains(c.Log(), `"message":"stopped"`) {
				t.Fatalf("no clean stop logged:\n%s", c.Log())
			}
			c = testenv.Start(t, cfg)
		}
		want := w.wait()
		got := cons.waitFor(t, len(want), 30*time.Second)
		got = append(got, cons.quiet(t, time.Second)[len(got):]...)
		checkDelivery(t, got, want, 3, true)
		if err := c.Stop(10 * time.Second); err != nil {
			t.Fatalf("SIGTERM exit: %v", err)
		}
	})
}
