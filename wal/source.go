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
