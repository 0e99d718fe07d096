package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
	"github.com/outbox-cdc/outbox-cdc/ha"
	"github.com/outbox-cdc/outbox-cdc/sink"
	"github.com/rs/zerolog"
)

// Stepping down when the sink cannot be reached from the active instance
// (ha.sink_unreachable_timeout). The lock guards the database side only:
// an active instance cut off from the broker keeps it and delivery stalls
// although a standby could deliver. So:
//
//   - every standby probes the sink every ha.check_interval (a request
//     that writes nothing and joins no transaction) and records each
//     success in the readiness table beside the lock (ha.ReadyTable);
//   - the active instance watches its sink writes (watchedSink): when it
//     has had something to deliver and delivered nothing for
//     sink_unreachable_timeout, and a standby proved it reaches the sink
//     with a probe that began after this instance's oldest undelivered
//     write (and within ha.Config.ProofFresh), it steps down: it fences its checkpoint
//     store, releases the lock, aborts the write in flight without
//     draining (exactly-once: the open Kafka transaction is abandoned and
//     the next instance's InitProducerId aborts it) and returns to
//     standby. With no fresh proof (the broker is down for everybody) it
//     keeps the lock: an outage of the sink never moves the connector;
//   - hysteresis: an instance that stepped down takes the lock again only
//     once its own probes have succeeded without a failure for
//     sink_unreachable_timeout, so a flapping path does not bounce the
//     connector back and forth.

// errSteppedDown is the run's error after it stepped down.
var errSteppedDown = errors.New("stepped down: this instance could not deliver to the sink for ha.sink_unreachable_timeout while a standby could")

// replicaID names this process in the readiness table.
var replicaID = func() string {
	host, _ := os.Hostname()
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return host + ":" + strconv.Itoa(os.Getpid()) + ":" + hex.EncodeToString(b)
}()

// validateStepDown checks ha.sink_unreachable_timeout against Kafka's
// bound on one produce request: a shorter timeout would step down while a
// write may still succeed. (The other brokers' sink.ack_timeout only says
// when the sink gives a silent connection up and sends again; stepping
// down earlier is what the timeout is for.)
func (c Config) validateStepDown() error {
	if !c.HA.Enabled || c.Sink.Type != "kafka" {
		return nil
	}
	if d := c.Sink.KafkaConfig.ProduceTimeout; c.HA.SinkUnreachableTimeout < d {
		return configErrorf("ha.sink_unreachable_timeout: %s is shorter than sink.produce_timeout (%s): an instance would step down while a write may still succeed; raise it to at least %s (or lower sink.produce_timeout)", c.HA.SinkUnreachableTimeout, d, d)
	}
	return nil
}

// sinkProbe returns what a standby runs to prove it reaches the sink, nil
// for a sink with nothing to reach (stdout): then nobody steps down.
func sinkProbe(cfg Config) func(ctx context.Context) error {
	timeout := probeTimeout(cfg.HA)
	switch cfg.Sink.Type {
	case "stdout":
		return nil
	case "kafka":
		return func(ctx context.Context) error { return sink.ReachKafka(ctx, cfg.Sink.KafkaConfig, timeout) }
	}
	kind, ok := sinkKinds[cfg.Sink.Type]
	if !ok || kind.check == nil {
		return nil
	}
	return func(ctx context.Context) error {
		for _, r := range kind.check(ctx, cfg) {
			if !r.OK {
				return fmt.Errorf("%s: %s", r.Name, r.Detail)
			}
		}
		return nil
	}
}

// probeTimeout bounds one probe: it must fit the proof's freshness.
func probeTimeout(c ha.Config) time.Duration { return max(c.CheckInterval, 2*time.Second) }

// prover runs a standby's probes and records them (ha.Readiness).
type prover struct {
	probe func(context.Context) error
	ready *ha.Readiness
	every time.Duration

	mu      sync.Mutex
	okSince time.Time // zero while the last probe failed
	stop    context.CancelFunc
	done    chan struct{}
}

