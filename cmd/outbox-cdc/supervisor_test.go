package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-cdc/outbox-cdc/ha"
	"github.com/outbox-cdc/outbox-cdc/test/testenv"
)

// TestLockLossReturnsConnectorToStandby: two connectors with HA in one
// process. The lock session of one is killed (as when the server timed it
// out): that connector is aborted and goes back to standby with fresh
// connections, takes its free lock again and streams, while the other
// keeps running throughout; the process does not exit, and both deliver
// rows committed afterwards. A single-connector process exits instead
// (TestHALockLossAbortsWithoutCheckpoint).
func TestLockLossReturnsConnectorToStandby(t *testing.T) {
	admin := testenv.MySQL(t)
	dsn, suffix := privateDatabase(t, "sup_lost_")
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if _, err := db.Exec(testenv.SeedTableMySQL("outbox_message")); err != nil {
		t.Fatal(err)
	}
	_, brokers := testenv.Kafka(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()

	names := []string{"sup-a-" + suffix, "sup-b-" + suffix}
	var entries strings.Builder
	for _, n := range names {
		fmt.Fprintf(&entries, `  - name: %s
    source:
      type: mysql
      dsn: %q
      table: outbox_message
    route:
      preset: seed
      topic: %q
    sink:
      brokers: [%q]
    checkpoint:
      type: table
    ha:
      enabled: true
      check_interval: 200ms
`, n, dsn, n, brokers[0])
	}
	pc, err := loadProcessConfig(writeFile(t, fmt.Sprintf("http:\n  listen: %q\nlog:\n  format: json\nconnectors:\n%s", addr, entries.String())), nil)
	if err != nil {
		t.Fatal(err)
	}
	logs := &lockedBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- runProcess(ctx, pc, runOptions{}, logs) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(40 * time.Second):
		}
		if t.Failed() {
			t.Logf("log:\n%s", logs.String())
		}
	})
	states := func() map[string]string {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err != nil {
			return nil
		}
		defer resp.Body.Close()
		var a healthAnswer
		json.NewDecoder(resp.Body).Decode(&a)
		out := map[string]string{}
		for _, c := range a.Connectors {
			out[c.Name] = c.State
			if c.Ready && c.State == stateRunning {
				out[c.Name] = "ready"
			}
		}
		return out
	}
	bothReady := func() bool { s := states(); return s[names[0]] == "ready" && s[names[1]] == "ready" }
	testenv.Eventually(t, 30*time.Second, "both connectors streaming", bothReady)

	var id int64
	if err := admin.QueryRow("SELECT IS_USED_LOCK(?)", ha.LockName(names[0])).Scan(&id); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec(fmt.Sprintf("KILL %d", id)); err != nil {
		t.Fatal(err)
	}
	// b stays ready while a loses its lock, goes back to standby and
	// streams again.
	sawStandby := false
	deadline := time.Now().Add(30 * time.Second)
	for {
		s := states()
		if s[names[1]] != "ready" {
			t.Fatalf("%s left running while %s lost its lock: %v", names[1], names[0], s)
		}
		if s[names[0]] == stateStandby || s[names[0]] == stateStopping {
			sawStandby = true
		}
		if sawStandby && s[names[0]] == "ready" {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("the process returned %v after one connector lost its lock", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not back to streaming within 30s (saw standby: %v): %v", names[0], sawStandby, s)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !strings.Contains(logs.String(), "back to standby with fresh connections") {
		t.Fatal("no log line for the return to standby")
	}
	// What the lines say about the aborted run is true: the process does
	// not exit, and nothing claims a checkpoint of every received
	// transaction while saves were refused.
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, `"connector":"`+names[0]+`"`) &&
			(strings.Contains(line, "exiting") || strings.Contains(line, "every received transaction written and checkpointed")) {
			t.Errorf("a line says what did not happen: %s", line)
		}
	}

	if _, err := db.Exec("INSERT INTO outbox_message (message_id, aggregate_type, aggregate_id, event_type, payload) VALUES ('after-1', 'ORDER', 'x', 'E', '{}')"); err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(n), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
			kgo.FetchMaxWait(100*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		pctx, pcancel := context.WithTimeout(context.Background(), 20*time.Second)
		found := false
		for !found && pctx.Err() == nil {
			cl.PollFetches(pctx).EachRecord(func(r *kgo.Record) {
				for _, h := range r.Headers {
					if h.Key == "id" && string(h.Value) == "after-1" {
						found = true
					}
				}
			})
		}
		pcancel()
		cl.Close()
		if !found {
			t.Fatalf("%s did not deliver after-1", n)
		}
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("clean stop returned %v", err)
		}
	case <-time.After(40 * time.Second):
		t.Fatal("not stopped within 40s of the cancel")
	}
}
