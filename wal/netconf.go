package wal

import (
	"context"
	"net"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// Every connection of the source to PostgreSQL (replication, metadata, the
// lag monitor, the pending backfill) is dialled with TCP keepalives the
// connector sets and, on Linux, TCP_USER_TIMEOUT, and asks the server for
// keepalives on its side too. A half-open connection (the peer's host gone,
// a firewall that dropped its state) then dies within about tcpDeadAfter
// even where no application-level timeout applies: a write that would
// otherwise sit in the send buffer, a query waiting for its answer.
//
// The server side gets keepalives only, never tcp_user_timeout: while the
// pipeline blocks, the source stops reading the replication stream and the
// server's sends meet a zero window, which Linux counts against
// TCP_USER_TIMEOUT, so the walsender would be cut during a long Kafka
// outage. Keepalive probes are not sent while data waits, so they do not.
const (
	keepAliveIdle     = 15 * time.Second
	keepAliveInterval = 5 * time.Second
	keepAliveCount    = 3
	// tcpUserTimeout bounds how long data the source sent (status updates,
	// queries) may stay unacknowledged before the kernel drops the
	// connection.
	tcpUserTimeout = 30 * time.Second
	// tcpDeadAfter is about when the kernel gives up on a silent peer.
	tcpDeadAfter = keepAliveIdle + keepAliveInterval*keepAliveCount
)

// netConfig sets the dialer, the connect timeout and the server-side
// session settings of one connection. replication adds
// wal_sender_timeout when the configuration sets it.
func (s *Source) netConfig(cfg *pgconn.Config, replication bool) {
	d := &net.Dialer{
		Timeout: s.cfg.ConnectTimeout,
		KeepAliveConfig: net.KeepAliveConfig{
			Enable: true, Idle: keepAliveIdle, Interval: keepAliveInterval, Count: keepAliveCount,
		},
		Control: setTCPUserTimeout,
	}
	cfg.DialFunc = d.DialContext
	if replication {
		cfg.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return newBatchConn(c), nil // readconn.go
		}
	}
	cfg.ConnectTimeout = s.cfg.ConnectTimeout
	rp := cfg.RuntimeParams
	rp["tcp_keepalives_idle"] = strconv.Itoa(int(keepAliveIdle / time.Second))
	rp["tcp_keepalives_interval"] = strconv.Itoa(int(keepAliveInterval / time.Second))
	rp["tcp_keepalives_count"] = strconv.Itoa(keepAliveCount)
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
