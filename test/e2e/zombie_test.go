package e2e

import (
	"fmt"
	"testing"
	"time"

	"github.com/outbox-cdc/outbox-cdc/test/testenv"
)

// A frozen active instance must not write once another has taken over
// (issue 23, part 3): the HA lock's lease expires on the monotonic clock
// while the process is stopped, so on SIGCONT every sink write is refused
// before it is issued and the connector aborts without draining what it
// had read ahead.

// staleWrites counts the records the old owner (the producer of the first
// record read) wrote after the new owner's first record in the same
// partition: records a zombie wrote after the takeover. It also returns
// how many records the old and the other producers wrote.
func staleWrites(got []consumed) (stale, old, other int) {
	if len(got) == 0 {
		return 0, 0, 0
	}
	owner := got[0].Producer
	firstNew := map[string]int64{}
	for _, r := range got {
		if r.Producer == owner {
			continue
		}
		tp := fmt.Sprintf("%s/%d", r.Topic, r.Partition)
		if o, ok := firstNew[tp]; !ok || r.Offset < o {
			firstNew[tp] = r.Offset
		}
	}
	for _, r := range got {
		if r.Producer != owner {
			other++
			continue
		}
		old++
		tp := fmt.Sprintf("%s/%d", r.Topic, r.Partition)
		if o, ok := firstNew[tp]; ok && r.Offset > o {
			stale++
		}
	}
	return stale, old, other
}

// TestHAFrozenActiveWritesNothingAfterTakeover: two instances, rows
// committed all along; the active one is frozen (SIGSTOP) mid-burst, the
// standby takes over and writes, then the frozen one is resumed. No record
// of the old owner may follow one of the new owner in any partition, and
// nothing committed is lost. Before the lease fence the resumed instance
// drained what it had read ahead into Kafka (at-least-once: tens of
// stale records per run).
func TestHAFrozenActiveWritesNothingAfterTakeover(t *testing.T) {
	for _, mode := range []struct{ delivery, checkpoint string }{{"at-least-once", "table"}, {"exactly-once", "kafka"}} {
		t.Run(mode.delivery, func(t *testing.T) {
			forEachBackend(t, func(t *testing.T, b *backend) { testFrozenActive(t, b, mode.delivery, mode.checkpoint) })
		})
	}
}

func testFrozenActive(t *testing.T, b *backend, delivery, checkpoint string) {
	_, brokers := testenv.Kafka(t)
	name := connName(t, "e2e-zombie-"+b.kind)
	active := testenv.Start(t, b.haCutoffConfig(t, name, brokers, delivery, checkpoint, nil))
	standby := testenv.Launch(t, b.haCutoffConfig(t, name, brokers, delivery, checkpoint, nil))
	standby.WaitStatus(200, "standby", 15*time.Second)
	cons := newConsumer(t, brokers, `outbox\.event\..*`)
	w := startChaosWriter(t, b, "zombie", 0) // a burst: the freeze catches rows read ahead
	cons.waitFor(t, 50, 30*time.Second)      // the active one streams

	active.Pause()
	frozen := time.Now()
	testenv.Eventually(t, haCutoffSessionTimeout+haCutoffCheck+30*time.Second, "the standby takes over and writes", func() bool {
		got := cons.quiet(t, 50*time.Millisecond)
		_, _, other := staleWrites(got)
		return standby.Streaming() && other > 0
	})
	took := time.Since(frozen)
	time.Sleep(500 * time.Millisecond) // the new owner writes a while before the zombie wakes
	active.Resume()
	code := active.WaitExit(30 * time.Second)
	if code == 0 {
		t.Fatalf("the resumed instance exited 0:\n%s", active.Log())
	}
	time.Sleep(time.Second)
	want := w.finish()
	got := cons.waitFor(t, len(want), 60*time.Second)
	got = append(got, cons.quiet(t, time.Second)[len(got):]...)
	stale, old, other := staleWrites(got)
	t.Logf("%s %s: takeover %s after the freeze; %d records by the old owner, %d by the new one, %d by the old owner after the takeover",
		b.kind, delivery, took.Round(time.Millisecond), old, other, stale)
	if stale > 0 {
		t.Fatalf("the resumed instance wrote %d records after the takeover (a zombie write)", stale)
	}
	checkDelivery(t, got, want, 3, delivery == "exactly-once")
	if err := standby.Stop(15 * time.Second); err != nil {
		t.Fatalf("SIGTERM exit: %v", err)
	}
}
