package main

import (
	"fmt"

	mysqldriver "github.com/go-sql-driver/mysql"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
	"github.com/outbox-cdc/outbox-cdc/lifecycle"
)

// observeLifecycle registers the outbox lifecycle (lifecycle.mark_sent,
// lifecycle.cleanup) as the pipeline's checkpoint observer, and returns
// what closes it: drain the marks queued (bounded by
// pipeline.shutdown_timeout), then release its two connections.
func observeLifecycle(cfg Config, p *outboxcdc.Pipeline, cols outboxcdc.Columns, log zerolog.Logger, reg prometheus.Registerer) (func(), error) {
	if !cfg.Lifecycle.Enabled() {
		return func() {}, nil
	}
	dsn, err := cfg.sourceDSN()
	if err != nil {
		return nil, err
	}
	var dialect, table string
	switch cfg.Source.Type {
	case "mysql":
		dc, err := mysqldriver.ParseDSN(dsn)
		if err != nil {
			return nil, configErrorf("source.dsn: not a valid go-sql-driver DSN")
		}
		dialect, table = lifecycle.MySQL, dc.DBName+"."+cfg.Source.MySQL.Table
	case "postgres":
		dialect, table = lifecycle.Postgres, cfg.Source.Postgres.Table
	}
	if table == "" || table[len(table)-1] == '.' {
		return nil, configErrorf("lifecycle: needs source.table")
	}
	l, err := lifecycle.New(cfg.Lifecycle, dialect, dsn, table, cols.MessageID, log, reg)
	if err != nil {
		return nil, fmt.Errorf("lifecycle: %w", err)
	}
	p.Observe(l)
	return func() { l.Close(cfg.Pipeline.ShutdownTimeout) }, nil
}
