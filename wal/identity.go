package wal

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
)

// The slot and the server are the checkpoint's, on every connect.
//
// A checkpoint promises that the server still holds, through the slot,
// every transaction that commits after it. Three things break that promise
// without the server saying a word:
//
//   - source.dsn reaches another cluster: its LSNs are another history.
//   - The server is a promoted standby that had not received all of the
//     WAL the checkpoint was read from. The checkpoint's LSN then lies past
//     the fork point on the old timeline; on the new timeline the same
//     LSNs hold other transactions, and START_REPLICATION at the checkpoint
//     would skip those up to it.
//   - The slot is not the one the connector confirmed to: dropped and
//     created again under the same name (by an operator, by a failover
//     script, by Patroni on a new primary), or advanced by something else.
//     The server then starts at the slot's confirmed position and silently
//     skips what committed after the checkpoint.
//
// So every connect, the first of a process and each reconnect, proves on
// the replication connection that is about to stream (proveSlot):
//
//  1. IDENTIFY_SYSTEM: the system identifier is the checkpoint's. It is set
//     by initdb and shared by a primary and every physical standby cloned
//     from it, so a promoted standby passes and another cluster does not.
//  2. The checkpoint is on this server's history: on the server's own
//     timeline, at or before its flush position; or on an earlier timeline
//     that TIMELINE_HISTORY lists, at or before the point where the
//     server's history left it (the fork point).
//  3. The slot's confirmed_flush_lsn is at or before the last position
//     this connector confirmed (the durable checkpoint). Every status
//     update this source sends confirms at most that position, so the slot
//     it streamed never confirms past it. A slot created again starts at its
//     creation point, which lies after every WAL position the connector
//     saw before it was dropped: it fails this test, and so does a slot
//     advanced past the checkpoint by something else.
//
// Positions carry the identity of the session they were read in (the
// system identifier and the server's timeline: Identity), so the file, the
// table and the exactly-once progress record store it without knowing.
//
// The slot has no identity of its own to compare (no creation time or
// OID in pg_replication_slots); restart_lsn and catalog_xmin move with its
// progress, and a new slot's values cannot be told from an advanced old
// one's. What is provable is 3: the connector's own confirmations bound
// the slot it streamed.
//
// What cannot be proven. A checkpoint in the short form (written by an
// earlier version, typed by hand, imported from Debezium) has no identity:
// only 2 at the same timeline (not ahead of the server's WAL) and 3 are
// checked, and the identity of the first server it streams from is
// adopted. Two standbys of one primary promoted to the same timeline
// number (a split brain) cannot be told apart by system identifier and
// timeline number alone. A checkpoint behind a slot on the first connect
// may be an older checkpoint (restored, moved by hand) rather than a
// replaced slot: both are refused (ErrBehindSlot), the message names both.

// ErrSlotChanged: the server or the replication slot is not the one the
// checkpoint came from (another system, a timeline the checkpoint is not
// on, a slot created again or advanced past the checkpoint). Permanent; the
// message names both sides and the lossless way back first.
var ErrSlotChanged = errors.New("the replication slot or the server is not the one the checkpoint came from")

// serverInfo is what IDENTIFY_SYSTEM said on one replication connection.
type serverInfo struct {
	id      Identity
	flushed pglogrepl.LSN // the server's WAL flush position
	version int           // server_version_num, when known
}

// identify runs IDENTIFY_SYSTEM on a replication connection.
func (s *Source) identify(ctx context.Context, conn *pgconn.PgConn) (*serverInfo, error) {
	qctx, cancel := context.WithTimeout(ctx, s.cfg.QueryTimeout)
	defer cancel()
	r, err := pglogrepl.IdentifySystem(qctx, conn)
	if err != nil {
		return nil, s.timedOut(qctx, "identify the server", classify(fmt.Errorf("IDENTIFY_SYSTEM: %w", err)))
	}
	sys, err := strconv.ParseUint(r.SystemID, 10, 64)
	if err != nil || sys == 0 || r.Timeline < 1 {
		return nil, fmt.Errorf("IDENTIFY_SYSTEM: unexpected system identifier %q or timeline %d", r.SystemID, r.Timeline)
	}
	return &serverInfo{id: Identity{System: sys, Timeline: r.Timeline}, flushed: r.XLogPos}, nil
}

