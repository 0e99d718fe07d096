package binlog

import (
	"context"
	"database/sql"
	"errors"
	"net"
	"sync"
	"time"

	mysqldriver "github.com/go-sql-driver/mysql"

	"github.com/outbox-cdc/outbox-cdc/deadpeer"
)

// Every connection to the server (the binlog dump and the metadata pool)
// follows deadpeer.Binlog: a peer that vanished without a FIN is found by
// the kernel even where no read deadline is running (an idle pooled
// connection), and so is one that stopped acknowledging what the source
// sent (a query waiting on a partitioned server).

// dumpWriteTimeout is the binlog dump session's net_write_timeout: how long
// the server keeps the session while the connector does not read, because
// the sink is stalled and the pipeline pushes back. The server's default
// (60 s) would end the session during any longer Kafka outage; reconnecting
// then is harmless but wasteful, so the session is given an hour.
const dumpWriteTimeout = time.Hour

func keepaliveDialer(timeout time.Duration) *net.Dialer { return deadpeer.Binlog.Dialer(timeout) }

// openMetadataDB opens the pool for the source's own queries (settings,
// columns, positions, KILL) on the DSN with TCP keepalives, the driver's
// messages going to the source's logger (driverlog.go). Every query on it
// runs under a context deadline (Source.callTimeout).
func (s *Source) openMetadataDB() (*sql.DB, error) {
	cfg := s.dsn.Clone()
	cfg.Logger = SQLDriverLogger(s.baseLog)
	d := keepaliveDialer(s.cfg.ReadTimeout)
	if cfg.Net != "unix" {
		cfg.DialFunc = d.DialContext
	}
	conn, err := mysqldriver.NewConnector(cfg)
	if err != nil {
		return nil, err
	}
	db := sql.OpenDB(conn)
	db.SetMaxOpenConns(2)
	db.SetConnMaxIdleTime(time.Minute)
	return db, nil
}

// callTimeout bounds each metadata query: the same bound as a silent
// replication stream, so one setting says how long the source waits for
// the server before it gives up and reconnects.
func (s *Source) callTimeout() time.Duration { return s.cfg.ReadTimeout }

// dumpDialer dials the binlog dump connection for go-mysql, with TCP
// keepalives. The connections it makes time out a read that waits longer
// than idle for the server (a heartbeat arrives every heartbeat_period),
// counted only while a read is waiting, never while the source is blocked
// by a stalled sink, and time out writes the same way, which go-mysql does
// not. Once stopped, the dialer refuses to dial, which keeps go-mysql's
// Close from opening a connection to KILL the dump thread by id without
// checking whose it is (see Source.killPreviousDump).
type dumpDialer struct {
	idle time.Duration
	d    *net.Dialer

	mu      sync.Mutex
	stopped bool
	conns   []net.Conn
}

func newDumpDialer(idle time.Duration) *dumpDialer {
	return &dumpDialer{idle: idle, d: keepaliveDialer(idle)}
}

var errDialerStopped = errors.New("binlog session closed")

// DialContext implements go-mysql's client.Dialer.
func (d *dumpDialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	d.mu.Lock()
	stopped := d.stopped
	d.mu.Unlock()
	if stopped {
		return nil, errDialerStopped
	}
	c, err := d.d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	ic := &idleConn{Conn: c, idle: d.idle}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.stopped {
		c.Close()
		return nil, errDialerStopped
	}
	d.conns = append(d.conns, ic)
	return ic, nil
}

// stop refuses further dials.
func (d *dumpDialer) stop() {
	d.mu.Lock()
	d.stopped = true
	d.mu.Unlock()
}

// abort stops the dialer and closes every connection it made, so a call
// blocked on one of them (go-mysql's StartSync takes no context) returns.
func (d *dumpDialer) abort() {
	d.mu.Lock()
	d.stopped = true
	conns := d.conns
	d.conns = nil
	d.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
}

// idleConn sets a fresh read deadline at the start of every Read (and a
// write deadline for every Write), so the timeout measures how long the
// server has been silent while the connector waits for it, not how long
// the connector took to come back for more. An explicit deadline (go-mysql
// sets a short one to stop its reader on Close) is kept when earlier.
type idleConn struct {
	net.Conn
	idle time.Duration

	mu       sync.Mutex
	explicit time.Time
}

func (c *idleConn) Read(b []byte) (int, error) {
	dl := time.Now().Add(c.idle)
	c.mu.Lock()
	if !c.explicit.IsZero() && c.explicit.Before(dl) {
		dl = c.explicit
	}
	c.mu.Unlock()
	if err := c.Conn.SetReadDeadline(dl); err != nil {
		return 0, err
	}
	return c.Conn.Read(b)
}

func (c *idleConn) Write(b []byte) (int, error) {
	if err := c.Conn.SetWriteDeadline(time.Now().Add(c.idle)); err != nil {
		return 0, err
	}
	return c.Conn.Write(b)
}

func (c *idleConn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	c.explicit = t
	c.mu.Unlock()
	return ignoreClosed(c.Conn.SetReadDeadline(t))
}

func (c *idleConn) SetDeadline(t time.Time) error {
	c.mu.Lock()
	c.explicit = t
	c.mu.Unlock()
	return ignoreClosed(c.Conn.SetDeadline(t))
}

// ignoreClosed drops the error of a deadline set on a connection already
// closed (by dumpDialer.abort): no read is left to stop. go-mysql's Close
// sets one to stop its reader, and since v1.15 answers a failure by
// closing the connection while that reader may still run (a data race)
// and logging two warnings on every clean stop.
func ignoreClosed(err error) error {
	if errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}
