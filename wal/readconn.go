package wal

import (
	"errors"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pglogrepl"
)

// Reading a backlog in batches.
//
// The walsender writes every pgoutput message with its own send(), and a
// reader that keeps up takes each one with its own read() after its own
// wakeup: while a backlog drains, the server is the limit, and the
// connector spends most of its stream CPU on syscalls and scheduling per
// ~300-byte message, CPU the walsender on the same host could use. While
// the stream reads a backlog (see backlog: the server's WAL end far ahead
// of what was received, and transactions that committed a second ago or
// more), the replication socket gets SO_RCVLOWAT
// batchLowat: the kernel then wakes the reader only once that many bytes
// are waiting, so one wakeup reads hundreds of messages. A read never waits
// longer than batchMaxWait for them: when it would, batching is switched
// off and what is there is read at once (the end of a backlog, or a sparse
// stream). Live streams are read exactly as before, message by message.
const (
	batchLowat   = 64 << 10
	batchMaxWait = 5 * time.Millisecond
	// batchReadSize is the size of one batched read.
	batchReadSize = 2 * batchLowat
	// backlogBytes is how far (in WAL bytes) the server's WAL end must be
	// ahead of the last message received, and backlogAge how long ago the
	// transaction being read must have committed, for the stream to count
	// as a backlog.
	backlogBytes = 4 << 20
	backlogAge   = time.Second
)

// backlog reports whether the stream reads a backlog: the server's WAL end
// (serverWAL, as last read) is far ahead of the last message received,
// and the transaction being read committed at least backlogAge ago (late).
// The WAL end is the whole cluster's: other databases' writes move it
// while this stream's rows are fresh, and batching those would only add
// latency. late is judged by the server's clock; a server clock ahead of
// ours only turns batching off.
func backlog(serverWAL, received pglogrepl.LSN, late bool) bool {
	return late && serverWAL > received+backlogBytes
}

// batchConn is the replication connection's socket. Batching is asked for
// with want; the socket option changes only on the reading goroutine, in
// Read. Deadlines set by pgconn and the stream loop (the outer deadline)
// are kept: a batching read waits until the earlier of the outer deadline
// and batchMaxWait from now.
type batchConn struct {
	net.Conn
	raw syscall.RawConn // nil: not a TCP socket, never batches

	wanted atomic.Bool
	failed atomic.Bool // setting SO_RCVLOWAT failed: never batch again

	mu       sync.Mutex
	outer    time.Time // the read deadline the users set
	batching bool      // SO_RCVLOWAT is batchLowat

	// lastRead is when the last batched read returned data. While
	// batching, every message the stream decodes came from such a read.
	// Like batching, buf, r and w, it is only touched by the reading
	// goroutine.
	lastRead time.Time

	// buf[r:w] was read ahead by a batched read and not yet returned.
	buf  []byte
	r, w int

	// batches counts the batched reads, waits those cut short by
	// batchMaxWait (tests).
	batches, waits atomic.Int64
}

func newBatchConn(c net.Conn) *batchConn {
	b := &batchConn{Conn: c}
	if tc, ok := c.(*net.TCPConn); ok {
		if raw, err := tc.SyscallConn(); err == nil {
			b.raw = raw
		}
	}
	return b
}

// NetConn returns the underlying connection (as tls.Conn does).
func (b *batchConn) NetConn() net.Conn { return b.Conn }

// want asks for batched reads (true) or reads of whatever arrived (false)
// from the next Read on. It is cheap enough to call per message.
func (b *batchConn) want(on bool) {
	if b.raw != nil && b.wanted.Load() != on && !b.failed.Load() {
		b.wanted.Store(on)
	}
}

func (b *batchConn) SetDeadline(t time.Time) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.outer = t
	return b.Conn.SetDeadline(t)
}

func (b *batchConn) SetReadDeadline(t time.Time) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.outer = t
	return b.Conn.SetReadDeadline(t)
}

func (b *batchConn) Read(p []byte) (n int, err error) {
	if b.r < b.w {
		n = copy(p, b.buf[b.r:b.w])
		b.r += n
		return n, nil
	}
	if !b.wanted.Load() {
		if b.batching {
			b.mu.Lock()
			b.stopLocked()
			b.mu.Unlock()
		}
		return b.Conn.Read(p)
	}
	if b.buf == nil {
		b.buf = make([]byte, batchReadSize)
	}
	n, err = b.readBatch(b.buf)
	b.batches.Add(1)
	if n > 0 {
		b.lastRead = time.Now()
	}
	b.r, b.w = 0, n
	n = copy(p, b.buf[:n])
	b.r = n
	return n, err
}

// readBatch reads into p with SO_RCVLOWAT set, waiting at most
// batchMaxWait for it.
func (b *batchConn) readBatch(p []byte) (n int, err error) {
	b.mu.Lock()
	if !b.batching {
		if setRcvLowat(b.raw, batchLowat) != nil {
			b.failed.Store(true) // read as before from now on
			b.wanted.Store(false)
			b.mu.Unlock()
			return b.Conn.Read(p)
		}
		b.batching = true
	}
	d := time.Now().Add(batchMaxWait)
	if !b.outer.IsZero() && b.outer.Before(d) {
		d = b.outer
	}
	_ = b.Conn.SetReadDeadline(d)
	b.mu.Unlock()

	n, err = b.Conn.Read(p)
	if n > 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
		return n, err
	}
	b.mu.Lock()
	if !b.outer.IsZero() && !time.Now().Before(b.outer) {
		b.mu.Unlock()
		return n, err // the outer deadline
	}
	// Fewer than batchLowat bytes came within batchMaxWait: the backlog
	// ended or the stream is sparse. Read what is there now; the stream
	// asks again while the backlog lasts.
	b.waits.Add(1)
	b.wanted.Store(false)
	b.stopLocked()
	b.mu.Unlock()
	return b.Conn.Read(p)
}

// stopLocked restores SO_RCVLOWAT 1 and the outer deadline; b.mu is held.
func (b *batchConn) stopLocked() {
	if !b.batching {
		return
	}
	b.batching = false
	if setRcvLowat(b.raw, 1) != nil {
		b.failed.Store(true)
	}
	_ = b.Conn.SetReadDeadline(b.outer)
}

// batchConnOf finds the batchConn under c (which may be a TLS
// connection), or nil.
func batchConnOf(c net.Conn) *batchConn {
	for c != nil {
		switch x := c.(type) {
		case *batchConn:
			return x
		case interface{ NetConn() net.Conn }:
			c = x.NetConn()
		default:
			return nil
		}
	}
	return nil
}
