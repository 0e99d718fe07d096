package wal

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// tcpPair returns a batchConn dialled over loopback TCP and the peer's
// end.
func tcpPair(t *testing.T) (*batchConn, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	acc := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		acc <- c
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	peer := <-acc
	if peer == nil {
		t.Fatal("accept failed")
	}
	b := newBatchConn(c)
	t.Cleanup(func() { b.Close(); peer.Close() })
	return b, peer
}

func rcvLowat(t *testing.T, b *batchConn) int {
	t.Helper()
	return sockoptInt(t, b, unix.SO_RCVLOWAT)
}

// sockoptInt reads a SOL_SOCKET option of b's socket.
func sockoptInt(t *testing.T, b *batchConn, opt int) int {
	t.Helper()
	var v int
	var gerr error
	if err := b.raw.Control(func(fd uintptr) {
		v, gerr = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, opt)
	}); err != nil || gerr != nil {
		t.Fatal(err, gerr)
	}
	return v
}

// readAsync reads once in the background.
func readAsync(b *batchConn, p []byte) <-chan error {
	done := make(chan error, 1)
	go func() {
		n, err := b.Read(p)
		if err == nil && n == 0 {
			err = errors.New("read returned nothing")
		}
		done <- err
	}()
	return done
}

// A batching read sets SO_RCVLOWAT, turning batching off restores it,
// and what one batched read took in is handed out by the following reads.
func TestBatchConnLowatAndReadAhead(t *testing.T) {
	b, peer := tcpPair(t)
	msg := bytes.Repeat([]byte("m"), 3000)
	if _, err := peer.Write(msg); err != nil {
		t.Fatal(err)
	}
	b.want(true)
	got := make([]byte, 0, len(msg))
	p := make([]byte, 1000)
	for len(got) < len(msg) {
		n, err := b.Read(p)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, p[:n]...)
	}
	if !bytes.Equal(got, msg) {
		t.Fatalf("read %d bytes, not the %d written", len(got), len(msg))
	}
	if v := rcvLowat(t, b); v != batchLowat {
		t.Fatalf("SO_RCVLOWAT while batching %d, want %d", v, batchLowat)
	}
	if b.batches.Load() == 0 {
		t.Fatal("no batched read counted")
	}
	b.want(false)
	if _, err := peer.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Read(p); err != nil {
		t.Fatal(err)
	}
	if v := rcvLowat(t, b); v != 1 {
		t.Fatalf("SO_RCVLOWAT after batching %d, want 1", v)
	}
}

// Fewer bytes than the low-water mark (the end of a backlog, a sparse
// stream) are read after batchMaxWait, not when the read deadline the
// stream set (its next status update) passes.
func TestBatchConnShortDataNotHeld(t *testing.T) {
	b, peer := tcpPair(t)
	if err := b.SetReadDeadline(time.Now().Add(20 * time.Second)); err != nil {
		t.Fatal(err)
	}
	b.want(true)
	done := readAsync(b, make([]byte, 100))
	time.Sleep(100 * time.Millisecond) // let the read wait with SO_RCVLOWAT set
	if _, err := peer.Write([]byte("short")); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("short data held back by the low-water mark")
	}
	if b.wanted.Load() {
		t.Error("batching still wanted after a read cut short")
	}
}

