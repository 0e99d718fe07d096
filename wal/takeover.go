package wal

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Slot takeover under high availability.
//
// A replication slot admits one walsender at a time. When the active
// instance dies or is cut off without its connection closing (a dead
// host, a partition, a frozen process), its walsender keeps the slot
// "active" until wal_sender_timeout (default 60s) or the kernel's TCP
// timeouts notice: the new active instance could not stream for that
// long. With Config.TakeOverSlot (set when the HA lock is held, which
// makes this instance the slot's only rightful reader) the source ends
// that walsender with pg_terminate_backend and streams as soon as the
// server has released the slot. It ends a backend only if it is a
// walsender and still the slot's active_pid at that moment.
//
// The role needs the right to signal the backend: the same role (the
// connector's own walsender), pg_signal_backend membership, or superuser.

// takeOverWait bounds the wait for the slot to become free after the
// walsender was told to exit.
const takeOverWait = 5 * time.Second

// takeOverSlot ends the walsender holding the slot and waits until the
// slot is free. It returns a retryable error in every case, so the session
// starts over and finds the slot free (or busy again, and tries again).
func (s *Source) takeOverSlot(ctx context.Context, db *pgx.Conn, cause error) error {
	slot := s.cfg.Slot
	var pid int32
	var backend, app, addr string
	err := db.QueryRow(ctx, `SELECT r.active_pid, coalesce(a.backend_type, ''), coalesce(a.application_name, ''), coalesce(host(a.client_addr), 'local')
		FROM pg_replication_slots r LEFT JOIN pg_stat_activity a ON a.pid = r.active_pid
		WHERE r.slot_name = $1 AND r.active_pid IS NOT NULL`, slot).Scan(&pid, &backend, &app, &addr)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("slot busy, now released: %w", cause)
	}
	if err != nil {
		return classify(fmt.Errorf("slot busy (%v); looking up its holder: %w", cause, err))
	}
	log := s.log.With().Int32("active_pid", pid).Str("holder_application", app).Str("holder_addr", addr).Logger()
	if backend != "walsender" {
		log.Warn().Str("backend_type", backend).Msg("replication slot held by a backend that is not a walsender; not ending it, retrying")
		return fmt.Errorf("slot busy, held by a %q backend: %w", backend, cause)
	}
	var ended bool
	err = db.QueryRow(ctx, `SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = $1 AND active_pid = $2`, slot, pid).Scan(&ended)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return fmt.Errorf("slot busy, changed hands meanwhile: %w", cause)
	case err != nil:
		log.Warn().Err(err).Msg("replication slot held by a stale walsender that this role may not end (grant pg_signal_backend, or wait for wal_sender_timeout); retrying")
		return fmt.Errorf("slot busy, could not end the walsender %d: %v: %w", pid, err, cause)
	case !ended:
		return fmt.Errorf("slot busy, walsender %d did not take the signal: %w", pid, cause)
	}
	log.Warn().Msg("HA takeover: ended the walsender that still held the replication slot for a previous active instance")
	deadline := time.Now().Add(takeOverWait)
	for time.Now().Before(deadline) {
		var active bool
		if err := db.QueryRow(ctx, `SELECT active FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&active); err != nil || !active {
			break
		}
		t := time.NewTimer(100 * time.Millisecond)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
	}
	return fmt.Errorf("slot was held by walsender %d of a previous active instance, ended it: %w", pid, cause)
}
