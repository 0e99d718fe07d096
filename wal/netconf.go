package wal

import (
	"context"
	"net"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outbox-cdc/outbox-cdc/deadpeer"
)

// Every connection of the source to PostgreSQL (replication, metadata, the
// lag monitor, the pending backfill) is dialled with deadpeer.WAL (TCP
// keepalives and, on Linux, TCP_USER_TIMEOUT), and asks the server for
// keepalives on its side too. A half-open connection (the peer's host gone,
// a firewall that dropped its state) then dies within about its DeadAfter
// even where no application-level timeout applies: a write that would
// otherwise sit in the send buffer, a query waiting for its answer.
//
// The server side gets keepalives only, never tcp_user_timeout: while the
// pipeline blocks, the source stops reading the replication stream and the
// server's sends meet a zero window, which Linux counts against
// TCP_USER_TIMEOUT, so the walsender would be cut during a long Kafka
// outage. Keepalive probes are not sent while data waits, so they do not.

// netConfig sets the dialer, the connect timeout and the server-side
// session settings of one connection. replication adds
// wal_sender_timeout when the configuration sets it.
func (s *Source) netConfig(cfg *pgconn.Config, replication bool) {
	p := deadpeer.WAL
	d := p.Dialer(s.cfg.ConnectTimeout)
	cfg.DialFunc = d.DialContext
	if replication {
		cfg.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			smallWindowOnLoopback(c)
			return newBatchConn(c), nil // readconn.go
		}
	}
	cfg.ConnectTimeout = s.cfg.ConnectTimeout
	rp := cfg.RuntimeParams
	rp["tcp_keepalives_idle"] = strconv.Itoa(int(p.Idle / time.Second))
	rp["tcp_keepalives_interval"] = strconv.Itoa(int(p.Interval / time.Second))
	rp["tcp_keepalives_count"] = strconv.Itoa(p.Count)
	if replication && s.cfg.WalSenderTimeout > 0 {
		rp["wal_sender_timeout"] = strconv.FormatInt(s.cfg.WalSenderTimeout.Milliseconds(), 10)
	}
}

// receiveTimeout is the silence after which a replication connection is
// presumed dead, given the wal_sender_timeout the server applies to it
// (0: disabled). The server answers a ping at once while it waits for WAL
// or reads it, but while it replays a large transaction whose changes it
// filters out it reads our messages only every wal_sender_timeout/2.
func (c *Config) receiveTimeout(serverWST time.Duration) time.Duration {
	if c.ReceiveTimeout > 0 {
		return c.ReceiveTimeout
	}
	return serverWST/2 + max(5*time.Second, 2*c.StatusInterval)
}

// loopbackRcvBuf is the receive buffer asked for on a replication
// connection to a server on the same host (the kernel doubles it).
//
// Over loopback TCP the walsender's send() of each pgoutput message also
// runs the receiving end of the connection on the walsender's CPU, and a
// backlog drain is bound by that one process (bench/PROFILE.md §5, §8). A
// small, fixed receive window closes while a batched read (readconn.go)
// waits: the walsender's next sends only queue on its socket, and the
// queued messages go out as large segments when the window opens, sent
// from the reader's side (our ACK's processing). Measured on the bench's
// 1M-row drain, three pairs back to back: walsender CPU 5.6-6.0 -> 5.0-5.6
// s, connector CPU 3.1-3.3 -> 2.6-3.0 s, drain 156-169k -> 171-196k
// rows/s. What matters is that the buffer is fixed: 64 KiB doubled is
// also the size a Linux TCP socket starts with (tcp_rmem), which
// autotuning then grows to megabytes during a drain. Other peers keep the
// kernel's autotuning: across a network the window bounds throughput
// (window / round trip) and the server's CPU does not run our side. A
// variable for tests.
var loopbackRcvBuf = 64 << 10

// smallWindowOnLoopback sets loopbackRcvBuf on c when it is a TCP
// connection to a loopback address.
func smallWindowOnLoopback(c net.Conn) {
	tc, ok := c.(*net.TCPConn)
	if !ok || !isLoopback(tc.RemoteAddr()) {
		return
	}
	_ = tc.SetReadBuffer(loopbackRcvBuf) // best effort: only a speed-up
}

func isLoopback(a net.Addr) bool {
	ta, ok := a.(*net.TCPAddr)
	return ok && ta.IP.IsLoopback()
}
