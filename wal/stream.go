package wal

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	outboxcdc "github.com/outbox-cdc/outbox-cdc"
)

// The replication stream: reading pgoutput messages, status updates,
// keepalives, and handing whole transactions to the queue.

// stream runs the read loop on a started replication connection until an
// error; rt is the receive timeout.
func (s *Source) stream(ctx context.Context, conn *pgconn.PgConn, st *runState, rt time.Duration) error {
	raw := conn.Conn()
	batch := batchConnOf(raw) // nil: reads are never batched
	late := false             // the open transaction committed backlogAge ago or more
	s.batch.Store(batch)
	stop := make(chan struct{})
	watcherDone := make(chan struct{})
	go func() {
		// Wake a blocked read when ctx ends; the loop re-checks ctx after
		// every deadline it sets, so this cannot be lost.
		defer close(watcherDone)
		select {
		case <-ctx.Done():
			_ = raw.SetReadDeadline(time.Now())
		case <-stop:
		}
	}()
	defer func() {
		close(stop)
		<-watcherDone
		closeRepl(conn)
	}()

	dec := newDecoder(s.schema, s.table, s.cfg.Messages.Prefix, s.cols, s.m)
	dec.pool = s.pool
	dec.prefixes = s.cfg.Messages.all()
	if s.pats != nil {
		dec.match = tableMatcher(s.pats)
	}
	dec.log = s.log
	dec.onNonTxMsg = func(lsn pglogrepl.LSN) {
		s.log.Warn().Str("lsn", lsn.String()).Strs("prefixes", s.cfg.Messages.all()).
			Msg("skipping a non-transactional logical message with the outbox prefix: emit it with pg_logical_emit_message(true, ...)")
	}
	// Transactions that end at or before the start were queued before;
	// of a transaction queued in part, its queued events.
	dec.resume(st.resume, st.partialFinal, st.partialSent)
	var received pglogrepl.LSN
	var lastEmpty time.Time
	interval := s.cfg.StatusInterval
	// lastRecv is when the last message arrived, or when reading (re)started:
	// the silence that counts is the time spent waiting to read.
	lastRecv := time.Now()

	status := func(ping bool) error {
		// Only a durable checkpoint is confirmed: the last Ack, clamped
		// defensively to the last whole transaction queued.
		flush := min(pglogrepl.LSN(s.ack.Load()), st.resume)
		write := max(received, flush)
		if flush == 0 {
			write = 0 // pglogrepl would report write as flush
		}
		_ = raw.SetWriteDeadline(time.Now().Add(10 * time.Second))
		err := pglogrepl.SendStandbyStatusUpdate(ctx, conn, pglogrepl.StandbyStatusUpdate{
			WALWritePosition: write, WALFlushPosition: flush, WALApplyPosition: flush, ReplyRequested: ping,
		})
		if err != nil {
			return fmt.Errorf("send standby status update: %w", err)
		}
		return nil
	}
	next := time.Now().Add(interval)
	arm := func() error {
		deadline := next
		if d := lastRecv.Add(rt); d.Before(deadline) {
			deadline = d
		}
		_ = raw.SetReadDeadline(deadline)
		return ctx.Err()
	}
	if err := status(false); err != nil {
		return err
	}
	if err := arm(); err != nil {
		return err
	}

	for {
		if st.q.full() {
			if err := s.paused(ctx, st.q, &next, status); err != nil {
				return err
			}
			lastRecv = time.Now() // not reading was not the server's silence
			if err := arm(); err != nil {
				return err
			}
			continue
		}
		msg, err := conn.ReceiveMessage(context.Background())
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if pgconn.Timeout(err) {
				now := time.Now()
				if silent := now.Sub(lastRecv); silent >= rt {
					return outboxcdc.Transient(fmt.Errorf("%w: nothing received for %s (receive timeout, source.receive_timeout) although pings were sent; "+
						"the network path or the server is presumed gone, reconnecting", errSilent, silent.Round(time.Millisecond)))
				}
				if !now.Before(next) {
					// Ask for an answer when the server said nothing for a
					// whole interval: its reply proves the path alive.
					if err := status(now.Sub(lastRecv) >= interval); err != nil {
						return err
					}
					next = now.Add(interval)
				}
				if err := arm(); err != nil {
					return err
				}
				continue
			}
			return fmt.Errorf("replication stream: %w", classify(err))
		}
		if batch != nil && batch.batching {
			lastRecv = batch.lastRead // one clock read per batch, not per message
		} else {
			lastRecv = time.Now()
		}
		switch m := msg.(type) {
		case *pgproto3.CopyData:
			if len(m.Data) == 0 {
				continue
			}
			switch m.Data[0] {
			case pglogrepl.PrimaryKeepaliveMessageByteID:
				pkm, err := pglogrepl.ParsePrimaryKeepaliveMessage(m.Data[1:])
				if err != nil {
					return fmt.Errorf("keepalive: %w", err)
				}
				received = max(received, pkm.ServerWALEnd)
				if !dec.inTx && st.partialFinal == 0 && uint64(received) >= s.serverWAL.Load() {
					// Read up to the server's WAL end as last read: a
					// catch-up is over.
					s.catchUp.Idle(received.String)
				}
				// Idle advance: between transactions, everything before the
				// keepalive's WAL end was decoded and sent to us; queue an
				// empty Tx ending there so the checkpoint (and then the
				// slot) follows the server's WAL on an idle outbox.
				if !dec.inTx && st.partialFinal == 0 && pkm.ServerWALEnd > st.resume {
					if now := time.Now(); now.Sub(lastEmpty) >= time.Second && st.q.empty() {
						lastEmpty = now
						st.q.push(queued{tx: outboxcdc.Tx{End: st.ident.Position(pkm.ServerWALEnd)}, bytes: txOverhead})
						st.resume = pkm.ServerWALEnd
					}
				}
				if pkm.ReplyRequested {
					if err := status(false); err != nil {
						return err
					}
				}
			case pglogrepl.XLogDataByteID:
				xld, err := pglogrepl.ParseXLogData(m.Data[1:])
				if err != nil {
					return fmt.Errorf("xlogdata: %w", err)
				}
				received = max(received, xld.WALStart)
				c, err := dec.handle(xld.WALData, xld.WALStart)
				if err != nil {
					if errors.Is(err, errProtocol) {
						return err
					}
					return permanent(err)
				}
				if batch != nil {
					if xld.WALData[0] == msgBegin {
						late = time.Since(dec.commitTime) >= backlogAge
					}
					batch.want(backlog(pglogrepl.LSN(s.serverWAL.Load()), received, late))
				}
				if c == nil {
					continue // not a commit, or one sent before this connection
				}
				s.queueTx(st, c, &lastEmpty)
			}
		case *pgproto3.ErrorResponse:
			return classify(fmt.Errorf("replication stream: %w", pgconn.ErrorResponseToPgError(m)))
		case *pgproto3.CopyDone:
			return outboxcdc.Transient(errors.New("replication stream: server ended the copy stream"))
		}
	}
}

