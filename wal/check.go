package wal

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	outboxcdc "github.com/outbox-cdc/outbox-cdc"
	"github.com/rs/zerolog"
)

// Check is the preflight for `outbox-cdc check`: it connects with cfg's DSN
// (a normal connection, never a replication one, so a running connector is
// not disturbed) and reports wal_level, the role's REPLICATION attribute,
// the outbox table with its role columns and the SELECT privilege, the
// publication, the slot (existence, plugin, database, invalidation, lag)
// and whether from (the checkpoint, may be zero) fits the slot. name is the
// connector name from which unset slot and publication names derive. It
// changes nothing: a missing slot or publication that Run would create is
// reported as passing with what Run will do.
func Check(ctx context.Context, cfg Config, name string, cols outboxcdc.Columns, from outboxcdc.Position) []outboxcdc.CheckResult {
	s, err := New(cfg, name, cols, zerolog.Nop(), nil, nil)
	if err != nil {
		return []outboxcdc.CheckResult{outboxcdc.Fail("postgres.config", err.Error(), "fix the source section of the configuration")}
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	db, err := s.connectMeta(ctx)
	if err != nil {
		return []outboxcdc.CheckResult{outboxcdc.Fail("postgres.connect", err.Error(),
			"check source.dsn (host, port, user, password, database) and that the server is up")}
	}
	defer closeMeta(db)
	var version string
	_ = db.QueryRow(ctx, `SELECT current_setting('server_version')`).Scan(&version)
	out := []outboxcdc.CheckResult{outboxcdc.Pass("postgres.connect", outboxcdc.RedactDSN(cfg.DSN)+", PostgreSQL "+version)}

	var walLevel string
	if err := db.QueryRow(ctx, `SELECT current_setting('wal_level')`).Scan(&walLevel); err != nil {
		out = append(out, outboxcdc.Fail("postgres.wal_level", err.Error(), "check the connection"))
	} else if walLevel != "logical" {
		out = append(out, outboxcdc.Fail("postgres.wal_level", "wal_level is "+walLevel,
			"ALTER SYSTEM SET wal_level = logical; then restart PostgreSQL"))
	} else {
		out = append(out, outboxcdc.Pass("postgres.wal_level", "logical"))
	}

	var repl, super bool
	var user string
	if err := db.QueryRow(ctx, `SELECT current_user, rolreplication, rolsuper FROM pg_roles WHERE rolname = current_user`).Scan(&user, &repl, &super); err != nil {
		out = append(out, outboxcdc.Fail("postgres.privilege.replication", err.Error(), "check the connection"))
	} else if !repl && !super {
		out = append(out, outboxcdc.Fail("postgres.privilege.replication", "role "+user+" lacks the REPLICATION attribute",
			"ALTER ROLE "+pgx.Identifier{user}.Sanitize()+" WITH REPLICATION;"))
	} else {
		out = append(out, outboxcdc.Pass("postgres.privilege.replication", "role "+user+" may stream (REPLICATION or superuser)"))
	}

	if s.table != "" {
		out = append(out, s.checkTable(ctx, db)...)
	}
	out = append(out, s.checkPublication(ctx, db))
	out = append(out, s.checkSlot(ctx, db, from)...)
	return out
}

func (s *Source) checkTable(ctx context.Context, db *pgx.Conn) []outboxcdc.CheckResult {
	ident := pgx.Identifier{s.schema, s.table}.Sanitize()
	rows, err := db.Query(ctx, `SELECT column_name FROM information_schema.columns WHERE table_schema = $1 AND table_name = $2 ORDER BY ordinal_position`,
		s.schema, s.table)
	if err != nil {
		return []outboxcdc.CheckResult{outboxcdc.Fail("postgres.table", err.Error(), "check the connection")}
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return []outboxcdc.CheckResult{outboxcdc.Fail("postgres.table", err.Error(), "check the connection")}
	}
	if len(names) == 0 {
		return []outboxcdc.CheckResult{outboxcdc.Fail("postgres.table", "table "+ident+" does not exist (or the role cannot see it)",
			"create the outbox table, or fix source.table / the database in source.dsn")}
	}
	var missing []string
	for _, want := range []string{s.cols.MessageID, s.cols.AggregateType, s.cols.AggregateID, s.cols.EventType, s.cols.Payload} {
		found := false
		for _, n := range names {
			if n == want {
				found = true
			}
		}
		if !found {
			missing = append(missing, want)
		}
	}
	var out []outboxcdc.CheckResult
	if len(missing) > 0 {
		out = append(out, outboxcdc.Fail("postgres.table", fmt.Sprintf("table %s has no column %s (its columns: %s)",
			ident, strings.Join(missing, ", "), strings.Join(names, ", ")),
			"the route preset needs these columns: change the table, or route.preset / route.columns"))
	} else {
		out = append(out, outboxcdc.Pass("postgres.table", ident+" has the role columns "+strings.Join([]string{
			s.cols.MessageID, s.cols.AggregateType, s.cols.AggregateID, s.cols.EventType, s.cols.Payload}, ", ")))
	}
	var canSelect bool
	if err := db.QueryRow(ctx, `SELECT has_table_privilege($1, 'SELECT')`, ident).Scan(&canSelect); err != nil {
		out = append(out, outboxcdc.Fail("postgres.privilege.select", err.Error(), "check the connection"))
	} else if !canSelect {
		out = append(out, outboxcdc.Fail("postgres.privilege.select", "the role may not SELECT "+ident,
			"GRANT SELECT ON "+ident+" TO <role>; (pgoutput reads rows with the role's rights)"))
	} else {
		out = append(out, outboxcdc.Pass("postgres.privilege.select", "SELECT on "+ident))
	}
	return out
}

func (s *Source) checkPublication(ctx context.Context, db *pgx.Conn) outboxcdc.CheckResult {
	const name = "postgres.publication"
	pub := s.cfg.Publication
	var pubInsert bool
	err := db.QueryRow(ctx, `SELECT pubinsert FROM pg_publication WHERE pubname = $1`, pub).Scan(&pubInsert)
	tableIdent := pgx.Identifier{s.schema, s.table}.Sanitize()
	create := "CREATE PUBLICATION " + pgx.Identifier{pub}.Sanitize()
	if s.table != "" {
		create += " FOR TABLE " + tableIdent + " WITH (publish = 'insert')"
	} else if s.pats != nil {
		target, _, _ := s.publicationTarget()
		create += " FOR " + target + " WITH (publish = 'insert')"
	}
	switch {
	case errors.Is(err, pgx.ErrNoRows) && s.cfg.Create:
		return outboxcdc.Pass(name, fmt.Sprintf("publication %q does not exist yet; the connector creates it (source.create: true; the role must own the table)", pub))
	case errors.Is(err, pgx.ErrNoRows):
		return outboxcdc.Fail(name, fmt.Sprintf("publication %q does not exist and source.create is false", pub), "run "+create+"; as the table's owner, or set source.create: true")
	case err != nil:
		return outboxcdc.Fail(name, err.Error(), "check the connection")
	case s.table == "":
		return outboxcdc.Pass(name, fmt.Sprintf("publication %q exists", pub))
	case !pubInsert:
		return outboxcdc.Fail(name, fmt.Sprintf("publication %q does not publish inserts", pub),
			"ALTER PUBLICATION "+pgx.Identifier{pub}.Sanitize()+" SET (publish = 'insert');")
	}
	var n int
	if err := db.QueryRow(ctx, `SELECT count(*) FROM pg_publication_tables WHERE pubname = $1 AND schemaname = $2 AND tablename = $3`,
		pub, s.schema, s.table).Scan(&n); err != nil {
		return outboxcdc.Fail(name, err.Error(), "check the connection")
	}
	if n == 0 {
		return outboxcdc.Fail(name, fmt.Sprintf("publication %q does not include %s", pub, tableIdent),
			"ALTER PUBLICATION "+pgx.Identifier{pub}.Sanitize()+" ADD TABLE "+tableIdent+";")
	}
	return outboxcdc.Pass(name, fmt.Sprintf("publication %q publishes inserts of %s", pub, tableIdent))
}

func (s *Source) checkSlot(ctx context.Context, db *pgx.Conn, from outboxcdc.Position) []outboxcdc.CheckResult {
	const name = "postgres.slot"
	slot := s.cfg.Slot
	var ckpt pglogrepl.LSN
	if !from.IsZero() {
		lsn, err := ackLSN(from) // a mid-backfill checkpoint: its stream position (pending.go)
		if err != nil {
			return []outboxcdc.CheckResult{outboxcdc.Fail("postgres.position", err.Error(), "point checkpoint.path at this connector's own checkpoint")}
		}
		ckpt = lsn
	}
	si, err := querySlot(ctx, db, slot)
	if err != nil {
		return []outboxcdc.CheckResult{outboxcdc.Fail(name, err.Error(), "check the connection")}
	}
	if si == nil {
		switch {
		case ckpt != 0:
			if err := s.nameChanged(ctx, db, true, ckpt); err != nil {
				return []outboxcdc.CheckResult{outboxcdc.Fail(name, errors.Unwrap(err).Error(), "pin source.slot (and source.publication) to the old names if that slot is this connector's")}
			}
			return []outboxcdc.CheckResult{outboxcdc.Fail(name, fmt.Sprintf("replication slot %q does not exist, but the checkpoint (LSN %s) says the connector streamed from it: the changes after the checkpoint are gone", slot, ckpt),
				"the connector will not recreate it: delete the checkpoint deliberately and restart (streaming starts at the new slot's creation), and republish the rows committed in between")}
		case !s.cfg.Create:
			return []outboxcdc.CheckResult{outboxcdc.Fail(name, fmt.Sprintf("replication slot %q does not exist and source.create is false", slot),
				fmt.Sprintf("run SELECT pg_create_logical_replication_slot('%s', 'pgoutput'); or set source.create: true", slot))}
		}
		return []outboxcdc.CheckResult{outboxcdc.Pass(name, fmt.Sprintf("replication slot %q does not exist yet; the connector creates it at its first start (source.create: true)", slot))}
	}
	var dbName string
	_ = db.QueryRow(ctx, `SELECT current_database()`).Scan(&dbName)
	switch {
	case si.slotType != "logical" || si.plugin != "pgoutput":
		return []outboxcdc.CheckResult{outboxcdc.Fail(name, fmt.Sprintf("replication slot %q is a %s slot with plugin %q", slot, si.slotType, si.plugin),
			"choose another source.slot, or drop the slot if it is unused")}
	case si.database != dbName:
		return []outboxcdc.CheckResult{outboxcdc.Fail(name, fmt.Sprintf("replication slot %q belongs to database %q, source.dsn connects to %q", slot, si.database, dbName),
			"choose another source.slot or fix source.dsn")}
	case si.walStatus == "lost":
		return []outboxcdc.CheckResult{outboxcdc.Fail(name, fmt.Sprintf("replication slot %q is invalidated (wal_status = lost): WAL it needed was removed", slot),
			"drop the slot, delete the checkpoint, restart, and republish what was missed; raise max_slot_wal_keep_size")}
	}
	var lag int64
	var currentText string
	_ = db.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text, coalesce((pg_current_wal_lsn() - confirmed_flush_lsn)::bigint, 0)
		FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&currentText, &lag)
	detail := fmt.Sprintf("replication slot %q (pgoutput, wal_status %s, active %v) confirmed %s", slot, orNone(si.walStatus), si.active, si.confirmed)
	out := []outboxcdc.CheckResult{outboxcdc.Pass(name, detail)}
	lagDetail := fmt.Sprintf("%d bytes of WAL retained behind the slot's confirmed position", lag)
	if si.walStatus == "unreserved" {
		out = append(out, outboxcdc.Fail("postgres.slot_lag", lagDetail+"; wal_status is unreserved: the server is about to remove WAL the slot needs",
			"let the connector catch up now, or raise max_slot_wal_keep_size"))
	} else {
		out = append(out, outboxcdc.Pass("postgres.slot_lag", lagDetail))
	}
	if ckpt != 0 {
		current, _ := pglogrepl.ParseLSN(currentText)
		if current != 0 && ckpt > current {
			out = append(out, outboxcdc.Fail("postgres.position", fmt.Sprintf("the checkpoint (LSN %s) is ahead of this server's WAL (%s): written against another server", ckpt, current),
				"point source.dsn at the right server, or delete the checkpoint deliberately"))
		} else if ckpt < si.confirmed {
			out = append(out, outboxcdc.Fail("postgres.position", behindSlotCause(slot, ckpt, si.confirmed).Error()+
				": the connector refuses to start, the transactions in between cannot be streamed again", behindSlotHint(si.confirmed)))
		} else {
			out = append(out, outboxcdc.Pass("postgres.position", fmt.Sprintf("the checkpoint (LSN %s) can be resumed from the slot (confirmed %s)", ckpt, si.confirmed)))
		}
	}
	return out
}

func orNone(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

// CheckResume tells whether Run could resume from pos on the configured
// slot, for the commands that write a checkpoint by hand (`position set`,
// `position import-debezium`). It returns an error wrapping ErrBehindSlot
// when pos is behind the slot's confirmed_flush_lsn (Run would refuse it:
// a logical slot cannot be rewound), another error when the slot could not
// be looked up, and nil otherwise, also when the slot does not exist (Run
// reports that itself). name is the connector name, as for New.
func CheckResume(ctx context.Context, cfg Config, name string, pos outboxcdc.Position) error {
	lsn, err := ackLSN(pos)
	if err != nil {
		return err
	}
	s, err := New(cfg, name, outboxcdc.Columns{}, zerolog.Nop(), nil, nil)
	if err != nil {
		return err
	}
	db, err := s.connectMeta(ctx)
	if err != nil {
		return err
	}
	defer closeMeta(db)
	qctx, cancel := context.WithTimeout(ctx, s.cfg.QueryTimeout)
	defer cancel()
	si, err := querySlot(qctx, db, s.cfg.Slot)
	if err != nil || si == nil {
		return err
	}
	if lsn < si.confirmed {
		return behindSlot(s.cfg.Slot, lsn, si.confirmed)
	}
	return nil
}
