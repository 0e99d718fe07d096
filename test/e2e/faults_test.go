package e2e

// Fault scenarios of issue 4 that concern the sink, the checkpoint store,
// poison rows and shutdown, run against the real binary. Each test names
// its scenario; each checks the outcome (exit status, metric, log), and
// reads the topics back to prove that nothing committed was lost.

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/outbox-cdc/outbox-cdc/test/testenv"
)

// outage is how long TestFaultKafkaDownForMinutes keeps the broker down:
// "minutes" in the issue, 10s by default so CI stays fast. Set
// OUTBOX_CDC_TEST_OUTAGE (e.g. 3m) for the real thing.
func outage(t *testing.T) time.Duration {
	if v := os.Getenv("OUTBOX_CDC_TEST_OUTAGE"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("OUTBOX_CDC_TEST_OUTAGE: %v", err)
		}
		return d
	}
	return 10 * time.Second
}

// broker is a kfake cluster that can be stopped and started again on the
// same port with its data (DataDir), like a Kafka broker restarted.
type broker struct {
	t    *testing.T
	port int
	dir  string
	opts []kfake.Opt
	c    *kfake.Cluster
}

func newBroker(t *testing.T, opts ...kfake.Opt) *broker {
	t.Helper()
	_, port, _ := net.SplitHostPort(testenv.FreeAddr(t))
	p, _ := strconv.Atoi(port)
	b := &broker{t: t, port: p, dir: t.TempDir(), opts: opts}
	b.start()
	t.Cleanup(b.stop)
	return b
}