// startProver probes every check_interval until stopped.
func (h *haState) startProver(ctx context.Context, probe func(context.Context) error, r *ha.Readiness) *prover {
	return startProver(ctx, h.cfg.HA, h.log, probe, r)
}

// startProver probes every cfg.CheckInterval until stopped, recording
// each result in r; log carries the connector and component.
func startProver(ctx context.Context, cfg ha.Config, log zerolog.Logger, probe func(context.Context) error, r *ha.Readiness) *prover {
	ctx, cancel := context.WithCancel(ctx)
	p := &prover{probe: probe, ready: r, every: cfg.CheckInterval, stop: cancel, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		failing := false
		for {
			began := time.Now()
			pctx, c := context.WithTimeout(ctx, probeTimeout(cfg))
			err := p.probe(pctx)
			c()
			if ctx.Err() != nil {
				return
			}
			p.mu.Lock()
			switch {
			case err != nil:
				p.okSince = time.Time{}
			case p.okSince.IsZero():
				p.okSince = time.Now()
			}
			p.mu.Unlock()
			if err != nil {
				if !failing {
					log.Warn().Err(err).Msg("standby: cannot reach the sink; not offering to take over from an active instance that cannot deliver")
				}
				failing = true
				_ = r.Withdraw(ctx)
			} else {
				if failing {
					log.Info().Msg("standby: reaches the sink again")
				}
				failing = false
				if err := r.Prove(ctx, began); err != nil && ctx.Err() == nil {
					log.Warn().Err(err).Str("table", ha.ReadyTable).Msg("standby: cannot record that it reaches the sink")
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(p.every):
			}
		}
	}()
	return p
}

// provenFor is how long the probes have succeeded without a failure.
func (p *prover) provenFor() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.okSince.IsZero() {
		return 0
	}
	return time.Since(p.okSince)
}

// end stops the probes and withdraws the proof: an active instance offers
// nothing.
func (p *prover) end() {
	p.stop()
	<-p.done
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = p.ready.Withdraw(ctx)
}

// holdAfterStepDown blocks, after this instance stepped down, until its
// own probes have succeeded for ha.sink_unreachable_timeout (hysteresis).
func (h *haState) holdAfterStepDown(ctx context.Context, p *prover) error {
	hold := h.cfg.HA.SinkUnreachableTimeout
	h.log.Info().Dur("hold", hold).Msg("stepped down earlier: taking the lock again only once this instance has reached the sink for the hold without a failure")
	for p.provenFor() < hold {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(h.cfg.HA.CheckInterval):
		}
	}
	h.log.Info().Msg("reaches the sink again: competing for the lock")
	return nil
}

// watchDelivery runs while active: it steps down when the sink has not
// taken anything it was given for sink_unreachable_timeout and a standby
// proved recently that it can reach it.
func (h *haState) watchDelivery(ctx context.Context, w *sinkWatch, r *ha.Readiness) {
	timeout := h.cfg.HA.SinkUnreachableTimeout
	t := time.NewTicker(h.cfg.HA.CheckInterval)
	defer t.Stop()
	logged := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		stalled := w.stalledFor()
		if stalled < timeout {
			logged = false
			continue
		}
		who, ok, err := r.OtherReady(ctx, stalled)
		if err != nil || !ok {
			if !logged {
				ev := h.log.Warn().Dur("undelivered_for", stalled.Round(time.Millisecond)).Dur("sink_unreachable_timeout", timeout)
				if err != nil {
					ev = ev.Err(err)
				}
				ev.Msg("the sink takes nothing, and no standby proved it can reach it: keeping the lock")
				logged = true
			}
			continue
		}
		h.log.Warn().Dur("undelivered_for", stalled.Round(time.Millisecond)).Str("standby", who).
			Msg("the sink takes nothing from this instance while a standby reaches it: stepping down (the write in flight is aborted, not drained)")
		h.stepDown()
		return
	}
}

