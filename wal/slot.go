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
)

// The replication slot: found, created, checked against the checkpoint,
// and a busy slot reported or taken over.

type slotInfo struct {
	plugin, slotType, database, walStatus string
	active                                bool
	activePID                             int32
	confirmed, restart                    pglogrepl.LSN
}

func querySlot(ctx context.Context, db *pgx.Conn, name string) (*slotInfo, error) {
	var si slotInfo
	var confirmed, restart string
	err := db.QueryRow(ctx, `SELECT coalesce(plugin::text, ''), slot_type::text, coalesce(database::text, ''), active,
		coalesce(active_pid, 0), coalesce(confirmed_flush_lsn::text, ''), coalesce(restart_lsn::text, ''), coalesce(wal_status, '')
		FROM pg_replication_slots WHERE slot_name = $1`, name).
		Scan(&si.plugin, &si.slotType, &si.database, &si.active, &si.activePID, &confirmed, &restart, &si.walStatus)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, classify(fmt.Errorf("look up replication slot %q: %w", name, err))
	}
	if confirmed != "" {
		if si.confirmed, err = pglogrepl.ParseLSN(confirmed); err != nil {
			return nil, fmt.Errorf("slot %q confirmed_flush_lsn %q: %w", name, confirmed, err)
		}
	}
	if restart != "" {
		if si.restart, err = pglogrepl.ParseLSN(restart); err != nil {
			return nil, fmt.Errorf("slot %q restart_lsn %q: %w", name, restart, err)
		}
	}
	return &si, nil
}

// slotCreateTimeout bounds creating a slot: the server waits for the
// transactions open at that moment to end before the slot is consistent.
const slotCreateTimeout = 5 * time.Minute

