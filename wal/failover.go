package wal

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Failover slots (source.failover_slot, PostgreSQL 17 and later).
//
// A logical slot lives on one server: after a promotion the new primary
// has no slot of the connector unless something put one there. PostgreSQL
// 17 synchronizes slots created with failover = true to physical standbys
// that run the slot sync worker (sync_replication_slots = on,
// hot_standby_feedback, a primary_slot_name), and with
// synchronized_standby_slots set on the primary the walsender sends no
// change the listed standbys have not received, so the checkpoint never
// lies past the fork point of a promotion. The synchronized slot then
// passes the proof of every connect (identity.go) like the original; it is
// never exempted from it. Before 17 the same role is played by Patroni's
// permanent slots (docs/operations.md, "Failover runbook").
//
// Only PostgreSQL 15 was available where this was written: the commands
// for 17 follow its documentation and are not run by any test here.

// failoverVersion is the first server_version_num with failover slots.
const failoverVersion = 170000

// checkFailoverVersion refuses source.failover_slot on a server without
// failover slots: silently creating an ordinary slot would leave the
// operator believing the slot survives a promotion.
func checkFailoverVersion(failover bool, version int, versionText string) error {
	if failover && version < failoverVersion {
		return permanent(fmt.Errorf("source.failover_slot is true, but this server is PostgreSQL %s: failover slots need PostgreSQL 17 or later. "+
			"Set source.failover_slot: false; to keep the slot across a promotion before 17, use Patroni permanent slots (docs/operations.md, \"Failover runbook\")", versionText))
	}
	return nil
}

// createSlotSQL is the statement that creates the slot ($1) on a server of
// version (server_version_num), as a failover slot when failover.
func createSlotSQL(version int, failover bool) (string, error) {
	if !failover {
		return `SELECT lsn::text FROM pg_create_logical_replication_slot($1, 'pgoutput')`, nil
	}
	if version < failoverVersion {
		return "", errors.New("failover slots need PostgreSQL 17 or later")
	}
	// (slot_name, plugin, temporary, twophase, failover)
	return `SELECT lsn::text FROM pg_create_logical_replication_slot($1, 'pgoutput', false, false, true)`, nil
}

// createSlotCommand is the replication command that creates the slot and
// exports its snapshot to the transaction (source.start: pending).
func createSlotCommand(slot string, version int, failover bool) (string, error) {
	name := pgx.Identifier{slot}.Sanitize()
	if !failover {
		return "CREATE_REPLICATION_SLOT " + name + " LOGICAL pgoutput USE_SNAPSHOT", nil
	}
	if version < failoverVersion {
		return "", errors.New("failover slots need PostgreSQL 17 or later")
	}
	return "CREATE_REPLICATION_SLOT " + name + " LOGICAL pgoutput (SNAPSHOT 'use', FAILOVER true)", nil
}

// ensureFailover makes an existing slot a failover slot when
// source.failover_slot asks for it (a slot created by hand, or before the
// key was set), and warns when the primary does not hold back changes its
// standbys have not received.
func (s *Source) ensureFailover(ctx context.Context, db *pgx.Conn, conn *pgconn.PgConn, srv *serverInfo) error {
	if !s.cfg.FailoverSlot || srv.version < failoverVersion {
		return nil // preflight refused failover_slot before 17
	}
	qctx, cancel := context.WithTimeout(ctx, s.cfg.QueryTimeout)
	defer cancel()
	var failover bool
	var standbys string
	err := db.QueryRow(qctx, `SELECT failover, coalesce(current_setting('synchronized_standby_slots', true), '') FROM pg_replication_slots WHERE slot_name = $1`, s.cfg.Slot).
		Scan(&failover, &standbys)
	if err != nil {
		return s.timedOut(qctx, "read the slot's failover setting", classify(fmt.Errorf("read replication slot %q failover setting: %w", s.cfg.Slot, err)))
	}
	if !failover {
		cmd := "ALTER_REPLICATION_SLOT " + pgx.Identifier{s.cfg.Slot}.Sanitize() + " (FAILOVER true)"
		if _, err := conn.Exec(qctx, cmd).ReadAll(); err != nil {
			return s.timedOut(qctx, "make the slot a failover slot", classify(fmt.Errorf("%s: %w", cmd, err)))
		}
		s.log.Info().Msg("replication slot is now a failover slot (source.failover_slot)")
	}
	if standbys == "" {
		s.log.Warn().Msg("source.failover_slot: synchronized_standby_slots is empty on the primary, so the connector may publish changes a standby has not received; " +
			"after a promotion of that standby the checkpoint then lies past the fork point and the connector stops for the runbook (docs/operations.md, \"Failover runbook\")")
	}
	return nil
}
