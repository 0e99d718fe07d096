package testenv

import (
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
)

// Proxy is a TCP proxy a test controls, put between the connector and a
// database or broker. Silence makes the path go quiet in both directions
// without closing anything, as a cut network or a dead firewall state
// looks: bytes are neither delivered nor refused, no RST and no FIN reach
// either side. Heal delivers again (what was held back while silent is
// dropped, as a partition loses it). Freeze stops reading in both
// directions, so the peers' kernel buffers fill and their writes block, as a
// SIGSTOPped process looks (its kernel keeps the connection up, acks
// nothing beyond a full window, and the application reads nothing); Thaw
// delivers what was held back. Cut closes every connection (a RST-free FIN
// both ways), as a server restart looks. Partition cuts the connections
// open at the time the way a lost network path does to TCP: what each
// side sends is held, as its kernel holds unacknowledged data to send
// again, and arrives on Heal; a side that resets its connection meanwhile
// (an abortive close) has discarded what it held.
type Proxy struct {
	target string
	ln     net.Listener

	mu     sync.Mutex
	thawed *sync.Cond // signalled when frozen turns false
	frozen bool
	silent bool
	conns  map[*proxyConn]struct{}
	accept int
	closed bool
	wg     sync.WaitGroup

	dropped atomic.Int64 // bytes from clients dropped while silent
}

type proxyConn struct {
	client, server net.Conn
	partitioned    bool // guarded by Proxy.mu
	up, down       half // client to server, server to client
}

// half is one direction of a partitioned connection: what its sender sent
// meanwhile, and how the sender ended the connection (nil: it did not).
type half struct {
	mu   sync.Mutex
	held []byte
	end  error
}

// NewProxy listens on a loopback port and forwards every connection to
// target. It is closed at test end.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("proxy listen: %v", err)
	}
	p := &Proxy{target: target, ln: ln, conns: map[*proxyConn]struct{}{}}
	p.thawed = sync.NewCond(&p.mu)
	p.wg.Add(1)
	go p.serve()
	t.Cleanup(p.Close)
	return p
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Accepted is how many connections the proxy has accepted so far.
func (p *Proxy) Accepted() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.accept
}

// Dropped is how many bytes the clients sent that the proxy dropped
// while silent: a test waits on it to know a client's request went
// into the void.
func (p *Proxy) Dropped() int64 { return p.dropped.Load() }

// Silence stops delivering bytes in both directions on every connection,
// existing and new, without closing any of them. New connections are
// accepted by the kernel but never reach the target, as a SYN to a
// partitioned host whose listener half-answers would.
func (p *Proxy) Silence() {
	p.mu.Lock()
	p.silent = true
	p.mu.Unlock()
}

// SetTarget sends the connections accepted from now on to target, as a
// virtual IP or a DNS name moved to a new primary looks; existing
// connections stay where they are (Cut them to move everyone).
func (p *Proxy) SetTarget(target string) {
	p.mu.Lock()
	p.target = target
	p.mu.Unlock()
}

// Heal delivers bytes again. Connections made while silent stay dead (their
// handshake never reached the target); clients must reconnect. A
// partitioned connection gets, each way, what its sender sent meanwhile,
// then the sender's close: a FIN as a FIN, a reset as a reset (and
// nothing of what was held).
func (p *Proxy) Heal() {
	p.mu.Lock()
	p.silent = false
	var healed []*proxyConn
	for c := range p.conns {
		if c.partitioned {
			c.partitioned = false
			healed = append(healed, c)
		}
	}
	p.mu.Unlock()
	for _, c := range healed {
		p.deliver(c, &c.up, c.server)
		p.deliver(c, &c.down, c.client)
	}
}

// Partition holds, on every connection open now, what either side sends,
// until Heal; connections made later are not affected (the path of one
// flow is lost, as when a firewall or NAT drops its state or a load
// balancer's node dies). Neither side learns anything meanwhile: no FIN,
// no RST, no ack.
func (p *Proxy) Partition() {
	p.mu.Lock()
	for c := range p.conns {
		c.partitioned = true
	}
	p.mu.Unlock()
}

func (p *Proxy) isPartitioned(c *proxyConn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return c.partitioned
}

// deliver writes what h held to dst and passes on how its sender ended
// the connection, closing both sides.
func (p *Proxy) deliver(c *proxyConn, h *half, dst net.Conn) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.held) > 0 {
		dst.Write(h.held)
		h.held = nil
	}
	if h.end == nil {
		return
	}
	if errors.Is(h.end, syscall.ECONNRESET) {
		if tc, ok := dst.(*net.TCPConn); ok {
			tc.SetLinger(0)
		}
	}
	c.client.Close()
	c.server.Close()
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