// ensureSlot verifies (or creates) the slot and, on a fresh start, fixes
// the start position; srv is the server the replication connection
// reached, pl where the positions held lie on its history (both for the
// messages; proveSlot judges them). Every query is bounded by
// QueryTimeout, the creation by slotCreateTimeout.
func (s *Source) ensureSlot(ctx context.Context, db *pgx.Conn, st *runState, srv *serverInfo, pl placement) error {
	slot := s.cfg.Slot
	qctx, cancel := context.WithTimeout(ctx, s.cfg.QueryTimeout)
	defer cancel()
	si, err := querySlot(qctx, db, slot)
	if err != nil {
		return s.timedOut(qctx, "look up the replication slot", err)
	}
	if si == nil {
		switch {
		case st.checkpoint || st.haveSlot:
			if !st.haveSlot {
				if err := s.nameChanged(qctx, db, true, st.resume); err != nil {
					return err
				}
			}
			return s.slotMissing(st, srv, pl)
		case !s.cfg.Create:
			return permanent(mark(ErrSlot, fmt.Errorf("replication slot %q does not exist and source.create is false: run SELECT pg_create_logical_replication_slot('%s', 'pgoutput'); or set source.create: true", slot, slot)))
		}
		if s.legacySlot != "" {
			if old, err := querySlot(qctx, db, s.legacySlot); err == nil && old != nil {
				s.log.Warn().Str("legacy_slot", s.legacySlot).
					Msg("a slot exists under the name earlier versions derived from this connector name; this connector now uses its own (hash-suffixed) slot. If the old slot is this connector's, stop, pin source.slot/source.publication to the old names and move the checkpoint back; otherwise drop it when unused, it pins WAL")
			}
		}
		create, err := createSlotSQL(srv.version, s.cfg.FailoverSlot)
		if err != nil {
			return err
		}
		cctx, ccancel := context.WithTimeout(ctx, slotCreateTimeout)
		var lsn string
		err = db.QueryRow(cctx, create, slot).Scan(&lsn)
		ccancel()
		if err != nil && pgCode(err) != codeDuplicateObject {
			if ctx.Err() == nil && errors.Is(cctx.Err(), context.DeadlineExceeded) {
				return fmt.Errorf("create replication slot %q: not done within %s: the server waits for every transaction open when the slot was requested to end; "+
					"look for long-running transactions (pg_stat_activity.xact_start): %w", slot, slotCreateTimeout, err)
			}
			return createSlotError(slot, err)
		}
		if err == nil {
			s.log.Info().Str("consistent_lsn", lsn).Bool("failover", s.cfg.FailoverSlot).Msg("created replication slot (pgoutput)")
		}
		// A fresh bound for the rest: the creation may have taken long.
		after, cancelAfter := context.WithTimeout(ctx, s.cfg.QueryTimeout)
		defer cancelAfter()
		qctx = after
		if si, err = querySlot(qctx, db, slot); err != nil {
			return s.timedOut(qctx, "look up the replication slot", err)
		}
		if si == nil {
			return fmt.Errorf("replication slot %q vanished right after creation", slot)
		}
	}
	if si.slotType != "logical" || si.plugin != "pgoutput" {
		return permanent(mark(ErrSlot, fmt.Errorf("replication slot %q is a %s slot with plugin %q, not a logical pgoutput slot: choose another source.slot, or drop it if it is unused", slot, si.slotType, si.plugin)))
	}
	var dbName string
	if err := db.QueryRow(qctx, `SELECT current_database()`).Scan(&dbName); err != nil {
		return s.timedOut(qctx, "read the database name", classify(err))
	}
	if si.database != dbName {
		return permanent(fmt.Errorf("replication slot %q belongs to database %q, but source.dsn connects to %q: choose another source.slot or fix the DSN", slot, si.database, dbName))
	}
	if si.walStatus == "lost" {
		return permanent(fmt.Errorf("replication slot %q is invalidated (wal_status = lost): the server removed WAL it still needed (max_slot_wal_keep_size), so changes are gone. "+
			"Drop the slot, delete the checkpoint, restart, and republish what was missed", slot))
	}
	if si.walStatus == "unreserved" {
		s.log.Warn().Msg("replication slot wal_status is 'unreserved': the server is about to remove WAL it needs; the connector is falling behind max_slot_wal_keep_size")
	}
	if si.active {
		return s.slotBusy(ctx, db, fmt.Errorf("replication slot %q is active for PID %d", slot, si.activePID))
	}

	if !st.haveSlot {
		if !st.checkpoint {
			st.resume = si.confirmed
			if s.cfg.Start == StartLatest && srv.flushed > si.confirmed {
				st.resume = srv.flushed
			}
			s.ack.Store(uint64(st.resume))
			s.log.Info().Str("start", s.cfg.Start).Str("start_lsn", st.resume.String()).
				Str("confirmed_flush_lsn", si.confirmed.String()).Msg("no checkpoint: first run")
			// Saved before anything is read: with start: latest a restart
			// would otherwise jump to the WAL end of then, past what the
			// slot holds. It carries this server's identity, as every
			// position issued from here on does.
			if err := s.saveStart(ctx, srv.id.Position(st.resume)); err != nil {
				return err
			}
		}
		st.haveSlot = true
	}
	return nil
}

// slotMissing is the error for a slot that does not exist although the
// checkpoint, or this Run, streamed from it. The slot is never created
// again then: a new slot starts at its creation, after everything
// committed since the checkpoint.
func (s *Source) slotMissing(st *runState, srv *serverInfo, pl placement) error {
	cause, hint, promoted := s.slotMissingCause(st, srv, pl)
	if promoted {
		return mark(ErrSlot, withHint(ErrSlotChanged, cause, hint))
	}
	return withHint(ErrSlot, cause, hint)
}

