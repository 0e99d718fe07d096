package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
	"github.com/outbox-cdc/outbox-cdc/checkpoint"
	"github.com/outbox-cdc/outbox-cdc/ha"
	"github.com/outbox-cdc/outbox-cdc/sink"
)

// Delivery modes (the top-level delivery key).
//
//   - at-least-once (default): the idempotent producer writes each batch,
//     then the position is saved to checkpoint.type file or table. After a
//     crash the last batch may be sent again.
//   - exactly-once: each batch and its position go into one Kafka
//     transaction (sink.Transactional); the position lives in
//     sink.progress_topic. The checkpoint store (checkpoint.type file, the
//     default, or table; kafka means file) holds a witness of it: a copy
//     written after the commits that is never read to resume, only to
//     notice at start that the progress record is missing although the
//     connector ran before (see outboxcdc.Pipeline.Witness). Consumers
//     must read with isolation.level=read_committed.
const (
	deliveryAtLeastOnce = "at-least-once"
	deliveryExactlyOnce = "exactly-once"
)

// validateDelivery checks the keys that depend on the delivery mode, the
// checkpoint store and HA.
func (c Config) validateDelivery() error {
	switch c.Delivery {
	case deliveryAtLeastOnce:
		if c.Checkpoint.Type == "kafka" {
			return configErrorf("checkpoint.type: kafka stores the position in a Kafka transaction with the records and needs delivery: exactly-once (use file or table with at-least-once)")
		}
	case deliveryExactlyOnce:
		if c.Sink.Type != "kafka" {
			return configErrorf("delivery: exactly-once needs sink.type kafka, not %q", c.Sink.Type)
		}
		if err := c.Sink.TxnConfig.Validate(); err != nil {
			return sectionError("sink", err)
		}
	default:
		return configErrorf("delivery: %q is not at-least-once or exactly-once", c.Delivery)
	}
	switch c.Checkpoint.Type {
	case "table":
		if err := c.Checkpoint.TableConfig.Validate(); err != nil {
			return sectionError("checkpoint", err)
		}
	case "kafka":
		if err := c.Checkpoint.FileConfig.Validate(); err != nil { // the witness file
			return sectionError("checkpoint", err)
		}
	}
	if c.HA.Enabled {
		if err := c.HA.Validate(); err != nil {
			return sectionError("ha", err)
		}
	}
	return nil
}

// newKafkaSink returns the Kafka sink of the delivery mode.
func newKafkaSink(cfg Config, kind string, log zerolog.Logger, reg prometheus.Registerer) (outboxcdc.Sink, error) {
	if cfg.Delivery != deliveryExactlyOnce {
		return sink.NewKafka(cfg.Sink.KafkaConfig, log, reg)
	}
	t, err := sink.NewTransactional(cfg.Sink.KafkaConfig, cfg.Sink.TxnConfig, cfg.Name, kind, log, reg)
	if err != nil {
		return nil, err
	}
	log.Info().Str("transactional_id", t.TransactionalID()).Str("progress_topic", cfg.Sink.ProgressTopic).
		Msg("exactly-once delivery: every batch and its position commit in one Kafka transaction; consumers must read with isolation.level=read_committed")
	return t, nil
}

// newCheckpoint returns the checkpoint store (nil in exactly-once mode,
// where the sink stores the position), the witness store (exactly-once
// mode only) and a function that closes them.
func newCheckpoint(cfg Config, kind string, log zerolog.Logger) (cp, witness outboxcdc.Checkpointer, closeFn func(), err error) {
	cp, witness, _, closeFn, err = openCheckpoint(cfg, kind, log)
	return cp, witness, closeFn, err
}

// openCheckpoint is newCheckpoint that also returns the table store when
// checkpoint.type is table (for HA fencing), else nil.
func openCheckpoint(cfg Config, kind string, log zerolog.Logger) (cp, witness outboxcdc.Checkpointer, table *checkpoint.Table, closeFn func(), err error) {
	store, table, closeFn, err := openStore(cfg, kind, log)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	if cfg.Delivery == deliveryExactlyOnce {
		return nil, store, table, closeFn, nil
	}
	return store, nil, table, closeFn, nil
}

