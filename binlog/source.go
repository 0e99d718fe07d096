// Package binlog is the MySQL/MariaDB source: it reads the binlog as a
// replica (go-mysql's BinlogSyncer, no canal) and turns each committed
// transaction into an outboxcdc.Tx holding the INSERTs into the outbox
// table.
//
// Rules this package keeps:
//   - A position is taken only at a transaction end (XID event, COMMIT or
//     ROLLBACK query, XA PREPARE, XA COMMIT, or a standalone statement such
//     as DDL), never at BEGIN, and it points just past that transaction
//     (with a restart point while an XA transaction is prepared, see
//     txn.go).
//   - A transaction's rows are held until its end, or sent in fragments
//     (Tx.More) once it is known that no later event takes them back
//     (txn.go); a connection lost mid-transaction discards the partial
//     transaction, and the source reconnects from the end of the last Tx
//     it sent, skipping the fragments it sent already.
//   - Errors are classified where they arise: transient ones (connection
//     lost, timeouts, server restart) lead to a reconnect with capped
//     exponential backoff; everything else is returned from Run wrapping
//     one of the Err* sentinels. Every wait for the server is bounded by
//     read_timeout (netconn.go).
package binlog

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"
	mysqldriver "github.com/go-sql-driver/mysql"
	outboxcdc "github.com/outbox-cdc/outbox-cdc"
	"github.com/outbox-cdc/outbox-cdc/backfill"
	"github.com/outbox-cdc/outbox-cdc/retry"
	"github.com/outbox-cdc/outbox-cdc/source"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// emptyTxInterval is the least time between two Tx without events: often
// enough to keep the checkpoint moving on a busy server whose outbox is
// idle, rarely enough not to cost anything.
const emptyTxInterval = time.Second

// Source reads one outbox table from a MySQL or MariaDB binlog. It
// implements outboxcdc.Source.
type Source struct {
	cfg      Config
	dsn      *mysqldriver.Config
	serverID uint32
	cols     outboxcdc.Columns
	log      zerolog.Logger
	baseLog  zerolog.Logger // as passed to New, for the drivers' components
	m        *outboxcdc.SourceMetrics
	pm       *outboxcdc.ProgressMetrics // connect failures, backfill progress (progress.go)
	rc       source.Reconnector         // the reconnect rule (source/reconnect.go)
	catchUp  *outboxcdc.CatchUp         // progress lines while behind; Run's goroutine only

	db, table       string         // from the DSN and Config.Table, as configured (match.go)
	qualifiedTable  string         // "db.table", for messages
	pats            []tablePattern // Config.Tables parsed; nil: the one table (tables.go)
	running         atomic.Bool
	connID          atomic.Uint32              // the binlog dump connection's id, 0 when none
	prevDump        dumpConn                   // the last dump connection; Run's goroutine only
	plan            *txPlan                    // see txn.go; Run's goroutine only
	proven          map[tableKey]*provenSchema // the last proven column list per table (schema.go); Run's goroutine only
	schemaLoads     atomic.Int64               // column lists read and proven (schema.go)
	mu              sync.Mutex
	notReady        error // nil while streaming
	lastAck         atomic.Pointer[outboxcdc.Position]
	emptyTxInterval time.Duration
	curFile         atomic.Pointer[string] // binlog file being read, from rotate events
	curOffset       atomic.Uint64          // offset in curFile just past the last event read
	behind          behindMetrics
	// pool holds the Events slices of the transactions sent, given back by
	// the pipeline once written (outboxcdc.Tx.Pool).
	pool *outboxcdc.EventPool
	// reportStart makes a resolved start durable (outboxcdc.StartReporter);
	// set before Run, called from Run's goroutine.
	reportStart func(context.Context, outboxcdc.Position) error
	// startUnsaved: the resume position is the resolved start, not yet
	// reported (Run's goroutine only).
	startUnsaved bool

	// noFinalFlag makes the source read MariaDB as it reads MySQL, which
	// marks no group as transactional-only (tests of the look-ahead).
	noFinalFlag bool
}

var (
	_ outboxcdc.Source        = (*Source)(nil)
	_ outboxcdc.StartReporter = (*Source)(nil)
)