// timelineSwitch is one line of a timeline history file: Timeline ended at
// End, where its child began.
type timelineSwitch struct {
	Timeline int32
	End      pglogrepl.LSN
}

// parseTimelineHistory reads a timeline history file (TIMELINE_HISTORY):
// lines "<parent timeline>\t<switch point>\t<reason>", oldest first;
// comments (#) and blank lines are skipped.
func parseTimelineHistory(content []byte) ([]timelineSwitch, error) {
	var out []timelineSwitch
	sc := bufio.NewScanner(bytes.NewReader(content))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		f := strings.Fields(line)
		if len(f) < 2 {
			return nil, fmt.Errorf("timeline history line %d %q: want <timeline> <switch point> <reason>", n, line)
		}
		tli, err := strconv.ParseInt(f[0], 10, 32)
		if err != nil || tli < 1 {
			return nil, fmt.Errorf("timeline history line %d: %q is not a timeline", n, f[0])
		}
		end, err := pglogrepl.ParseLSN(f[1])
		if err != nil {
			return nil, fmt.Errorf("timeline history line %d: %q is not an LSN", n, f[1])
		}
		if k := len(out); k > 0 && (int32(tli) <= out[k-1].Timeline || end < out[k-1].End) {
			return nil, fmt.Errorf("timeline history line %d: timeline %d at %s does not follow timeline %d at %s", n, tli, end, out[k-1].Timeline, out[k-1].End)
		}
		out = append(out, timelineSwitch{Timeline: int32(tli), End: end})
	}
	return out, sc.Err()
}

// history returns the server's timeline history (TIMELINE_HISTORY of its
// timeline); timeline 1 has none.
func (s *Source) history(ctx context.Context, conn *pgconn.PgConn, srv *serverInfo) ([]timelineSwitch, error) {
	if srv.id.Timeline <= 1 {
		return nil, nil
	}
	qctx, cancel := context.WithTimeout(ctx, s.cfg.QueryTimeout)
	defer cancel()
	r, err := pglogrepl.TimelineHistory(qctx, conn, srv.id.Timeline)
	if err != nil {
		return nil, s.timedOut(qctx, "read the timeline history", classify(fmt.Errorf("TIMELINE_HISTORY %d: %w", srv.id.Timeline, err)))
	}
	h, err := parseTimelineHistory(r.Content)
	if err != nil {
		return nil, permanent(fmt.Errorf("TIMELINE_HISTORY %d (%s): %w", srv.id.Timeline, r.FileName, err))
	}
	return h, nil
}

// placement says where the position (lsn, claimed) lies on a server's
// history.
type placement struct {
	// problem says why the position is not on the history; "" when it is.
	problem string
	// common is the last LSN the position's history shares with the
	// server's, when they share one: the position itself when it is on the
	// history, else the fork point (or the server's flush position). A
	// checkpoint moved there loses nothing the server holds. 0: none.
	common pglogrepl.LSN
	// fork is where the server's history left the position's timeline
	// (0: the same timeline, or unknown).
	fork pglogrepl.LSN
}

