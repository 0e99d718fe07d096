// Package e2e runs the outbox-cdc binary as a separate process against the
// real local databases and a Kafka-protocol broker, and checks what a
// consumer reads back.
package e2e

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-cdc/outbox-cdc/sink"
	"github.com/outbox-cdc/outbox-cdc/test/testenv"
)

// The connector processes are testenv.Connector: testenv.Binary builds the
// binary once for this test process, TestMain removes it.
func TestMain(m *testing.M) {
	code := m.Run()
	testenv.RemoveBinary()
	os.Exit(code)
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

// consumed is one record read back from Kafka.
type consumed struct {
	Topic     string
	Partition int32
	Offset    int64
	Key       string
	Value     string
	Headers   map[string]string
	// Producer is the Kafka producer that wrote the record: its id and
	// epoch (each connector process has its own idempotent producer id;
	// in exactly-once mode the id is shared and the epoch tells them
	// apart).
	Producer producerOf
}

// producerOf identifies a Kafka producer instance.
type producerOf struct {
	ID    int64
	Epoch int16
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
	return c.poll(ctx, n)
}

// poll reads until at least n records were read or ctx ends. The records
// of a fetch are kept even when ctx ended after PollFetches took them: the
// client hands each fetch over once, so a record dropped here is never
// read by this consumer and looks lost. quiet's short polls meet that
// race whenever records arrive as a wait ends: about one 50 ms window in
// a hundred under load while records flow, and then a whole fetch (all
// partitions' batches of a catch-up write) goes missing at once.
func (c *consumer) poll(ctx context.Context, n int) []consumed {
	for len(c.r) < n {
		fs := c.cl.PollFetches(ctx)
		fs.EachRecord(func(r *kgo.Record) {
			h := map[string]string{}
			for _, x := range r.Headers {
				h[x.Key] = string(x.Value)
			}
			c.r = append(c.r, consumed{r.Topic, r.Partition, r.Offset, string(r.Key), string(r.Value), h, producerOf{r.ProducerID, r.ProducerEpoch}})
		})
		if ctx.Err() != nil {
			break
		}
	}
	return append([]consumed(nil), c.r...)
}

// waitForIDs polls until a record of every id in want was read, and
// returns everything read so far. It waits while records keep arriving:
// it gives up only after stall without a new record (or after limit in
// all). A count of records is no such test in at-least-once mode, where
// duplicates make it up before the last rows arrive.
func (c *consumer) waitForIDs(t *testing.T, want []string, stall, limit time.Duration) []consumed {
	t.Helper()
	missing := make(map[string]bool, len(want))
	for _, id := range want {
		missing[id] = true
	}
	seen := 0
	end := time.Now().Add(limit)
	for {
		for _, r := range c.r[seen:] {
			delete(missing, r.Headers["id"])
		}
		seen = len(c.r)
		if len(missing) == 0 || !time.Now().Before(end) {
			break
		}
		until := time.Now().Add(stall)
		if until.After(end) {
			until = end
		}
		ctx, cancel := context.WithDeadline(context.Background(), until)
		c.poll(ctx, seen+1)
		cancel()
		if len(c.r) == seen {
			break // nothing new for stall
		}
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
		// In commit order (not sorted as text, which put zombie-1000 before
		// zombie-370): the first ones say where the gap begins.
		t.Fatalf("%d of %d committed rows never arrived, the first in commit order: %v", len(missing), len(want), missing[:min(5, len(missing))])
	}
	if exact && dups > 0 {
		t.Fatalf("%d duplicate records", dups)
	}
	t.Logf("%d rows committed, %d records read, %d duplicates", len(want), len(got), dups)
}
