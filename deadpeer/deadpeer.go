// Package deadpeer is the connector's one policy for a TCP peer that went
// silent without closing (its host died, a firewall dropped the flow, the
// network was cut): every connection kind's keepalive settings live here,
// and so does the one dialer that applies them.
//
// Two kernel mechanisms end such a connection, and a Policy sets both:
//
//   - TCP keepalives, for an idle connection: after Idle without traffic
//     the kernel probes every Interval, and Count unanswered probes end it.
//   - TCP_USER_TIMEOUT (Linux), for a connection with data outstanding (a
//     query waiting on a partitioned server, a write in the send buffer):
//     data unacknowledged for DeadAfter ends it. Keepalive probes are not
//     sent while data waits, so without it such a connection waits for the
//     kernel's retransmission limit (about 15 minutes).
//
// Both are about a silent path: a peer that answers at the TCP level but
// never at the application level (a frozen process, a proxy that still
// ACKs) is found only by the caller's own deadlines.
package deadpeer

import (
	"net"
	"strings"
	"syscall"
	"time"
)

// Policy is how long a connection lives on after its peer went silent.
type Policy struct {
	// Idle is the silence before the first keepalive probe, Interval the
	// time between probes, Count the unanswered probes that end the
	// connection.
	Idle, Interval time.Duration
	Count          int
	// UserTimeout bounds unacknowledged sent data by DeadAfter as well
	// (TCP_USER_TIMEOUT, Linux only). Off where the client library only
	// takes a keepalive period.
	UserTimeout bool
}

// The policies of each connection kind. Changing one changes how fast
// that kind gives up on a dead peer, and how soon a slow peer is taken
// for a dead one.
var (
	// Database is the side connections to the source database (the
	// checkpoint table, the HA lock's readiness records, the lifecycle):
	// dead after 20s. The HA lock derives its own from
	// ha.session_timeout (dbconn.Options).
	Database = Policy{Idle: 5 * time.Second, Interval: 5 * time.Second, Count: 3, UserTimeout: true}
	// Binlog is the MySQL/MariaDB source's connections (the binlog dump
	// and the metadata pool): dead after 25s.
	Binlog = Policy{Idle: 10 * time.Second, Interval: 5 * time.Second, Count: 3, UserTimeout: true}
	// WAL is the PostgreSQL source's connections (replication, metadata,
	// lag monitor, pending backfill): dead after 30s.
	WAL = Policy{Idle: 15 * time.Second, Interval: 5 * time.Second, Count: 3, UserTimeout: true}
	// Kafka is the Kafka sink's broker connections: the client takes a
	// keepalive period only (Idle); interval and count are Go's defaults
	// (15s, 9). An idle connection to a vanished host is dropped in under
	// three minutes rather than after the OS's hours; requests in flight
	// are bounded by the sink's read deadline first.
	Kafka = Policy{Idle: 10 * time.Second, Interval: 15 * time.Second, Count: 9}
	// HTTP is the HTTP-based sinks' connections (sink.type http, sqs, sns):
	// Go's HTTP transport defaults.
	HTTP = Policy{Idle: 30 * time.Second, Interval: 15 * time.Second, Count: 9}
)

// DeadAfter is about when the kernel gives up on a silent peer: the idle
// time plus every probe.
func (p Policy) DeadAfter() time.Duration { return p.Idle + p.Interval*time.Duration(p.Count) }

// KeepAliveConfig is the keepalive settings for a net.Dialer.
func (p Policy) KeepAliveConfig() net.KeepAliveConfig {
	return net.KeepAliveConfig{Enable: true, Idle: p.Idle, Interval: p.Interval, Count: p.Count}
}

// Dialer returns a dialer that applies p to every TCP connection and
// bounds connecting by timeout (0: none).
func (p Policy) Dialer(timeout time.Duration) *net.Dialer {
	d := &net.Dialer{Timeout: timeout, KeepAliveConfig: p.KeepAliveConfig()}
	if p.UserTimeout {
		d.Control = UserTimeout(p.DeadAfter())
	}
	return d
}

// UserTimeout is a net.Dialer Control function that sets TCP_USER_TIMEOUT
// to d on a TCP socket before it connects (other networks: nothing), where
// the system has it (Linux).
func UserTimeout(d time.Duration) func(network, address string, c syscall.RawConn) error {
	return func(network, _ string, c syscall.RawConn) error {
		if !strings.HasPrefix(network, "tcp") {
			return nil
		}
		return setUserTimeout(c, d)
	}
}
