package e2e

import (
	"context"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outbox-cdc/outbox-cdc/ha"
	"github.com/outbox-cdc/outbox-cdc/test/testenv"
)

// Exactly-once mode and high availability, against each source database.
// Consumers read with read_committed (newConsumer) and checkDelivery runs
// with exact=true: every committed row once, per-aggregate order, nothing
// from rolled-back transactions.

// eosConfig writes an exactly-once configuration; haOn adds the HA lock.
func (b *backend) eosConfig(t *testing.T, name string, brokers []string, haOn bool) string {
	return b.modeConfig(t, name, brokers, haOn, "exactly-once", "kafka")
}

// modeConfig writes a configuration with the given delivery mode and
// checkpoint type (kafka or table).
func (b *backend) modeConfig(t *testing.T, name string, brokers []string, haOn bool, delivery, cp string) string {
	extra := ""
	if haOn {
		extra = "ha:\n  enabled: true\n  check_interval: 300ms\n"
	}
	if cp == "table" {
		// In the test's own database (MySQL) or schema (PostgreSQL), so it
		// goes with them.
		table := "outbox_cdc_checkpoint"
		if b.kind == "postgres" {
			table = testObjectName(t) + "." + table
		}
		cp = "table\n  table: " + table
	} else {
		// The witness of the progress (exactly-once) or the checkpoint.
		cp += fmt.Sprintf("\n  path: %q", filepath.Join(t.TempDir(), "checkpoint"))
	}
	return writeConfig(t, fmt.Sprintf(`
name: %s
delivery: %s
source:
%sroute:
  preset: seed
  topic: "outbox.event.{aggregate_type}"
sink:
  type: kafka
  brokers: [%q]
  progress_topic: %s.progress
  retry_backoff_min: 20ms
  retry_backoff_max: 500ms
checkpoint:
  type: %s
pipeline:
  shutdown_timeout: 5s
%s`, name, delivery, b.sourceYAML(name), brokers[0], name, cp, extra))
}

// chaosWriter commits transactions of 1..5 outbox rows and, every 7th
// time, rolls one back, until stop is closed.
type chaosWriter struct {
	mu        sync.Mutex
	committed []string
	rolled    int
	stop      chan struct{}
	stopOnce  sync.Once
	done      chan struct{}
}

func startChaosWriter(t *testing.T, b *backend, prefix string, pause time.Duration) *chaosWriter {
	w := &chaosWriter{stop: make(chan struct{}), done: make(chan struct{})}
	// A test that fails early must not leave the writer running past its end.
	t.Cleanup(func() { w.finish() })
	rnd := rand.New(rand.NewSource(time.Now().UnixNano()))
	go func() {
		defer close(w.done)
		n := 0
		for i := 0; ; i++ {
			select {
			case <-w.stop:
				return
			default:
			}
			rows := make([]row, 1+rnd.Intn(5))
			commit := i%7 != 6
			for j := range rows {
				n++
				id := fmt.Sprintf("%s-%d", prefix, n)
				if !commit {
					id = "rolled-back-" + id
				}
				rows[j] = row{id, "ORDER", fmt.Sprintf("agg-%d", rnd.Intn(7)), "E", fmt.Sprintf(`{"seq": %d}`, n)}
			}
			b.insertTx(t, rows, commit)
			w.mu.Lock()
			if commit {
				for _, r := range rows {
					w.committed = append(w.committed, r.id)
				}
			} else {
				w.rolled += len(rows)
			}
			w.mu.Unlock()
			time.Sleep(pause)
		}
	}()
	return w
}

func (w *chaosWriter) finish() []string {
	w.stopOnce.Do(func() { close(w.stop) })
	<-w.done
	return w.committed
}

// chaosKills is the number of SIGKILLs per backend: 10 by default (20 in
// all), OUTBOX_CDC_CHAOS_KILLS to change it.
func chaosKills(t *testing.T) int {
	if v := os.Getenv("OUTBOX_CDC_CHAOS_KILLS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			t.Fatalf("OUTBOX_CDC_CHAOS_KILLS=%q", v)
		}
		return n
	}
	if testing.Short() {
		return 3
	}
	return 10
}

