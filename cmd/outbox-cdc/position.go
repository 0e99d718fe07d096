package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
	"time"

	_ "github.com/go-sql-driver/mysql" // database/sql driver for --to latest
	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/rs/zerolog"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
	"github.com/outbox-cdc/outbox-cdc/binlog"
	"github.com/outbox-cdc/outbox-cdc/checkpoint"
	"github.com/outbox-cdc/outbox-cdc/migrate"
	"github.com/outbox-cdc/outbox-cdc/wal"
)

// The position commands read and replace the checkpoint offline. They
// cannot tell whether a connector is running with the same checkpoint (or,
// with several replicas, which one holds the lock): stop every instance
// first, or the running one overwrites the new position at its next
// checkpoint, or worse, resumes from it after the change.
const positionUsage = `usage:
  outbox-cdc position show --config FILE [--json]
  outbox-cdc position set --config FILE --to POS|latest [--force] [--dry-run]
  outbox-cdc position import-debezium --config FILE --offset FILE|- [--connector NAME] [--force] [--dry-run]

POS is a full position (mysql:file:mysql-bin.000003:4, postgres:0/16B3748) or
a short form for the configured source: mysql-bin.000003:4, a MySQL GTID set
3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5, a MariaDB GTID list 0-1-42,1-7-9,
an LSN 0/16B3748. latest asks the database for its current position.

Replacing an existing checkpoint needs --force; stop the connector first.
`