func (b *broker) start() {
	b.t.Helper()
	opts := append([]kfake.Opt{
		kfake.NumBrokers(1), kfake.DefaultNumPartitions(3), kfake.AllowAutoTopicCreation(),
		kfake.Ports(b.port), kfake.DataDir(b.dir),
	}, b.opts...)
	var err error
	for i := 0; i < 50; i++ { // the port may take a moment to be free again
		if b.c, err = kfake.NewCluster(opts...); err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	b.t.Fatalf("start kfake on port %d: %v", b.port, err)
}

func (b *broker) stop() {
	if b.c != nil {
		b.c.Close()
		b.c = nil
	}
}

func (b *broker) brokers() []string { return []string{fmt.Sprintf("127.0.0.1:%d", b.port)} }

func ids(prefix string, from, to int) []string {
	var out []string
	for i := from; i <= to; i++ {
		out = append(out, fmt.Sprintf("%s-%d", prefix, i))
	}
	return out
}

// insertRows commits one transaction per id, with a payload of size bytes.
func (b *backend) insertRows(t *testing.T, idList []string, size int) {
	t.Helper()
	pad := strings.Repeat("x", max(0, size-30))
	for i, id := range idList {
		b.insertTx(t, []row{{id, "ORDER", fmt.Sprintf("agg-%d", i%5), "E", fmt.Sprintf(`{"id": %q, "pad": %q}`, id, pad)}}, true)
	}
}

// TestFaultKafkaDownForMinutes: the broker goes away while rows keep being
// committed. The connector stops reading ahead (heap stays far below the
// bytes committed meanwhile), retries with capped backoff, never moves the
// checkpoint, reports the sink down (outbox_cdc_sink_connected 0, /readyz
// 503, one "kafka unreachable or failing" warning and rate-limited retry warnings)
// while /healthz stays 200, and delivers everything once the broker is back.
func TestFaultKafkaDownForMinutes(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		down := outage(t)
		k := newBroker(t)
		cpPath := filepath.Join(t.TempDir(), "checkpoint")
		cfg := b.config(t, connName(t, "e2e-kafkadown-"+b.kind), k.brokers())
		env := []string{
			"OUTBOX_CDC_CHECKPOINT_PATH=" + cpPath,
			"OUTBOX_CDC_SINK_RETRY_BACKOFF_MAX=1s",
			"OUTBOX_CDC_SINK_READY_INTERVAL=500ms",
			"OUTBOX_CDC_PIPELINE_MAX_BATCH_BYTES=262144",
			"OUTBOX_CDC_PIPELINE_QUEUE_TRANSACTIONS=8",
		}
		if b.kind == "postgres" {
			// The source's own bound on decoded transactions (16 MiB by default).
			env = append(env, "OUTBOX_CDC_SOURCE_BUFFER_BYTES=2097152")
		}
		c := testenv.Start(t, cfg, env...)
		before := ids("up", 1, 50)
		b.insertRows(t, before, 200)
		cons := newConsumer(t, k.brokers(), `outbox\.event\..*`)
		cons.waitFor(t, len(before), 20*time.Second)

		k.stop()
		testenv.Eventually(t, 15*time.Second, "outbox_cdc_sink_connected 0", func() bool { return c.Metric("outbox_cdc_sink_connected") == 0 })
		baseHeap := c.Metric("go_memstats_heap_inuse_bytes")

		// Commit far more bytes than the pipeline may hold, while probing.
		const rows, size = 6000, 8 << 10
		var during []string
		deadline := time.Now().Add(down)
		maxHeap := baseHeap
		cp0, _ := os.ReadFile(cpPath)
		for n := 0; time.Now().Before(deadline); {
			if n < rows {
				batch := ids("down", n+1, n+500)
				b.insertRows(t, batch, size)
				during = append(during, batch...)
				n += len(batch)
			} else {
				time.Sleep(250 * time.Millisecond)
			}
			if s := c.Status("/healthz"); s != 200 {
				t.Fatalf("/healthz %d during the outage: liveness must not flap", s)
			}
			if s := c.Status("/readyz"); s != 503 {
				t.Fatalf("/readyz %d during the outage, want 503", s)
			}
			if v := c.Metric("outbox_cdc_sink_connected"); v != 0 {
				t.Fatalf("outbox_cdc_sink_connected %v during the outage", v)
			}
			maxHeap = max(maxHeap, c.Metric("go_memstats_heap_inuse_bytes"))
		}
		committed := float64(len(during) * size)
		t.Logf("outage %s: %d rows (%.0f MB) committed; heap in use %.1f MB before, at most %.1f MB during",
			down, len(during), committed/1e6, baseHeap/1e6, maxHeap/1e6)
		if maxHeap-baseHeap > committed/2 {
			t.Fatalf("heap grew by %.1f MB while %.1f MB were committed: the connector reads ahead without bound",
				(maxHeap-baseHeap)/1e6, committed/1e6)
		}
		if cp1, _ := os.ReadFile(cpPath); string(cp1) != string(cp0) {
			t.Fatal("the checkpoint moved while the broker was down")
		}
		log := c.Log()
		if n := strings.Count(log, `"message":"kafka unreachable or failing"`); n < 1 {
			t.Fatalf("no \"kafka unreachable or failing\" warning:\n%s", log)
		}
		retries := 0
		for _, line := range strings.Split(log, "\n") {
			if strings.Contains(line, `"level":"warn"`) && strings.Contains(line, `"component":"sink"`) {
				retries++
			}
		}
		if limit := 3 + 2*int(down/(30*time.Second)); retries > limit+1 {
			t.Fatalf("%d sink warnings during a %s outage, want at most about %d (rate-limited)", retries, down, limit)
		}

		k.start()
		testenv.Eventually(t, 30*time.Second, "outbox_cdc_sink_connected 1", func() bool { return c.Metric("outbox_cdc_sink_connected") == 1 })
		after := ids("back", 1, 20)
		b.insertRows(t, after, 200)
		want := append(append(append([]string{}, before...), during...), after...)
		cons = newConsumer(t, k.brokers(), `outbox\.event\..*`)
		got := cons.waitFor(t, len(want), 60*time.Second)
		got = append(got, cons.quiet(t, 500*time.Millisecond)[len(got):]...)
		checkDelivery(t, got, want, 3, false)
		testenv.Eventually(t, 10*time.Second, "/readyz 200", func() bool { return c.Status("/readyz") == 200 })
		if err := c.Stop(15 * time.Second); err != nil {
			t.Fatalf("SIGTERM exit: %v", err)
		}
	})
}