// New validates cfg and returns a Source. name is the connector's name; it
// derives the replica server_id when cfg.ServerID is 0. cols names the role
// columns (from the route preset). m may be nil; reg is where metrics of
// this source alone go (connect failures, backfill progress, files and
// bytes behind) and may be nil.
// The Postgres source's New takes the same arguments. Nothing connects
// until Run.
func New(cfg Config, name string, cols outboxcdc.Columns, log zerolog.Logger, m *outboxcdc.SourceMetrics, reg prometheus.Registerer) (*Source, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("mysql source config: %w", err)
	}
	var missing []string
	for _, c := range []struct{ role, col string }{
		{"message id", cols.MessageID}, {"aggregate type", cols.AggregateType},
		{"aggregate id", cols.AggregateID}, {"event type", cols.EventType}, {"payload", cols.Payload},
	} {
		if c.col == "" {
			missing = append(missing, c.role)
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("mysql source: no column name given for role(s) %v", missing)
	}
	if m == nil {
		m = outboxcdc.NewSourceMetrics(nil)
	}
	// Every connection below opens the DSN with source.tls applied.
	connDSN, err := cfg.ConnDSN()
	if err != nil {
		return nil, fmt.Errorf("mysql source config: %w", err)
	}
	cfg.DSN = connDSN
	cfg.warnTLS(log)
	dc, err := mysqldriver.ParseDSN(cfg.DSN)
	if err != nil {
		return nil, errors.New("mysql source config: dsn: not a valid go-sql-driver DSN")
	}
	id := cfg.ServerID
	if id == 0 {
		id = DeriveServerID(name)
	}
	pm, err := outboxcdc.NewProgressMetrics(reg)
	if err != nil {
		return nil, fmt.Errorf("mysql source: register metrics: %w", err)
	}
	clog := log.With().Str("component", "binlog").Logger()
	s := &Source{
		cfg:             cfg,
		dsn:             dc,
		serverID:        id,
		cols:            cols,
		log:             clog,
		baseLog:         log,
		m:               m,
		pm:              pm,
		catchUp:         outboxcdc.NewCatchUp(clog, cfg.ProgressInterval),
		db:              dc.DBName,
		table:           cfg.Table,
		qualifiedTable:  dc.DBName + "." + cfg.Table,
		emptyTxInterval: emptyTxInterval,
		pool:            new(outboxcdc.EventPool),
	}
	s.notReady = outboxcdc.Connecting(fmt.Errorf("binlog source connecting to %s", s.address()))
	if s.behind, err = newBehindMetrics(reg); err != nil {
		return nil, err
	}
	if len(cfg.Tables) > 0 {
		if s.pats, err = parseTables(cfg.Tables, dc.DBName); err != nil {
			return nil, fmt.Errorf("mysql source config: %w", err)
		}
		s.qualifiedTable = s.patternsText()
	}
	s.rc = source.Reconnector{Server: "MySQL/MariaDB", Address: s.address, SetReady: s.setReady, Log: &s.log, Metrics: s.m, Progress: s.pm}
	return s, nil
}

// ServerID is the replica id the source registers with.
func (s *Source) ServerID() uint32 { return s.serverID }

// Ready returns nil while the binlog stream is connected, else why not.
func (s *Source) Ready() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.notReady
}

func (s *Source) setReady(err error) {
	s.mu.Lock()
	s.notReady = err
	s.mu.Unlock()
	if err == nil {
		s.m.Connected.Set(1)
	} else {
		s.m.Connected.Set(0)
	}
}

// ReportStart sets the function Run calls with the position a run
// without a checkpoint resolves source.start to (latest, earliest, or a
// pending backfill's first position), before it sends any Tx. See
// outboxcdc.StartReporter.
func (s *Source) ReportStart(report func(context.Context, outboxcdc.Position) error) {
	s.reportStart = report
}

// saveStart reports the resolved start, when someone listens.
func (s *Source) saveStart(ctx context.Context, start outboxcdc.Position) error {
	if s.reportStart == nil {
		return nil
	}
	return s.reportStart(ctx, start)
}

// Ack is a no-op beyond remembering pos: a MySQL server keeps no state for
// its replicas, the checkpoint alone says where to resume.
func (s *Source) Ack(pos outboxcdc.Position) { s.lastAck.Store(&pos) }

