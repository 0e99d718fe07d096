package e2e

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/outbox-cdc/outbox-cdc/test/testenv"
)

// Outbox lifecycle under faults: a mark_sent slowed by the business's row
// locks, and one that cannot work.

// lockUnmarkedRow commits a row and takes a row lock on it (as a long
// business transaction would) before the connector marks it; it returns
// the ids committed (the locked one last) and what releases the lock.
func lockUnmarkedRow(t *testing.T, b *backend, prefix string) ([]string, func()) {
	t.Helper()
	ph := "?"
	if b.kind == "postgres" {
		ph = "$1"
	}
	var committed []string
	for i := 0; i < 20; i++ {
		id := fmt.Sprintf("%s-lock-%d", prefix, i)
		b.insertTx(t, []row{{id, "ORDER", "agg-lock", "E", `{}`}}, true)
		committed = append(committed, id)
		// READ COMMITTED: a row lock without InnoDB's gap locks, which
		// would also block the writer's inserts.
		tx, err := b.db.BeginTx(context.Background(), &sql.TxOptions{Isolation: sql.LevelReadCommitted})
		if err != nil {
			t.Fatal(err)
		}
		var status int
		if err := tx.QueryRow("SELECT status FROM "+b.table()+" WHERE message_id = "+ph+" FOR UPDATE", id).Scan(&status); err != nil {
			t.Fatal(err)
		}
		if status == 0 {
			release := func() { tx.Rollback() }
			t.Cleanup(release)
			return committed, release
		}
		tx.Rollback() // marked before the lock was taken; try again
	}
	t.Fatal("could not lock a row before the connector marked it")
	return nil, nil
}

// TestLifecycleSlowMarkNeverStallsCheckpoint: the business holds a row
// lock on a delivered row, so mark_sent waits. Delivery and checkpoints
// (and on PostgreSQL the slot's confirmed position) must keep moving, the
// mark queue stays within lifecycle.queue, and what does not fit is
// counted unmarked instead of holding the checkpoint.
func TestLifecycleSlowMarkNeverStallsCheckpoint(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		_, brokers := testenv.Kafka(t)
		cfg := b.tunedConfig(t, connName(t, "e2e-slowmark-"+b.kind), brokers, "  start: latest\n",
			"lifecycle:\n  mark_sent: true\n  mark_batch: 5\n  queue: 20\n  mark_timeout: 30s\n  mark_retry_timeout: 5m\npipeline:\n  checkpoint_interval: 0s\n")
		c := testenv.Start(t, cfg)
		cons := newConsumer(t, brokers, `outbox\.event\..*`)
		first, release := lockUnmarkedRow(t, b, "slow")
		locked := first[len(first)-1]
		began := time.Now()
		w := startWriter(t, b, "slow", 60, 5*time.Millisecond)
		want := append(first, w.wait()...)
		lastCommit := time.Now()
		// mark_sent waiting on the locked row must not hold up the
		// business's own INSERTs (InnoDB gap locks under REPEATABLE READ).
		if took := lastCommit.Sub(began); took > 15*time.Second {
			t.Fatalf("committing 60 transactions took %s while mark_sent waits on a row lock: the marking holds locks that block the business's inserts", took)
		}
		var walAfter string
		if b.kind == "postgres" {
			if err := b.db.QueryRow("SELECT pg_current_wal_lsn()::text").Scan(&walAfter); err != nil {
				t.Fatal(err)
			}
		}
		got := cons.waitFor(t, len(want), 30*time.Second)
		checkDelivery(t, got, want, 3, false)

		// Every transaction is checkpointed although marking is stuck.
		saved := func() float64 { return c.Metric("outbox_cdc_checkpoint_last_saved_timestamp_seconds") }
		testenv.Eventually(t, 15*time.Second, "a checkpoint saved after the last commit while mark_sent waits on a row lock",
			func() bool { return saved() >= float64(lastCommit.Unix()) })
		if b.kind == "postgres" {
			slot := strings.ReplaceAll(testObjectName(t), "-", "_")
			testenv.Eventually(t, 15*time.Second, "the slot confirmed past the last commit", func() bool {
				var ok sql.NullBool
				b.db.QueryRow("SELECT confirmed_flush_lsn >= $1::pg_lsn FROM pg_replication_slots WHERE slot_name = $2", walAfter, slot).Scan(&ok)
				return ok.Valid && ok.Bool
			})
		}
		queued, unmarked := c.Metric("outbox_cdc_lifecycle_queue_ids"), c.Metric("outbox_cdc_lifecycle_unmarked_total")
		t.Logf("%s: checkpoint kept moving with mark_sent stuck on %s; %v ids queued (bound 20), %v left unmarked", b.kind, locked, queued, unmarked)
		if queued > 20 || unmarked <= 0 {
			t.Fatalf("queue %v (bound 20), unmarked %v", queued, unmarked)
		}
		if n := b.count(t, "status = 1"); n != len(first)-1 {
			t.Fatalf("%d rows marked while the batch with %s waits on the lock", n, locked)
		}

		// Once the lock goes, what was queued is marked; the rest stays as
		// after a crash (status 0), exactly as many as counted.
		released := time.Now()
		release()
		testenv.Eventually(t, 20*time.Second, "the queue marked", func() bool { return c.Metric("outbox_cdc_lifecycle_queue_ids") == 0 })
		testenv.Eventually(t, 20*time.Second, "the marked rows", func() bool {
			return b.count(t, "status = 1") == len(want)-int(c.Metric("outbox_cdc_lifecycle_unmarked_total"))
		})
		t.Logf("%s: queue marked %s after the lock went", b.kind, time.Since(released).Round(time.Millisecond))
		if err := c.Stop(15 * time.Second); err != nil {
			t.Fatalf("SIGTERM exit: %v", err)
		}
	})
}

