package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rs/zerolog"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
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

// runConnector builds the parts from cfg and runs the pipeline until ctx is
// done. It logs its own failures.
func runConnector(ctx context.Context, cfg Config, opts runOptions, logOut io.Writer) error {
	log := newLogger(cfg.Log, logOut)
	routeLibraryLogs(log)
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		buildInfo(),
	)

	// HTTP is up while standby too: /readyz says "standby" (see delivery.go).
	role := newHAState(cfg, log, reg)
	if cfg.HTTP.Listen != "" {
		srv, err := serveHTTP(cfg.HTTP.Listen, reg, role)
		if err != nil {
			log.Error().Err(err).Str("listen", cfg.HTTP.Listen).Msg("cannot serve http (set http.listen to a free address, or empty to turn it off)")
			return err
		}
		defer srv.Close()
		log.Info().Str("listen", srv.Addr).Msg("serving /metrics, /healthz, /readyz")
	}
	ctx, err := role.acquire(ctx)
	if err != nil {
		if ctx == nil && errors.Is(err, context.Canceled) {
			log.Info().Msg("stopped while standby")
			return nil
		}
		log.Error().Err(err).Msg("cannot take the HA lock")
		return err
	}
	defer role.releaseLock()

	b, err := build(ctx, cfg, opts, role, log, reg, os.Stdout)
	if err != nil {
		log.Error().Err(err).Msg("cannot start")
		return err
	}
	defer b.close()
	role.activate(b.p, b.abort)

	// A lifecycle that cannot mark stops the connector (gracefully: what
	// was received is still delivered and checkpointed).
	ctx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	go func() {
		select {
		case <-b.lc.failed():
			stopRun()
		case <-ctx.Done():
		}
	}()

	log.Info().Str("version", buildVersion()).Str("connector", cfg.Name).Str("source", cfg.Source.Type).
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
			log.Warn().Dur("waited", lostExitWait).Msg("the pipeline did not stop after the HA lock loss (a source connection hangs on the network?); exiting without waiting for it")
		}
	}
	if lostErr := role.err(); lostErr != nil {
		if err != nil {
			lostErr = fmt.Errorf("%w (pipeline: %v)", lostErr, err)
		}
		log.Error().Err(lostErr).Msg("stopped")
		return lostErr
	}
	if lcErr := b.lc.err(); lcErr != nil {
		if err != nil {
			lcErr = fmt.Errorf("%w (pipeline: %v)", lcErr, err)
		}
		log.Error().Err(lcErr).Msg("stopped on error")
		return lcErr
	}
	if err != nil {
		log.Error().Err(err).Msg("stopped on error")
		return err
	}
	log.Info().Msg("stopped")
	return nil
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
	// abort closes the sink (cancelling the write in flight) and the
	// lifecycle at once: HA lock loss.
	abort func()
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
		abort: func() {
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

type readiness interface{ Ready() error }

// serveHTTP serves /metrics, /healthz (the process is alive) and /readyz
// (200 only while the source stream and the sink are connected).
func serveHTTP(addr string, reg *prometheus.Registry, ready readiness) (*http.Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if err := ready.Ready(); err != nil {
			http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	srv := &http.Server{Addr: ln.Addr().String(), Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			fmt.Fprintf(os.Stderr, "outbox-cdc: http server: %v\n", err)
		}
	}()
	return srv, nil
}
