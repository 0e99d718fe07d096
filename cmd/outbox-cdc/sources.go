package main

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	mysqldriver "github.com/go-sql-driver/mysql"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
	"github.com/outbox-cdc/outbox-cdc/binlog"
	"github.com/outbox-cdc/outbox-cdc/router"
	"github.com/outbox-cdc/outbox-cdc/wal"
)

// sourceKind is one source.type: where its keys decode to, how to
// validate, build and check it, where its database is, and how its
// positions are read, described and ordered. The one place that maps
// source.type to code (sinks.go does the same for sink.type); source.type
// is also the position kind the source issues.
//
// Every function is called from the command's goroutine, with a cfg that
// passed Validate unless said otherwise.
type sourceKind struct {
	// config returns the struct the type's keys (directly under source:)
	// decode into.
	config func(*SourceConfig) any
	// validate checks the type's section; called from Config.Validate.
	validate func(Config) error
	// dsn is the DSN the HA lock, the checkpoint table, the outbox
	// lifecycle and the position commands connect with.
	dsn func(Config) (string, error)
	// build returns the source `run` streams from.
	build func(cfg Config, cols outboxcdc.Columns, log zerolog.Logger, m *outboxcdc.SourceMetrics, reg prometheus.Registerer) (outboxcdc.Source, error)
	// check is the source's part of `outbox-cdc check`; from is the
	// checkpoint (may be zero). It changes nothing.
	check func(ctx context.Context, cfg Config, cols outboxcdc.Columns, from outboxcdc.Position) []outboxcdc.CheckResult
	// tables is source.tables.
	tables func(Config) []string
	// derived lists the keys left empty for the source to derive, with
	// the value it will use (config print).
	derived func(Config) []derivedKey
	// exclusive is the server-side identity two connectors of one process
	// must not share: its key, the scope it is unique in ("": everywhere)
	// and its value, derived when the key is not set.
	exclusive func(Config) (key, scope, value string)
	// table reads the outbox table's columns for route.converters
	// (table.go): a transient error when the database is out of reach.
	table func(ctx context.Context, cfg Config) (*router.Table, error)
	// lifecycleTable names the outbox table for the lifecycle's UPDATEs
	// and DELETEs ("" when source.table is not set).
	lifecycleTable func(cfg Config, dsn string) (string, error)

	// latest asks the server for its current position, in form (the
	// existing checkpoint's, from the form function; "" when none).
	latest func(ctx context.Context, cfg Config, form string) (outboxcdc.Position, error)
	// parse reads a position an operator typed: a full position of this
	// kind or a short form.
	parse func(string) (outboxcdc.Position, error)
	// describe says in words what a position of this kind is.
	describe func(outboxcdc.Position) string
	// form names a position's form ("file", "lsn", ...; "" if unreadable).
	form func(outboxcdc.Position) string
	// compare orders two positions of this kind (cmp.Compare's sign), or
	// says why they cannot be ordered.
	compare func(a, b outboxcdc.Position) (int, error)
	// guardWrite, when set, says why the position commands must not write
	// pos (refusal, "" to go on); err is a check it could not make, which
	// is only noted (see refuseUnresumable).
	guardWrite func(ctx context.Context, cfg Config, pos outboxcdc.Position) (refusal string, err error)
	// preferFileForm says import-debezium should derive a binlog file
	// position rather than a GTID one.
	preferFileForm func(Config) bool
}

// derivedKey is a key left empty and the value the source derives for it.
type derivedKey struct{ key, value string }

