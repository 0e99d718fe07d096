package e2e

import (
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/outbox-cdc/outbox-cdc/test/testenv"
)

// A frozen active instance must not write once another has taken over
// (issue 23, part 3): the HA lock's lease expires on the monotonic clock
// while the process is stopped, so on SIGCONT every sink write is refused
// before it is issued and the connector aborts without draining what it
// had read ahead.

// staleWrites counts the records written, in their partition, after a
// newer producer had written there: records of an owner that had been
// superseded (a zombie). Producers are told apart by Kafka producer id and
// epoch; each connector run (and each producer the sink replaces after a
// failure) has its own. It also returns how many records the first
// producer seen (the first owner) and the others wrote.
func staleWrites(got []consumed) (stale, first, others int) {
	type part struct {
		order  map[producerOf]int // producer -> rank of its first record
		latest int                // rank of the newest producer so far
	}
	parts := map[string]*part{}
	byOffset := append([]consumed(nil), got...)
	sort.SliceStable(byOffset, func(i, j int) bool { return byOffset[i].Offset < byOffset[j].Offset })
	for _, r := range byOffset {
		if len(got) > 0 && r.Producer == got[0].Producer {
			first++
		} else {
			others++
		}
		key := fmt.Sprintf("%s/%d", r.Topic, r.Partition)
		p := parts[key]
		if p == nil {
			p = &part{order: map[producerOf]int{}}
			parts[key] = p
		}
		rank, seen := p.order[r.Producer]
		if !seen {
			rank = len(p.order)
			p.order[r.Producer] = rank
			p.latest = rank
			continue
		}
		if rank < p.latest {
			stale++
		}
	}
	return stale, first, others
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
	got := cons.waitForIDs(t, want, 20*time.Second, 3*time.Minute)
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
