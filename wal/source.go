// Package wal is the PostgreSQL source: it streams a permanent logical
// replication slot with the pgoutput plugin and turns every committed INSERT
// into the outbox table (and, optionally, every transactional logical
// decoding message with a configured prefix) into an outboxcdc.Event.
//
// Positions are LSNs (see Kind). The slot is only ever confirmed up to the
// last position the pipeline Acked, i.e. a durable checkpoint, so after any
// crash the server still holds everything after the checkpoint.
package wal

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	outboxcdc "github.com/outbox-cdc/outbox-cdc"
	"github.com/outbox-cdc/outbox-cdc/backfill"
	"github.com/outbox-cdc/outbox-cdc/retry"
	"github.com/outbox-cdc/outbox-cdc/source"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// Source is the PostgreSQL outboxcdc.Source. Create it with New; Run is
// called once.
//
// Flow control and the slot. One goroutine owns the replication connection:
// it reads pgoutput messages, decodes transactions into a bounded queue and
// answers the server. Another goroutine moves queued transactions to the
// pipeline's channel and may block there as long as the sink does. When the
// queue holds BufferBytes the reader stops reading (the server keeps the
// WAL; TCP pushes back on the walsender) but keeps sending standby status
// updates every StatusInterval, which is all wal_sender_timeout needs: a
// stalled sink never gets the walsender killed.
//
// Transactions of any size. pgoutput without streaming sends a transaction
// only after it committed, so nothing of it can be undone: once the open
// transaction holds outboxcdc.MaxFragmentEvents events or
// MaxFragmentBytes, what was decoded so far is queued as a fragment
// (Tx.More), and memory does not grow with the transaction. If the
// connection is lost in the middle, the server sends the transaction again
// from its start and the events already queued are dropped, so the
// pipeline sees every event once.
//
// What is confirmed. Every status update reports as flushed (and applied)
// only the last position passed to Ack, i.e. the TransactionEndLSN of a
// durably checkpointed transaction, never what was received, so
// confirmed_flush_lsn never passes the checkpoint. An idle outbox must not
// pin WAL either: when a keepalive arrives between transactions with a WAL
// end past the last queued position (everything before it was decoded and
// sent to us) and the queue is empty, an empty Tx ending there is queued
// (at most once a second); the pipeline checkpoints it like any other and
// Acks it, and only then is it confirmed. The checkpoint is therefore never
// behind the slot, and a checkpoint that is (moved back by hand, or a slot
// advanced by something else) is refused (ErrBehindSlot) rather than
// silently skipped ahead.
//
// A silent peer. A network path can go quiet in both directions without a
// FIN or RST; writes then still "succeed" into the kernel's buffer. A
// status update sent after nothing arrived for a whole StatusInterval asks
// the server to answer at once, and a connection on which nothing arrived
// for the receive timeout (Config.ReceiveTimeout, derived from
// wal_sender_timeout by default) is closed and the source reconnects,
// exactly as after a killed walsender. Every connection also has TCP
// keepalives and a user timeout (netconf.go), and every setup step a
// deadline.
type Source struct {
	cfg           Config
	schema, table string
	pats          []tablePattern // Config.Tables; nil: the one table (tables.go)
	cols          outboxcdc.Columns
	log           zerolog.Logger
	m             *outboxcdc.SourceMetrics
	pm            *outboxcdc.ProgressMetrics // connect failures, backfill progress (progress.go)
	rc            source.Reconnector         // the reconnect rule (source/reconnect.go)
	catchUp       *outboxcdc.CatchUp         // progress lines while behind; Run's goroutine only
	lagBytes      prometheus.Gauge
	walStatus     *prometheus.GaugeVec

	// legacySlot and legacyPub are the names earlier versions derived, when
	// they differ from the derived ones in use (see DeriveName).
	legacySlot, legacyPub string

	ack atomic.Uint64 // last Acked LSN
	// serverWAL is the server's WAL end as last read (session start, the
	// lag monitor): the stream reads in batches while it is far ahead of
	// what was received (readconn.go).
	serverWAL atomic.Uint64
	batch     atomic.Pointer[batchConn] // the stream's socket (tests)
	ready     atomic.Pointer[readyState]
	running   atomic.Bool

	// pool holds the Events slices of the transactions sent, given back by
	// the pipeline once written (outboxcdc.Tx.Pool).
	pool *outboxcdc.EventPool
	// reportStart makes a resolved start durable (outboxcdc.StartReporter);
	// set before Run, called from Run's goroutine.
	reportStart func(context.Context, outboxcdc.Position) error
}

