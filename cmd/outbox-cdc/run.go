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
	"github.com/outbox-cdc/outbox-cdc/binlog"
	"github.com/outbox-cdc/outbox-cdc/router"
	"github.com/outbox-cdc/outbox-cdc/sink"
	"github.com/outbox-cdc/outbox-cdc/wal"
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

	p, closeAll, err := build(cfg, opts, log, reg, os.Stdout)
	if err != nil {
		log.Error().Err(err).Msg("cannot start")
		return err
	}
	defer closeAll()
	role.activate(p, closeAll)

	log.Info().Str("version", buildVersion()).Str("connector", cfg.Name).Str("source", cfg.Source.Type).
		Str("sink", cfg.Sink.Type).Msg("starting")
	if err := p.Run(ctx); err != nil {
		if lostErr := role.err(); lostErr != nil {
			err = fmt.Errorf("%w (pipeline: %v)", lostErr, err)
		}
		log.Error().Err(err).Msg("stopped on error")
		return err
	}
	if err := role.err(); err != nil {
		log.Error().Err(err).Msg("stopped")
		return err
	}
	log.Info().Msg("stopped")
	return nil
}

// build constructs the pipeline and a function that closes what it opened.
func build(cfg Config, opts runOptions, log zerolog.Logger, reg prometheus.Registerer, stdout io.Writer) (*outboxcdc.Pipeline, func(), error) {
	rt, err := router.New(cfg.Route)
	if err != nil {
		return nil, nil, &configError{msg: err.Error()}
	}
	cols := rt.Columns()
	srcMetrics := outboxcdc.NewSourceMetrics(reg)

	var src outboxcdc.Source
	var kind string
	switch cfg.Source.Type {
	case "mysql":
		s, err := binlog.New(cfg.Source.MySQL, cfg.Name, cols, log, srcMetrics)
		if err != nil {
			return nil, nil, err
		}
		src, kind = s, binlog.Kind
	case "postgres":
		s, err := wal.New(cfg.Source.Postgres, cfg.Name, cols, log, srcMetrics, reg)
		if err != nil {
			return nil, nil, err
		}
		src, kind = s, wal.Kind
	}

	var snk outboxcdc.Sink
	switch cfg.Sink.Type {
	case "kafka":
		k, err := newKafkaSink(cfg, kind, log, reg) // transactional in exactly-once mode
		if err != nil {
			return nil, nil, err
		}
		snk = k
	case "stdout":
		snk = sink.NewStdout(stdout)
	}

	cp, witness, closeCP, err := newCheckpoint(cfg, kind, log) // cp nil in exactly-once mode: the sink stores it
	if err != nil {
		snk.Close()
		return nil, nil, err
	}

	p, err := outboxcdc.NewPipeline(cfg.Pipeline, src, rt, snk, cp, log, reg)
	if err != nil {
		snk.Close()
		closeCP()
		return nil, nil, err
	}
	if witness != nil {
		p.Witness(witness, opts.freshStart)
	}
	closeLC, err := observeLifecycle(cfg, p, cols, log, reg) // lifecycle.go
	if err != nil {
		snk.Close()
		closeCP()
		return nil, nil, err
	}
	return p, func() {
		closeLC()
		if err := snk.Close(); err != nil {
			log.Warn().Err(err).Msg("closing sink")
		}
		closeCP()
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
