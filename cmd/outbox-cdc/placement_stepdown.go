package main

import (
	"context"
	"time"

	"github.com/outbox-cdc/outbox-cdc/ha"
	"github.com/outbox-cdc/outbox-cdc/placement"
)

// With placement, a replica that cannot deliver gives its connectors up
// (the HA step-down of stepdown.go, spread over the group):
//
//   - a replica proves, for every connector it does not run, that it
//     reaches that connector's sink, in the connector's readiness table
//     (what a standby does without placement): the replica running the
//     connector steps down only on such a proof, so a sink that nobody
//     reaches still never moves a connector;
//   - a connector that stepped down here is marked unfit
//     (placement.UnfitSet): the replica rejoins the group and the
//     balancer gives it to a replica fit for it, which takes the lock the
//     step-down released;
//   - hysteresis: the mark is cleared once this replica's own probes for
//     the connector have succeeded without a failure for
//     ha.sink_unreachable_timeout (while it runs elsewhere, or, if the group
//     left it here, when its hold ends), and the replica rejoins again.

// idleProbe is the proving of one connector this replica does not run.
type idleProbe struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// startIdleProbe starts proving for name while it does not run here
// (placement only; nothing when its sink has nothing to reach).
func (s *supervisor) startIdleProbe(name string) {
	if s.unfit == nil || s.ctx.Err() != nil {
		return
	}
	s.mu.Lock()
	m, ok := s.conns[name]
	if !ok || s.idle[name] != nil {
		s.mu.Unlock()
		return
	}
	ctx, cancel := context.WithCancel(s.ctx)
	ip := &idleProbe{cancel: cancel, done: make(chan struct{})}
	s.idle[name] = ip
	s.mu.Unlock()
	go func() {
		defer close(ip.done)
		s.idleProve(ctx, m.cfg)
	}()
}

// stopIdleProbe stops proving for name (it starts here) and waits.
func (s *supervisor) stopIdleProbe(name string) {
	s.mu.Lock()
	ip := s.idle[name]
	delete(s.idle, name)
	s.mu.Unlock()
	if ip != nil {
		ip.cancel()
		<-ip.done
	}
}

// stopIdleProbes stops every idle probe (the process stops).
func (s *supervisor) stopIdleProbes() {
	for _, name := range s.order {
		s.stopIdleProbe(name)
	}
}

func (s *supervisor) idleProve(ctx context.Context, cfg Config) {
	probe := sinkProbe(cfg)
	if probe == nil || !cfg.HA.Enabled {
		return
	}
	log := s.log.With().Str("connector", cfg.Name).Str("component", "ha").Logger()
	dsn, err := cfg.sourceDSN()
	if err != nil {
		return
	}
	r, err := ha.NewReadiness(cfg.Source.Type, dsn, cfg.Name, replicaID, cfg.HA, s.log.With().Str("connector", cfg.Name).Logger())
	if err != nil {
		log.Warn().Err(err).Msg("cannot open the HA readiness table: the replica running this connector will not step down for this one")
		return
	}
	defer r.Close()
	p := startProver(ctx, cfg.HA, log, probe, r)
	defer p.end()
	hold := cfg.HA.SinkUnreachableTimeout
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(cfg.HA.CheckInterval):
		}
		if s.unfit.Has(cfg.Name) && p.provenFor() >= hold {
			s.fitAgain(cfg.Name)
		}
	}
}

// markUnfit gives name up to the placement group after it stepped down.
func (s *supervisor) markUnfit(name string) {
	if s.unfit != nil && s.unfit.Set(name, true) {
		s.log.Warn().Str("connector", name).Msg("stepped down: giving the connector up to another replica of the placement group until this replica reaches its sink again")
	}
}

// fitAgain clears name's mark after the hold (hysteresis).
func (s *supervisor) fitAgain(name string) {
	if s.unfit != nil && s.unfit.Set(name, false) {
		s.log.Info().Str("connector", name).
			Msg("reaches the connector's sink again for the hold: this replica may be given it again")
	}
}

// Unfit implements placement.Unfit.
func (s *supervisor) Unfit() []string {
	if s.unfit == nil {
		return nil
	}
	return s.unfit.Unfit()
}

// UnfitChanged implements placement.Unfit (nil without placement: never).
func (s *supervisor) UnfitChanged() <-chan struct{} {
	if s.unfit == nil {
		return nil
	}
	return s.unfit.UnfitChanged()
}

var _ placement.Unfit = (*supervisor)(nil)