// TestFaultSigtermWhileKafkaDown: SIGTERM while the broker is down and
// rows are waiting. The connector exits within pipeline.shutdown_timeout
// (plus the sink's bounded close) with status 1 and "final flush did not
// finish", the checkpoint stays before the unsent rows, and after a
// restart with the broker back every row arrives.
func TestFaultSigtermWhileKafkaDown(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		k := newBroker(t)
		cfg := b.config(t, connName(t, "e2e-sigtermdown-"+b.kind), k.brokers())
		env := []string{
			"OUTBOX_CDC_CHECKPOINT_PATH=" + filepath.Join(t.TempDir(), "checkpoint"),
			"OUTBOX_CDC_PIPELINE_SHUTDOWN_TIMEOUT=2s",
			"OUTBOX_CDC_SINK_RETRY_BACKOFF_MAX=500ms",
			"OUTBOX_CDC_SINK_READY_INTERVAL=500ms",
		}
		c := testenv.Start(t, cfg, env...)
		before := ids("pre", 1, 20)
		b.insertRows(t, before, 200)
		cons := newConsumer(t, k.brokers(), `outbox\.event\..*`)
		cons.waitFor(t, len(before), 20*time.Second)

		k.stop()
		during := ids("held", 1, 30)
		b.insertRows(t, during, 200)
		testenv.Eventually(t, 15*time.Second, "outbox_cdc_sink_connected 0", func() bool { return c.Metric("outbox_cdc_sink_connected") == 0 })
		time.Sleep(500 * time.Millisecond) // the rows reach the stuck write

		sent := time.Now()
		c.Signal(syscall.SIGTERM)
		code := c.WaitExit(20 * time.Second)
		took := time.Since(sent)
		log := c.Log()
		t.Logf("exit %d after %s", code, took.Round(time.Millisecond))
		if code != 1 || !strings.Contains(log, "final flush did not finish within 2s") {
			t.Fatalf("exit %d, want 1 with \"final flush did not finish\":\n%s", code, log)
		}
		// shutdown_timeout, then at most the sink's 10s close.
		if took > 2*time.Second+12*time.Second {
			t.Fatalf("took %s to exit", took)
		}

		k.start()
		c = testenv.Start(t, cfg, env...)
		after := ids("post", 1, 10)
		b.insertRows(t, after, 200)
		want := append(append(append([]string{}, before...), during...), after...)
		cons = newConsumer(t, k.brokers(), `outbox\.event\..*`)
		got := cons.waitFor(t, len(want), 30*time.Second)
		got = append(got, cons.quiet(t, 500*time.Millisecond)[len(got):]...)
		checkDelivery(t, got, want, 3, false)
		if err := c.Stop(15 * time.Second); err != nil {
			t.Fatalf("SIGTERM exit: %v", err)
		}
	})
}

// TestFaultCheckpointUnwritable: the checkpoint's directory disappears
// (as a read-only or full filesystem would fail the write; the tests run as
// root, which ignores permissions). The connector stops with status 1 and a
// message naming the checkpoint, without acknowledging anything further;
// with the directory back, a restart delivers every row.
func TestFaultCheckpointUnwritable(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		_, brokers := testenv.Kafka(t)
		dir := filepath.Join(t.TempDir(), "state")
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		cpPath := filepath.Join(dir, "checkpoint")
		cfg := b.config(t, connName(t, "e2e-cpunwritable-"+b.kind), brokers)
		env := []string{"OUTBOX_CDC_CHECKPOINT_PATH=" + cpPath}
		c := testenv.Start(t, cfg, env...)
		first := ids("ok", 1, 5)
		b.insertRows(t, first, 100)
		cons := newConsumer(t, brokers, `outbox\.event\..*`)
		cons.waitFor(t, len(first), 20*time.Second)
		testenv.Eventually(t, 10*time.Second, "a checkpoint", func() bool { _, err := os.Stat(cpPath); return err == nil })
		saved, _ := os.ReadFile(cpPath)

		// The directory becomes unusable: a file stands where it was.
		if err := os.Rename(dir, dir+".away"); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dir, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		more := ids("late", 1, 3)
		b.insertRows(t, more, 100)
		code := c.WaitExit(20 * time.Second)
		log := c.Log()
		if code != 1 || !strings.Contains(log, "save checkpoint") || !strings.Contains(log, "stopping before acknowledging anything further") {
			t.Fatalf("exit %d, want 1 with the checkpoint error:\n%s", code, log)
		}

		os.Remove(dir)
		if err := os.Rename(dir+".away", dir); err != nil {
			t.Fatal(err)
		}
		if now, _ := os.ReadFile(cpPath); string(now) != string(saved) {
			t.Fatal("the checkpoint changed although saving failed")
		}
		c = testenv.Start(t, cfg, env...)
		want := append(first, more...)
		got := cons.waitFor(t, len(want), 30*time.Second)
		got = append(got, cons.quiet(t, 500*time.Millisecond)[len(got):]...)
		checkDelivery(t, got, want, 3, false)
		if err := c.Stop(15 * time.Second); err != nil {
			t.Fatalf("SIGTERM exit: %v", err)
		}
	})
}

