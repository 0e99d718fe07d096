package e2e

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/outbox-cdc/outbox-cdc/test/testenv"
)

// placedPair is two replicas with placement sharing four connectors (even:
// MariaDB, odd: Postgres), watched, balanced 2/2 once started.
type placedPair struct {
	brokers  []string
	sfx      string
	placed   []placedConnector
	procs    []*testenv.Connector
	w        *placementWatch
	balanced func() bool
}

// startPlacedPair starts the pair; config returns replica i's
// configuration file. Connector names are <prefix>-<sfx>-<i>.
func startPlacedPair(t *testing.T, prefix string, config func(brokers []string, sfx string, placed []placedConnector, i int) string) *placedPair {
	t.Helper()
	_, brokers := testenv.Kafka(t, kfake.GroupMinSessionTimeout(time.Second))
	sfx := fmt.Sprintf("%06d", rand.IntN(1000000))
	placed := make([]placedConnector, 4)
	for i := range placed {
		placed[i] = newPlacedConnector(t, sfx, i, fmt.Sprintf("%s-%s-%d", prefix, sfx, i))
	}
	procs := make([]*testenv.Connector, 2)
	for i := range procs {
		procs[i] = testenv.Start(t, config(brokers, sfx, placed, i))
	}
	w := startPlacementWatch(t, placed[0].b.db, placed[1].b.db, func() []*testenv.Connector { return procs }, placed)
	balanced := func() bool {
		per, total := w.activeCounts()
		return total == len(placed) && per[0] == 2 && per[1] == 2
	}
	testenv.Eventually(t, 60*time.Second, "placement balanced 2/2 at start", balanced)
	return &placedPair{brokers, sfx, placed, procs, w, balanced}
}

// TestPlacementFrozenOwnerWritesNothingAfterTakeover: two replicas with
// placement share four connectors (two on MariaDB, two on Postgres), rows
// committed without pause into every outbox all along. Four times, the
// replica that owns connector k (k = 0..3, MariaDB and Postgres in turn)
// is frozen (SIGSTOP) mid-burst; once the group has given the connector to
// the other replica and that one has written to its topic, the frozen one
// is resumed. The resumed replica must abort what it owned
// without writing anything more (a lost assignment is a lost lock: no
// record of a superseded Kafka producer after a newer one in any
// partition), get its share back, and nothing committed may be lost.
// Before the lease and the lost-assignment abort, the resumed replica
// drained what it had read ahead into the topic after the takeover.
func TestPlacementFrozenOwnerWritesNothingAfterTakeover(t *testing.T) {
	pp := startPlacedPair(t, "plz", func(brokers []string, sfx string, placed []placedConnector, _ int) string {
		return placementConfig(t, sfx, brokers[0], brokers[0], placed, "", "")
	})
	brokers, sfx, placed, procs, w, balanced := pp.brokers, pp.sfx, pp.placed, pp.procs, pp.w, pp.balanced
	writers := make([]*chaosWriter, len(placed))
	cons := make([]*consumer, len(placed))
	for i, c := range placed {
		writers[i] = startChaosWriter(t, c.b, fmt.Sprintf("plz%d", i), 0) // a burst all along
		cons[i] = newConsumer(t, brokers, fmt.Sprintf(`pl%s\.%d\..*`, sfx, i))
	}
	time.Sleep(2 * time.Second) // both stream a while

	for i, c := range placed {
		owners := w.activeOn(c.name)
		if len(owners) != 1 {
			t.Errorf("%s active on %v before the freeze, want one replica", c.name, owners)
			break
		}
		owner := owners[0]
		frozen, other := procs[owner], 1-owner
		// The producers seen so far; a record of any other one is the new
		// owner's (the frozen replica cannot start a producer).
		seen := map[producerOf]bool{}
		for _, r := range cons[i].quiet(t, 200*time.Millisecond) {
			seen[r.Producer] = true
		}
		frozenAt := time.Now()
		frozen.Pause()
		w.setFrozen(owner, true)
		testenv.Eventually(t, 60*time.Second, "the other replica streams "+c.name+" and writes to its topic", func() bool {
			if on := w.activeOn(c.name); len(on) != 1 || on[0] != other {
				return false
			}
			for _, r := range cons[i].quiet(t, 50*time.Millisecond) {
				if !seen[r.Producer] {
					return true
				}
			}
			return false
		})
		t.Logf("%s (%s): the other replica writes %s after the freeze", c.name, c.b.kind, time.Since(frozenAt).Round(time.Millisecond))
		time.Sleep(500 * time.Millisecond) // the new owner writes a while before the zombie wakes
		frozen.Resume()
		w.setFrozen(owner, false)
		deadline := time.Now().Add(30 * time.Second)
		for !balanced() && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
		if !balanced() {
			per, total := w.activeCounts()
			t.Errorf("after resuming the owner of %s: placement %v (%d active), want 2/2", c.name, per, total)
			break
		}
		if frozen.Exited() {
			t.Fatalf("the resumed replica exited: %v\n%s", frozen.Err(), frozen.Log())
		}
		time.Sleep(time.Second)
	}

	failed := t.Failed()
	for i, c := range placed {
		want := writers[i].finish()
		got := cons[i].waitFor(t, len(want), 60*time.Second)
		got = append(got, cons[i].quiet(t, time.Second)[len(got):]...)
		stale, _, _ := staleWrites(got)
		delivered := map[string]bool{}
		for _, r := range got {
			delivered[r.Headers["id"]] = true
		}
		lost := 0
		for _, id := range want {
			if !delivered[id] {
				lost++
			}
		}
		t.Logf("%s (%s): %d rows committed, %d records read, %d lost, %d written by a superseded owner after a newer one (zombie writes)",
			c.name, c.b.kind, len(want), len(got), lost, stale)
		if stale > 0 {
			t.Errorf("%s: %d records written by an owner after a newer owner had written to the partition", c.name, stale)
		}
		if lost > 0 {
			t.Errorf("%s: %d of %d committed rows never arrived", c.name, lost, len(want))
			continue
		}
		checkDelivery(t, got, want, 3, false)
	}
	w.stop()
	if !failed {
		w.report()
	}
	for _, p := range procs {
		if err := p.Stop(15 * time.Second); err != nil {
			t.Errorf("SIGTERM exit: %v", err)
		}
	}
}