type readyState struct{ err error }

var _ outboxcdc.StartReporter = (*Source)(nil)

// ReportStart sets the function Run calls, without a checkpoint, with the
// position it starts from (the slot's position at creation or when found,
// or the server's WAL end with start: latest; for start: pending the
// backfill's first position) before it sends any Tx. The checkpoint then
// names the slot's position from the first run on: a restart resumes
// there (with start: latest it would otherwise jump to the WAL end of the
// moment), and the slot checks have a checkpoint to judge against. See
// outboxcdc.StartReporter.
func (s *Source) ReportStart(report func(context.Context, outboxcdc.Position) error) {
	s.reportStart = report
}

// saveStart reports the resolved start, when someone listens.
func (s *Source) saveStart(ctx context.Context, start outboxcdc.Position) error {
	if s.reportStart == nil {
		return nil
	}
	return permanent(s.reportStart(ctx, start))
}

// New checks cfg and returns a source. name is the connector name, from
// which the slot and publication names are derived when not configured.
// m may be nil (metrics are then not exported); reg may be nil.
func New(cfg Config, name string, cols outboxcdc.Columns, log zerolog.Logger, m *outboxcdc.SourceMetrics, reg prometheus.Registerer) (*Source, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	var legacySlot, legacyPub string
	if cfg.Slot == "" {
		cfg.Slot = DeriveName(name)
		if l := legacyName(name); l != cfg.Slot {
			legacySlot = l
		}
	}
	if cfg.Publication == "" {
		cfg.Publication = DeriveName(name)
		if l := legacyName(name); l != cfg.Publication {
			legacyPub = l
		}
	}
	if m == nil {
		m = outboxcdc.NewSourceMetrics(nil)
	}
	pm, err := outboxcdc.NewProgressMetrics(reg)
	if err != nil {
		return nil, fmt.Errorf("postgres source: register metrics: %w", err)
	}
	clog := log.With().Str("component", "wal").Str("slot", cfg.Slot).Logger()
	s := &Source{
		cfg:        cfg,
		cols:       cols,
		legacySlot: legacySlot,
		legacyPub:  legacyPub,
		log:        clog,
		m:          m,
		pm:         pm,
		catchUp:    outboxcdc.NewCatchUp(clog, cfg.ProgressInterval),
		lagBytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "outbox_cdc_postgres_slot_lag_bytes",
			Help: "Bytes of WAL between the server's current position and the slot's confirmed_flush_lsn.",
		}),
		walStatus: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "outbox_cdc_postgres_slot_wal_status",
			Help: "1 for the slot's current wal_status in pg_replication_slots (reserved, extended, unreserved, lost).",
		}, []string{"status"}),
		pool: new(outboxcdc.EventPool),
	}
	if len(cfg.Tables) > 0 {
		s.pats, _ = parseTables(cfg.Tables)
		s.cfg.Table = s.patternsText()
	} else if cfg.Table != "" {
		s.schema, s.table, _ = splitTable(cfg.Table)
	}
	if reg != nil {
		if err := reg.Register(s.lagBytes); err != nil {
			return nil, fmt.Errorf("register slot lag metric: %w", err)
		}
		if err := reg.Register(s.walStatus); err != nil {
			return nil, fmt.Errorf("register slot wal_status metric: %w", err)
		}
	}
	s.setReady(outboxcdc.Connecting(fmt.Errorf("postgres source: connecting to %s", s.address())))
	s.rc = source.Reconnector{Server: "PostgreSQL", Prefix: "postgres source: ", Address: s.address, SetReady: s.setReady, Log: &s.log, Metrics: s.m, Progress: s.pm}
	return s, nil
}

// Slot returns the replication slot name in use.
func (s *Source) Slot() string { return s.cfg.Slot }

// Publication returns the publication name in use.
func (s *Source) Publication() string { return s.cfg.Publication }

// Ack records that everything up to pos is durably checkpointed. The next
// status update confirms it to the slot. It never blocks.
func (s *Source) Ack(pos outboxcdc.Position) {
	lsn, err := ackLSN(pos)
	if err != nil {
		s.log.Error().Err(err).Msg("ignoring Ack of a position this source did not issue")
		return
	}
	for {
		cur := s.ack.Load()
		if uint64(lsn) <= cur || s.ack.CompareAndSwap(cur, uint64(lsn)) {
			return
		}
	}
}