var sourceKinds = map[string]sourceKind{
	binlog.Kind: {
		config:   func(s *SourceConfig) any { return &s.MySQL },
		validate: func(c Config) error { return c.Source.MySQL.Validate() },
		dsn:      mysqlDSN,
		build: func(cfg Config, cols outboxcdc.Columns, log zerolog.Logger, m *outboxcdc.SourceMetrics, reg prometheus.Registerer) (outboxcdc.Source, error) {
			mc := cfg.Source.MySQL
			// Under HA this instance streams only while it holds the lock, so a
			// previous binlog dump of this connector belongs to a fenced
			// instance and is ended at once (binlog/dumplock.go).
			mc.TakeOver = cfg.HA.Enabled
			mc.ProgressInterval = cfg.Log.ProgressInterval
			return binlog.New(mc, cfg.Name, cols, log, m, reg)
		},
		check: func(ctx context.Context, cfg Config, cols outboxcdc.Columns, from outboxcdc.Position) []outboxcdc.CheckResult {
			return binlog.Check(ctx, cfg.Source.MySQL, cfg.Name, cols, from)
		},
		tables: func(c Config) []string { return c.Source.MySQL.Tables },
		derived: func(c Config) []derivedKey {
			if c.Source.MySQL.ServerID != 0 {
				return nil
			}
			return []derivedKey{{"source.server_id", fmt.Sprint(binlog.DeriveServerID(c.Name))}}
		},
		exclusive: func(c Config) (string, string, string) {
			id := c.Source.MySQL.ServerID
			if id == 0 {
				id = binlog.DeriveServerID(c.Name)
			}
			return "source.server_id", "", fmt.Sprint(id)
		},
		table: func(ctx context.Context, cfg Config) (*router.Table, error) {
			return binlog.ReadOutboxTable(ctx, cfg.Source.MySQL)
		},
		lifecycleTable: func(cfg Config, dsn string) (string, error) {
			dc, err := mysqldriver.ParseDSN(dsn)
			if err != nil {
				return "", configErrorf("source.dsn: not a valid go-sql-driver DSN")
			}
			if cfg.Source.MySQL.Table == "" {
				return "", nil
			}
			return dc.DBName + "." + cfg.Source.MySQL.Table, nil
		},
		latest: func(ctx context.Context, cfg Config, form string) (outboxcdc.Position, error) {
			return binlog.LatestPosition(ctx, cfg.Source.MySQL, form)
		},
		parse:          binlog.ParseInput,
		describe:       binlog.Describe,
		form:           binlog.Form,
		compare:        binlog.Compare,
		preferFileForm: func(c Config) bool { return c.Source.MySQL.GTID == binlog.GTIDOff },
	},
	wal.Kind: {
		config:   func(s *SourceConfig) any { return &s.Postgres },
		validate: func(c Config) error { return c.Source.Postgres.Validate() },
		// A Postgres DSN carries its own sslmode.
		dsn: func(c Config) (string, error) { return c.Source.Postgres.DSN, nil },
		build: func(cfg Config, cols outboxcdc.Columns, log zerolog.Logger, m *outboxcdc.SourceMetrics, reg prometheus.Registerer) (outboxcdc.Source, error) {
			pc := postgresConfig(cfg)
			// The HA lock makes this instance the only rightful reader of the
			// slot: a walsender still holding it served a previous active
			// instance that is gone or cut off (wal/takeover.go).
			pc.TakeOverSlot = cfg.HA.Enabled
			pc.ProgressInterval = cfg.Log.ProgressInterval
			return wal.New(pc, cfg.Name, cols, log, m, reg)
		},
		check: func(ctx context.Context, cfg Config, cols outboxcdc.Columns, from outboxcdc.Position) []outboxcdc.CheckResult {
			return wal.Check(ctx, postgresConfig(cfg), cfg.Name, cols, from)
		},
		tables: func(c Config) []string { return c.Source.Postgres.Tables },
		derived: func(c Config) []derivedKey {
			var out []derivedKey
			if c.Source.Postgres.Slot == "" {
				out = append(out, derivedKey{"source.slot", wal.DeriveName(c.Name)})
			}
			if c.Source.Postgres.Publication == "" {
				out = append(out, derivedKey{"source.publication", wal.DeriveName(c.Name)})
			}
			return out
		},
		exclusive: func(c Config) (string, string, string) {
			slot := c.Source.Postgres.Slot
			if slot == "" {
				slot = wal.DeriveName(c.Name)
			}
			return "source.slot", c.Source.Postgres.DSN, slot
		},
		table: func(ctx context.Context, cfg Config) (*router.Table, error) {
			return wal.ReadOutboxTable(ctx, cfg.Source.Postgres)
		},
		lifecycleTable: func(cfg Config, _ string) (string, error) { return cfg.Source.Postgres.Table, nil },
		latest: func(ctx context.Context, cfg Config, form string) (outboxcdc.Position, error) {
			return wal.LatestPosition(ctx, cfg.Source.Postgres, form)
		},
		parse:    wal.ParseInput,
		describe: wal.Describe,
		form:     wal.Form,
		compare:  wal.Compare,
		guardWrite: func(ctx context.Context, cfg Config, pos outboxcdc.Position) (string, error) {
			// A logical slot is never rewound: the server would silently
			// start at its confirmed position, so run refuses a position
			// behind it.
			pc := postgresConfig(cfg)
			ctx, cancel := context.WithTimeout(ctx, pc.ConnectTimeout+3*pc.QueryTimeout)
			defer cancel()
			err := wal.CheckResume(ctx, pc, cfg.Name, pos)
			if errors.Is(err, wal.ErrSlotChanged) {
				return err.Error(), nil
			}
			if errors.Is(err, wal.ErrBehindSlot) {
				return err.Error() + "\nNothing between that position and the slot's can be published again from the slot. " +
					"To re-publish rows that are still in the outbox table, see docs/operations.md \"Positions and replay\" (source.start: pending with a pending.where selecting them).", nil
			}
			return "", err
		},
		preferFileForm: func(Config) bool { return false },
	},
}