// TestChaosExactlyOnce kills the exactly-once connector with SIGKILL at
// random moments under continuous writes and restarts it; a read_committed
// consumer must see every committed row exactly once, in order per
// aggregate, and no row of a rolled-back transaction.
func TestChaosExactlyOnce(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		_, brokers := testenv.Kafka(t)
		cfg := b.eosConfig(t, connName(t, "e2e-chaos-"+b.kind), brokers, false)
		c := testenv.Start(t, cfg)
		cons := newConsumer(t, brokers, `outbox\.event\..*`)
		w := startChaosWriter(t, b, "cx", time.Millisecond)
		kills := chaosKills(t)
		rnd := rand.New(rand.NewSource(time.Now().UnixNano()))
		for i := 0; i < kills; i++ {
			time.Sleep(time.Duration(50+rnd.Intn(400)) * time.Millisecond)
			c.Kill()
			if rnd.Intn(2) == 0 {
				time.Sleep(time.Duration(rnd.Intn(200)) * time.Millisecond) // rows committed while down
			}
			c = testenv.Start(t, cfg)
		}
		time.Sleep(200 * time.Millisecond)
		want := w.finish()
		got := cons.waitFor(t, len(want), 60*time.Second)
		got = append(got, cons.quiet(t, time.Second)[len(got):]...)
		checkDelivery(t, got, want, 3, true)
		t.Logf("chaos %s: %d SIGKILLs, %d rows committed, %d rows rolled back, %d records read (read_committed), 0 duplicates",
			b.kind, kills, len(want), w.rolled, len(got))
		if err := c.Stop(10 * time.Second); err != nil {
			t.Fatalf("SIGTERM exit: %v", err)
		}
	})
}

// TestHATakeover starts two instances together: one streams, the other
// says standby; killing the active one makes the standby take over within
// seconds, with nothing lost and, in exactly-once mode, nothing duplicated.
// The at-least-once run keeps its checkpoint in a table of the source
// database, which both instances share.
func TestHATakeover(t *testing.T) {
	for _, mode := range []struct{ delivery, checkpoint string }{{"exactly-once", "kafka"}, {"at-least-once", "table"}} {
		t.Run(mode.delivery, func(t *testing.T) { testHATakeover(t, mode.delivery, mode.checkpoint) })
	}
}

func testHATakeover(t *testing.T, delivery, checkpoint string) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		_, brokers := testenv.Kafka(t)
		cfg := b.modeConfig(t, connName(t, "e2e-ha-"+b.kind), brokers, true, delivery, checkpoint)
		a := testenv.Launch(t, cfg)
		s := testenv.Launch(t, cfg)
		// Exactly one becomes active; the other reports standby.
		deadline := time.Now().Add(30 * time.Second)
		for {
			ca, cs := a.Streaming(), s.Streaming()
			if ca || cs {
				if cs {
					a, s = s, a
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("no instance became active\nA:\n%s\nB:\n%s", a.Log(), s.Log())
			}
			time.Sleep(50 * time.Millisecond)
		}
		s.WaitStatus(200, "standby", 5*time.Second)
		cons := newConsumer(t, brokers, `outbox\.event\..*`)
		w := startChaosWriter(t, b, "ha", 2*time.Millisecond)
		time.Sleep(time.Second)
		if strings.Contains(s.Log(), `"component":"pipeline"`) || strings.Contains(s.Log(), "kafka sink starting") {
			t.Fatalf("the standby started streaming:\n%s", s.Log())
		}
		a.Kill()
		took := s.WaitStreaming(15 * time.Second)
		t.Logf("%s: standby took over %s after the active one was killed", b.kind, took)
		time.Sleep(time.Second)
		want := w.finish()
		got := cons.waitFor(t, len(want), 30*time.Second)
		got = append(got, cons.quiet(t, time.Second)[len(got):]...)
		checkDelivery(t, got, want, 3, delivery == "exactly-once")
		if err := s.Stop(10 * time.Second); err != nil {
			t.Fatalf("SIGTERM exit: %v", err)
		}
	})
}