// Ready returns nil while the replication stream is up.
func (s *Source) Ready() error { return s.ready.Load().err }

func (s *Source) setReady(err error) { s.ready.Store(&readyState{err: err}) }

// runState is what survives reconnections within one Run.
type runState struct {
	checkpoint bool          // Run was given a position
	haveSlot   bool          // the slot was found or created during this Run
	resume     pglogrepl.LSN // end of the last whole Tx queued, else the start position
	// ident is the server history resume and the last Ack were read on
	// (zero: unknown, a short-form checkpoint); proven says a connect of
	// this Run proved them (identity.go). Positions issued carry ident.
	ident  Identity
	proven bool
	// partialFinal and partialSent: the transaction (by commit LSN) of
	// which partialSent events were queued as fragments, but not its end.
	partialFinal pglogrepl.LSN
	partialSent  int
	q            *queue
	dedupe       *dedupe // after a pending backfill read in a fresh snapshot (pending.go)
}

// Run streams from just after from (or, without a checkpoint, from where
// Config.Start says) until ctx is done or a permanent error. See
// outboxcdc.Source.
func (s *Source) Run(ctx context.Context, from outboxcdc.Position, out chan<- outboxcdc.Tx) error {
	if !s.running.CompareAndSwap(false, true) {
		return errors.New("postgres source: Run called twice")
	}
	st := &runState{q: newQueue(s.cfg.BufferBytes)}
	if !from.IsZero() && !backfill.IsPending(from) {
		lsn, id, err := ParsePositionIdentity(from)
		if err != nil {
			return err
		}
		st.checkpoint = true
		st.resume = lsn
		st.ident = id
		s.ack.Store(uint64(lsn))
	}

	if err := s.backfillFirst(ctx, st, from, out); err != nil {
		return err // source.start: pending (pending.go)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	fwdDone := make(chan struct{})
	go func() {
		defer close(fwdDone)
		for {
			it, ok := st.q.pop(ctx)
			if !ok {
				return
			}
			select {
			case out <- st.dedupe.filter(it.tx, it.final):
			case <-ctx.Done():
				return
			}
		}
	}()
	wg.Add(1)
	go func() { defer wg.Done(); s.monitor(ctx) }()
	defer func() {
		cancel()
		<-fwdDone
		wg.Wait()
		s.m.Connected.Set(0)
	}()

	s.rc.Start(s.cfg.Reconnect)
	for first := true; ; first = false {
		began := time.Now()
		streamed, err := s.session(ctx, st, first)
		err = classify(err) // unmarked and not the network's: permanent (errors.go)
		s.m.Connected.Set(0)
		if ctx.Err() != nil {
			s.setReady(errors.New("postgres source: stopped"))
			return ctx.Err()
		}
		if isPermanent(err) {
			s.setReady(fmt.Errorf("postgres source: %w", err))
			// Returned, not logged: the connector logs why it stopped, once.
			s.log.Debug().Err(err).Str("resume_lsn", st.resume.String()).Msg("stopping: permanent error")
			// Deliver the whole transactions already decoded so the
			// checkpoint gets as close to the problem as possible.
			st.q.close()
			select {
			case <-fwdDone:
			case <-ctx.Done():
			}
			return err
		}
		wait, never := s.rc.Failed(began, streamed)
		if never {
			s.rc.ConnectFailed(err, wait, func(ev *zerolog.Event) *zerolog.Event {
				if st.checkpoint {
					return ev.Str("resume_lsn", st.resume.String())
				}
				return ev.Str("start", s.cfg.Start)
			})
		} else {
			s.setReady(fmt.Errorf("postgres source: %w", err))
			s.log.Warn().Err(err).Str("resume_lsn", st.resume.String()).Dur("backoff", wait).
				Msg("replication stream lost; reconnecting")
		}
		if retry.Sleep(ctx, wait) != nil {
			return ctx.Err()
		}
	}
}

// session prepares the slot and streams until an error. streamed reports
// whether START_REPLICATION succeeded.
func (s *Source) session(ctx context.Context, st *runState, first bool) (streamed bool, err error) {
	meta, err := s.connectMeta(ctx)
	if err != nil {
		return false, err
	}
	defer closeMeta(meta)

	setup, cancel := context.WithTimeout(ctx, s.cfg.QueryTimeout)
	defer cancel()
	version, err := s.preflight(setup, meta)
	if err != nil {
		return false, s.timedOut(setup, "read the server settings", err)
	}
	if err := s.ensurePublication(setup, meta, st.checkpoint); err != nil {
		return false, s.timedOut(setup, "check the publication", err)
	}
	cancel()

	// The server is identified, and the positions held are proven, on the
	// replication connection that will stream (identity.go).
	conn, err := s.connectReplication(ctx)
	if err != nil {
		return false, err
	}
	streaming := false
	defer func() {
		if !streaming {
			closeRepl(conn)
		}
	}()
	srv, err := s.identify(ctx, conn)
	if err != nil {
		return false, err
	}
	srv.version = version
	var pl placement
	if st.checkpoint || st.proven {
		if pl, err = s.placeOn(ctx, conn, srv, st.resume, st.ident); err != nil {
			return false, err
		}
	}
	if err := s.ensureSlot(ctx, meta, st, srv, pl); err != nil {
		return false, err
	}
	if err := s.ensureFailover(ctx, meta, conn, srv); err != nil {
		return false, err
	}
	s.readServerWAL(ctx, meta)
	wst, err := s.walSenderTimeout(ctx, conn)
	if err != nil {
		return false, err
	}
	if err := s.proveSlot(ctx, conn, st, srv, pl); err != nil {
		return false, err
	}
	rt := s.cfg.receiveTimeout(wst)
	if s.cfg.ReceiveTimeout > 0 && wst > 0 && rt <= wst/2+s.cfg.StatusInterval {
		s.log.Warn().Dur("receive_timeout", rt).Dur("wal_sender_timeout", wst).
			Msg("source.receive_timeout is at most half the server's wal_sender_timeout plus a status interval: while the server decodes a large transaction a healthy connection may be taken for dead; raise it or set source.wal_sender_timeout")
	}
	args := []string{"publication_names '" + s.cfg.Publication + "'"}
	if version >= 140000 {
		args = append(args, "proto_version '2'")
		if len(s.cfg.Messages.all()) > 0 {
			args = append(args, "messages 'true'")
		}
	} else {
		args = append(args, "proto_version '1'")
	}
	start := st.resume
	sctx, cancel := context.WithTimeout(ctx, s.cfg.ConnectTimeout)
	err = pglogrepl.StartReplication(sctx, conn, s.cfg.Slot, start, pglogrepl.StartReplicationOptions{PluginArgs: args})
	cancel()
	if err != nil {
		if pgCode(err) == codeObjectInUse {
			return false, s.slotBusy(ctx, meta, err)
		}
		if ctx.Err() == nil && sctx.Err() != nil {
			return false, fmt.Errorf("START_REPLICATION slot %s at %s: no answer within %s (source.connect_timeout): %w", s.cfg.Slot, start, s.cfg.ConnectTimeout, err)
		}
		return false, classify(fmt.Errorf("START_REPLICATION slot %s at %s: %w", s.cfg.Slot, start, err))
	}
	closeMeta(meta)
	meta = nil
	streaming = true // stream closes it

	ev := s.log.Info().Str("start_lsn", start.String()).Str("server", srv.id.String()).Str("publication", s.cfg.Publication).Int("server_version", version).
		Dur("wal_sender_timeout", wst).Dur("receive_timeout", rt)
	if st.partialFinal != 0 {
		ev = ev.Str("partial_commit_lsn", st.partialFinal.String()).Int("partial_events_sent", st.partialSent)
	}
	if first {
		ev.Msg("streaming started")
	} else {
		ev.Msg("streaming resumed after reconnect")
	}
	s.m.Connected.Set(1)
	s.setReady(nil)
	return true, s.stream(ctx, conn, st, rt)
}

// timedOut names the step and the query timeout when err is the setup
// deadline's doing; the error stays transient.
func (s *Source) timedOut(ctx context.Context, step string, err error) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) && !(outboxcdc.IsClassified(err) && isPermanent(err)) {
		return outboxcdc.Transient(fmt.Errorf("%s: no answer within %s (source.query_timeout): %w", step, s.cfg.QueryTimeout, err))
	}
	return err
}

