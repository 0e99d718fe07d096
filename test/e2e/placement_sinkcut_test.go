package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/outbox-cdc/outbox-cdc/test/testenv"
)

// TestPlacementSinkCutGivesConnectorsUp: two replicas with placement share
// four connectors (two on MariaDB, two on Postgres), each replica reaching
// the sink broker through its own testenv.KafkaProxy (the placement group
// is reached directly). Under writes, replica 0's path to the broker is
// cut (silent) for 30 s. Its connectors must step down after
// ha.sink_unreachable_timeout, because replica 1 proves it reaches the
// broker, and move to replica 1, which streams them within the step-down
// bound plus a rebalance and start-up; replica 1's own connectors keep
// streaming. Nothing committed is lost, and once the path heals replica 0
// is given its share back (after the hold, so the connectors do not
// bounce back while the path is still cut). Without giving connectors up,
// delivery of replica 0's connectors stalls for the whole cut.
func TestPlacementSinkCutGivesConnectorsUp(t *testing.T) {
	var paths []*testenv.KafkaProxy
	sinkExtra := "      produce_timeout: " + sinkCutProduce.String() + "\n"
	haExtra := "      sink_unreachable_timeout: " + sinkCutTimeout.String() + "\n"
	pp := startPlacedPair(t, "plc", func(brokers []string, sfx string, placed []placedConnector, i int) string {
		paths = append(paths, testenv.NewKafkaProxy(t, brokers[0]))
		return placementConfig(t, sfx, brokers[0], paths[i].Addr(), placed, sinkExtra, haExtra)
	})
	brokers, sfx, placed, procs, w, balanced := pp.brokers, pp.sfx, pp.placed, pp.procs, pp.w, pp.balanced

	writers := make([]*chaosWriter, len(placed))
	arr := make([]*arrivals, len(placed))
	for i, c := range placed {
		writers[i] = startChaosWriter(t, c.b, fmt.Sprintf("plc%d", i), 2*time.Millisecond)
		arr[i] = watchArrivals(t, brokers, fmt.Sprintf(`pl%s\.%d\..*`, sfx, i))
	}
	time.Sleep(2 * time.Second) // every connector streams a while

	moved := w.heldBy(0)
	cut := time.Now()
	paths[0].Silence()
	testenv.Eventually(t, sinkCutFor, "replica 1 streams every connector during the cut", func() bool {
		per, total := w.activeCounts()
		return total == len(placed) && per[1] == len(placed)
	})
	took := time.Since(cut)
	if !strings.Contains(procs[0].Log(), "stepping down") {
		t.Fatalf("replica 1 streams replica 0's connectors, but replica 0 did not say it stepped down:\n%s", procs[0].Log())
	}
	time.Sleep(3 * time.Second) // delivery resumes on replica 1; measure the stall once it has
	bound := sinkCutTimeout + 2*haCutoffCheck
	for i, c := range placed {
		stall := arr[i].longestGap(cut.Add(-time.Second), time.Now())
		t.Logf("%s (%s, on replica 0 before the cut: %v): longest delivery stall %s", c.name, c.b.kind, contains(moved, c.name), stall.Round(time.Millisecond))
		if stall > bound+10*time.Second {
			t.Errorf("%s: delivery stalled %s, bound %s + rebalance and start-up", c.name, stall, bound)
		}
	}
	t.Logf("replica 0's connectors %v stream on replica 1 %s after the cut (step-down bound %s)", moved, took.Round(time.Millisecond), bound)

	// Replica 0 stays without connectors while cut off (hysteresis), then
	// heals and is given its share back.
	time.Sleep(time.Until(cut.Add(sinkCutFor)))
	if per, _ := w.activeCounts(); per[0] != 0 {
		t.Errorf("replica 0 was given %d connectors back while its path was still cut", per[0])
	}
	paths[0].Heal()
	healed := time.Now()
	testenv.Eventually(t, 60*time.Second, "replica 0 gets its share back after the heal", balanced)
	t.Logf("placement back to 2/2 %s after the heal (hold %s)", time.Since(healed).Round(time.Millisecond), sinkCutTimeout)
	time.Sleep(time.Second)

	for i, c := range placed {
		want := writers[i].finish()
		cons := newConsumer(t, brokers, fmt.Sprintf(`pl%s\.%d\..*`, sfx, i))
		got := cons.waitFor(t, len(want), 60*time.Second)
		got = append(got, cons.quiet(t, time.Second)[len(got):]...)
		t.Logf("%s:", c.name)
		checkDelivery(t, got, want, 3, false)
	}
	w.stop()
	w.report()
	for _, p := range procs {
		if err := p.Stop(15 * time.Second); err != nil {
			t.Errorf("SIGTERM exit: %v", err)
		}
	}
}

func contains(names []string, name string) bool {
	for _, n := range names {
		if n == name {
			return true
		}
	}
	return false
}
