package main

import (
	"errors"
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/outbox-cdc/outbox-cdc/checkpoint"
	"github.com/outbox-cdc/outbox-cdc/ha"
)

type readyNow struct{}

func (readyNow) Ready() error { return nil }

// TestActiveJudgesTheLeaseAtRequestTime: an active connector whose lease
// has run out (a process resumed after a freeze, before its lock check or
// the lease's timer ran) is neither active nor ready, its sink writes and
// checkpoint saves are refused, although nothing has marked the lock lost.
func TestActiveJudgesTheLeaseAtRequestTime(t *testing.T) {
	cfg := Config{Name: "lease"}
	cfg.HA = ha.DefaultConfig()
	cfg.HA.Enabled = true
	h := newHAState(cfg, zerolog.Nop(), prometheus.NewRegistry())
	h.standby = false
	h.ready = readyNow{}
	h.lease.Store(&ha.Lease{}) // expired
	s := &supervisor{conns: map[string]*managed{"lease": {state: stateStarting, role: h}}, order: []string{"lease"}, changed: make(chan struct{})}
	st := s.status()[0]
	if st.Active || st.Ready || st.State != stateStopping {
		t.Fatalf("expired lease: %+v, want stopping, not active, not ready", st)
	}
	if err := h.Ready(); err == nil {
		t.Fatal("/readyz ready with an expired lease")
	}
	if err := h.leaseFence(); err == nil {
		t.Fatal("the sink's fence let a request through with an expired lease")
	}
	if err := h.writeFence(); err == nil {
		t.Fatal("the pipeline's fence let a write through with an expired lease")
	}
	if !h.fenced.Load() || h.err() == nil {
		t.Fatal("a refused write did not mark the lock lost")
	}
	if err := (&fencedCheckpoint{cp: nil, h: h}).Save(t.Context(), "x"); err == nil {
		t.Fatal("a checkpoint save went through with an expired lease")
	}
}

// TestClaimedCheckpointIsALostLock: a save refused because another
// instance claimed the checkpoint, as the pipeline wraps it, counts as a
// lost lock with HA (the connector returns to standby), and the connector
// that got it reports the lock lost rather than halting.
func TestClaimedCheckpointIsALostLock(t *testing.T) {
	cfg := Config{Name: "claimed"}
	cfg.HA = ha.DefaultConfig()
	cfg.HA.Enabled = true
	err := fmt.Errorf("save checkpoint x: %w", fmt.Errorf("%w: owner epoch 3, ours 2", checkpoint.ErrFenced))
	if !claimedElsewhere(cfg, err) {
		t.Fatalf("%v not taken for a checkpoint claimed elsewhere", err)
	}
	if claimedElsewhere(cfg, errors.New("broker exploded")) {
		t.Fatal("an unrelated error taken for a claim")
	}
	off := cfg
	off.HA.Enabled = false
	if claimedElsewhere(off, err) {
		t.Fatal("without HA a refused save is a failure, not a lost lock")
	}
	h := newHAState(cfg, zerolog.Nop(), prometheus.NewRegistry())
	h.lease.Store(&ha.Lease{})
	h.loseLock(err.Error())
	if h.err() == nil {
		t.Fatal("the claim did not mark the lock lost")
	}
}