// walSenderTimeout returns the wal_sender_timeout the server applies to
// the replication connection: the configured one, which the connection
// set, or the server's own (read from it).
func (s *Source) walSenderTimeout(ctx context.Context, conn *pgconn.PgConn) (time.Duration, error) {
	if s.cfg.WalSenderTimeout > 0 {
		return s.cfg.WalSenderTimeout, nil
	}
	qctx, cancel := context.WithTimeout(ctx, s.cfg.QueryTimeout)
	defer cancel()
	res, err := conn.Exec(qctx, "SELECT setting FROM pg_settings WHERE name = 'wal_sender_timeout'").ReadAll()
	if err == nil && (len(res) != 1 || res[0].Err != nil || len(res[0].Rows) != 1) {
		err = errors.New("unexpected answer")
	}
	if err != nil {
		return 0, classify(fmt.Errorf("read wal_sender_timeout: %w", err))
	}
	ms, err := strconv.ParseInt(string(res[0].Rows[0][0]), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("read wal_sender_timeout: %q is not milliseconds", res[0].Rows[0][0])
	}
	return time.Duration(ms) * time.Millisecond, nil
}

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

func (s *Source) connectMeta(ctx context.Context) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(s.cfg.DSN)
	if err != nil {
		return nil, permanent(errors.New("source.dsn: not a valid PostgreSQL connection string"))
	}
	delete(cfg.RuntimeParams, "replication")
	cfg.RuntimeParams["application_name"] = "outbox-cdc"
	s.netConfig(&cfg.Config, false)
	cctx, cancel := context.WithTimeout(ctx, s.cfg.ConnectTimeout)
	defer cancel()
	conn, err := pgx.ConnectConfig(cctx, cfg)
	if err != nil {
		return nil, classify(fmt.Errorf("connect to %s: %w", outboxcdc.RedactDSN(s.cfg.DSN), err))
	}
	return conn, nil
}

