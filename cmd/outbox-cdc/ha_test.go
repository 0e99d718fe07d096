package main

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outbox-cdc/outbox-cdc/ha"
	"github.com/outbox-cdc/outbox-cdc/test/testenv"
)

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestHALockLossAbortsWithoutCheckpoint: the active instance loses its HA
// lock while a Kafka write is in flight, more transactions wait behind it
// and the outbox lifecycle is stuck on a row lock. It must stop at once:
// the transactions waiting are not produced, no checkpoint is saved after
// the loss, and it returns the lock-loss error promptly (not after a
// graceful drain bounded by pipeline.shutdown_timeout).
func TestHALockLossAbortsWithoutCheckpoint(t *testing.T) {
	admin := testenv.MySQL(t)
	dsn, suffix := privateDatabase(t, "ha_abort_")
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if _, err := db.Exec(testenv.SeedTableMySQL("outbox_message")); err != nil {
		t.Fatal(err)
	}
	insert := func(id string) {
		t.Helper()
		if _, err := db.Exec("INSERT INTO outbox_message (message_id, aggregate_type, aggregate_id, event_type, payload) VALUES (?, 'ORDER', ?, 'E', '{}')", id, id); err != nil {
			t.Fatal(err)
		}
	}
	checkpointPos := func() string {
		var pos string
		err := db.QueryRow("SELECT position FROM outbox_cdc_checkpoint WHERE connector = ?", "ha-abort-"+suffix).Scan(&pos)
		if err != nil && err != sql.ErrNoRows {
			t.Fatal(err)
		}
		return pos
	}

	kc, brokers := testenv.Kafka(t)
	var holding atomic.Bool
	var hold chan struct{}
	var holdMu sync.Mutex
	produced := make(chan struct{}, 64)
	kc.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		kc.KeepControl()
		if !holding.Load() {
			return nil, nil, false
		}
		holdMu.Lock()
		h := hold
		holdMu.Unlock()
		select {
		case produced <- struct{}{}:
		default:
		}
		kc.SleepControl(func() { <-h })
		return nil, nil, false
	})
	holdProduce := func() {
		holdMu.Lock()
		hold = make(chan struct{})
		holdMu.Unlock()
		for len(produced) > 0 {
			<-produced
		}
		holding.Store(true)
	}
	releaseProduce := func() {
		holding.Store(false)
		holdMu.Lock()
		close(hold)
		holdMu.Unlock()
	}

	name := "ha-abort-" + suffix
	path := filepath.Join(t.TempDir(), "c.yaml")
	conf := fmt.Sprintf(`name: %s
source:
  type: mysql
  dsn: %q
  table: outbox_message
  start: latest
sink:
  brokers: [%q]
  retry_backoff_min: 20ms
  retry_backoff_max: 200ms
checkpoint:
  type: table
ha:
  enabled: true
  check_interval: 200ms
lifecycle:
  mark_sent: true
pipeline:
  checkpoint_interval: 0s
  shutdown_timeout: 30s
http:
  listen: ""
log:
  format: json
`, name, dsn, brokers[0])
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := loadConfig(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	logs := &lockedBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	finished := make(chan struct{})
	go func() { done <- runConnector(ctx, cfg, runOptions{}, logs); close(finished) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-finished:
		case <-time.After(40 * time.Second):
		}
		if t.Failed() {
			t.Logf("connector log:\n%s", logs.String())
		}
	})
	testenv.Eventually(t, 30*time.Second, "binlog stream started", func() bool { return strings.Contains(logs.String(), "binlog stream started") })

	// Stage 1: the lifecycle gets stuck marking b1, whose row the business
	// holds locked.
	holdProduce()
	insert("b1")
	select {
	case <-produced:
	case <-time.After(20 * time.Second):
		t.Fatal("b1 never produced")
	}
	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := tx.Exec("UPDATE outbox_message SET retry_count = 1 WHERE message_id = 'b1'"); err != nil {
		t.Fatal(err)
	}
	releaseProduce()
	testenv.Eventually(t, 20*time.Second, "b1 checkpointed", func() bool { return checkpointPos() != "" })
	time.Sleep(300 * time.Millisecond) // the mark_sent UPDATE now waits on the row lock

	// Stage 2: c1 is in flight (its produce held), c2..c5 wait behind it.
	holdProduce()
	insert("c1")
	select {
	case <-produced:
	case <-time.After(20 * time.Second):
		t.Fatal("c1 never produced")
	}
	for i := 2; i <= 5; i++ {
		insert(fmt.Sprintf("c%d", i))
	}
	time.Sleep(time.Second) // read by the source, queued behind c1
	before := checkpointPos()

	// The lock session ends (as when the server timed it out).
	var id int64
	if err := admin.QueryRow("SELECT IS_USED_LOCK(?)", ha.LockName(name)).Scan(&id); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec(fmt.Sprintf("KILL %d", id)); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	testenv.Eventually(t, 10*time.Second, "lock loss noticed", func() bool { return strings.Contains(logs.String(), "lost the HA lock") })
	releaseProduce()

	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "lost the HA lock") {
			t.Fatalf("runConnector = %v, want the lock-loss error", err)
		}
		t.Logf("stopped %s after the lock session was killed: %v", time.Since(killed).Round(time.Millisecond), err)
	case <-time.After(15 * time.Second):
		t.Fatalf("still running 15s after losing the lock (a graceful drain, not an abort)")
	}
	if after := checkpointPos(); after != before {
		t.Fatalf("checkpoint moved from %q to %q after the lock was lost", before, after)
	}

	// Nothing that waited behind the write in flight was produced.
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics("outbox.event.ORDER"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	seen := map[string]bool{}
	pctx, pcancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer pcancel()
	for pctx.Err() == nil {
		cl.PollFetches(pctx).EachRecord(func(r *kgo.Record) {
			for _, h := range r.Headers {
				if h.Key == "id" {
					seen[string(h.Value)] = true
				}
			}
		})
	}
	if !seen["b1"] {
		t.Fatalf("b1 not in Kafka (read %v)", seen)
	}
	for i := 2; i <= 5; i++ {
		if id := fmt.Sprintf("c%d", i); seen[id] {
			t.Fatalf("%s was produced after the lock was lost (read %v)", id, seen)
		}
	}
	t.Logf("records in Kafka: %v (c1 was in flight at the loss)", seen)
}