// postgresConfig is the Postgres source configuration with what the
// source takes from the rest of the configuration: the rows its recovery
// advice re-publishes are those lifecycle.mark_sent has not marked.
func postgresConfig(cfg Config) wal.Config {
	pc := cfg.Source.Postgres
	if cfg.Lifecycle.MarkSent {
		pc.RepublishWhere = "(" + cfg.Lifecycle.Cleanup.Delivered + ") IS NOT TRUE"
	}
	return pc
}

// mysqlDSN is source.dsn with source.tls applied (it reads the certificate
// files).
func mysqlDSN(c Config) (string, error) {
	dsn, err := c.Source.MySQL.ConnDSN()
	if err != nil {
		return "", sectionError("source", err)
	}
	return dsn, nil
}

// sourceTypeNames lists the source types for messages.
func sourceTypeNames() string { return kindNames(sourceKinds) }

// kindNames lists a registry's kinds for messages: "a, b or c", sorted.
func kindNames[K any](kinds map[string]K) string {
	names := make([]string, 0, len(kinds))
	for n := range kinds {
		names = append(names, n)
	}
	sort.Strings(names)
	if len(names) == 1 {
		return names[0]
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// source returns the kind of cfg's source.type, which loadConfig checked.
func (c Config) source() sourceKind {
	k, ok := sourceKinds[c.Source.Type]
	if !ok {
		panic(fmt.Sprintf("source.type %q not checked", c.Source.Type))
	}
	return k
}

// sourceDSN is the DSN the HA lock, the checkpoint table, the lifecycle and
// the position commands connect with.
func (c Config) sourceDSN() (string, error) { return c.source().dsn(c) }

// positionKind is the kind of a position's issuer, if it is a known one.
func positionKind(p outboxcdc.Position) (sourceKind, bool) {
	k, ok := sourceKinds[p.Kind()]
	return k, ok
}

// describePosition says what p is, whichever source issued it.
func describePosition(p outboxcdc.Position) string {
	if k, ok := positionKind(p); ok {
		return k.describe(p)
	}
	return fmt.Sprintf("position of an unknown source kind %q", p.Kind())
}

// positionForm names p's form, whichever source issued it ("" if unknown).
func positionForm(p outboxcdc.Position) string {
	if k, ok := positionKind(p); ok {
		return k.form(p)
	}
	return ""
}

// parsePosition reads a position an operator typed for a source of type
// kind: a full position, or a short form of that source. A full position
// of another source kind is refused with outboxcdc.ErrForeignPosition.
func parsePosition(kind, s string) (outboxcdc.Position, error) {
	s = strings.TrimSpace(s)
	if p := outboxcdc.Position(s); p.Kind() != kind {
		if _, ok := positionKind(p); ok {
			return "", p.CheckKind(kind)
		}
	}
	return sourceKinds[kind].parse(s)
}

// comparePositions orders old and new: cmp.Compare's sign, or why they
// cannot be ordered.
func comparePositions(old, new outboxcdc.Position) (int, error) {
	if old.Kind() != new.Kind() {
		return 0, fmt.Errorf("the positions belong to different sources (%q, %q)", old.Kind(), new.Kind())
	}
	k, ok := positionKind(old)
	if !ok {
		return 0, fmt.Errorf("unknown source kind %q", old.Kind())
	}
	return k.compare(old, new)
}