func closeMeta(c *pgx.Conn) {
	if c == nil || c.IsClosed() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = c.Close(ctx)
}

func (s *Source) connectReplication(ctx context.Context) (*pgconn.PgConn, error) {
	cfg, err := pgconn.ParseConfig(s.cfg.DSN)
	if err != nil {
		return nil, permanent(errors.New("source.dsn: not a valid PostgreSQL connection string"))
	}
	cfg.RuntimeParams["replication"] = "database"
	cfg.RuntimeParams["application_name"] = "outbox-cdc"
	// Stable text forms for what pgoutput renders: bytea as hex (decoded to
	// raw bytes), timestamptz in UTC ISO form.
	cfg.RuntimeParams["bytea_output"] = "hex"
	cfg.RuntimeParams["DateStyle"] = "ISO, YMD"
	cfg.RuntimeParams["TimeZone"] = "UTC"
	s.netConfig(cfg, true)
	cctx, cancel := context.WithTimeout(ctx, s.cfg.ConnectTimeout)
	defer cancel()
	conn, err := pgconn.ConnectConfig(cctx, cfg)
	if err != nil {
		return nil, classify(fmt.Errorf("replication connection to %s: %w", outboxcdc.RedactDSN(s.cfg.DSN), err))
	}
	return conn, nil
}

func closeRepl(c *pgconn.PgConn) {
	_ = c.Conn().SetDeadline(time.Now().Add(2 * time.Second))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = c.Close(ctx)
}

// preflight checks server settings and returns server_version_num.
func (s *Source) preflight(ctx context.Context, db *pgx.Conn) (int, error) {
	var walLevel, versionText string
	var recovery bool
	err := db.QueryRow(ctx, `SELECT current_setting('wal_level'), current_setting('server_version_num'), pg_is_in_recovery()`).
		Scan(&walLevel, &versionText, &recovery)
	if err != nil {
		return 0, classify(fmt.Errorf("read server settings: %w", err))
	}
	if err := checkWalLevel(walLevel); err != nil {
		return 0, err
	}
	version, _ := strconv.Atoi(versionText)
	if len(s.cfg.Messages.all()) > 0 && version < 140000 {
		return 0, permanent(fmt.Errorf("source.messages.prefix needs PostgreSQL 14 or later (pgoutput's messages option); this server is %s", versionText))
	}
	if err := checkFailoverVersion(s.cfg.FailoverSlot, version, versionText); err != nil {
		return 0, err
	}
	if recovery && version < 160000 {
		return 0, permanent(errors.New("the server is a standby (in recovery): logical decoding needs the primary before PostgreSQL 16; point source.dsn at the primary"))
	}
	return version, nil
}

func checkWalLevel(level string) error {
	if level != "logical" {
		return permanent(mark(ErrServerSettings, fmt.Errorf("wal_level is %q, logical decoding needs 'logical': run ALTER SYSTEM SET wal_level = logical; and restart PostgreSQL", level)))
	}
	return nil
}