// openStore opens the file or table store of checkpoint.type (kafka: the
// file, which holds the witness in exactly-once mode), checking the
// position kind; table is the table store, else nil.
func openStore(cfg Config, kind string, log zerolog.Logger) (store outboxcdc.Checkpointer, table *checkpoint.Table, closeFn func(), err error) {
	nop := func() {}
	if cfg.Checkpoint.Type == "table" {
		dsn, err := cfg.sourceDSN()
		if err != nil {
			return nil, nil, nil, err
		}
		t, err := checkpoint.NewTable(cfg.Source.Type, dsn, cfg.Checkpoint.TableConfig, cfg.Name, log)
		if err != nil {
			return nil, nil, nil, sectionError("checkpoint", err)
		}
		return checkpoint.Expect(kind, t), t, func() { t.Close() }, nil
	}
	if cfg.HA.Enabled {
		log.Warn().Str("path", cfg.Checkpoint.Path).Msg("ha.enabled with a file checkpoint: every instance must see the same file (shared volume), or a standby resumes from a stale position (in exactly-once mode: misses the evidence that a progress record went missing); prefer checkpoint.type table")
	}
	file, err := checkpoint.NewFile(cfg.Checkpoint.FileConfig, log)
	if err != nil {
		return nil, nil, nil, err
	}
	return checkpoint.Expect(kind, file), nil, nop, nil
}

// haState is the instance's role. It serves /readyz: while standby (or
// before the pipeline is built) it says why it is not ready; once active
// it delegates to the pipeline.
//
// While active, every sink write is fenced by the lock's lease (ha.Lease,
// checked at the time of the write on the monotonic clock): a process
// resumed after a freeze longer than the lease finds it expired before it
// writes anything, even before its lock check has run.
//
// Lock loss (the check failed, the lease expired, or the checkpoint table
// was claimed by another instance) aborts the connector, and nothing is
// drained: the pipeline issues no further write (outboxcdc.Pipeline.Abort,
// what was read ahead is dropped), the checkpoint store refuses every
// further save (fence), the sink is closed, which cancels the write in
// flight (at-least-once: the Write returns; exactly-once: the open Kafka
// transaction is abandoned, and the next instance's InitProducerId aborts
// it), the outbox lifecycle stops without marking what is queued, and the
// pipeline is cancelled. runConnector then
// returns an error, so the process exits 1 and its supervisor restarts it
// as a standby. A fresh process resets every connection and producer,
// which is simpler and safer than returning to standby in-process.
type haState struct {
	cfg    Config
	log    zerolog.Logger
	active prometheus.Gauge
	// lockLog is the logger as given, for ha.New, which adds component
	// ha itself (log has it already).
	lockLog zerolog.Logger

	// fenced is set the moment the lock is found lost, before anything
	// else happens: from then on no checkpoint is saved. lostCh is closed
	// right after.
	fenced   atomic.Bool
	lostCh   chan struct{}
	loseOnce sync.Once
	// lease is the lock's, set once the lock is held (nil: HA off, or
	// standby). Written once before the pipeline exists.
	lease atomic.Pointer[ha.Lease]
	// runCancel cancels the active run's context (set by acquire).
	runCancel context.CancelFunc

	// Stepping down (stepdown.go): afterStepDown is set when the previous
	// run of the connector stepped down; ready records the standby's
	// proofs, nil when stepping down is off (HA off, stdout, no table);
	// watch sees the sink's writes.
	afterStepDown bool
	fitAgain      func() // the hold after a step-down passed (nil: nobody to tell)
	readyRec      *ha.Readiness
	watch         *sinkWatch

	mu      sync.Mutex
	ready   readiness // the pipeline once active
	standby bool
	abort   func(cause error) // aborts the pipeline, closes the sink and the lifecycle without draining
	lost    bool
	release func()
	// steppedDown: the run ended by stepDown.
	steppedDown bool
}

