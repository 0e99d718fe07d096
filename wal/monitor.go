package wal

import (
	"context"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
)

// heartbeatPrefix is the logical message prefix of heartbeats. With
// source.messages.prefix unset pgoutput does not even send them; either way
// the decoder ignores them. Their only job is to move this database's WAL
// so that keepalives carry a newer WAL end for the idle advance.
const heartbeatPrefix = "outbox-cdc-heartbeat"

var walStatuses = []string{"reserved", "extended", "unreserved", "lost"}

// monitor refreshes the slot lag metrics and writes heartbeats on its own
// small connection until ctx is done. Failures are logged and retried on
// the next tick; they never stop the stream.
func (s *Source) monitor(ctx context.Context) {
	var db *pgx.Conn
	defer func() { closeMeta(db) }()
	conn := func() *pgx.Conn {
		if db != nil && !db.IsClosed() {
			return db
		}
		c, err := s.connectMeta(ctx)
		if err != nil {
			if ctx.Err() == nil {
				s.log.Debug().Err(err).Msg("monitor connection failed")
			}
			return nil
		}
		db = c
		return db
	}
	drop := func() { closeMeta(db); db = nil }

	// The slot lag is measured at once, so a catch-up shows its size from
	// the start, then every lag_interval. Until a first measurement
	// succeeds (the slot may not exist yet) it is tried every second.
	lagTimer := time.NewTimer(0)
	defer lagTimer.Stop()
	var hbC <-chan time.Time
	if s.cfg.Heartbeat.Interval > 0 {
		hb := time.NewTicker(s.cfg.Heartbeat.Interval)
		defer hb.Stop()
		hbC = hb.C
	}
	measured := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-lagTimer.C:
			if c := conn(); c != nil {
				if measured {
					// The session read it at its start.
					s.readServerWAL(ctx, c)
				}
				switch err := s.measureSlot(ctx, c); {
				case err == nil:
					measured = true
				case err != pgx.ErrNoRows && ctx.Err() == nil:
					s.log.Debug().Err(err).Msg("slot lag query failed")
					drop()
				}
			}
			next := s.cfg.LagInterval
			if !measured {
				next = min(next, time.Second)
			}
			lagTimer.Reset(next)
		case <-hbC:
			c := conn()
			if c == nil {
				continue
			}
			qctx, cancel := context.WithTimeout(ctx, s.cfg.QueryTimeout)
			_, err := c.Exec(qctx, `SELECT pg_logical_emit_message(false, '`+heartbeatPrefix+`', '')`)
			cancel()
			if err != nil && ctx.Err() == nil {
				s.log.Warn().Err(err).Msg("heartbeat failed")
				drop()
			}
		}
	}
}

// measureSlot sets the slot lag and wal_status gauges from
// pg_replication_slots; pgx.ErrNoRows while the slot does not exist (yet).
func (s *Source) measureSlot(ctx context.Context, c *pgx.Conn) error {
	qctx, cancel := context.WithTimeout(ctx, s.cfg.QueryTimeout)
	var lag float64
	var status string
	err := c.QueryRow(qctx, `SELECT coalesce((pg_current_wal_lsn() - confirmed_flush_lsn)::float8, 0), coalesce(wal_status, '')
		FROM pg_replication_slots WHERE slot_name = $1`, s.cfg.Slot).Scan(&lag, &status)
	cancel()
	if err != nil {
		return err
	}
	s.lagBytes.Set(lag)
	for _, w := range walStatuses {
		v := 0.0
		if w == status {
			v = 1
		}
		s.walStatus.WithLabelValues(w).Set(v)
	}
	return nil
}

// readServerWAL records the server's current WAL end (its replay position
// on a standby) in s.serverWAL, which tells the stream whether it reads a
// backlog. On error it is left as it was.
func (s *Source) readServerWAL(ctx context.Context, db *pgx.Conn) {
	qctx, cancel := context.WithTimeout(ctx, s.cfg.QueryTimeout)
	defer cancel()
	var text string
	err := db.QueryRow(qctx, `SELECT coalesce(CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() ELSE pg_current_wal_lsn() END, '0/0')::text`).Scan(&text)
	if err != nil {
		if ctx.Err() == nil {
			s.log.Debug().Err(err).Msg("reading the server's WAL end failed")
		}
		return
	}
	if lsn, err := pglogrepl.ParseLSN(text); err == nil {
		s.serverWAL.Store(uint64(lsn))
	}
}