// queueTx queues a decoded transaction or fragment and moves the resume
// state past it.
func (s *Source) queueTx(st *runState, c *txOut, lastEmpty *time.Time) {
	s.m.EventsRead.Add(float64(len(c.events)))
	if c.more {
		st.q.push(queued{tx: outboxcdc.Tx{Events: c.events, CommitTime: c.commitTime, More: true, Pool: s.pool}, bytes: c.bytes + txOverhead, final: c.final})
		if st.partialFinal != c.final {
			st.partialFinal, st.partialSent = c.final, 0
		}
		st.partialSent += len(c.events)
		return
	}
	s.m.TransactionsRead.Inc()
	s.m.LagSeconds.Set(time.Since(c.commitTime).Seconds())
	s.catchUp.Observe(c.commitTime, len(c.events), c.end.String) // progress lines while behind (progress.go)
	fragmented := c.pieces > 0 || st.partialFinal == c.final
	if len(c.events) == 0 && !fragmented {
		// Empty transactions only keep the checkpoint moving on a busy
		// server; once a second is plenty.
		now := time.Now()
		if now.Sub(*lastEmpty) < time.Second || !st.q.empty() {
			return
		}
		*lastEmpty = now
	}
	st.q.push(queued{tx: outboxcdc.Tx{Events: c.events, End: st.ident.Position(c.end), CommitTime: c.commitTime, Pool: s.pool}, bytes: c.bytes + txOverhead, final: c.final})
	st.resume = c.end
	st.partialFinal, st.partialSent = 0, 0
}

const txOverhead = 128

// paused waits while the queue is full, sending status updates on time, so
// the connection stays healthy however long the pipeline blocks.
func (s *Source) paused(ctx context.Context, q *queue, next *time.Time, status func(ping bool) error) error {
	for q.full() {
		t := time.NewTimer(time.Until(*next))
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-q.space:
			t.Stop()
		case <-t.C:
			if err := status(false); err != nil {
				return err
			}
			*next = time.Now().Add(s.cfg.StatusInterval)
		}
	}
	return nil
}
