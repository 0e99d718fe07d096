package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/rs/zerolog"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
	"github.com/outbox-cdc/outbox-cdc/retry"
	"github.com/outbox-cdc/outbox-cdc/router"
)

// The Kafka Connect converters (route.converters) write each column as
// Debezium would, which depends on its type, nullability and default:
// newRouter reads them from the catalog once at start-up. A change of the
// outbox table's types while running is noticed only where a value no
// longer parses (the row is then bad, saying to restart).

// newRouter builds the route, reading the outbox table's columns first
// when the converters need them. Connection failures are retried until ctx
// is done (the database may come up after the connector); a table or a
// type the converters cannot handle is a configuration error.
func newRouter(ctx context.Context, cfg Config, log zerolog.Logger) (*router.Router, error) {
	if !cfg.Route.NeedsTable() {
		rt, err := router.New(cfg.Route)
		if err != nil {
			return nil, sectionError("route", err)
		}
		return rt, nil
	}
	backoff := retry.New(retry.Policy{Min: time.Second, Max: 30 * time.Second})
	for {
		table, err := readOutboxTable(ctx, cfg)
		if err == nil {
			rt, err := router.NewForTable(cfg.Route, table)
			if err != nil {
				return nil, sectionError("route", err)
			}
			log.Info().Str("component", "route").Str("table", table.Schema+"."+table.Name).
				Strs("typed_columns", cfg.Route.TypedColumns()).Msg("read the outbox table's column types for route.converters")
			return rt, nil
		}
		var perm *tableError
		if errors.As(err, &perm) {
			return nil, err
		}
		wait := backoff.Next()
		log.Warn().Str("component", "route").Err(err).Dur("backoff", wait).
			Msg("cannot read the outbox table's column types (route.converters needs them); retrying")
		if retry.Sleep(ctx, wait) != nil {
			return nil, fmt.Errorf("reading the outbox table's column types: %w (last error: %v)", ctx.Err(), err)
		}
	}
}

// tableError is a permanent problem reading the table: it is missing, or
// the database refused the query.
type tableError struct{ err error }

func (e *tableError) Error() string { return e.err.Error() }
func (e *tableError) Unwrap() error { return e.err }

// readOutboxTable reads the outbox table's columns from the catalog with
// the source's reader (binlog.ReadOutboxTable, wal.ReadOutboxTable; see
// sources.go). Errors retrying cannot fix (no such table, no privilege, a
// missing setting) are *tableError, a missing setting a *configError in
// it; connection failures are returned as they are.
func readOutboxTable(ctx context.Context, cfg Config) (*router.Table, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	t, err := cfg.source().table(ctx, cfg)
	if err == nil || outboxcdc.IsTransient(err) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return t, err
	}
	var ke *outboxcdc.KeyError
	if errors.As(err, &ke) {
		err = sectionError("source", err)
	}
	return nil, &tableError{err}
}
