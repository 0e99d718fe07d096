package e2e

import (
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/outbox-cdc/outbox-cdc/test/testenv"
)

// TestSecondSignalExitsAtOnce: SIGTERM while the broker is down and rows
// are waiting starts a drain that would last pipeline.shutdown_timeout
// (here 2 minutes); a second SIGTERM ends the process at once with status
// 1, saying so. Nothing is lost: after a restart with the broker back,
// every row arrives.
func TestSecondSignalExitsAtOnce(t *testing.T) {
	b := mysqlBackend(t)
	k := newBroker(t)
	cfg := b.config(t, connName(t, "e2e-secondsig"), k.brokers())
	env := []string{
		"OUTBOX_CDC_CHECKPOINT_PATH=" + filepath.Join(t.TempDir(), "checkpoint"),
		"OUTBOX_CDC_PIPELINE_SHUTDOWN_TIMEOUT=2m",
		"OUTBOX_CDC_SINK_RETRY_BACKOFF_MAX=500ms",
		"OUTBOX_CDC_SINK_READY_INTERVAL=500ms",
	}
	c := testenv.Start(t, cfg, env...)
	before := ids("pre", 1, 5)
	b.insertRows(t, before, 200)
	cons := newConsumer(t, k.brokers(), `outbox\.event\..*`)
	cons.waitFor(t, len(before), 20*time.Second)

	k.stop()
	during := ids("held", 1, 10)
	b.insertRows(t, during, 200)
	testenv.Eventually(t, 15*time.Second, "outbox_cdc_sink_connected 0", func() bool { return c.Metric("outbox_cdc_sink_connected") == 0 })
	time.Sleep(500 * time.Millisecond) // the rows reach the stuck write

	c.Signal(syscall.SIGTERM)
	time.Sleep(1500 * time.Millisecond)
	if c.Exited() {
		t.Fatalf("exited during the drain before the second signal:\n%s", c.Log())
	}
	sent := time.Now()
	c.Signal(syscall.SIGTERM)
	code := c.WaitExit(20 * time.Second)
	took := time.Since(sent)
	log := c.Log()
	t.Logf("exit %d %s after the second SIGTERM", code, took.Round(time.Millisecond))
	if code != 1 || !strings.Contains(log, "second signal during the stop: exiting at once") {
		t.Fatalf("exit %d, want 1 with \"second signal during the stop\":\n%s", code, log)
	}
	if !strings.Contains(log, "a second signal exits at once") {
		t.Errorf("the first signal's log line does not say that a second one exits at once:\n%s", log)
	}
	if took > 5*time.Second {
		t.Fatalf("took %s to exit after the second signal", took)
	}

	k.start()
	c = testenv.Start(t, cfg, env...)
	want := append(append([]string{}, before...), during...)
	cons = newConsumer(t, k.brokers(), `outbox\.event\..*`)
	got := cons.waitFor(t, len(want), 30*time.Second)
	got = append(got, cons.quiet(t, 500*time.Millisecond)[len(got):]...)
	checkDelivery(t, got, want, 3, false)
	if err := c.Stop(15 * time.Second); err != nil {
		t.Fatalf("SIGTERM exit: %v", err)
	}
}
