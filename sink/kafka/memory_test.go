package kafka_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
	"github.com/outbox-cdc/outbox-cdc/router"
	"github.com/outbox-cdc/outbox-cdc/sink/kafka"
)

// hugeTxSource sends one transaction of rows events of size bytes in
// fragments bounded as a real source bounds them (MaxFragmentEvents,
// MaxFragmentBytes), then waits.
type hugeTxSource struct {
	rows, size int
	ack        atomic.Value
}

func (s *hugeTxSource) Run(ctx context.Context, from outboxcdc.Position, out chan<- outboxcdc.Tx) error {
	if from.IsZero() {
		pad := strings.Repeat("x", s.size-40)
		for i := 0; i < s.rows; {
			tx := outboxcdc.Tx{CommitTime: time.Now(), More: true}
			bytes := 0
			for ; i < s.rows && len(tx.Events) < outboxcdc.MaxFragmentEvents && bytes < outboxcdc.MaxFragmentBytes; i++ {
				p := []byte(fmt.Sprintf(`{"i":%d,"pad":%q}`, i, pad)) // a fresh buffer per row, as a source decodes
				bytes += len(p)
				tx.Events = append(tx.Events, outboxcdc.Event{
					MessageID: fmt.Sprintf("m-%d", i), AggregateType: "ORDER", AggregateID: fmt.Sprintf("a-%d", i%50),
					EventType: "E", Payload: p, CommitTime: tx.CommitTime, Origin: fmt.Sprintf("fake row %d", i),
				})
			}
			if i == s.rows {
				tx.More, tx.End = false, "fake:1"
			}
			select {
			case out <- tx:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	<-ctx.Done()
	return ctx.Err()
}
func (s *hugeTxSource) Ack(pos outboxcdc.Position) { s.ack.Store(pos) }
func (s *hugeTxSource) Ready() error               { return nil }

type memCP struct{ pos atomic.Value }

func (c *memCP) Load(context.Context) (outboxcdc.Position, error) {
	p, _ := c.pos.Load().(outboxcdc.Position)
	return p, nil
}
func (c *memCP) Save(_ context.Context, p outboxcdc.Position) error { c.pos.Store(p); return nil }

// brokerProcess runs test/cmd/kfake-broker as its own process, so that the
// records it stores do not count in this process's heap.
func brokerProcess(t *testing.T) []string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "kfake-broker")
	build := exec.Command("go", "build", "-o", bin, "github.com/outbox-cdc/outbox-cdc/test/cmd/kfake-broker")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build kfake-broker: %v\n%s", err, out)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	ln.Close()
	cmd := exec.Command(bin, "-port", port)
	stdout, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	if !bufio.NewScanner(stdout).Scan() {
		t.Fatal("kfake-broker did not start")
	}
	go func() { _, _ = bufio.NewReader(stdout).WriteTo(discard{}) }()
	return []string{"127.0.0.1:" + port}
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// TestPipelineHugeTransactionHeapBound: the pipeline with the real Kafka
// sinks (both delivery modes, against a broker in another process) moves
// one 100 MB transaction that its source sends in fragments while the Go
// heap in use stays within the documented bound of the pipeline and the
// producer (3 × (max_batch_bytes + a fragment) + queue_bytes + a fragment
// + max_in_flight_bytes, about 56 MiB of rows with the defaults), with the
// connector's soft memory limit (100 MiB). This is the connector's half of
// the 128 MiB RSS target; the e2e test measures the whole process.
func TestPipelineHugeTransactionHeapBound(t *testing.T) {
	if testing.Short() {
		t.Skip("moves 100 MB")
	}
	const rows, size = 100_000, 1024
	const bound = 96 << 20
	brokers := brokerProcess(t)
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(100 << 20))
	for _, mode := range []string{"at-least-once", "exactly-once"} {
		t.Run(mode, func(t *testing.T) {
			cfg := kafka.DefaultKafkaConfig()
			cfg.Brokers = brokers
			log := zerolog.Nop()
			var snk outboxcdc.Sink
			var cp outboxcdc.Checkpointer
			var at func() outboxcdc.Position
			if mode == "at-least-once" {
				k, err := kafka.NewKafka(cfg, log, nil)
				if err != nil {
					t.Fatal(err)
				}
				c := &memCP{}
				snk, cp, at = k, c, func() outboxcdc.Position { p, _ := c.Load(context.Background()); return p }
			} else {
				tc := kafka.DefaultTxnConfig()
				tc.ProgressTopic = "progress-" + fmt.Sprint(time.Now().UnixNano())
				tx, err := kafka.NewTransactional(cfg, tc, "huge", "fake", log, nil)
				if err != nil {
					t.Fatal(err)
				}
				snk = tx
				at = func() outboxcdc.Position {
					p, _ := kafka.ReadProgress(context.Background(), cfg, tc.ProgressTopic, "huge", "")
					return p.Position
				}
			}
			defer snk.Close()
			rt, err := router.New(router.DefaultConfig())
			if err != nil {
				t.Fatal(err)
			}
			src := &hugeTxSource{rows: rows, size: size}
			p, err := outboxcdc.NewPipeline(outboxcdc.DefaultPipelineConfig(), src, rt, snk, cp, log, nil)
			if err != nil {
				t.Fatal(err)
			}
			runtime.GC()
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- p.Run(ctx) }()
			var peak uint64
			var ms runtime.MemStats
			start := time.Now()
			for {
				runtime.ReadMemStats(&ms)
				peak = max(peak, ms.HeapInuse)
				if ack, _ := src.ack.Load().(outboxcdc.Position); ack == "fake:1" {
					break
				}
				if time.Since(start) > 5*time.Minute {
					t.Fatalf("the transaction was not checkpointed within 5 minutes (position %q)", at())
				}
				time.Sleep(20 * time.Millisecond)
			}
			cancel()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			if got := at(); got != "fake:1" {
				t.Fatalf("stored position %q", got)
			}
			t.Logf("%d rows (%d MB) in one fragmented transaction: %v; peak heap in use %.1f MiB (bound %d MiB)",
				rows, rows*size>>20, time.Since(start).Round(time.Millisecond), float64(peak)/(1<<20), bound>>20)
			if peak > bound {
				t.Fatalf("peak heap in use %.1f MiB is above %d MiB", float64(peak)/(1<<20), bound>>20)
			}
		})
	}
}
