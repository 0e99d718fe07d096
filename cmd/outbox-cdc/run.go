package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
	"github.com/outbox-cdc/outbox-cdc/checkpoint"
	"github.com/outbox-cdc/outbox-cdc/sink"
)

func newLogger(cfg LogConfig, w io.Writer) zerolog.Logger {
	level, _ := zerolog.ParseLevel(cfg.Level)
	out := w
	console := cfg.Format == "console"
	if cfg.Format == "auto" {
		if f, ok := w.(*os.File); ok {
			if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
				console = true
			}
		}
	}
	if console {
		out = zerolog.ConsoleWriter{Out: w, TimeFormat: time.RFC3339}
	}
	return zerolog.New(out).Level(level).With().Timestamp().Logger()
}

// runOptions are the run command's flags.
type runOptions struct {
	// freshStart: in exactly-once mode, start where source.start says even
	// though the witness shows the connector ran before and the progress
	// record is missing.
	freshStart bool
}

// runConnector runs the process with cfg as its only connector (see
// runProcess).
func runConnector(ctx context.Context, cfg Config, opts runOptions, logOut io.Writer) error {
	return runProcess(ctx, processConfig{HTTP: cfg.HTTP, Log: cfg.Log, Connectors: []Config{cfg}}, opts, logOut)
}

// runOne runs one connector until ctx is done: it waits as a standby
// while HA is on, then builds the parts from cfg and runs the pipeline.
// reg is the connector's own registry (its metrics carry the connector
// label); started receives the connector's HA role as soon as it exists,
// for /readyz. It returns its failure without logging it: the supervisor
// logs why a connector stopped, once.
func runOne(ctx context.Context, cfg Config, opts runOptions, log zerolog.Logger, reg prometheus.Registerer, ctl runControl, started func(*haState)) error {
	role := newHAState(cfg, log, reg)
	role.afterStepDown, role.fitAgain = ctl.steppedDown, ctl.fitAgain
	started(role)
	ctx, err := role.acquire(ctx)
	if err != nil {
		if ctx == nil && errors.Is(err, context.Canceled) {
			log.Info().Msg("stopped while standby")
			return nil
		}
		return fmt.Errorf("cannot take the HA lock: %w", err)
	}
	defer role.releaseLock()
	defer role.closeReadiness()
	// Once the lock is held (a standby that takes over too): a connector
	// stopped through the REST API stays stopped, one paused starts paused
	// (stopstate.go).
	target, err := readTarget(ctx, cfg, log)
	switch {
	case err != nil:
		log.Warn().Err(err).Msg("cannot read whether the connector was paused or stopped through the REST API; starting it as it was")
	case target == targetStopped:
		return errHeld
	default:
		if sharedHold(cfg) && ctl.worker != "" {
			if err := writeHolder(ctx, cfg, ctl.worker, log); err != nil {
				log.Warn().Err(err).Msg("cannot name this replica as the connector's holder in the checkpoint table; other replicas' REST status will not say where it runs")
			}
		}
		if ctl.target != nil {
			ctl.target.Lock()
			applyPause(ctl.gate, target, log)
			ctl.target.Unlock()
		}
		if ctl.notHeld != nil {
			ctl.notHeld()
		}
	}

	b, err := build(ctx, cfg, opts, role, log, reg, os.Stdout)
	if err != nil {
		if lostErr := role.err(); lostErr != nil {
			return fmt.Errorf("%w (while starting: %v)", lostErr, err)
		}
		if ctx.Err() != nil && errors.Is(err, context.Canceled) {
			// Stopped (SIGTERM, a revoke, the REST API) while starting:
			// nothing was read, nothing to drain.
			log.Info().Msg("stopped while starting")
			return nil
		}
		return err
	}
	defer b.close()
	b.p.SetGate(ctl.gate)
	role.activate(b.p, b.abort)
	role.startWatch(ctx)

	// A lifecycle that cannot mark stops the connector (gracefully: what
	// was received is still delivered and checkpointed).
	ctx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	// A pause, resume or stop sent to another replica reaches this one
	// through the checkpoint table.
	stoppedElsewhere := make(chan struct{})
	if sharedHold(cfg) {
		go watchTarget(ctx, cfg, ctl, log, func() {
			close(stoppedElsewhere)
			stopRun()
		})
	}
	go func() {
		select {
		case <-b.lc.failed():
			stopRun()
		case <-ctx.Done():
		}
	}()

	log.Info().Str("version", buildVersion()).Str("source", cfg.Source.Type).
		Str("sink", cfg.Sink.Type).Msg("starting")
	ran := make(chan error, 1)
	go func() { ran <- b.p.Run(ctx) }()
	select {
	case err = <-ran:
	case <-role.lostCh:
		// Nothing is produced or checkpointed any more (see haState);
		// a source connection that hangs on a cut network must not keep
		// the process from exiting.
		select {
		case err = <-ran:
		case <-time.After(lostExitWait):
			log.Warn().Dur("waited", lostExitWait).Msg("the pipeline did not stop after the HA lock loss (a source connection hangs on the network?); no longer waiting for it")
		}
	}
	if claimedElsewhere(cfg, err) {
		role.loseLock(err.Error())
	}
	if lostErr := role.err(); lostErr != nil {
		if err != nil {
			lostErr = fmt.Errorf("%w (pipeline: %v)", lostErr, err)
		}
		return lostErr
	}
	if lcErr := b.lc.err(); lcErr != nil {
		if err != nil {
			lcErr = fmt.Errorf("%w (pipeline: %v)", lcErr, err)
		}
		return lcErr
	}
	if err != nil {
		return err
	}
	select {
	case <-stoppedElsewhere:
		log.Info().Msg("stopped through the REST API (the stop reached this replica through the checkpoint table)")
		return errHeld
	default:
	}
	log.Info().Msg("stopped")
	return nil
}