// Run streams from just after from (or the start setting when from is zero)
// until ctx is done or a permanent error occurs. See outboxcdc.Source.
func (s *Source) Run(ctx context.Context, from outboxcdc.Position, out chan<- outboxcdc.Tx) error {
	if !s.running.CompareAndSwap(false, true) {
		return errors.New("binlog source: Run called twice")
	}
	if !from.IsZero() && !backfill.IsPending(from) {
		if _, err := ParsePosition(from); err != nil {
			err = fmt.Errorf("mysql source: cannot resume from the checkpoint: %w", err)
			s.setReady(err)
			return err
		}
	}
	db, err := s.openMetadataDB() // keepalives (netconn.go); the driver logs through s.log (driverlog.go)
	if err != nil {
		return fmt.Errorf("mysql source: %w", err)
	}
	defer db.Close()

	go s.watchBehind(ctx, db)

	resume := from // the end of the last Tx sent, or the start position
	if err := s.backfillFirst(ctx, db, &resume, out); err != nil {
		return err // source.start: pending (pending.go)
	}
	s.rc.Start(s.cfg.Reconnect)
	rewind := false
	for {
		began := time.Now()
		streamed, err := s.session(ctx, db, &resume, out, rewind, s.rc.Lost())
		s.connID.Store(0)
		if ctx.Err() != nil {
			s.setReady(errors.New("binlog source stopped"))
			return ctx.Err()
		}
		if rewind = errors.Is(err, errRewind); rewind {
			continue // not a failure: read a transaction again (txn.go)
		}
		if !outboxcdc.IsTransient(err) {
			if errors.Is(err, ErrServerIDConflict) {
				// The server lets one replica per server_id stream: the
				// newcomer takes over and the older one is told so. Stop
				// instead of reconnecting, which would kick the other one
				// in turn, forever.
				err = fmt.Errorf("server_id %d (source.server_id, or derived from the connector name): %w", s.serverID, err)
			}
			where := outboxcdc.RedactDSN(s.cfg.DSN)
			if !resume.IsZero() {
				where += ", resume position " + string(resume)
			}
			err = fmt.Errorf("mysql source (%s): %w", where, err)
			s.setReady(err)
			// Returned, not logged: the connector logs why it stopped, once.
			s.log.Debug().Err(err).Msg("binlog source stopped")
			return err
		}
		wait, never := s.rc.Failed(began, streamed)
		if never {
			s.rc.ConnectFailed(err, wait, func(ev *zerolog.Event) *zerolog.Event {
				if resume.IsZero() {
					return ev.Str("start", s.cfg.Start)
				}
				return ev.Str("position", s.describe(resume))
			})
		} else {
			s.setReady(fmt.Errorf("binlog stream lost, reconnecting: %w", err))
			s.log.Warn().Err(err).Str("position", s.describe(resume)).Dur("backoff", wait).Msg("binlog stream lost; reconnecting")
		}
		if retry.Sleep(ctx, wait) != nil {
			s.setReady(errors.New("binlog source stopped"))
			return ctx.Err()
		}
	}
}

