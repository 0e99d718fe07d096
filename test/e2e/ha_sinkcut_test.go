package e2e

import (
	"context"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-cdc/outbox-cdc/test/testenv"
)

// An active instance cut off from the broker while its database path is
// fine keeps the HA lock; without stepping down (ha.sink_unreachable_timeout)
// delivery stalls for the whole cut although the standby reaches the
// broker. Each replica reaches the broker through its own
// testenv.KafkaProxy, so one path can be cut alone.

// The tests' step-down timings: the active steps down after
// sinkCutTimeout without delivering, checked every haCutoffCheck; the
// Kafka produce timeout must not exceed it.
const (
	sinkCutTimeout = 2 * time.Second
	sinkCutProduce = time.Second
)

// sinkCutConfig is haCutoffConfig (no database proxy) with the replica's
// own broker path and the step-down timings.
func (b *backend) sinkCutConfig(t *testing.T, name string, path *testenv.KafkaProxy, delivery, cp string) string {
	t.Helper()
	text := readConfig(t, b.haCutoffConfig(t, name, []string{path.Addr()}, delivery, cp, nil))
	text = strings.Replace(text, "  session_timeout: ", "  sink_unreachable_timeout: "+sinkCutTimeout.String()+"\n  session_timeout: ", 1)
	text = strings.Replace(text, "  retry_backoff_min: ", "  produce_timeout: "+sinkCutProduce.String()+"\n  retry_backoff_min: ", 1)
	if !strings.Contains(text, "sink_unreachable_timeout") || !strings.Contains(text, "produce_timeout") {
		t.Fatal("haCutoffConfig changed its ha or sink section; adapt sinkCutConfig")
	}
	return writeConfig(t, text)
}

// arrivals records when each record becomes visible to a read_committed
// consumer, to measure how long delivery stalls.
type arrivals struct {
	mu sync.Mutex
	at []time.Time
}

func watchArrivals(t *testing.T, brokers []string, regex string) *arrivals {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeRegex(), kgo.ConsumeTopics(regex),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.MetadataMinAge(50*time.Millisecond), kgo.MetadataMaxAge(250*time.Millisecond),
		kgo.FetchMaxWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	a := &arrivals{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			fs := cl.PollFetches(ctx)
			now := time.Now()
			n := 0
			fs.EachRecord(func(*kgo.Record) { n++ })
			if n > 0 {
				a.mu.Lock()
				a.at = append(a.at, now)
				a.mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-done; cl.Close() })
	return a
}

// longestGap is the longest time without a new record between from and
// to (the edges count as arrivals: a stall still open at to counts).
func (a *arrivals) longestGap(from, to time.Time) time.Duration {
	a.mu.Lock()
	defer a.mu.Unlock()
	last, gap := from, time.Duration(0)
	for _, at := range a.at {
		if at.Before(from) {
			continue
		}
		if at.After(to) {
			break
		}
		gap = max(gap, at.Sub(last))
		last = at
	}
	return max(gap, to.Sub(last))
}

// TestHASinkCutStepsDown cuts the active instance's path to the broker
// for 30 s under writes, the standby's path staying up. The active must
// step down within ha.sink_unreachable_timeout + check_interval, the
// standby then streams; nothing is lost and, in exactly-once mode,
// nothing duplicated for read_committed readers; once the path heals, the
// old active rejoins as a standby.
func TestHASinkCutStepsDown(t *testing.T) {
	for _, mode := range []struct{ delivery, checkpoint string }{{"exactly-once", "kafka"}, {"at-least-once", "table"}} {
		t.Run(mode.delivery, func(t *testing.T) {
			forEachBackend(t, func(t *testing.T, b *backend) { testHASinkCut(t, b, mode.delivery, mode.checkpoint) })
		})
	}
}

const sinkCutFor = 30 * time.Second

