package placement

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kfake"
)

// unfitConns is an in-process replica's Connectors: it records what runs
// and how often each connector was stopped, and reports its unfit set.
type unfitConns struct {
	*UnfitSet
	mu      sync.Mutex
	running map[string]bool
	stops   map[string]int
}

func newUnfitConns() *unfitConns {
	return &unfitConns{UnfitSet: NewUnfitSet(), running: map[string]bool{}, stops: map[string]int{}}
}

func (c *unfitConns) Start(n string) error {
	c.mu.Lock()
	c.running[n] = true
	c.mu.Unlock()
	return nil
}
func (c *unfitConns) Stop(n string) error {
	c.mu.Lock()
	delete(c.running, n)
	c.stops[n]++
	c.mu.Unlock()
	return nil
}
func (c *unfitConns) Abort(n string) error { return c.Stop(n) }

func (c *unfitConns) names() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for n := range c.running {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// TestUnfitConnectorsMoveToAFitReplica: two replicas share four
// connectors; the connectors one replica marks unfit (they stepped down:
// it cannot deliver for them) move to the other replica, the cut replica
// is given none of the others meanwhile and the other replica's own
// connectors are not stopped; once the marks are cleared (the hold passed)
// the group is balanced again.
func TestUnfitConnectorsMoveToAFitReplica(t *testing.T) {
	kf, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.GroupMinSessionTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kf.Close)
	names := []string{"a", "b", "c", "d"}
	cfg := DefaultConfig()
	cfg.Enabled, cfg.Deployment, cfg.Brokers = true, fmt.Sprintf("unfit-%d", time.Now().UnixNano()), kf.ListenAddrs()
	cfg.SessionTimeout, cfg.RebalanceTimeout = 2*time.Second, 5*time.Second
	ctx, cancel := context.WithCancel(context.Background())
	reps := []*unfitConns{newUnfitConns(), newUnfitConns()}
	var wg sync.WaitGroup
	for _, r := range reps {
		wg.Add(1)
		go func() { defer wg.Done(); _ = Run(ctx, cfg, names, r, zerolog.Nop()) }()
	}
	t.Cleanup(func() { cancel(); wg.Wait() })
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for !ok() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: replica 0 runs %v, replica 1 runs %v", what, reps[0].names(), reps[1].names())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	balanced := func() bool { return len(reps[0].names()) == 2 && len(reps[1].names()) == 2 }
	waitFor("balanced at start", balanced)

	given := reps[0].names()
	kept := reps[1].names()
	for _, n := range given {
		reps[0].Set(n, true)
	}
	waitFor("replica 1 runs every connector", func() bool { return len(reps[1].names()) == 4 && len(reps[0].names()) == 0 })
	time.Sleep(2 * time.Second) // no connector comes back while the marks hold
	if got := reps[0].names(); len(got) != 0 {
		t.Fatalf("the replica that cannot deliver was given %v", got)
	}
	reps[1].mu.Lock()
	for _, n := range kept {
		if reps[1].stops[n] != 0 {
			t.Errorf("replica 1's own connector %s was stopped %d times", n, reps[1].stops[n])
		}
	}
	reps[1].mu.Unlock()

	for _, n := range given {
		reps[0].Set(n, false)
	}
	waitFor("balanced again once fit", balanced)
}