// session connects once and streams until an error. *resume is the
// position to start from; it is advanced after every Tx sent (not after a
// fragment), and set to the start position on the first connection without
// a checkpoint so that a reconnect does not re-evaluate "latest"; that
// start is reported (ReportStart) once the server is known to hold it,
// before the dump begins. streamed
// reports whether events were received (see source.Reconnector). rewind
// says the session reads a transaction again (errRewind): the source stays
// ready.
func (s *Source) session(ctx context.Context, db *sql.DB, resume *outboxcdc.Position, out chan<- outboxcdc.Tx, rewind, reconnect bool) (streamed bool, err error) {
	switch {
	case rewind:
	case reconnect:
		s.setReady(errors.New("binlog source reconnecting"))
	default:
		if !outboxcdc.IsConnecting(s.Ready()) { // keeps the last failure's cause between attempts
			s.setReady(outboxcdc.Connecting(fmt.Errorf("binlog source connecting to %s", s.address())))
		}
	}
	info, err := s.inspect(ctx, db)
	if err != nil {
		return false, err
	}
	var start Pos
	if resume.IsZero() {
		start, err = s.startPosition(ctx, db, info)
		if err != nil {
			return false, err
		}
		*resume = start.Encode()
		s.startUnsaved = true
		s.log.Info().Str("position", start.String()).Str("start", s.cfg.Start).Msg("no checkpoint: starting from the server's " + s.cfg.Start + " position")
	} else if start, err = ParsePosition(*resume); err != nil {
		return false, err
	}
	from := start.ReadFrom() // where reading begins (a restart point, see txn.go)
	if err := info.accepts(&from); err != nil {
		return false, err
	}
	if err := s.checkResume(ctx, db, &info, &from); err != nil {
		return false, err
	}
	if s.startUnsaved {
		// The start is a position: saved before anything is read, so a
		// restart resumes here instead of resolving source.start again
		// and skipping what committed in between.
		if err := s.saveStart(ctx, *resume); err != nil {
			return false, err
		}
		s.startUnsaved = false
	}
	boot, err := s.serverBoot(ctx, db)
	if err != nil {
		return false, err
	}
	s.killPreviousDump(ctx, db, boot)

	match := info.match
	decoder := newDeferringDecoder(match)
	// The dump connection's reads time out after read_timeout of silence
	// from the server, counted only while waiting for it (netconn.go).
	dial := newDumpDialer(s.cfg.ReadTimeout)
	// closing: from here on the session closes the dump connection itself
	// (a stop, or an error it returns); the syncer's lines about that are
	// debug (replicationLogger).
	var closing atomic.Bool
	defer context.AfterFunc(ctx, func() { closing.Store(true); dial.abort() })()
	tctx, cancel := context.WithTimeout(ctx, s.callTimeout())
	tlsConfig := s.binlogTLS(tctx, db)
	cancel()
	host, port := s.hostPort()
	syncer := replication.NewBinlogSyncer(replication.BinlogSyncerConfig{
		ServerID:            s.serverID,
		Flavor:              info.flavor,
		Host:                host,
		Port:                port,
		User:                s.dsn.User,
		Password:            s.dsn.Passwd,
		TLSConfig:           tlsConfig,
		ParseTime:           true,
		UseDecimal:          false,
		HeartbeatPeriod:     s.cfg.HeartbeatPeriod,
		Dialer:              dial.DialContext,
		Option:              s.dumpSession, // dumplock.go
		DisableRetrySync:    true,          // one retry layer: ours
		DiscardGTIDSet:      true,          // positions are tracked here, once per transaction
		EventCacheCount:     128,
		Logger:              replicationLogger(s.baseLog, closing.Load),
		RowsEventDecodeFunc: decoder.decode, // outbox rows only (decode.go)
	})
	defer func() {
		closing.Store(true)
		dial.stop() // no connection to KILL by id on Close (killPreviousDump checks first)
		syncer.Close()
	}()

	var streamer *replication.BinlogStreamer
	switch {
	case from.MySQLGTID != nil:
		streamer, err = syncer.StartSyncGTID(from.MySQLGTID.Clone())
	case from.IsMariaDB:
		var set mysql.GTIDSet
		if set, err = from.MariaDB.gtidSet(); err == nil {
			streamer, err = syncer.StartSyncGTID(set)
		}
	default:
		streamer, err = syncer.StartSync(mysql.Position{Name: from.File, Pos: from.Offset})
	}
	if id := syncer.LastConnectionID(); id != 0 {
		s.prevDump = dumpConn{id: id, boot: boot} // also when the dump failed after connecting
	}
	if err != nil {
		if ctx.Err() != nil {
			return false, ctx.Err()
		}
		return false, classifyDumpErr(fmt.Errorf("start binlog dump: %w", err))
	}
	s.connID.Store(syncer.LastConnectionID())
	s.log.Info().Str("position", start.String()).Str("flavor", info.flavor).Str("version", info.version).
		Uint32("server_id", s.serverID).Uint32("connection_id", syncer.LastConnectionID()).Str("table", s.qualifiedTable).Bool("column_names_in_binlog", info.rowMetadataFull).
		Msg("binlog stream started")

	send := func(tx outboxcdc.Tx) error {
		select {
		case out <- tx:
			if !tx.More {
				*resume = tx.End
			}
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	st := newStream(s, start, streamEnv{ctx: ctx, db: db, match: match, rowsDec: decoder}, send)
	for {
		ev, err := streamer.GetEvent(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return streamed, ctx.Err()
			}
			return streamed, classifyConnErr(fmt.Errorf("read binlog after %s: %w", *resume, err))
		}
		if !streamed {
			streamed = true
			s.setReady(nil)
		}
		if err := st.handle(ev, ev.Header.LogPos); err != nil {
			return streamed, err
		}
		if _, rot := ev.Event.(*replication.RotateEvent); !rot && ev.Header.LogPos > 0 {
			s.curOffset.Store(uint64(ev.Header.LogPos)) // for the bytes behind (behind.go)
		}
	}
}

// address is the server's address as the DSN gives it (host:port, or the
// socket path), for messages.
func (s *Source) address() string {
	if s.dsn.Net == "unix" {
		return "unix:" + s.dsn.Addr
	}
	host, port := s.hostPort()
	return net.JoinHostPort(host, strconv.Itoa(int(port)))
}

// describe is the position for a log line: never empty.
func (s *Source) describe(p outboxcdc.Position) string {
	if p.IsZero() {
		return "none yet (source.start: " + s.cfg.Start + ")"
	}
	return string(p)
}

func (s *Source) hostPort() (string, uint16) {
	if s.dsn.Net == "unix" {
		return s.dsn.Addr, 0
	}
	host, p, err := net.SplitHostPort(s.dsn.Addr)
	if err != nil {
		return s.dsn.Addr, 3306
	}
	port, err := strconv.ParseUint(p, 10, 16)
	if err != nil {
		return host, 3306
	}
	return host, uint16(port)
}