// The deadlines of the users still apply to a batching read: the stream's
// own (status update, receive timeout) and the one that ends a read when
// the context is cancelled, set from another goroutine.
func TestBatchConnKeepsDeadlines(t *testing.T) {
	b, _ := tcpPair(t)
	b.want(true)
	if err := b.SetReadDeadline(time.Now().Add(time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := b.Read(make([]byte, 10)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read past its deadline: %v", err)
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Fatalf("read took %s past a 1 ms deadline", el)
	}

	_ = b.SetReadDeadline(time.Time{})
	b.want(true)
	done := readAsync(b, make([]byte, 10))
	time.Sleep(50 * time.Millisecond)
	_ = b.SetReadDeadline(time.Now()) // what the stream's watcher does on cancel
	select {
	case err := <-done:
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("read after the deadline was moved to now: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a deadline set from another goroutine did not end the read")
	}
}

// fillerWAL writes about mib MiB of WAL into a table outside the
// publication, in one transaction.
func (e *pgEnv) fillerWAL(mib int) {
	e.t.Helper()
	tbl := "fill_" + e.name
	e.exec(`CREATE TABLE IF NOT EXISTS ` + tbl + ` (v text)`)
	e.exec(fmt.Sprintf(`INSERT INTO %s SELECT repeat(md5(g::text), 32) FROM generate_series(1, %d) g`, tbl, mib*1024))
	e.t.Cleanup(func() { e.exec(`DROP TABLE IF EXISTS ` + tbl) })
}

// createSlot runs the source until it streams, so the slot exists, and
// stops it.
func createSlot(t *testing.T, e *pgEnv, cfg Config) {
	t.Helper()
	src, _ := e.source(cfg, seedCols)
	r := start(t, src, "", 16)
	r.waitReady()
	if err := r.stop(); !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
}

// A backlog is read in batches, whole and in order; once it is drained, a
// new row arrives at once, not at the next status update.
func TestBacklogReadInBatches(t *testing.T) {
	e := newPgEnv(t)
	cfg := e.config()
	cfg.StatusInterval = 20 * time.Second // a read held to its deadline would show
	cfg.WalSenderTimeout = 2 * time.Minute
	createSlot(t, e, cfg)

	const txs, rows = 40, 250
	ctx := context.Background()
	for i := range txs {
		tx, err := e.db.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		_, err = tx.Exec(ctx, `INSERT INTO `+e.table+` (message_id, aggregate_type, aggregate_id, event_type, payload)
			SELECT $1::text || '-' || g, 'ORDER', 'agg', 'CREATED', json_build_object('n', g, 'pad', repeat('p', 400))
			FROM generate_series(1, $2::int) g`, fmt.Sprint(i), rows)
		if err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}

	time.Sleep(backlogAge) // the rows are late when read

	src, _ := e.source(cfg, seedCols)
	r := start(t, src, "", 4)
	r.waitReady()
	for i := range txs {
		tx := r.next(30 * time.Second)
		if len(tx.Events) != rows || tx.Events[0].MessageID != fmt.Sprint(i)+"-1" || tx.Events[rows-1].MessageID != fmt.Sprintf("%d-%d", i, rows) {
			t.Fatalf("tx %d: %d events, %s … %s", i, len(tx.Events), tx.Events[0].MessageID, tx.Events[len(tx.Events)-1].MessageID)
		}
		src.Ack(tx.End)
	}
	b := src.batch.Load()
	if b == nil || b.batches.Load() == 0 {
		t.Fatalf("the backlog was not read in batches (%v)", b)
	}
	e.insertTx("live")
	if tx := r.next(5 * time.Second); ids(tx) != "live" {
		t.Fatalf("got %s", ids(tx))
	}
}

// A sparse stream while the server's WAL is far ahead (other tables' WAL
// in between): a transaction is not held back waiting for more bytes.
func TestSparseBacklogNotHeld(t *testing.T) {
	e := newPgEnv(t)
	cfg := e.config()
	cfg.StatusInterval = 20 * time.Second
	cfg.WalSenderTimeout = 2 * time.Minute
	createSlot(t, e, cfg)

	e.insertTx("first")
	e.fillerWAL(8)
	e.insertTx("second")
	e.fillerWAL(8) // still a backlog when "second" is read
	time.Sleep(backlogAge)

	src, _ := e.source(cfg, seedCols)
	r := start(t, src, "", 4)
	r.waitReady()
	for _, want := range []string{"first", "second"} {
		tx := r.next(10 * time.Second)
		if ids(tx) != want {
			t.Fatalf("got %s, want %s", ids(tx), want)
		}
		src.Ack(tx.End)
	}
	if b := src.batch.Load(); b == nil || b.batches.Load() == 0 {
		t.Fatal("no batched read: the test did not exercise batching")
	}
}

// Fresh rows are read message by message even when the server's WAL end
// is far ahead (the cluster's other databases write a lot): batching them
// would only add latency.
func TestFreshRowsNotBatched(t *testing.T) {
	e := newPgEnv(t)
	cfg := e.config()
	cfg.LagInterval = time.Hour // keep the WAL end stored below
	src, _ := e.source(cfg, seedCols)
	r := start(t, src, "", 16)
	r.waitReady()
	src.serverWAL.Store(1 << 62) // a WAL end far ahead of anything received
	for i := range 5 {
		e.insertTx(fmt.Sprint("fresh", i))
		if tx := r.next(10 * time.Second); ids(tx) != fmt.Sprint("fresh", i) {
			t.Fatalf("got %s", ids(tx))
		}
	}
	if n := src.batch.Load().batches.Load(); n != 0 {
		t.Fatalf("%d batched reads of fresh rows", n)
	}
}

// The replication connection to a server on this host gets the small
// fixed receive buffer (netconf.go, loopbackRcvBuf); the kernel doubles
// what is asked for. The test asks for a size that differs from the
// kernel's initial one (tcp_rmem), which the socket keeps otherwise.
func TestReplicationLoopbackSmallWindow(t *testing.T) {
	defer func(v int) { loopbackRcvBuf = v }(loopbackRcvBuf)
	loopbackRcvBuf = 40 << 10
	e := newPgEnv(t)
	src, _ := e.source(e.config(), seedCols)
	r := start(t, src, "", 4)
	r.waitReady()
	b := src.batch.Load()
	if b == nil || b.raw == nil {
		t.Fatal("the replication connection is not a TCP connection: the test needs the DSN's 127.0.0.1")
	}
	if v := sockoptInt(t, b, unix.SO_RCVBUF); v != 2*loopbackRcvBuf {
		t.Fatalf("SO_RCVBUF %d on a loopback replication connection, want %d", v, 2*loopbackRcvBuf)
	}
	e.insertTx("after")
	if tx := r.next(10 * time.Second); ids(tx) != "after" {
		t.Fatalf("got %s", ids(tx))
	}
}

func TestIsLoopback(t *testing.T) {
	for addr, want := range map[string]bool{"127.0.0.1:5432": true, "127.8.0.1:5432": true, "[::1]:5432": true, "10.0.0.7:5432": false, "[2001:db8::1]:5432": false} {
		a, err := net.ResolveTCPAddr("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		if got := isLoopback(a); got != want {
			t.Errorf("isLoopback(%s) = %v", addr, got)
		}
	}
	if isLoopback(&net.UnixAddr{Name: "/var/run/postgresql/.s.PGSQL.5432", Net: "unix"}) {
		t.Error("a Unix socket is not a TCP loopback peer")
	}
}
