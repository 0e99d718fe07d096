package main

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
	"github.com/outbox-cdc/outbox-cdc/lifecycle"
)

// lifecycleRun is the outbox lifecycle of a run, or none.
type lifecycleRun struct{ l *lifecycle.Lifecycle }

// close stops the lifecycle: it marks what is queued for at most timeout
// (0: nothing more), then releases its connections. Safe to call twice.
func (r lifecycleRun) close(timeout time.Duration) {
	if r.l != nil {
		r.l.Close(timeout)
	}
}

// failed is closed when marking stopped on an error; nil (never ready)
// without a lifecycle.
func (r lifecycleRun) failed() <-chan struct{} {
	if r.l == nil {
		return nil
	}
	return r.l.Failed()
}

// err is the error that closed failed.
func (r lifecycleRun) err() error {
	if r.l == nil {
		return nil
	}
	return r.l.Err()
}

// observeLifecycle registers the outbox lifecycle (lifecycle.mark_sent,
// lifecycle.cleanup) as the pipeline's checkpoint observer, and returns
// it; its close drains the marks queued (bounded by
// pipeline.shutdown_timeout), then releases its two connections.
func observeLifecycle(cfg Config, p *outboxcdc.Pipeline, cols outboxcdc.Columns, log zerolog.Logger, reg prometheus.Registerer) (lifecycleRun, error) {
	if !cfg.Lifecycle.Enabled() {
		return lifecycleRun{}, nil
	}
	dsn, err := cfg.sourceDSN()
	if err != nil {
		return lifecycleRun{}, err
	}
	table, err := cfg.source().lifecycleTable(cfg, dsn)
	if err != nil {
		return lifecycleRun{}, err
	}
	if table == "" {
		return lifecycleRun{}, configErrorf("lifecycle: needs source.table")
	}
	// The lifecycle's dialects are named as the source types are.
	l, err := lifecycle.New(cfg.Lifecycle, cfg.Source.Type, dsn, table, cols.MessageID, log, reg)
	if err != nil {
		return lifecycleRun{}, fmt.Errorf("lifecycle: %w", err)
	}
	p.Observe(l)
	return lifecycleRun{l}, nil
}