// TestFaultCheckpointDamaged: a corrupted, truncated or foreign checkpoint
// file makes the connector refuse to start (status 1, a message saying the
// checkpoint cannot be trusted and what to do) and leaves the file as it
// was: it never falls back to the start or the end of the log.
func TestFaultCheckpointDamaged(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		_, brokers := testenv.Kafka(t)
		cpPath := filepath.Join(t.TempDir(), "checkpoint")
		cfg := b.config(t, connName(t, "e2e-cpdamaged-"+b.kind), brokers)
		env := []string{"OUTBOX_CDC_CHECKPOINT_PATH=" + cpPath}
		// A real checkpoint of this source to damage.
		c := testenv.Start(t, cfg, env...)
		b.insertRows(t, ids("ok", 1, 3), 100)
		cons := newConsumer(t, brokers, `outbox\.event\..*`)
		cons.waitFor(t, 3, 20*time.Second)
		if err := c.Stop(15 * time.Second); err != nil {
			t.Fatalf("SIGTERM exit: %v", err)
		}
		good, err := os.ReadFile(cpPath)
		if err != nil {
			t.Fatal(err)
		}
		other := "postgres"
		if b.kind == "postgres" {
			other = "mysql"
		}
		foreign := strings.Replace(string(good), b.kind+":", other+":", 1)
		cases := []struct {
			name, content, want string
		}{
			{"corrupted", strings.Replace(string(good), ":", ";", -1), "cannot be trusted"},
			{"truncated", string(good[:len(good)/2]), "cannot be trusted"},
			{"garbage", "\x00\x01not a checkpoint at all\n", "cannot be trusted"},
			{"empty", "", "cannot be trusted"},
			{"foreign source", foreign, ""},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				if err := os.WriteFile(cpPath, []byte(tc.content), 0o600); err != nil {
					t.Fatal(err)
				}
				code, out := testenv.Run(t, 30*time.Second, env, "run", "--config", cfg)
				if code != 1 {
					t.Fatalf("exit %d, want 1:\n%s", code, out)
				}
				for _, w := range []string{tc.want, "load checkpoint", cpPath} {
					if !strings.Contains(out, w) {
						t.Fatalf("output does not mention %q:\n%s", w, out)
					}
				}
				if now, _ := os.ReadFile(cpPath); string(now) != tc.content {
					t.Fatal("the damaged checkpoint was overwritten")
				}
			})
		}
		// The good checkpoint back: resumes and delivers rows committed meanwhile.
		if err := os.WriteFile(cpPath, good, 0o600); err != nil {
			t.Fatal(err)
		}
		b.insertRows(t, ids("while-refused", 1, 3), 100)
		c = testenv.Start(t, cfg, env...)
		want := append(ids("ok", 1, 3), ids("while-refused", 1, 3)...)
		got := cons.waitFor(t, len(want), 30*time.Second)
		got = append(got, cons.quiet(t, 500*time.Millisecond)[len(got):]...)
		checkDelivery(t, got, want, 3, true)
		if err := c.Stop(15 * time.Second); err != nil {
			t.Fatalf("SIGTERM exit: %v", err)
		}
	})
}