// TestLifecycleMarkFailureStops: a mark_sent_set naming a column the table
// lacks stops the connector with exit 1 and an error naming the setting
// (no endless retries). Nothing is lost: restarted with a correct setting,
// it delivers every committed row from its checkpoint.
func TestLifecycleMarkFailureStops(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		_, brokers := testenv.Kafka(t)
		bad := "status = 1, sent_at = CURRENT_TIMESTAMP"
		cfg := b.tunedConfig(t, connName(t, "e2e-badmark-"+b.kind), brokers, "  start: latest\n",
			fmt.Sprintf("lifecycle:\n  mark_sent: true\n  mark_sent_set: %q\n", bad))
		c := testenv.Start(t, cfg)
		cons := newConsumer(t, brokers, `outbox\.event\..*`)
		w := startWriter(t, b, "bad", 20, 5*time.Millisecond)
		code := c.WaitExit(20 * time.Second)
		log := c.Log()
		if code != 1 || !strings.Contains(log, "lifecycle.mark_sent_set") || !strings.Contains(log, "sent_at") {
			t.Fatalf("exit %d; want 1 with an error naming lifecycle.mark_sent_set:\n%s", code, log)
		}
		t.Logf("%s: exit %d: %s", b.kind, code, errorLine(log, "lifecycle.mark_sent_set"))
		want := w.wait()

		raw, err := os.ReadFile(cfg)
		if err != nil {
			t.Fatal(err)
		}
		fixed := writeConfig(t, strings.Replace(string(raw), fmt.Sprintf("%q", bad), `"status = 1"`, 1))
		c = testenv.Start(t, fixed)
		got := cons.waitFor(t, len(want), 30*time.Second)
		checkDelivery(t, got, want, 3, false)
		if err := c.Stop(15 * time.Second); err != nil {
			t.Fatalf("SIGTERM exit: %v", err)
		}
	})
}

// errorLine returns the first log line containing s.
func errorLine(log, s string) string {
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, s) {
			return l
		}
	}
	return ""
}