func newHAState(cfg Config, log zerolog.Logger, reg prometheus.Registerer) *haState {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "outbox_cdc_ha_active",
		Help: "1 while this instance is the active one (holds the HA lock, or HA is off), 0 while standby.",
	})
	reg.MustRegister(g)
	return &haState{cfg: cfg, log: log.With().Str("component", "ha").Logger(), lockLog: log, active: g, standby: cfg.HA.Enabled, lostCh: make(chan struct{})}
}

// Ready implements readiness for /readyz.
func (h *haState) Ready() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case h.lost || !h.holds(time.Now()):
		return errors.New("lost the HA lock; stopping")
	case h.standby:
		return errors.New("standby: another instance holds the HA lock")
	case h.ready == nil:
		return errors.New("starting")
	}
	return h.ready.Ready()
}

// acquire blocks while this instance is a standby. It returns a context
// that is cancelled when the lock is lost.
func (h *haState) acquire(ctx context.Context) (context.Context, error) {
	if !h.cfg.HA.Enabled {
		h.active.Set(1)
		return ctx, nil
	}
	dsn, err := h.cfg.sourceDSN()
	if err != nil {
		return nil, err
	}
	l, err := ha.New(h.cfg.Source.Type, dsn, h.cfg.Name, h.cfg.HA, h.lockLog)
	if err != nil {
		return nil, sectionError("ha", err)
	}
	h.log.Info().Str("lock", ha.LockName(h.cfg.Name)).Dur("session_timeout", h.cfg.HA.SessionTimeout).
		Dur("takeover_within", h.cfg.HA.TakeoverWithin()).
		Msg("high availability: taking the lock (standby until it is free)")
	var pr *prover
	if probe := sinkProbe(h.cfg); probe != nil {
		r, err := ha.NewReadiness(h.cfg.Source.Type, dsn, h.cfg.Name, replicaID, h.cfg.HA, h.lockLog)
		if err != nil {
			h.log.Warn().Err(err).Msg("cannot open the HA readiness table: this instance will not step down for a standby when it cannot reach the sink")
		} else {
			h.readyRec, h.watch = r, &sinkWatch{}
			pr = h.startProver(ctx, probe, r)
		}
	}
	if pr != nil && h.afterStepDown {
		if err := h.holdAfterStepDown(ctx, pr); err != nil {
			pr.end()
			h.closeReadiness()
			return nil, err
		}
		if h.fitAgain != nil {
			h.fitAgain()
		}
	}
	lease, release, err := l.Acquire(ctx)
	if pr != nil {
		pr.end()
	}
	if err != nil {
		h.closeReadiness()
		return nil, err
	}
	runCtx, cancel := context.WithCancel(ctx)
	h.lease.Store(lease)
	h.mu.Lock()
	h.standby = false
	h.release = release
	h.runCancel = cancel
	h.mu.Unlock()
	h.active.Set(1)
	go func() {
		select {
		case <-lease.Lost():
		case <-runCtx.Done():
			return
		}
		h.loseLock(lease.Why())
	}()
	return runCtx, nil
}

// loseLock aborts the active run once: no checkpoint is saved any more,
// no sink write is issued, the write in flight is cancelled, nothing read
// ahead is drained. why says how the loss was found.
func (h *haState) loseLock(why string) {
	h.loseOnce.Do(func() {
		h.fenced.Store(true)
		close(h.lostCh)
		h.log.Error().Str("reason", why).Msg("lost the HA lock: aborting without draining (the write in flight is cancelled, nothing read ahead is written, no further checkpoint is saved); a standby takes over")
		h.active.Set(0)
		h.mu.Lock()
		h.lost = true
		abort, cancel := h.abort, h.runCancel
		h.mu.Unlock()
		if abort != nil {
			abort(fmt.Errorf("%w: %s", errLockLost, why))
		}
		if cancel != nil {
			cancel()
		}
	})
}

// abortRun aborts the active run without draining (loseLock) with cause;
// a standby has nothing to abort.
func (h *haState) abortRun(cause error) {
	if h.lease.Load() != nil {
		h.loseLock(cause.Error())
	}
}