// TestFencedZombie pauses the active instance (SIGSTOP), cuts its database
// sessions as a network partition would, lets the standby take over, then
// resumes the old one: it must exit non-zero without a record of its own
// becoming visible.
func TestFencedZombie(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		_, brokers := testenv.Kafka(t)
		name := connName(t, "e2e-zombie-"+b.kind)
		cfg := b.eosConfig(t, name, brokers, true)
		old := testenv.Start(t, cfg)
		standby := testenv.Launch(t, cfg)
		standby.WaitStatus(200, "standby", 10*time.Second)
		cons := newConsumer(t, brokers, `outbox\.event\..*`)
		w := startChaosWriter(t, b, "zb", 2*time.Millisecond)
		time.Sleep(500 * time.Millisecond)

		old.Pause()
		killSessions(t, b, name)
		took := standby.WaitStreaming(20 * time.Second)
		t.Logf("%s: standby active %s after the paused instance lost its sessions", b.kind, took)
		time.Sleep(500 * time.Millisecond)
		old.Resume()
		code := old.WaitExit(15 * time.Second)
		if code == 0 {
			t.Fatalf("the resumed zombie exited 0\n%s", old.Log())
		}
		log := old.Log()
		fenced := strings.Contains(log, "took over")
		lost := strings.Contains(log, "lost the HA lock")
		if !fenced && !lost {
			t.Fatalf("zombie exit %d without saying why:\n%s", code, log)
		}
		t.Logf("%s: zombie exited %d (fenced by transactional id: %v, noticed lock loss: %v)", b.kind, code, fenced, lost)
		time.Sleep(500 * time.Millisecond)
		want := w.finish()
		got := cons.waitFor(t, len(want), 30*time.Second)
		got = append(got, cons.quiet(t, time.Second)[len(got):]...)
		checkDelivery(t, got, want, 3, true)
		if err := standby.Stop(10 * time.Second); err != nil {
			t.Fatalf("SIGTERM exit: %v", err)
		}
	})
}

// TestFencedWithoutLock runs two exactly-once instances without the HA
// lock: the second one's start fences the first, whose next transaction is
// rejected; it exits 1 saying another instance took over.
func TestFencedWithoutLock(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		_, brokers := testenv.Kafka(t)
		cfg := b.eosConfig(t, connName(t, "e2e-fence-"+b.kind), brokers, false)
		first := testenv.Start(t, cfg)
		cons := newConsumer(t, brokers, `outbox\.event\..*`)
		w := startChaosWriter(t, b, "fn", 2*time.Millisecond)
		time.Sleep(500 * time.Millisecond)
		second := testenv.Launch(t, cfg)
		if code := first.WaitExit(20 * time.Second); code != 1 {
			t.Fatalf("fenced instance exit %d, want 1\n%s", code, first.Log())
		}
		if log := first.Log(); !strings.Contains(log, `another instance with transactional id \"outbox-cdc-e2e-fence-`) ||
			!strings.Contains(log, "took over") {
			t.Fatalf("no fencing message:\n%s", log)
		}
		second.WaitStreaming(20 * time.Second)
		time.Sleep(500 * time.Millisecond)
		want := w.finish()
		got := cons.waitFor(t, len(want), 30*time.Second)
		got = append(got, cons.quiet(t, time.Second)[len(got):]...)
		checkDelivery(t, got, want, 3, true)
	})
}

// killSessions ends every database session of the connector name: the HA
// lock's and the replication stream's, as a partition would.
func killSessions(t *testing.T, b *backend, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	switch b.kind {
	case "mysql":
		var id int64
		if err := b.db.QueryRowContext(ctx, "SELECT IS_USED_LOCK(?)", ha.LockName(name)).Scan(&id); err != nil {
			t.Fatal(err)
		}
		if _, err := b.db.ExecContext(ctx, fmt.Sprintf("KILL %d", id)); err != nil {
			t.Fatal(err)
		}
	case "postgres":
		key := ha.AdvisoryKey(name)
		if _, err := b.db.ExecContext(ctx, `SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory' AND granted
  AND classid = (($1::bigint >> 32) & 4294967295)::oid AND objid = ($1::bigint & 4294967295)::oid`, key); err != nil {
			t.Fatal(err)
		}
		if _, err := b.db.ExecContext(ctx, `SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE active_pid IS NOT NULL AND slot_name = $1`,
			strings.ReplaceAll(testObjectName(t), "-", "_")); err != nil {
			t.Fatal(err)
		}
	}
}
