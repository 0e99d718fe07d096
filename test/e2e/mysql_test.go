package e2e

import (
	"database/sql"
	"fmt"
	"math/rand"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outbox-cdc/outbox-cdc/test/testenv"
)

type row struct{ id, aggType, aggID, evType, payload string }

// insertTx commits an orders row and the outbox rows in one transaction,
// or rolls it back.
func insertTx(t testing.TB, db *sql.DB, rows []row, commit bool) {
	t.Helper()
	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec("INSERT INTO orders (order_no) VALUES (?)", rows[0].aggID); err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if _, err := tx.Exec(`INSERT INTO outbox_message (message_id, aggregate_type, aggregate_id, event_type, payload) VALUES (?, ?, ?, ?, ?)`,
			r.id, r.aggType, r.aggID, r.evType, r.payload); err != nil {
			t.Fatal(err)
		}
	}
	if commit {
		err = tx.Commit()
	} else {
		err = tx.Rollback()
	}
	if err != nil {
		t.Fatal(err)
	}
}

func mysqlConfig(t *testing.T, name, dsn string, brokers []string, checkpointPath string) string {
	return writeConfig(t, fmt.Sprintf(`
name: %s
source:
  type: mysql
  dsn: %q
  table: outbox_message
  start: latest
route:
  preset: seed
  topic: "outbox.event.{aggregate_type}"
sink:
  type: kafka
  brokers: [%q]
checkpoint:
  type: file
  path: %q
`, name, dsn, brokers[0], checkpointPath))
}

// TestMySQLDelivery: 1-row and multi-row transactions arrive once, in
// order per aggregate, with the right topic, key, headers, value and
// partition; a rolled-back transaction, UPDATE/DELETE and other tables
// produce nothing.
func TestMySQLDelivery(t *testing.T) {
	dsn, db := mysqlDB(t)
	_, brokers := testenv.Kafka(t)
	c := start(t, mysqlConfig(t, "e2e-delivery", dsn, brokers, filepath.Join(t.TempDir(), "cp")))
	cons := newConsumer(t, brokers, `outbox\.event\..*`)

	var want []string
	insertTx(t, db, []row{{"m-1", "ORDER", "A-1", "ORDER_CREATED", `{"n": 1}`}}, true)
	want = append(want, "m-1")
	insertTx(t, db, []row{
		{"m-2", "ORDER", "A-2", "ORDER_CREATED", `{"n": 2}`},
		{"m-3", "PAYMENT", "A-2", "PAYMENT_REQUESTED", `{"n": 3}`},
		{"m-4", "ORDER", "A-1", "ORDER_PAID", `{"n": 4}`},
	}, true)
	want = append(want, "m-2", "m-3", "m-4")
	insertTx(t, db, []row{{"m-rolled-back", "ORDER", "A-3", "ORDER_CREATED", `{}`}}, false)
	for _, q := range []string{
		"UPDATE outbox_message SET status = 1",
		"DELETE FROM outbox_message WHERE message_id = 'm-1'",
		"INSERT INTO orders (order_no) VALUES ('not-an-event')",
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	insertTx(t, db, []row{{"m-5", "ORDER", "A-1", "ORDER_SHIPPED", `{"n": 5}`}}, true)
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
	if err := c.stop(10 * time.Second); err != nil {
		t.Fatalf("SIGTERM exit: %v", err)
	}
}

// writer commits transactions of 1..5 outbox rows over a few aggregates
// until stopped, and remembers the message ids it committed, in commit order.
type writer struct {
	db   *sql.DB
	mu   sync.Mutex
	ids  []string
	stop chan struct{}
	done chan struct{}
	n    int
}

func startWriter(t *testing.T, db *sql.DB, prefix string, txs int, pause time.Duration) *writer {
	w := &writer{db: db, stop: make(chan struct{}), done: make(chan struct{})}
	rnd := rand.New(rand.NewSource(1))
	go func() {
		defer close(w.done)
		for i := 0; i < txs; i++ {
			select {
			case <-w.stop:
				return
			default:
			}
			k := 1 + rnd.Intn(5)
			rows := make([]row, k)
			for j := range rows {
				w.n++
				agg := fmt.Sprintf("agg-%d", rnd.Intn(7))
				rows[j] = row{fmt.Sprintf("%s-%d", prefix, w.n), "ORDER", agg, "E", fmt.Sprintf(`{"seq": %d}`, w.n)}
			}
			insertTx(t, db, rows, true)
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

// TestMySQLHardKillLosesNothing kills the connector with SIGKILL several
// times while rows are being committed, restarts it from its checkpoint, and
// checks that every committed row arrives, in order per aggregate.
func TestMySQLHardKillLosesNothing(t *testing.T) {
	dsn, db := mysqlDB(t)
	_, brokers := testenv.Kafka(t)
	cfg := mysqlConfig(t, "e2e-hardkill", dsn, brokers, filepath.Join(t.TempDir(), "cp"))
	c := start(t, cfg)
	cons := newConsumer(t, brokers, `outbox\.event\..*`)
	w := startWriter(t, db, "hk", 400, 2*time.Millisecond)
	for i := 0; i < 3; i++ {
		time.Sleep(time.Duration(150+rand.Intn(200)) * time.Millisecond)
		c.kill()
		time.Sleep(100 * time.Millisecond) // rows committed while it is down
		c = start(t, cfg)
	}
	want := w.wait()
	got := cons.waitFor(t, len(want), 30*time.Second)
	got = append(got, cons.quiet(t, 500*time.Millisecond)[len(got):]...)
	checkDelivery(t, got, want, 3, false)
	if err := c.stop(10 * time.Second); err != nil {
		t.Fatalf("SIGTERM exit: %v", err)
	}
}

// TestMySQLSigtermNoDuplicates stops the connector with SIGTERM under load;
// it must exit 0, and a restart must send nothing twice.
func TestMySQLSigtermNoDuplicates(t *testing.T) {
	dsn, db := mysqlDB(t)
	_, brokers := testenv.Kafka(t)
	cfg := mysqlConfig(t, "e2e-sigterm", dsn, brokers, filepath.Join(t.TempDir(), "cp"))
	c := start(t, cfg)
	cons := newConsumer(t, brokers, `outbox\.event\..*`)
	w := startWriter(t, db, "st", 300, time.Millisecond)
	for i := 0; i < 2; i++ {
		time.Sleep(200 * time.Millisecond)
		if err := c.stop(15 * time.Second); err != nil {
			t.Fatalf("SIGTERM exit: %v\n%s", err, c.log.String())
		}
		if !strings.Contains(c.log.String(), "stopped") {
			t.Fatalf("no clean stop logged:\n%s", c.log.String())
		}
		c = start(t, cfg)
	}
	want := w.wait()
	got := cons.waitFor(t, len(want), 30*time.Second)
	got = append(got, cons.quiet(t, time.Second)[len(got):]...)
	checkDelivery(t, got, want, 3, true)
	if err := c.stop(10 * time.Second); err != nil {
		t.Fatalf("SIGTERM exit: %v", err)
	}
}