// holds reports whether this instance may write at now: HA is off, or its
// lock's lease is valid. A standby (no lease yet) does not hold it.
func (h *haState) holds(now time.Time) bool {
	if !h.cfg.HA.Enabled {
		return true
	}
	l := h.lease.Load()
	return l != nil && !h.fenced.Load() && l.Valid(now)
}

// errLeaseExpired is the fence's refusal of a sink write after the lease
// ran out.
var errLeaseExpired = errors.New("the HA lock's lease expired (not confirmed within ha.session_timeout minus a tenth): another instance may hold the lock; the write is not issued")

// leaseFence is the sink's fence (outboxcdc.FencedSink): it refuses a
// produce request once the lease is not valid, without side effects (it
// runs on the sink's goroutines; the lease's own expiry aborts the run).
func (h *haState) leaseFence() error {
	if h.holds(time.Now()) {
		return nil
	}
	return errLeaseExpired
}

// writeFence is the pipeline's fence (outboxcdc.Pipeline.SetFence): a sink
// write is issued only while the lock's lease is valid at that moment. A
// refusal loses the lock (abort, no drain).
func (h *haState) writeFence() error {
	if h.holds(time.Now()) {
		return nil
	}
	if h.fenced.Load() {
		return errLockLost
	}
	h.loseLock(errLeaseExpired.Error())
	return errLeaseExpired
}

// activate hands /readyz to the pipeline and registers what aborts the
// pipeline, the sink and the lifecycle when the lock is lost.
func (h *haState) activate(r readiness, abort func(cause error)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ready = r
	h.abort = abort
}

// err returns the error to exit with when the lock was lost.
func (h *haState) err() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.steppedDown {
		return errSteppedDown
	}
	if h.lost {
		return fmt.Errorf("lost the HA lock %q; another instance may take over", ha.LockName(h.cfg.Name))
	}
	return nil
}

// releaseLock gives the lock up (after the pipeline stopped).
func (h *haState) releaseLock() {
	h.mu.Lock()
	r := h.release
	h.release = nil
	h.mu.Unlock()
	if r != nil {
		r()
	}
	h.active.Set(0)
}

// closeReadiness closes the readiness records (stepdown.go).
func (h *haState) closeReadiness() {
	if h.readyRec != nil {
		h.readyRec.Close()
	}
}

// watchSink wraps the sink so that the active instance sees whether it
// delivers (stepdown.go); s unchanged when stepping down is off.
func (h *haState) watchSink(s outboxcdc.Sink) outboxcdc.Sink {
	if h.watch == nil {
		return s
	}
	return h.watch.watch(s)
}

// startWatch starts watching delivery once the pipeline runs.
func (h *haState) startWatch(ctx context.Context) {
	if h.watch != nil {
		go h.watchDelivery(ctx, h.watch, h.readyRec)
	}
}

// errLockLost is the error of a checkpoint save after the lock was lost.
var errLockLost = errors.New("the HA lock was lost: this instance saves no further checkpoint")

// fence wraps the checkpoint store of the active instance. Load first
// claims the checkpoint table (raising its owner epoch, so that a
// previous active instance that wakes up cannot save any more); Save is
// refused once this instance found its lock lost. Without HA it returns
// cp unchanged.
func (h *haState) fence(cp outboxcdc.Checkpointer, table *checkpoint.Table) outboxcdc.Checkpointer {
	if !h.cfg.HA.Enabled || cp == nil {
		return cp
	}
	return &fencedCheckpoint{cp: cp, table: table, h: h}
}

type fencedCheckpoint struct {
	cp    outboxcdc.Checkpointer
	table *checkpoint.Table
	h     *haState
}

func (f *fencedCheckpoint) Load(ctx context.Context) (outboxcdc.Position, error) {
	if f.table != nil {
		if _, err := f.table.Claim(ctx); err != nil {
			return "", err
		}
	}
	return f.cp.Load(ctx)
}

func (f *fencedCheckpoint) Save(ctx context.Context, pos outboxcdc.Position) error {
	if !f.h.holds(time.Now()) {
		return errLockLost
	}
	return f.cp.Save(ctx, pos)
}

func (f *fencedCheckpoint) String() string { return fmt.Sprint(f.cp) }