// ensurePublication verifies (or creates) the publication. checkpoint
// says the connector streamed before.
func (s *Source) ensurePublication(ctx context.Context, db *pgx.Conn, checkpoint bool) error {
	if s.pats != nil {
		return s.ensureTablesPublication(ctx, db, checkpoint)
	}
	pub := s.cfg.Publication
	tableIdent := pgx.Identifier{s.schema, s.table}.Sanitize()
	if s.table != "" {
		var exists bool
		if err := db.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, tableIdent).Scan(&exists); err != nil {
			return classify(fmt.Errorf("look up table %s: %w", s.cfg.Table, err))
		}
		if !exists {
			return outboxcdc.Permanent(fmt.Errorf("source.table: table %s does not exist in this database", tableIdent), "check the database in source.dsn and the schema in source.table")
		}
	}
	// route.on_update needs the UPDATEs of the outbox table in the stream.
	wantUpdates := s.cols.OnUpdate != "" && s.cols.OnUpdate != "skip"
	for attempt := 0; ; attempt++ {
		var pubInsert, pubUpdate bool
		err := db.QueryRow(ctx, `SELECT pubinsert, pubupdate FROM pg_publication WHERE pubname = $1`, pub).Scan(&pubInsert, &pubUpdate)
		if errors.Is(err, pgx.ErrNoRows) {
			create := "CREATE PUBLICATION " + pgx.Identifier{pub}.Sanitize()
			if s.table != "" {
				if wantUpdates {
					create += " FOR TABLE " + tableIdent + " WITH (publish = 'insert, update')"
				} else {
					create += " FOR TABLE " + tableIdent + " WITH (publish = 'insert')"
				}
			}
			if checkpoint {
				// A publication created now would not exist at the slot's
				// position: pgoutput would fail on the first transaction.
				if err := s.nameChanged(ctx, db, false, 0); err != nil {
					return err
				}
			}
			if !s.cfg.Create {
				return permanent(mark(ErrPublication, fmt.Errorf("publication %q does not exist and source.create is false: run %s; (as the table's owner) or set source.create: true", pub, create)))
			}
			if _, err := db.Exec(ctx, create); err != nil {
				if pgCode(err) == codeDuplicateObject && attempt == 0 {
					continue
				}
				return classify(fmt.Errorf("%s: %w (the role must own the table, or create the publication as its owner)", create, err))
			}
			s.log.Info().Str("publication", pub).Str("table", s.cfg.Table).Msg("created publication")
			continue
		}
		if err != nil {
			return classify(fmt.Errorf("look up publication %q: %w", pub, err))
		}
		if s.table == "" {
			return nil
		}
		if !pubInsert {
			return permanent(fmt.Errorf("publication %q does not publish inserts: run ALTER PUBLICATION %s SET (publish = 'insert');", pub, pgx.Identifier{pub}.Sanitize()))
		}
		if wantUpdates && !pubUpdate {
			return permanent(fmt.Errorf("route.on_update is %s but publication %q does not publish updates, so none would be seen: run ALTER PUBLICATION %s SET (publish = 'insert, update'); (the outbox table then needs a primary key or replica identity, or its UPDATEs fail), or set route.on_update: skip",
				s.cols.OnUpdate, pub, pgx.Identifier{pub}.Sanitize()))
		}
		var n int
		err = db.QueryRow(ctx, `SELECT count(*) FROM pg_publication_tables WHERE pubname = $1 AND schemaname = $2 AND tablename = $3`,
			pub, s.schema, s.table).Scan(&n)
		if err != nil {
			return classify(fmt.Errorf("look up publication %q tables: %w", pub, err))
		}
		if n == 0 {
			return permanent(mark(ErrPublication, fmt.Errorf("publication %q exists but does not include the outbox table %s, so its rows would never be streamed: run ALTER PUBLICATION %s ADD TABLE %s; or point source.publication at a publication that includes it",
				pub, tableIdent, pgx.Identifier{pub}.Sanitize(), tableIdent)))
		}
		return nil
	}
}

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

// address is the server's host:port as source.dsn gives it (the first
// one when it lists several), for messages.
func (s *Source) address() string {
	c, err := pgconn.ParseConfig(s.cfg.DSN)
	if err != nil {
		return "the server of source.dsn"
	}
	if strings.HasPrefix(c.Host, "/") {
		return c.Host + " (socket, port " + strconv.Itoa(int(c.Port)) + ")"
	}
	return net.JoinHostPort(c.Host, strconv.Itoa(int(c.Port)))
}