// runPosition implements `outbox-cdc position ...`; args start after
// "position". Exit codes: 0 done (or nothing to do), 1 refused or failed,
// 2 usage or configuration error.
func runPosition(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, positionUsage)
		return 2
	}
	sub := args[0]
	fset := flag.NewFlagSet("position "+sub, flag.ContinueOnError)
	fset.SetOutput(stderr)
	cfgPath := fset.String("config", "", "configuration file (YAML)")
	var asJSON, force, dryRun *bool
	var to, offset, connector *string
	switch sub {
	case "show":
		asJSON = fset.Bool("json", false, "print JSON")
	case "set":
		to = fset.String("to", "", "the new position, or latest")
	case "import-debezium":
		offset = fset.String("offset", "", "Debezium offset: a file (offsets topic dump, offset value, Debezium Server offsets file) or - for stdin")
		connector = fset.String("connector", "", "connector (or Debezium Server engine) name, when the input holds several offsets")
	case "help", "--help", "-h":
		fmt.Fprint(stdout, positionUsage)
		return 0
	default:
		fmt.Fprintf(stderr, "outbox-cdc position: unknown subcommand %q\n\n%s", sub, positionUsage)
		return 2
	}
	if sub != "show" {
		force = fset.Bool("force", false, "replace an existing checkpoint")
		dryRun = fset.Bool("dry-run", false, "print what would be written, write nothing")
	}
	if err := fset.Parse(args[1:]); err != nil {
		return 2
	}
	if fset.NArg() > 0 {
		fmt.Fprintf(stderr, "outbox-cdc position %s: unexpected argument %q\n", sub, fset.Arg(0))
		return 2
	}
	cfg, err := loadConfig(*cfgPath, environ())
	if err != nil {
		fmt.Fprintf(stderr, "outbox-cdc: %v\n", err)
		return 2
	}
	kind := binlog.Kind
	if cfg.Source.Type == "postgres" {
		kind = wal.Kind
	}
	log := newLogger(cfg.Log, stderr)
	store, err := openPositionStore(cfg, log)
	if err != nil {
		fmt.Fprintf(stderr, "outbox-cdc: %v\n", err)
		return 2
	}
	ctx := context.Background()

	switch sub {
	case "show":
		return positionShow(store, kind, *asJSON, stdout, stderr)
	case "set":
		if strings.TrimSpace(*to) == "" {
			fmt.Fprintf(stderr, "outbox-cdc position set: --to is required\n")
			return 2
		}
		var pos outboxcdc.Position
		if strings.EqualFold(strings.TrimSpace(*to), "latest") {
			form := ""
			if s, err := checkpoint.ReadFile(store.Path()); err == nil {
				form = migrate.Form(s.Position)
			}
			qctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			pos, err = latestPosition(qctx, cfg, form)
			cancel()
			if err != nil {
				fmt.Fprintf(stderr, "outbox-cdc: reading the server's current position: %v\n", err)
				return 1
			}
			fmt.Fprintf(stdout, "the server's current position is %s (%s)\n", pos, migrate.Describe(pos))
		} else {
			pos, err = migrate.ParsePosition(kind, *to)
			if err != nil {
				fmt.Fprintf(stderr, "outbox-cdc position set: --to: %v\n", err)
				return 2
			}
		}
		if code := refuseBehindSlot(ctx, cfg, kind, pos, "position set", stdout, stderr); code != 0 {
			return code
		}
		return writePosition(ctx, store, kind, pos, *force, *dryRun, "position set", stdout, stderr, log)
	default: // import-debezium
		if *offset == "" {
			fmt.Fprintf(stderr, "outbox-cdc position import-debezium: --offset is required (a file, or - for stdin)\n")
			return 2
		}
		var data []byte
		if *offset == "-" {
			data, err = io.ReadAll(io.LimitReader(os.Stdin, 64<<20))
		} else {
			data, err = os.ReadFile(*offset)
		}
		if err != nil {
			fmt.Fprintf(stderr, "outbox-cdc: reading the Debezium offset: %v\n", err)
			return 1
		}
		pos, notes, err := migrate.Convert(kind, data, migrate.Options{
			Connector:  *connector,
			PreferFile: kind == binlog.Kind && cfg.Source.MySQL.GTID == binlog.GTIDOff,
		})
		if err != nil {
			fmt.Fprintf(stderr, "outbox-cdc: %v\n", err)
			return 1
		}
		if notes.Key != "" {
			fmt.Fprintf(stdout, "Debezium offset of %s:\n", notes.Key)
		} else {
			fmt.Fprintf(stdout, "Debezium offset:\n")
		}
		fmt.Fprintf(stdout, "  %s\n", notes.Offset)
		fmt.Fprintf(stdout, "derived position: %s (%s)\n", pos, migrate.Describe(pos))
		for _, l := range notes.Lines {
			fmt.Fprintf(stdout, "  - %s\n", l)
		}
		if notes.Alternative != "" {
			fmt.Fprintf(stdout, "  - The same point in the other form is %s; `outbox-cdc position set --to %s` writes that instead.\n", notes.Alternative, notes.Alternative)
		}
		log.Info().Str("debezium_key", notes.Key).Str("debezium_offset", notes.Offset).
			Str("position", string(pos)).Bool("resend_transaction", notes.Resend).Msg("Debezium offset converted")
		if code := refuseBehindSlot(ctx, cfg, kind, pos, "position import-debezium", stdout, stderr); code != 0 {
			return code
		}
		return writePosition(ctx, store, kind, pos, *force, *dryRun, "position import-debezium", stdout, stderr, log)
	}
}

// openPositionStore opens the configured checkpoint store. Only the file
// store can be read and replaced offline so far.
func openPositionStore(cfg Config, log zerolog.Logger) (*checkpoint.File, error) {
	if cfg.Checkpoint.Type != "file" {
		return nil, fmt.Errorf("checkpoint.type %q: the position commands do not support this checkpoint store yet (only file)", cfg.Checkpoint.Type)
	}
	return checkpoint.NewFile(cfg.Checkpoint.FileConfig, log)
}

type showJSON struct {
	Store       string `json:"store"`
	Path        string `json:"path"`
	Exists      bool   `json:"exists"`
	Position    string `json:"position,omitempty"`
	Kind        string `json:"kind,omitempty"`
	Form        string `json:"form,omitempty"`
	Description string `json:"description,omitempty"`
	SavedAt     string `json:"saved_at,omitempty"`
	Error       string `json:"error,omitempty"`
}