func testHASinkCut(t *testing.T, b *backend, delivery, checkpoint string) {
	_, brokers := testenv.Kafka(t)
	name := connName(t, "e2e-sinkcut-"+b.kind)
	pathA, pathB := testenv.NewKafkaProxy(t, brokers[0]), testenv.NewKafkaProxy(t, brokers[0])
	active := testenv.Start(t, b.sinkCutConfig(t, name, pathA, delivery, checkpoint))
	standby := testenv.Launch(t, b.sinkCutConfig(t, name, pathB, delivery, checkpoint))
	standby.WaitStatus(200, "standby", 15*time.Second)
	arr := watchArrivals(t, brokers, `outbox\.event\..*`)
	w := startChaosWriter(t, b, "sinkcut", 2*time.Millisecond)
	time.Sleep(2 * time.Second) // the active streams a while before the cut

	cut := time.Now()
	pathA.Silence()
	var acquired, streams time.Duration
	for streams == 0 {
		if time.Since(cut) > sinkCutFor {
			t.Fatalf("the standby did not stream within the %s cut\nactive:\n%s\nstandby:\n%s", sinkCutFor, active.Log(), standby.Log())
		}
		if acquired == 0 && strings.Contains(standby.Log(), "lock acquired") {
			acquired = time.Since(cut)
		}
		if standby.Streaming() {
			streams = time.Since(cut)
		}
		select {
		case <-standby.Done():
			t.Fatalf("standby exited: %v\n%s", standby.Err(), standby.Log())
		case <-active.Done():
			t.Fatalf("the active exited instead of stepping down: %v\n%s", active.Err(), active.Log())
		default:
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !strings.Contains(active.Log(), "stepping down") {
		t.Fatalf("the standby streams but the active did not say it stepped down:\n%s", active.Log())
	}
	// Delivery resumes on the new active; measure the stall once it has.
	time.Sleep(3 * time.Second)
	stall := arr.longestGap(cut.Add(-time.Second), time.Now())
	bound := sinkCutTimeout + 2*haCutoffCheck
	t.Logf("%s %s: standby holds the lock %s after the cut, streams after %s; longest delivery stall %s (bound %s + start-up; %s without stepping down)",
		b.kind, delivery, acquired.Round(time.Millisecond), streams.Round(time.Millisecond), stall.Round(time.Millisecond), bound, sinkCutFor)
	if stall > bound+10*time.Second {
		t.Fatalf("delivery stalled %s, bound %s + start-up", stall, bound)
	}

	// The old active waits as a standby, still cut off, then heals.
	active.WaitStatus(200, "standby", 10*time.Second)
	time.Sleep(time.Until(cut.Add(sinkCutFor)))
	pathA.Heal()
	// It proves it reaches the broker for the hold, then competes for
	// the lock again, as a standby.
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(active.Log(), "competing for the lock") {
		if time.Now().After(deadline) {
			t.Fatalf("the old active did not rejoin after the heal:\n%s", active.Log())
		}
		time.Sleep(50 * time.Millisecond)
	}
	active.WaitStatus(200, "standby", 10*time.Second)
	if !standby.Streaming() {
		t.Fatalf("the new active stopped streaming when the old one rejoined:\n%s", standby.Log())
	}

	want := w.finish()
	cons := newConsumer(t, brokers, `outbox\.event\..*`)
	got := cons.waitFor(t, len(want), 60*time.Second)
	got = append(got, cons.quiet(t, time.Second)[len(got):]...)
	checkDelivery(t, got, want, 3, delivery == "exactly-once")
	for _, c := range []*testenv.Connector{active, standby} { // the standby first, or it takes over while stopping
		if err := c.Stop(15 * time.Second); err != nil {
			t.Fatalf("SIGTERM exit: %v", err)
		}
	}
}

// TestHASinkCutBothKeepsLock cuts both replicas' paths to the broker (an
// outage of the broker as both see it): nobody proves it reaches the
// broker, so the active keeps the lock (no ping-pong), and delivery
// resumes from it once the paths heal, with nothing lost.
func TestHASinkCutBothKeepsLock(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		const delivery, checkpoint = "exactly-once", "kafka"
		_, brokers := testenv.Kafka(t)
		name := connName(t, "e2e-sinkboth-"+b.kind)
		pathA, pathB := testenv.NewKafkaProxy(t, brokers[0]), testenv.NewKafkaProxy(t, brokers[0])
		active := testenv.Start(t, b.sinkCutConfig(t, name, pathA, delivery, checkpoint))
		standby := testenv.Launch(t, b.sinkCutConfig(t, name, pathB, delivery, checkpoint))
		standby.WaitStatus(200, "standby", 15*time.Second)
		w := startChaosWriter(t, b, "sinkboth", 2*time.Millisecond)
		time.Sleep(time.Second)

		pathA.Silence()
		pathB.Silence()
		cutFor := 4 * (sinkCutTimeout + 2*haCutoffCheck)
		deadline := time.Now().Add(cutFor)
		for time.Now().Before(deadline) {
			if strings.Contains(standby.Log(), "lock acquired") || strings.Contains(active.Log(), "stepping down") {
				t.Fatalf("the lock moved although no replica reaches the broker\nactive:\n%s\nstandby:\n%s", active.Log(), standby.Log())
			}
			time.Sleep(50 * time.Millisecond)
		}
		if !strings.Contains(active.Log(), "keeping the lock") {
			t.Fatalf("the active did not notice the stall:\n%s", active.Log())
		}
		pathA.Heal()
		pathB.Heal()

		want := w.finish()
		cons := newConsumer(t, brokers, `outbox\.event\..*`)
		got := cons.waitFor(t, len(want), 60*time.Second)
		got = append(got, cons.quiet(t, time.Second)[len(got):]...)
		checkDelivery(t, got, want, 3, true)
		if strings.Contains(standby.Log(), "lock acquired") {
			t.Fatalf("the standby took the lock:\n%s", standby.Log())
		}
		for _, c := range []*testenv.Connector{standby, active} { // the standby first, or it takes over while stopping
			if err := c.Stop(15 * time.Second); err != nil {
				t.Fatalf("SIGTERM exit: %v", err)
			}
		}
	})
}

// readConfig returns the text of a configuration file.
func readConfig(t *testing.T, path string) string {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(raw)
}