// claimedElsewhere reports whether err says that another instance claimed
// the checkpoint (or the transactional id): it holds the lock, whatever
// this one believed. With HA that is a lost lock, not a failure: the
// connector goes back to standby instead of halting.
func claimedElsewhere(cfg Config, err error) bool {
	return cfg.HA.Enabled && (errors.Is(err, checkpoint.ErrFenced) || sink.IsFenced(err))
}

// lostExitWait bounds how long a process that lost the HA lock waits for
// its pipeline to return before exiting anyway.
const lostExitWait = 5 * time.Second

// parts is what build makes.
type parts struct {
	p  *outboxcdc.Pipeline
	lc lifecycleRun
	// close closes everything, giving the lifecycle up to
	// pipeline.shutdown_timeout to mark what is queued.
	close func()
	// abort stops the pipeline without draining (no further write), closes
	// the sink (cancelling the write in flight) and the lifecycle at once:
	// HA lock loss, a lost placement assignment.
	abort func(cause error)
}

// build constructs the pipeline and what closes or aborts what it opened.
// role fences the checkpoint store and the witness (see haState).
func build(ctx context.Context, cfg Config, opts runOptions, role *haState, log zerolog.Logger, reg prometheus.Registerer, stdout io.Writer) (*parts, error) {
	rt, err := newRouter(ctx, cfg, log) // table.go
	if err != nil {
		return nil, err
	}
	cols := rt.Columns()
	srcMetrics := outboxcdc.NewSourceMetrics(reg)

	src, err := cfg.source().build(cfg, cols, log, srcMetrics, reg) // sources.go
	if err != nil {
		return nil, err
	}
	kind := cfg.Source.Type // the kind of the positions it issues

	snk, err := sinkKinds[cfg.Sink.Type].build(cfg, kind, log, reg, stdout) // sinks.go
	if err != nil {
		return nil, err
	}
	snk = role.watchSink(snk) // stepdown.go

	cp, witness, table, closeCP, err := openCheckpoint(cfg, kind, log) // cp nil in exactly-once mode: the sink stores it
	if err != nil {
		snk.Close()
		return nil, err
	}
	cp, witness = role.fence(cp, table), role.fence(witness, table)

	p, err := outboxcdc.NewPipeline(cfg.Pipeline, src, rt, snk, cp, log, reg)
	if err != nil {
		snk.Close()
		closeCP()
		return nil, err
	}
	if witness != nil {
		p.Witness(witness, opts.freshStart)
	}
	if cfg.HA.Enabled {
		p.SetFence(role.writeFence) // no sink write without a valid lease
		if fs, ok := snk.(outboxcdc.FencedSink); ok {
			fs.SetFence(role.leaseFence) // nor a request inside one (a retry)
		}
	}
	lc, err := observeLifecycle(cfg, p, cols, log, reg) // lifecycle.go
	if err != nil {
		snk.Close()
		closeCP()
		return nil, err
	}
	closeSink := func() {
		if err := snk.Close(); err != nil {
			log.Warn().Err(err).Msg("closing sink")
		}
	}
	return &parts{
		p:  p,
		lc: lc,
		close: func() {
			drain := cfg.Pipeline.ShutdownTimeout
			if role.fenced.Load() {
				drain = 0 // the lock is lost: mark nothing more
			}
			lc.close(drain)
			closeSink()
			closeCP()
		},
		abort: func(cause error) {
			p.Abort(cause)
			go lc.close(0)
			closeSink()
		},
	}, nil
}

func buildInfo() prometheus.Collector {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "outbox_cdc_build_info",
		Help: "Always 1; the version label says which build runs.",
	}, []string{"version"})
	g.WithLabelValues(buildVersion()).Set(1)
	return g
}

// readiness is what /readyz asks: nil means ready.
type readiness interface{ Ready() error }