func positionShow(store *checkpoint.File, kind string, asJSON bool, stdout, stderr io.Writer) int {
	out := showJSON{Store: "file", Path: store.Path()}
	s, err := checkpoint.ReadFile(store.Path())
	code := 0
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		fmt.Fprintf(stderr, "outbox-cdc: %v\n", err)
		if !asJSON {
			return 1
		}
		out.Error, code = err.Error(), 1
	default:
		out.Exists = true
		out.Position = string(s.Position)
		out.Kind = s.Position.Kind()
		out.Form = migrate.Form(s.Position)
		out.Description = migrate.Describe(s.Position)
		out.SavedAt = s.SavedAt.UTC().Format(time.RFC3339Nano)
		if err := s.Position.CheckKind(kind); err != nil {
			out.Error, code = err.Error()+"; the connector refuses to start with it", 1
		}
	}
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(out)
		return code
	}
	if !out.Exists {
		fmt.Fprintf(stdout, "no checkpoint (%s does not exist): the connector starts where source.start says\n", out.Path)
		return 0
	}
	fmt.Fprintf(stdout, "position: %s\nmeaning:  %s\nsaved at: %s\nstore:    checkpoint file %s\n",
		out.Position, out.Description, out.SavedAt, out.Path)
	if out.Error != "" {
		fmt.Fprintf(stderr, "outbox-cdc: %s\n", out.Error)
	}
	return code
}

// writePosition replaces the checkpoint with pos, guarded: an existing (or
// damaged) checkpoint is only replaced with force, after saying which way
// the move goes.
func writePosition(ctx context.Context, store *checkpoint.File, kind string, pos outboxcdc.Position, force, dryRun bool,
	what string, stdout, stderr io.Writer, log zerolog.Logger) int {
	old, err := checkpoint.ReadFile(store.Path())
	exists := err == nil
	damaged := err != nil && !errors.Is(err, fs.ErrNotExist)
	fmt.Fprintf(stdout, "checkpoint file %s\n", store.Path())
	dir, why := migrate.Direction(0), ""
	switch {
	case damaged:
		fmt.Fprintf(stdout, "  old: unreadable: %v\n", err)
	case exists:
		fmt.Fprintf(stdout, "  old: %s (%s, saved %s)\n", old.Position, migrate.Describe(old.Position), old.SavedAt.UTC().Format(time.RFC3339))
		dir, why = migrate.Compare(old.Position, pos)
	default:
		fmt.Fprintf(stdout, "  old: none\n")
	}
	fmt.Fprintf(stdout, "  new: %s (%s)\n", pos, migrate.Describe(pos))
	if exists {
		switch dir {
		case migrate.Same:
			fmt.Fprintf(stdout, "the checkpoint is already at this position; nothing to do\n")
			return 0
		case migrate.Backward:
			fmt.Fprintf(stdout, "  direction: BACKWARD: transactions between the new and the old position are published again\n")
		case migrate.Forward:
			fmt.Fprintf(stdout, "  direction: FORWARD: transactions between the old and the new position are skipped and never published\n")
		default:
			fmt.Fprintf(stdout, "  direction: not comparable (%s): check by hand what is re-published or skipped\n", why)
		}
	}
	if (exists || damaged) && !force {
		fmt.Fprintf(stderr, "outbox-cdc %s: refusing to replace the existing checkpoint without --force. Stop the connector first (every replica, whichever holds the lock): a running connector overwrites the checkpoint at its next commit.\n", what)
		return 1
	}
	if dryRun {
		fmt.Fprintf(stdout, "dry run: the checkpoint was not written\n")
		return 0
	}
	if err := checkpoint.Expect(kind, store).Save(ctx, pos); err != nil {
		fmt.Fprintf(stderr, "outbox-cdc: %v\n", err)
		return 1
	}
	ev := log.Warn()
	if !exists && !damaged {
		ev = log.Info()
	}
	ev = ev.Str("command", what).Str("position", string(pos)).Str("path", store.Path())
	if exists {
		ev = ev.Str("old_position", string(old.Position)).Str("direction", dir.String())
	}
	ev.Msg("checkpoint set by hand")
	fmt.Fprintf(stdout, "checkpoint written: the connector resumes from %s at its next start\n", pos)
	return 0
}

