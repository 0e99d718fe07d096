package sink

import (
	"net"
	"sync"
)

// Sockets keeps the TCP sockets one broker connection dialed (a client
// may dial several: a pool), so that a connection given up can be torn
// down at once, whatever its client is blocked on: Abort closes them, and
// a write blocked on a full socket, a read waiting for an answer that
// will not come, return.
//
// Every socket kept is closed with a reset (SO_LINGER 0), whoever closes
// it (Abort, or the client itself after a read timeout). A plain close
// leaves what the kernel has not yet delivered (publishes the broker has
// not acknowledged) to be sent, and sent again, for as long as the
// kernel retries; on a path that heals meanwhile those writes reach the
// broker after the sink has sent them again on a new connection, after
// later rows of the same key. A reset discards them. It cannot recall
// what already reached the broker's host, so it narrows the window, no
// more (docs/sinks.md). A socket closed in the normal way has nothing
// unsent: its writes were answered.
type Sockets struct {
	mu     sync.Mutex
	conns  []net.Conn
	closed bool
}

// Track keeps c (a connection dialed for the client, TCP or TLS over
// TCP), sets its SO_LINGER to 0 and returns it; c is closed at once when
// Abort ran already.
func (s *Sockets) Track(c net.Conn) net.Conn {
	raw := c
	if tc, ok := raw.(interface{ NetConn() net.Conn }); ok { // *tls.Conn
		raw = tc.NetConn()
	}
	if tc, ok := raw.(*net.TCPConn); ok {
		tc.SetLinger(0)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		c.Close()
		return c
	}
	s.conns = append(s.conns, c)
	return c
}

// Abort closes every socket kept, and every one tracked later.
func (s *Sockets) Abort() {
	s.mu.Lock()
	conns := s.conns
	s.conns, s.closed = nil, true
	s.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
}