// Freeze stops reading from every connection, existing and new, in both
// directions, without closing any: what each side sends piles up in the
// kernel buffers until its writes block. New connections are accepted but
// not forwarded until Thaw.
func (p *Proxy) Freeze() {
	p.mu.Lock()
	p.frozen = true
	p.mu.Unlock()
}

// Thaw reads and delivers again, what was held back included.
func (p *Proxy) Thaw() {
	p.mu.Lock()
	p.frozen = false
	p.thawed.Broadcast()
	p.mu.Unlock()
}

// waitThawed blocks while the proxy is frozen; it returns false once the
// proxy is closed.
func (p *Proxy) waitThawed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.frozen && !p.closed {
		p.thawed.Wait()
	}
	return !p.closed
}

// Cut closes every open connection (both sides see EOF), leaving the proxy
// accepting new ones.
func (p *Proxy) Cut() {
	p.mu.Lock()
	conns := p.conns
	p.conns = map[*proxyConn]struct{}{}
	p.mu.Unlock()
	for c := range conns {
		c.client.Close()
		c.server.Close()
	}
}

// Close stops accepting and closes every connection.
func (p *Proxy) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	p.thawed.Broadcast()
	p.mu.Unlock()
	p.ln.Close()
	p.Cut()
	p.wg.Wait()
}

func (p *Proxy) isSilent() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.silent
}

func (p *Proxy) serve() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		p.accept++
		silent := p.silent
		p.mu.Unlock()
		if !p.waitThawed() {
			client.Close()
			return
		}
		if silent {
			// Hold the connection open and answer nothing, until Close.
			p.mu.Lock()
			c := &proxyConn{client: client, server: nopConn{}}
			p.conns[c] = struct{}{}
			p.mu.Unlock()
			continue
		}
		p.mu.Lock()
		target := p.target
		p.mu.Unlock()
		server, err := net.Dial("tcp", target)
		if err != nil {
			client.Close()
			continue
		}
		c := &proxyConn{client: client, server: server}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			client.Close()
			server.Close()
			return
		}
		p.conns[c] = struct{}{}
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(c, &c.up, client, server)
		go p.pipe(c, &c.down, server, client)
	}
}

// pipe copies src to dst, dropping what arrives while the proxy is silent
// and holding it in h while c is partitioned. When either side closes,
// both are closed (unless the proxy is silent: a silent path delivers no
// FIN either; or c is partitioned: Heal passes the close on).
func (p *Proxy) pipe(c *proxyConn, h *half, src, dst net.Conn) {
	defer p.wg.Done()
	buf := make([]byte, 32<<10)
	for {
		if !p.waitThawed() {
			return
		}
		n, err := src.Read(buf)
		// A read that was under way when the proxy froze delivers nothing
		// (and reports no error to the other side) until the thaw.
		if !p.waitThawed() {
			return
		}
		if p.isPartitioned(c) {
			h.mu.Lock()
			if h.end == nil {
				h.held = append(h.held, buf[:n]...)
				if err != nil {
					h.end = err
					if errors.Is(err, syscall.ECONNRESET) {
						h.held = nil // an abortive close discards what the sender's kernel held
					}
				}
			}
			h.mu.Unlock()
			if err != nil {
				return
			}
			continue
		}
		h.mu.Lock()
		if len(h.held) > 0 { // Heal is delivering it; keep the order
			dst.Write(h.held)
			h.held = nil
		}
		if n > 0 && !p.isSilent() {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				err = werr
			}
		} else if n > 0 && h == &c.up {
			p.dropped.Add(int64(n))
		}
		h.mu.Unlock()
		if err != nil {
			if p.isSilent() && !errors.Is(err, net.ErrClosed) && err != io.EOF {
				return
			}
			if p.isSilent() && err == io.EOF {
				// The peer closed while the path is silent: the other side
				// must not learn of it; keep its socket open until Cut/Close.
				return
			}
			c.client.Close()
			c.server.Close()
			p.mu.Lock()
			delete(p.conns, c)
			p.mu.Unlock()
			return
		}
	}
}

// nopConn stands in for the server side of a connection accepted while
// silent: there is none.
type nopConn struct{ net.Conn }

func (nopConn) Close() error { return nil }
