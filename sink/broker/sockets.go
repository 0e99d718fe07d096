package broker

import (
	"net"
	"sync"
)

// Sockets keeps the TCP sockets one broker connection dialed (a client
// may dial several: a pool), so that a connection given up can be torn
// down at once, whatever its client is blocked on: Abort closes them, and
// a write blocked on a full socket, a read waiting for an answer that
// will not come, return.
type Sockets struct {
	mu     sync.Mutex
	conns  []net.Conn
	closed bool
}

// Track keeps c (a connection dialed for the client) and returns it; c
// is closed at once when Abort ran already.
func (s *Sockets) Track(c net.Conn) net.Conn {
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
