package outboxcdc

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// CheckpointObserver hears about every durable checkpoint.
type CheckpointObserver interface {
	// Checkpointed is called from the pipeline's saver goroutine after end
	// was saved and the source acked, with the message ids of the records
	// delivered since the previous call, in order. It must not block for
	// long: the next save waits for it.
	Checkpointed(ctx context.Context, end Position, messageIDs []string)
}

// Observe registers an observer (for outbox lifecycle: mark rows sent,
// clean up). Call before Run.
func (p *Pipeline) Observe(o CheckpointObserver) { p.observer = o }

// saver saves the newest acknowledged position in its own goroutine.
type saver struct {
	p       *Pipeline
	ctx     context.Context
	mu      sync.Mutex
	pending Position
	commit  time.Time
	idle    bool // pending ends with a "nothing pending" marker
	ids     []string
	err     error
	wake    chan struct{}
	fail    chan struct{} // closed when a save fails
	closing chan struct{}
	done    chan struct{}
	closed  bool
	lastLog time.Time
}

func (p *Pipeline) startSaver(ctx context.Context) *saver {
	sv := &saver{p: p, ctx: ctx, wake: make(chan struct{}, 1), fail: make(chan struct{}), closing: make(chan struct{}), done: make(chan struct{}), lastLog: time.Now()}
	go sv.run()
	return sv
}

// put records that everything up to end is acknowledged. A zero end (a
// batch inside an open transaction) only adds ids for the next save. idle:
// end is a source's "nothing pending" marker.
func (sv *saver) put(end Position, commit time.Time, idle bool, ids []string) {
	sv.mu.Lock()
	sv.p.lag.delivered()
	sv.ids = append(sv.ids, ids...)
	if end.IsZero() {
		sv.mu.Unlock()
		return
	}
	sv.pending = end
	if !commit.IsZero() {
		sv.commit = commit
	}
	sv.idle = idle
	sv.mu.Unlock()
	select {
	case sv.wake <- struct{}{}:
	default:
	}
}

func (sv *saver) failed() error {
	sv.mu.Lock()
	defer sv.mu.Unlock()
	return sv.err
}

// close saves what is pending, stops the goroutine and returns the first
// save error.
func (sv *saver) close() error {
	sv.mu.Lock()
	if !sv.closed {
		sv.closed = true
		close(sv.closing)
		close(sv.wake)
	}
	sv.mu.Unlock()
	<-sv.done
	return sv.failed()
}

func (sv *saver) run() {
	defer close(sv.done)
	interval := sv.p.cfg.CheckpointInterval
	if sv.p.atomic != nil && sv.p.witness == nil {
		interval = 0 // the position was stored with the records; only acks remain
	}
	for range sv.wake {
		if !sv.saveOnce() {
			for range sv.wake { // drain until close
			}
			return
		}
		// Pace the saves: what is acknowledged in the meantime is saved in
		// one go, instead of one fsync per small batch. A stop saves at once.
		if interval > 0 {
			t := time.NewTimer(interval)
			select {
			case <-t.C:
			case <-sv.closing:
				t.Stop()
			}
		}
	}
	sv.saveOnce() // whatever close left pending
}

// saveOnce saves the pending position, if any; false after a failure.
func (sv *saver) saveOnce() bool {
	sv.mu.Lock()
	end, commit, idle, ids := sv.pending, sv.commit, sv.idle, sv.ids
	if end.IsZero() {
		sv.mu.Unlock()
		return true
	}
	sv.pending, sv.ids = "", nil
	sv.p.lag.saving()
	sv.mu.Unlock()
	p := sv.p
	if err := p.checkpoint(sv.ctx, end); err != nil {
		sv.mu.Lock()
		sv.err = err
		sv.mu.Unlock()
		close(sv.fail)
		return false
	}
	p.lag.saved(commit, idle)
	p.src.Ack(end)
	if p.observer != nil {
		p.observer.Checkpointed(sv.ctx, end, ids)
	}
	if time.Since(sv.lastLog) >= p.cfg.LogInterval {
		sv.lastLog = time.Now()
		p.log.Info().Str("position", string(end)).Msg("checkpoint")
	}
	return true
}

// checkpoint saves end (unless the atomic sink stored it with the records).
func (p *Pipeline) checkpoint(ctx context.Context, end Position) error {
	switch {
	case p.atomic == nil:
		if err := p.cp.Save(ctx, end); err != nil {
			return fmt.Errorf("save checkpoint %s: %w; stopping before acknowledging anything further (the records written since the last checkpoint will be sent again after a restart)", end, err)
		}
	case p.witness != nil:
		p.saveWitness(ctx, end)
	}
	p.saved.Store(&end)
	p.metrics.checkpoints.Inc()
	p.metrics.checkpointTime.SetToCurrentTime()
	return nil
}