// place decides whether the position lsn, read on claimed, is on the
// history of the server srv, whose timeline history is hist (needed only
// when claimed is an earlier timeline of the same system).
func place(lsn pglogrepl.LSN, claimed Identity, srv Identity, flushed pglogrepl.LSN, hist []timelineSwitch) placement {
	ahead := func() placement {
		return placement{common: flushed, problem: fmt.Sprintf("the checkpoint (LSN %s) is ahead of this server's WAL (flushed up to %s): it was read from another server, "+
			"or this server lost WAL it had (restored from a backup, or a crash with fsync off)", lsn, flushed)}
	}
	switch {
	case !claimed.Known():
		if lsn > flushed {
			return ahead()
		}
		return placement{common: lsn}
	case claimed.System != srv.System:
		return placement{problem: fmt.Sprintf("the checkpoint was read from PostgreSQL system %d, this server is system %d: another cluster, not the checkpoint's server or a physical standby of it",
			claimed.System, srv.System)}
	case claimed.Timeline == srv.Timeline:
		if lsn > flushed {
			return ahead()
		}
		return placement{common: lsn}
	case claimed.Timeline > srv.Timeline:
		return placement{problem: fmt.Sprintf("the checkpoint was read on timeline %d, later than this server's timeline %d: this server is behind the checkpoint's history "+
			"(an old primary that was failed over, or a standby that did not follow the promotion)", claimed.Timeline, srv.Timeline)}
	}
	for _, h := range hist {
		if h.Timeline != claimed.Timeline {
			continue
		}
		if lsn > h.End {
			return placement{common: h.End, fork: h.End, problem: fmt.Sprintf("the checkpoint (LSN %s on timeline %d) lies past the point %s where this server's history left timeline %d "+
				"(a promotion of a standby that had not received everything): on this server's timeline %d the LSNs after %s hold other transactions, which streaming from the checkpoint would skip",
				lsn, claimed.Timeline, h.End, claimed.Timeline, srv.Timeline, h.End)}
		}
		return placement{common: lsn, fork: h.End}
	}
	tl := make([]string, 0, len(hist)+1)
	for _, h := range hist {
		tl = append(tl, strconv.FormatInt(int64(h.Timeline), 10))
	}
	tl = append(tl, strconv.FormatInt(int64(srv.Timeline), 10))
	return placement{problem: fmt.Sprintf("the checkpoint was read on timeline %d, which is not in this server's history (timelines %s): a sibling branch of the history",
		claimed.Timeline, strings.Join(tl, ", "))}
}

// placeOn places (lsn, claimed) on the server of conn, reading its
// timeline history when needed.
func (s *Source) placeOn(ctx context.Context, conn *pgconn.PgConn, srv *serverInfo, lsn pglogrepl.LSN, claimed Identity) (placement, error) {
	var hist []timelineSwitch
	if claimed.Known() && claimed.System == srv.id.System && claimed.Timeline < srv.id.Timeline {
		var err error
		if hist, err = s.history(ctx, conn, srv); err != nil {
			return placement{}, err
		}
	}
	return place(lsn, claimed, srv.id, srv.flushed, hist), nil
}

// replSlot reads the slot's positions on a replication connection (the
// one that will stream, so the slot judged is the slot streamed). nil: no
// such slot.
func (s *Source) replSlot(ctx context.Context, conn *pgconn.PgConn) (*slotInfo, error) {
	qctx, cancel := context.WithTimeout(ctx, s.cfg.QueryTimeout)
	defer cancel()
	res, err := conn.Exec(qctx, `SELECT coalesce(confirmed_flush_lsn::text, ''), coalesce(restart_lsn::text, '') FROM pg_replication_slots WHERE slot_name = `+
		quoteLiteral(s.cfg.Slot)).ReadAll()
	if err == nil && (len(res) != 1 || res[0].Err != nil) {
		err = errors.New("unexpected answer")
	}
	if err != nil {
		return nil, s.timedOut(qctx, "look up the replication slot", classify(fmt.Errorf("look up replication slot %q: %w", s.cfg.Slot, err)))
	}
	if len(res[0].Rows) == 0 {
		return nil, nil
	}
	var si slotInfo
	row := res[0].Rows[0]
	if len(row[0]) > 0 {
		if si.confirmed, err = pglogrepl.ParseLSN(string(row[0])); err != nil {
			return nil, fmt.Errorf("slot %q confirmed_flush_lsn %q: %w", s.cfg.Slot, row[0], err)
		}
	}
	if len(row[1]) > 0 {
		if si.restart, err = pglogrepl.ParseLSN(string(row[1])); err != nil {
			return nil, fmt.Errorf("slot %q restart_lsn %q: %w", s.cfg.Slot, row[1], err)
		}
	}
	return &si, nil
}

