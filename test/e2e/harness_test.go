// Package e2e runs the outbox-cdc binary as a separate process against the
// real local databases and a Kafka-protocol broker, and checks what a
// consumer reads back.
package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-cdc/outbox-cdc/sink"
)

var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "outbox-cdc-e2e")
	if err != nil {
		panic(err)
	}
	binary = filepath.Join(dir, "outbox-cdc")
	build := exec.Command("go", "build", "-o", binary, "github.com/outbox-cdc/outbox-cdc/cmd/outbox-cdc")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintf(os.Stderr, "build outbox-cdc: %v\n", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// connector is one outbox-cdc process.
type connector struct {
	t        *testing.T
	cmd      *exec.Cmd
	httpAddr string
	log      *syncBuffer
	done     chan struct{}
	exitErr  error
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// writeConfig writes a YAML config file into the test's temp dir.
func writeConfig(t *testing.T, yaml string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "outbox-cdc.yaml")
	if err := os.WriteFile(p, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// start runs the binary with the config and waits until it streams
// (/readyz and /active say 200).
func start(t *testing.T, configPath string, env ...string) *connector {
	t.Helper()
	c := &connector{t: t, httpAddr: freeAddr(t), log: &syncBuffer{}, done: make(chan struct{})}
	c.cmd = exec.Command(binary, "run", "--config", configPath)
	c.cmd.Env = append(os.Environ(), append(env, "OUTBOX_CDC_HTTP_LISTEN="+c.httpAddr, "OUTBOX_CDC_LOG_FORMAT=json")...)
	c.cmd.Stdout, c.cmd.Stderr = c.log, c.log
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { c.exitErr = c.cmd.Wait(); close(c.done) }()
	t.Cleanup(func() {
		c.kill()
		if t.Failed() {
			t.Logf("connector log:\n%s", c.log.String())
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-c.done:
			t.Fatalf("connector exited during start: %v\n%s", c.exitErr, c.log.String())
		default:
		}
		if c.streaming() {
			return c
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("connector not ready within 30s:\n%s", c.log.String())
	return nil
}

// kill stops the process with SIGKILL: no flush, no checkpoint.
func (c *connector) kill() {
	if c.cmd.Process != nil {
		c.cmd.Process.Kill()
	}
	<-c.done
}

// stop sends SIGTERM and returns the exit error (nil for status 0).
func (c *connector) stop(timeout time.Duration) error {
	c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
		return c.exitErr
	case <-time.After(timeout):
		c.t.Fatalf("connector did not exit within %s of SIGTERM", timeout)
		return nil
	}
}

// consumed is one record read back from Kafka.
type consumed struct {
	Topic     string
	Partition int32
	Offset    int64
	Key       string
	Value     string
	Headers   map[string]string
}

// consumer reads every topic matching regex with read_committed.
type consumer struct {
	cl *kgo.Client
	mu sync.Mutex
	r  []consumed
}

func newConsumer(t *testing.T, brokers []string, regex string) *consumer {
	t.Helper()
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(brokers...),
		kgo.ConsumeRegex(), kgo.ConsumeTopics(regex),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.MetadataMinAge(50*time.Millisecond), kgo.MetadataMaxAge(250*time.Millisecond),
		kgo.FetchMaxWait(100*time.Millisecond),
	)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return &consumer{cl: cl}
}

// waitFor polls until at least n records were read or the timeout passes,
// and returns everything read so far.
func (c *consumer) waitFor(t *testing.T, n int, timeout time.Duration) []consumed {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for len(c.r) < n {
		fs := c.cl.PollFetches(ctx)
		if ctx.Err() != nil {
			break
		}
		fs.EachRecord(func(r *kgo.Record) {
			h := map[string]string{}
			for _, x := range r.Headers {
				h[x.Key] = string(x.Value)
			}
			c.r = append(c.r, consumed{r.Topic, r.Partition, r.Offset, string(r.Key), string(r.Value), h})
		})
	}
	return append([]consumed(nil), c.r...)
}

// quiet reads for d more and returns everything read.
func (c *consumer) quiet(t *testing.T, d time.Duration) []consumed {
	return c.waitFor(t, 1<<30, d)
}

// checkDelivery asserts that every expected message id arrived at least
// once (exactly once when exact), that nothing unexpected arrived, that each
// record's partition is the Java murmur2 partition of its key, and that per
// aggregate and topic the first deliveries keep commit order.
func checkDelivery(t *testing.T, got []consumed, want []string, partitions int32, exact bool) {
	t.Helper()
	order := map[string]int{}
	for i, id := range want {
		order[id] = i
	}
	seen := map[string]int{}
	lastByKey := map[string]int{}
	dups := 0
	for _, r := range got {
		id := r.Headers["id"]
		idx, ok := order[id]
		if !ok {
			t.Fatalf("unexpected record %+v", r)
		}
		if p := sink.JavaPartition([]byte(r.Key), partitions); p != r.Partition {
			t.Fatalf("record %s key %q on partition %d, Java murmur2 says %d", id, r.Key, r.Partition, p)
		}
		seen[id]++
		if seen[id] > 1 {
			dups++
			continue
		}
		// Order holds per partition stream: one key within one topic.
		stream := r.Topic + "/" + r.Key
		if prev, ok := lastByKey[stream]; ok && idx < prev {
			t.Fatalf("aggregate %s out of order in %s: %s (commit #%d) after commit #%d", r.Key, r.Topic, id, idx, prev)
		}
		lastByKey[stream] = idx
	}
	var missing []string
	for _, id := range want {
		if seen[id] == 0 {
			missing = append(missing, id)
		}
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		t.Fatalf("%d of %d committed rows never arrived, e.g. %v", len(missing), len(want), missing[:min(5, len(missing))])
	}
	if exact && dups > 0 {
		t.Fatalf("%d duplicate records", dups)
	}
	t.Logf("%d rows committed, %d records read, %d duplicates", len(want), len(got), dups)
}
