package wal

import (
	"context"
	"database/sql"
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
// (a normal connection, and a replication connection that runs
// IDENTIFY_SYSTEM and TIMELINE_HISTORY only and never touches the slot, so
// a running connector is not disturbed) and reports wal_level, the role's
// REPLICATION attribute, the outbox table with its role columns and the
// SELECT privilege, the publication, the server's identity, the slot
// (existence, plugin, database, invalidation, lag) and whether from (the
// checkpoint, may be zero) is on the server's history and fits the slot,
// as every connect of Run proves it (identity.go). name is the
// connector name from which unset slot and publication names derive. It
// changes nothing: a missing slot or publication that Run would create is
// reported as passing with what Run will do, or failing when the role
// cannot create it.
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
	if s.cfg.FailoverSlot {
		out = append(out, s.checkFailover(ctx, db))
	}
	return out
}

// checkFailover reports on source.failover_slot: refused before
// PostgreSQL 17; from 17 on, whether the slot is a failover slot and the
// primary holds changes back for its standbys (synchronized_standby_slots).
func (s *Source) checkFailover(ctx context.Context, db *pgx.Conn) outboxcdc.CheckResult {
	const name = "postgres.failover_slot"
	var versionText string
	var version int
	if err := db.QueryRow(ctx, `SELECT current_setting('server_version'), current_setting('server_version_num')::int`).Scan(&versionText, &version); err != nil {
		return outboxcdc.Fail(name, err.Error(), "check the connection")
	}
	if err := checkFailoverVersion(true, version, versionText); err != nil {
		return outboxcdc.Fail(name, "PostgreSQL "+versionText+" has no failover slots (17 and later)",
			`set source.failover_slot: false; before 17 use Patroni permanent slots (docs/operations.md, "Failover runbook")`)
	}
	var failover sql.NullBool
	var standbys string
	err := db.QueryRow(ctx, `SELECT (SELECT failover FROM pg_replication_slots WHERE slot_name = $1), coalesce(current_setting('synchronized_standby_slots', true), '')`, s.cfg.Slot).
		Scan(&failover, &standbys)
	switch {
	case err != nil:
		return outboxcdc.Fail(name, err.Error(), "check the connection")
	case failover.Valid && !failover.Bool:
		return outboxcdc.Pass(name, fmt.Sprintf("replication slot %q is not a failover slot yet; the connector makes it one at its next start (ALTER_REPLICATION_SLOT)", s.cfg.Slot))
	case standbys == "":
		return outboxcdc.Fail(name, "synchronized_standby_slots is empty: the connector may publish changes no standby has received, and after a promotion its checkpoint then lies past the fork point",
			"list the standbys' physical slots in synchronized_standby_slots on the primary (docs/operations.md, \"Failover runbook\")")
	}
	return outboxcdc.Pass(name, "failover slot; the primary holds changes back for the standbys of synchronized_standby_slots = "+standbys)
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
	switch {
	case errors.Is(err, pgx.ErrNoRows) && s.cfg.Create:
		return s.checkCreatePublication(ctx, db)
	case errors.Is(err, pgx.ErrNoRows):
		return outboxcdc.Fail(name, fmt.Sprintf("publication %q does not exist and source.create is false", pub),
			"run "+s.createPublicationSQL()+"; as the table's owner (or a superuser), or set source.create: true")
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

// createPublicationSQL is the statement the connector runs to create the
// publication (ensurePublication, ensureTablesPublication).
func (s *Source) createPublicationSQL() string {
	create := "CREATE PUBLICATION " + pgx.Identifier{s.cfg.Publication}.Sanitize()
	switch {
	case s.table != "":
		publish := "insert"
		if s.cols.OnUpdate != "" && s.cols.OnUpdate != "skip" {
			publish = "insert, update"
		}
		create += " FOR TABLE " + pgx.Identifier{s.schema, s.table}.Sanitize() + " WITH (publish = '" + publish + "')"
	case s.pats != nil:
		target, _, _ := s.publicationTarget()
		create += " FOR " + target + " WITH (publish = 'insert')"
	}
	return create
}

// checkCreatePublication judges, for a publication that does not exist
// yet and source.create: true, whether the role can create it as the
// connector will: PostgreSQL wants the CREATE privilege on the database
// and ownership of every table named FOR TABLE, and a superuser for FOR
// TABLES IN SCHEMA and FOR ALL TABLES. A role that cannot fails here
// rather than at the first start ("permission denied for database",
// "must be owner of table").
func (s *Source) checkCreatePublication(ctx context.Context, db *pgx.Conn) outboxcdc.CheckResult {
	const name = "postgres.publication"
	pub := s.cfg.Publication
	create := s.createPublicationSQL() + ";"
	var user, dbName string
	var super, canCreate bool
	if err := db.QueryRow(ctx, `SELECT current_user, current_database(), r.rolsuper, has_database_privilege(current_database(), 'CREATE')
		FROM pg_roles r WHERE r.rolname = current_user`).Scan(&user, &dbName, &super, &canCreate); err != nil {
		return outboxcdc.Fail(name, err.Error(), "check the connection")
	}
	if super {
		return outboxcdc.Pass(name, fmt.Sprintf("publication %q does not exist yet; the connector creates it (source.create: true) as role %s, a superuser", pub, user))
	}
	roleIdent := pgx.Identifier{user}.Sanitize()
	asSuperuser := "have a superuser run " + create + " (the connector then uses it)"
	_, schemas, all := s.publicationTarget()
	if s.pats != nil && (all || len(schemas) > 0) {
		what := "FOR ALL TABLES"
		if !all {
			what = "FOR TABLES IN SCHEMA"
		}
		return outboxcdc.Fail(name, fmt.Sprintf("publication %q does not exist, and role %s cannot create it: a publication %s needs a superuser", pub, user, what),
			asSuperuser)
	}
	var tables [][2]string
	if s.table != "" {
		tables = append(tables, [2]string{s.schema, s.table})
	}
	for _, p := range s.pats {
		if p.Literal() {
			tables = append(tables, [2]string{p.Schema.Text, p.Table.Text})
		}
	}
	var missing, grants []string
	if !canCreate {
		missing = append(missing, "the CREATE privilege on database "+dbName)
		grants = append(grants, "GRANT CREATE ON DATABASE "+pgx.Identifier{dbName}.Sanitize()+" TO "+roleIdent+";")
	}
	for _, t := range tables {
		ident := pgx.Identifier{t[0], t[1]}.Sanitize()
		var owns bool
		var owner string
		err := db.QueryRow(ctx, `SELECT pg_has_role(current_user, c.relowner, 'USAGE'), pg_get_userbyid(c.relowner)
			FROM pg_class c WHERE c.oid = to_regclass($1)`, ident).Scan(&owns, &owner)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			continue // a missing table is postgres.table's failure
		case err != nil:
			return outboxcdc.Fail(name, err.Error(), "check the connection")
		case !owns:
			missing = append(missing, fmt.Sprintf("ownership of %s (owned by %s)", ident, owner))
			grants = append(grants, "ALTER TABLE "+ident+" OWNER TO "+roleIdent+";")
		}
	}
	if len(missing) == 0 {
		return outboxcdc.Pass(name, fmt.Sprintf("publication %q does not exist yet; the connector creates it (source.create: true): role %s has CREATE on database %s and owns the outbox table", pub, user, dbName))
	}
	return outboxcdc.Fail(name, fmt.Sprintf("publication %q does not exist, and role %s cannot create it: it lacks %s (the connector would fail at start with \"permission denied\" or \"must be owner\")",
		pub, user, strings.Join(missing, " and ")),
		asSuperuser+"; or let the role create it: "+strings.Join(grants, " "))
}

func (s *Source) checkSlot(ctx context.Context, db *pgx.Conn, from outboxcdc.Position) []outboxcdc.CheckResult {
	const name = "postgres.slot"
	slot := s.cfg.Slot
	var ckpt pglogrepl.LSN
	var claimed Identity
	if !from.IsZero() {
		lsn, id, err := ackPosition(from) // a mid-backfill checkpoint: its stream position (pending.go)
		if err != nil {
			return []outboxcdc.CheckResult{outboxcdc.Fail("postgres.position", err.Error(), "point checkpoint.path at this connector's own checkpoint")}
		}
		ckpt, claimed = lsn, id
	}
	// The server's identity and timeline history come from a replication
	// connection that runs IDENTIFY_SYSTEM and TIMELINE_HISTORY only: it
	// touches no slot, so a running connector is not disturbed.
	var out []outboxcdc.CheckResult
	var srv *serverInfo
	var pl placement
	if conn, err := s.connectReplication(ctx); err != nil {
		out = append(out, outboxcdc.Fail("postgres.server", err.Error(), "the role needs the REPLICATION attribute, and max_wal_senders a free walsender"))
	} else {
		srv, err = s.identify(ctx, conn)
		if err == nil && ckpt != 0 {
			pl, err = s.placeOn(ctx, conn, srv, ckpt, claimed)
		}
		closeRepl(conn)
		if err != nil {
			out = append(out, outboxcdc.Fail("postgres.server", err.Error(), "check the connection and the REPLICATION attribute"))
			srv = nil
		} else {
			out = append(out, outboxcdc.Pass("postgres.server", fmt.Sprintf("%s, WAL flushed to %s", srv.id, srv.flushed)))
		}
	}
	si, err := querySlot(ctx, db, slot)
	if err != nil {
		return append(out, outboxcdc.Fail(name, err.Error(), "check the connection"))
	}
	if si == nil {
		switch {
		case ckpt != 0:
			if err := s.nameChanged(ctx, db, true, ckpt); err != nil {
				return append(out, outboxcdc.Fail(name, errors.Unwrap(err).Error(), "pin source.slot (and source.publication) to the old names if that slot is this connector's"))
			}
			if srv == nil {
				return append(out, outboxcdc.Fail(name, fmt.Sprintf("replication slot %q does not exist, but the checkpoint (LSN %s) says the connector streamed from it", slot, ckpt),
					`the connector will not create it again; see docs/operations.md, "Failover runbook"`))
			}
			cause, hint, _ := s.slotMissingCause(&runState{checkpoint: true, resume: ckpt, ident: claimed}, srv, pl)
			return append(out, outboxcdc.Fail(name, cause.Error(), hint))
		case !s.cfg.Create:
			return append(out, outboxcdc.Fail(name, fmt.Sprintf("replication slot %q does not exist and source.create is false", slot),
				fmt.Sprintf("run SELECT pg_create_logical_replication_slot('%s', 'pgoutput'); or set source.create: true", slot)))
		}
		return append(out, outboxcdc.Pass(name, fmt.Sprintf("replication slot %q does not exist yet; the connector creates it at its first start (source.create: true)", slot)))
	}
	var dbName string
	_ = db.QueryRow(ctx, `SELECT current_database()`).Scan(&dbName)
	switch {
	case si.slotType != "logical" || si.plugin != "pgoutput":
		return append(out, outboxcdc.Fail(name, fmt.Sprintf("replication slot %q is a %s slot with plugin %q", slot, si.slotType, si.plugin),
			"choose another source.slot, or drop the slot if it is unused"))
	case si.database != dbName:
		return append(out, outboxcdc.Fail(name, fmt.Sprintf("replication slot %q belongs to database %q, source.dsn connects to %q", slot, si.database, dbName),
			"choose another source.slot or fix source.dsn"))
	case si.walStatus == "lost":
		return append(out, outboxcdc.Fail(name, fmt.Sprintf("replication slot %q is invalidated (wal_status = lost): WAL it needed was removed", slot),
			"drop the slot, delete the checkpoint, restart, and republish what was missed; raise max_slot_wal_keep_size"))
	}
	var lag int64
	_ = db.QueryRow(ctx, `SELECT coalesce((pg_current_wal_lsn() - confirmed_flush_lsn)::bigint, 0)
		FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&lag)
	detail := fmt.Sprintf("replication slot %q (pgoutput, wal_status %s, active %v) confirmed %s", slot, orNone(si.walStatus), si.active, si.confirmed)
	out = append(out, outboxcdc.Pass(name, detail))
	lagDetail := fmt.Sprintf("%d bytes of WAL retained behind the slot's confirmed position", lag)
	if si.walStatus == "unreserved" {
		out = append(out, outboxcdc.Fail("postgres.slot_lag", lagDetail+"; wal_status is unreserved: the server is about to remove WAL the slot needs",
			"let the connector catch up now, or raise max_slot_wal_keep_size"))
	} else {
		out = append(out, outboxcdc.Pass("postgres.slot_lag", lagDetail))
	}
	if ckpt != 0 {
		out = append(out, s.checkPosition(ckpt, claimed, srv, pl, si))
	}
	return out
}

// checkPosition judges the checkpoint ckpt (read on claimed) against the
// server srv (nil: not identified) and its slot si, as every connect of
// `run` does (proveSlot).
func (s *Source) checkPosition(ckpt pglogrepl.LSN, claimed Identity, srv *serverInfo, pl placement, si *slotInfo) outboxcdc.CheckResult {
	const name = "postgres.position"
	if srv == nil {
		return outboxcdc.Fail(name, fmt.Sprintf("the checkpoint (LSN %s) cannot be proven to be on this server's history: the server could not be identified (see postgres.server)", ckpt),
			"fix postgres.server first")
	}
	if pl.problem != "" {
		return outboxcdc.Fail(name, pl.problem+": the connector refuses to start", s.recovery(srv, pl.common, si))
	}
	if ckpt < si.confirmed {
		cause := behindSlotCause(s.cfg.Slot, ckpt, si.confirmed).Error()
		if claimed.Known() && claimed != srv.id {
			cause = fmt.Sprintf("replication slot %q has confirmed_flush_lsn %s, past the checkpoint (LSN %s on %s): after the promotion to this server (%s) the slot was created again or advanced",
				s.cfg.Slot, si.confirmed, ckpt, claimed, srv.id)
		}
		return outboxcdc.Fail(name, cause+": the connector refuses to start, the transactions in between cannot be streamed again",
			behindSlotHint(s.recovery(srv, pl.common, si)))
	}
	switch {
	case !claimed.Known():
		return outboxcdc.Warn(name, fmt.Sprintf("the checkpoint (LSN %s) can be resumed from the slot (confirmed %s); it carries no server identity (written by an earlier version, or set by hand), "+
			"so only that it is not ahead of this server's WAL is proven, not its system and timeline", ckpt, si.confirmed),
			"make sure source.dsn reaches the server the checkpoint was written against; the connector records this server's identity at its next checkpoint")
	case claimed != srv.id:
		return outboxcdc.Pass(name, fmt.Sprintf("the checkpoint (LSN %s on %s) lies on this server's history, before its fork at %s, and the slot (confirmed %s) has not passed it",
			ckpt, claimed, pl.fork, si.confirmed))
	}
	return outboxcdc.Pass(name, fmt.Sprintf("the checkpoint (LSN %s on %s) is this server's and can be resumed from the slot (confirmed %s)", ckpt, claimed, si.confirmed))
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
// a logical slot cannot be rewound), one wrapping ErrSlotChanged when pos
// names another system or a timeline it is not on (identity.go), another
// error when the server or the slot could not be looked up, and nil
// otherwise, also when the slot does not exist (Run reports that itself).
// name is the connector name, as for New.
func CheckResume(ctx context.Context, cfg Config, name string, pos outboxcdc.Position) error {
	lsn, claimed, err := ackPosition(pos)
	if err != nil {
		return err
	}
	s, err := New(cfg, name, outboxcdc.Columns{}, zerolog.Nop(), nil, nil)
	if err != nil {
		return err
	}
	conn, err := s.connectReplication(ctx)
	if err != nil {
		return err
	}
	defer closeRepl(conn)
	srv, err := s.identify(ctx, conn)
	if err != nil {
		return err
	}
	pl, err := s.placeOn(ctx, conn, srv, lsn, claimed)
	if err != nil {
		return err
	}
	si, err := s.replSlot(ctx, conn)
	if err != nil {
		return err
	}
	if pl.problem != "" {
		return s.slotChanged(pl.problem, srv, pl, si)
	}
	if si != nil && lsn < si.confirmed {
		return behindSlot(s.cfg.Slot, lsn, si.confirmed, s.recovery(srv, pl.common, si))
	}
	return nil
}