// slotMissingCause is slotMissing's message and remedy; promoted says the
// server was promoted since the positions held were read.
func (s *Source) slotMissingCause(st *runState, srv *serverInfo, pl placement) (cause error, hint string, promoted bool) {
	slot := s.cfg.Slot
	what := fmt.Sprintf("the checkpoint (LSN %s) says this connector streamed from it", st.resume)
	if st.haveSlot {
		what = fmt.Sprintf("this connector streamed from it until %s", st.resume)
	}
	hint = s.recovery(srv, pl.common, nil)
	if st.ident.Known() && st.ident.System == srv.id.System && st.ident.Timeline < srv.id.Timeline {
		fork := ""
		if pl.fork != 0 {
			fork = fmt.Sprintf(", which left the checkpoint's timeline at %s", pl.fork)
		}
		return fmt.Errorf("replication slot %q does not exist on this server, but %s on timeline %d: this server (%s%s) was promoted since, "+
			"and the slot stayed on the old primary (it was neither a failover slot synchronized to this standby nor a Patroni permanent slot). "+
			"It was NOT created here: a slot created now would start at its creation and skip what this server committed before it",
			slot, what, st.ident.Timeline, srv.id, fork), hint, true
	}
	return fmt.Errorf("replication slot %q does not exist, but %s: the slot was dropped, and the transactions committed since can no longer be streamed. "+
		"It was NOT created again: a new slot would start at its creation and skip them", slot, what), hint, false
}

// nameChanged returns ErrNameChanged when the derived slot (slot true)
// or publication, which does not exist although the checkpoint (at from,
// for the message) says the connector streamed, exists under the name
// earlier versions derived (DeriveName), else nil. The error names every
// old name to pin.
func (s *Source) nameChanged(ctx context.Context, db *pgx.Conn, slot bool, from pglogrepl.LSN) error {
	exists := func(q, name string) bool {
		var n int
		return name != "" && db.QueryRow(ctx, q, name).Scan(&n) == nil && n > 0
	}
	oldSlot := exists(`SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1`, s.legacySlot)
	oldPub := exists(`SELECT count(*) FROM pg_publication WHERE pubname = $1`, s.legacyPub)
	var cause error
	switch {
	case slot && oldSlot:
		cause = fmt.Errorf("replication slot %q does not exist, but the checkpoint (LSN %s) says this connector streamed, and slot %q exists: the name earlier versions derived from the connector name",
			s.cfg.Slot, from, s.legacySlot)
	case !slot && oldPub:
		cause = fmt.Errorf("publication %q does not exist, but a checkpoint exists, and publication %q does: the name earlier versions derived from the connector name",
			s.cfg.Publication, s.legacyPub)
	default:
		return nil
	}
	var pins []string
	if oldSlot {
		pins = append(pins, "source.slot: "+s.legacySlot)
	}
	if oldPub {
		pins = append(pins, "source.publication: "+s.legacyPub)
	}
	return permanent(withHint(ErrNameChanged, cause,
		"a connector name that is not already a legal slot name (upper case, '-', other characters, more than 52 characters) "+
			"now derives a hash-suffixed name, because altered names made connectors such as orders-outbox and orders_outbox share one slot; "+
			"if the old objects are this connector's and no other connector uses them, pin the old names in the configuration: "+strings.Join(pins, " and ")))
}

// slotBusy logs who holds the slot and returns a retryable error (marked
// transient: the holder may go away).
func (s *Source) slotBusy(ctx context.Context, db *pgx.Conn, cause error) error {
	if s.cfg.TakeOverSlot && db != nil {
		err := s.takeOverSlot(ctx, db, cause)
		if !outboxcdc.IsClassified(err) {
			err = outboxcdc.Transient(err)
		}
		return err
	}
	var pid int32
	var app, addr string
	if db != nil {
		ctx, cancel := context.WithTimeout(ctx, s.cfg.QueryTimeout)
		defer cancel()
		_ = db.QueryRow(ctx, `SELECT coalesce(r.active_pid, 0), coalesce(a.application_name, ''), coalesce(host(a.client_addr), 'local')
			FROM pg_replication_slots r LEFT JOIN pg_stat_activity a ON a.pid = r.active_pid WHERE r.slot_name = $1`, s.cfg.Slot).
			Scan(&pid, &app, &addr)
	}
	s.log.Warn().Int32("active_pid", pid).Str("holder_application", app).Str("holder_addr", addr).
		Msg("replication slot is in use by another connection (another instance, or a walsender that has not exited yet); retrying")
	return outboxcdc.Transient(fmt.Errorf("slot busy: %w", cause))
}