// stepDown gives the connector up for a standby. The checkpoint store is
// fenced first; the lock is then released at once (the database path is
// fine), before the sink is closed, because closing a producer whose
// broker is silent may take its close timeout: a standby takes over
// within check_interval, and what the old producer still sends can only
// add duplicates (at-least-once) or is fenced by the transactional id
// (exactly-once).
func (h *haState) stepDown() {
	h.mu.Lock()
	h.steppedDown = true
	h.mu.Unlock()
	h.fenced.Store(true)
	h.releaseLock()
	h.abortWithoutDrain()
}

// abortWithoutDrain ends the active run at once, as a lost lock does:
// no checkpoint is saved any more (fenced), the run's context is
// cancelled, and the sink is closed, which abandons the write in flight
// (exactly-once: the open transaction, which the next instance's
// InitProducerId aborts; a commit that still reaches the broker first is
// consistent, as the next instance reads the progress only after it) and
// the lifecycle marks nothing more. Safe to call more than once.
func (h *haState) abortWithoutDrain() {
	h.loseOnce.Do(func() {
		h.fenced.Store(true)
		close(h.lostCh)
		h.active.Set(0)
		h.mu.Lock()
		h.lost = true
		abort, cancel := h.abort, h.runCancel
		h.abort = nil
		h.mu.Unlock()
		// Cancel first: closing a sink whose broker is silent can take its
		// close timeout, and the source must let go of the database (binlog
		// server id, replication slot) for the next active instance at once.
		if cancel != nil {
			cancel()
		}
		if abort != nil {
			abort(errSteppedDown)
		}
	})
}

// sinkWatch wraps the pipeline's sink and tracks whether it delivers:
// since when a write has been wanted without any succeeding.
type sinkWatch struct {
	mu sync.Mutex
	// wanting: since when the sink has been given records and returned
	// none of them delivered (zero: the last write succeeded, or none yet).
	wanting time.Time
}

func (w *sinkWatch) begin() {
	w.mu.Lock()
	if w.wanting.IsZero() {
		w.wanting = time.Now()
	}
	w.mu.Unlock()
}

func (w *sinkWatch) end(err error) {
	if err != nil {
		return // a failed write is still wanted: the pipeline retries it
	}
	w.mu.Lock()
	w.wanting = time.Time{}
	w.mu.Unlock()
}

// stalledFor is how long the oldest undelivered write has waited.
func (w *sinkWatch) stalledFor() time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.wanting.IsZero() {
		return 0
	}
	return time.Since(w.wanting)
}

// watch wraps s so that w sees its writes; an atomic sink stays atomic.
func (w *sinkWatch) watch(s outboxcdc.Sink) outboxcdc.Sink {
	if a, ok := s.(outboxcdc.AtomicSink); ok {
		return &watchedAtomicSink{watchedSink{a, w}, a}
	}
	return &watchedSink{s, w}
}

type watchedSink struct {
	outboxcdc.Sink
	w *sinkWatch
}

func (s *watchedSink) Write(ctx context.Context, records []outboxcdc.Record) error {
	s.w.begin()
	err := s.Sink.Write(ctx, records)
	s.w.end(err)
	return err
}

func (s *watchedSink) String() string { return fmt.Sprint(s.Sink) }

type watchedAtomicSink struct {
	watchedSink
	a outboxcdc.AtomicSink
}

func (s *watchedAtomicSink) Load(ctx context.Context) (outboxcdc.Position, error) {
	return s.a.Load(ctx)
}

func (s *watchedAtomicSink) WriteAtomic(ctx context.Context, records []outboxcdc.Record, end outboxcdc.Position) error {
	s.w.begin()
	err := s.a.WriteAtomic(ctx, records, end)
	s.w.end(err)
	return err
}