func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// proveSlot proves, before every START_REPLICATION, that the server srv
// reached by conn and its slot are the ones the positions held (st.ident,
// the durable Ack and st.resume) came from, or returns a permanent error
// wrapping ErrSlotChanged (ErrBehindSlot for a first start from a
// checkpoint behind the slot on the same timeline). pl is where st.resume
// lies on srv's history (placeOn; zero on a fresh start, which has no
// position to prove yet). On success the positions issued from now on
// carry srv's identity.
func (s *Source) proveSlot(ctx context.Context, conn *pgconn.PgConn, st *runState, srv *serverInfo, pl placement) error {
	ack := pglogrepl.LSN(s.ack.Load())
	claimed := st.ident
	si, err := s.replSlot(ctx, conn)
	if err != nil {
		return err
	}
	if pl.problem != "" {
		return s.slotChanged(pl.problem, srv, pl, si)
	}
	if si == nil {
		// ensureSlot found it a moment ago on the other connection.
		return permanent(mark(ErrSlotChanged, fmt.Errorf("replication slot %q is not on the server the replication connection reached (%s), although the metadata connection found it: "+
			"source.dsn leads to two different servers (several hosts, a virtual IP moving during a failover); restart once the address is stable", s.cfg.Slot, srv.id)))
	}
	if si.confirmed > ack {
		if !st.proven && (!claimed.Known() || claimed == srv.id) {
			return behindSlot(s.cfg.Slot, ack, si.confirmed, s.recovery(srv, pl.common, si))
		}
		cause := fmt.Sprintf("replication slot %q has confirmed_flush_lsn %s (restart_lsn %s), past %s, the last position this connector confirmed to it: "+
			"every update the connector sends confirms at most its durable checkpoint, so this is not the slot it streamed: it was dropped and created again "+
			"(after a failover, by an operator or a failover tool) or advanced by something else, and the transactions committed in between cannot be streamed from it",
			s.cfg.Slot, si.confirmed, si.restart, ack)
		return s.slotChanged(cause, srv, pl, si)
	}
	if claimed != srv.id && (st.checkpoint || st.proven) {
		ev := s.log.Info().Str("server", srv.id.String()).Str("resume_lsn", st.resume.String())
		if !claimed.Known() {
			ev.Msg("the checkpoint carries no server identity (written by an earlier version, or set by hand): its system and timeline cannot be proven, only that it is not ahead of the server's WAL and not behind the slot; positions from now on carry this server's identity")
		} else {
			ev.Str("checkpoint_server", claimed.String()).Str("fork_lsn", pl.fork.String()).
				Msg("the checkpoint lies on this server's history before its fork from the checkpoint's timeline, and the slot has not passed it: streaming on the new timeline")
		}
	}
	st.ident, st.proven = srv.id, true
	return nil
}

// slotChanged is the ErrSlotChanged error for cause, with the lossless way
// back first.
func (s *Source) slotChanged(cause string, srv *serverInfo, pl placement, si *slotInfo) error {
	return withHint(ErrSlotChanged, errors.New(cause), s.recovery(srv, pl.common, si))
}

// recovery says how to get back without losing a row, computed from what
// the server said: common is the last LSN of the checkpoint's history that
// this server shares (0: none), si the slot (nil: none). The lossless way
// comes first; accepting a gap last.
func (s *Source) recovery(srv *serverInfo, common pglogrepl.LSN, si *slotInfo) string {
	runbook := `see docs/operations.md, "Failover runbook"`
	where := s.cfg.RepublishWhere
	if where == "" {
		where = "1 = 1"
	}
	republish := fmt.Sprintf("to re-publish the rows still in the outbox table (nothing is lost, consumers dedupe by id): stop every instance, move the checkpoint away (keep the slot), "+
		"start once with source.start: pending and source.pending.where: %q (narrow it if you know which rows were not delivered), then set source.start back", where)
	if si == nil {
		republish = fmt.Sprintf("to re-publish the rows still in the outbox table (nothing is lost, consumers dedupe by id): stop every instance, move the checkpoint away, "+
			"start once with source.start: pending and source.pending.where: %q (the slot is then created in the snapshot the rows are read in), then set source.start back", where)
	}
	switch {
	case si != nil && common != 0 && si.confirmed <= common:
		return fmt.Sprintf("lossless: the slot still holds everything after %s, the last point the checkpoint shares with this server: stop every instance and run "+
			"outbox-cdc position set --to %s --force, then start; records published from the old history after that point are not on this server (consumers saw rows the database no longer has); %s",
			common, srv.id.Position(common), runbook)
	case si != nil:
		return fmt.Sprintf("%s; or, accepting that the rows in between are never published: outbox-cdc position set --to %s --force; %s",
			republish, srv.id.Position(si.confirmed), runbook)
	default:
		return republish + "; or, accepting that the rows committed since the checkpoint are never published: move the checkpoint away and start " +
			"(the slot is created, and streaming starts at its creation); " + runbook
	}
}
