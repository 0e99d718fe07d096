package e2e

// The start is a position (issue 23 part 2): the position source.start
// resolves to is saved before the first row is read, so a first run that
// ends before any transaction was checkpointed (stopped while idle,
// killed, or halted by a permanent failure of its first write) resumes
// from it. Before, nothing was saved until a transaction went through,
// and the restart resolved "latest" again: every row committed in between
// was skipped.

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/outbox-cdc/outbox-cdc/test/testenv"
)

// forEachLatestBackend runs test on MariaDB and PostgreSQL with start:
// latest. MariaDB is a private server with nothing else writing to it: on
// the shared one other tests' transactions keep the checkpoint moving (as
// empty transactions) and hide an unsaved start; "a quiet binlog" is the
// case that lost rows.
func forEachLatestBackend(t *testing.T, test func(t *testing.T, b *backend, sourceExtra string)) {
	t.Run("mysql", func(t *testing.T) {
		dsn := testenv.PrivateMariaDB(t, testenv.MariaDBOptions{Instance: "quiet-start"})
		test(t, mysqlBackendOn(t, dsn, testObjectName(t)), "  start: latest\n")
	})
	t.Run("postgres", func(t *testing.T) { test(t, postgresBackend(t), "  start: latest\n") })
}

// withSourceLines adds lines under source: of the configuration file at
// path (replacing a start: latest already there) and returns the new one.
func withSourceLines(t *testing.T, path, lines string) string {
	t.Helper()
	s := strings.Replace(readFile(t, path), "  start: latest\n", "", 1)
	return writeConfig(t, strings.Replace(s, "source:\n", "source:\n"+lines, 1))
}

// TestStartIdleStopLosesNothing: a connector without a checkpoint starts
// (start: latest), streams an idle outbox and is stopped (SIGTERM, kill
// -9); rows are committed while it is down; the restart delivers every
// one. In every store: the checkpoint file, the checkpoint table with HA
// on (a new owner finds the start there) and, exactly-once, the progress
// topic. Before the fix each restart delivered none of the 10 rows.
func TestStartIdleStopLosesNothing(t *testing.T) {
	for _, mode := range []struct {
		name, delivery, checkpoint string
		ha, kill                   bool
	}{
		{"sigterm", "at-least-once", "file", false, false},
		{"kill-9", "at-least-once", "file", false, true},
		{"table-ha-kill-9", "at-least-once", "table", true, true},
		{"exactly-once-kill-9", "exactly-once", "kafka", false, true},
	} {
		t.Run(mode.name, func(t *testing.T) {
			forEachLatestBackend(t, func(t *testing.T, b *backend, extra string) {
				_, brokers := testenv.Kafka(t)
				name := connName(t, "e2e-start-"+mode.name+"-"+b.kind)
				cfg := withSourceLines(t, b.modeConfig(t, name, brokers, mode.ha, mode.delivery, mode.checkpoint), extra)
				b.insertRows(t, ids("before", 1, 3), 100) // committed before the first start: not sent
				c := testenv.Start(t, cfg)
				time.Sleep(300 * time.Millisecond) // idle
				if mode.kill {
					c.Kill()
				} else if err := c.Stop(30 * time.Second); err != nil {
					t.Fatalf("SIGTERM: %v\n%s", err, c.Log())
				}
				down := ids("down", 1, 10)
				b.insertRows(t, down, 100) // while the connector is down
				testenv.Start(t, cfg)
				cons := newConsumer(t, brokers, `outbox\.event\..*`)
				got := cons.waitFor(t, len(down), 30*time.Second)
				got = append(got, cons.quiet(t, time.Second)[len(got):]...)
				checkDelivery(t, got, down, 3, mode.delivery == "exactly-once")
			})
		})
	}
}

// TestStartLatestFirstWriteFailsThenFixed: the reported case. start:
// latest, the RabbitMQ exchange does not exist, the first row's write
// fails permanently and the connector exits; rows are committed while the
// operator creates the exchange; the restart delivers the first row and
// every later one. Before the fix it delivered none of the 11.
func TestStartLatestFirstWriteFailsThenFixed(t *testing.T) {
	forEachLatestBackend(t, func(t *testing.T, b *backend, extra string) {
		url := testenv.RabbitMQURL(t)
		exchange := testObjectName(t) + ".exchange"
		name := connName(t, "e2e-start-rabbit-"+b.kind)
		kafkaCfg := b.config(t, name, []string{"127.0.0.1:1"})
		s := strings.Replace(readFile(t, kafkaCfg), "  type: kafka\n  brokers: [\"127.0.0.1:1\"]\n",
			fmt.Sprintf("  type: rabbitmq\n  url: %q\n  exchange: %q\n  retry_backoff_max: 500ms\n", url, exchange), 1)
		cfg := withSourceLines(t, writeConfig(t, s), extra)

		c := testenv.Launch(t, cfg)
		streaming := "binlog stream started"
		if b.kind == "postgres" {
			streaming = "streaming started"
		}
		testenv.Eventually(t, 30*time.Second, "the source streams", func() bool {
			return strings.Contains(c.Log(), streaming) || c.Exited()
		})
		if c.Exited() {
			t.Fatalf("the connector exited before streaming:\n%s", c.Log())
		}
		first := ids("first", 1, 1)
		b.insertRows(t, first, 100)
		if code := c.WaitExit(60 * time.Second); code == 0 {
			t.Fatalf("the connector exited 0 although the exchange is missing:\n%s", c.Log())
		}
		if !strings.Contains(c.Log(), exchange) {
			t.Fatalf("the exit does not name the missing exchange:\n%s", c.Log())
		}
		later := ids("later", 1, 10)
		b.insertRows(t, later, 100)

		got := rabbitQueue(t, url, exchange) // the operator fixes the sink
		testenv.Launch(t, cfg)
		want := append(first, later...)
		for deadline := time.Now().Add(30 * time.Second); len(got()) < len(want) && time.Now().Before(deadline); {
			time.Sleep(50 * time.Millisecond)
		}
		time.Sleep(500 * time.Millisecond)
		seen := map[string]int{}
		for _, id := range got() {
			seen[id]++
		}
		var missing []string
		for _, id := range want {
			if seen[id] == 0 {
				missing = append(missing, id)
			}
		}
		if len(missing) > 0 || len(seen) != len(want) {
			t.Fatalf("%d of %d rows never delivered (%v); %d distinct rows delivered", len(missing), len(want), missing, len(seen))
		}
	})
}

// rabbitQueue declares exchange (topic, durable), binds a fresh queue to
// it with "#", and returns a function listing the message ids consumed so
// far. The exchange is deleted at test end.
func rabbitQueue(t *testing.T, url, exchange string) func() []string {
	t.Helper()
	r := consumeRabbit(t, url, exchange)
	return func() []string {
		var ids []string
		for _, m := range r.all() {
			ids = append(ids, m.id)
		}
		return ids
	}
}