// latestPosition asks the database for its current position, in the form
// the existing checkpoint has (form, "" when none) or, without one, the
// form source.gtid asks for.
func latestPosition(ctx context.Context, cfg Config, form string) (outboxcdc.Position, error) {
	if cfg.Source.Type == "postgres" {
		conn, err := pgx.Connect(ctx, cfg.Source.Postgres.DSN)
		if err != nil {
			return "", err
		}
		defer conn.Close(context.Background())
		var s string
		if err := conn.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&s); err != nil {
			return "", err
		}
		lsn, err := pglogrepl.ParseLSN(s)
		if err != nil {
			return "", err
		}
		return wal.MakePosition(lsn), nil
	}
	dsn, err := cfg.sourceDSN()
	if err != nil {
		return "", err
	}
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		return "", err
	}
	defer db.Close()
	var version string
	if err := db.QueryRowContext(ctx, "SELECT VERSION()").Scan(&version); err != nil {
		return "", err
	}
	wantFile := form == "file" || (form == "" && cfg.Source.MySQL.GTID == binlog.GTIDOff)
	if !wantFile {
		var q string
		if strings.Contains(strings.ToLower(version), "mariadb") {
			q = "SELECT @@GLOBAL.gtid_binlog_pos"
		} else {
			var mode string
			if err := db.QueryRowContext(ctx, "SELECT @@GLOBAL.gtid_mode").Scan(&mode); err != nil {
				return "", err
			}
			if strings.EqualFold(mode, "ON") {
				q = "SELECT @@GLOBAL.gtid_executed"
			}
		}
		if q != "" {
			var set string
			if err := db.QueryRowContext(ctx, q).Scan(&set); err != nil {
				return "", err
			}
			if set = strings.NewReplacer("\n", "", " ", "").Replace(set); set != "" {
				return migrate.ParsePosition(binlog.Kind, set)
			}
		}
		if form != "" {
			return "", fmt.Errorf("the checkpoint is in %s form but the server has no GTIDs", form)
		}
	}
	file, pos, err := binlogStatus(ctx, db)
	if err != nil {
		return "", err
	}
	return migrate.ParsePosition(binlog.Kind, fmt.Sprintf("%s:%d", file, pos))
}

// binlogStatus returns the current binlog file and offset (SHOW BINARY
// LOG STATUS on MySQL 8.2+, SHOW MASTER STATUS before and on MariaDB).
func binlogStatus(ctx context.Context, db *sql.DB) (string, uint64, error) {
	var lastErr error
	for _, q := range []string{"SHOW BINARY LOG STATUS", "SHOW MASTER STATUS"} {
		rows, err := db.QueryContext(ctx, q)
		if err != nil {
			lastErr = err
			continue
		}
		defer rows.Close()
		cols, err := rows.Columns()
		if err != nil {
			return "", 0, err
		}
		if !rows.Next() {
			if err := rows.Err(); err != nil {
				return "", 0, err
			}
			return "", 0, errors.New(q + " returned nothing: binary logging is off")
		}
		vals := make([]sql.NullString, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			return "", 0, err
		}
		var file string
		var pos uint64
		for i, c := range cols {
			switch strings.ToLower(c) {
			case "file":
				file = vals[i].String
			case "position":
				if _, err := fmt.Sscan(vals[i].String, &pos); err != nil {
					return "", 0, fmt.Errorf("%s: position %q", q, vals[i].String)
				}
			}
		}
		if file == "" {
			return "", 0, fmt.Errorf("%s: no File column", q)
		}
		return file, pos, nil
	}
	return "", 0, lastErr
}
