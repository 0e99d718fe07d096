package wal

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	outboxcdc "github.com/outbox-cdc/outbox-cdc"
	"github.com/outbox-cdc/outbox-cdc/test/testenv"
	"github.com/rs/zerolog"
)

// Fault scenarios of the Postgres source against the real server: a silent
// network path, huge transactions, a connection lost in the middle of one,
// a checkpoint behind the slot, derived slot names, undecodable logical
// messages.

// viaProxy returns e's DSN pointed at a testenv.Proxy in front of the
// server.
func viaProxy(t *testing.T, e *pgEnv) (string, *testenv.Proxy) {
	t.Helper()
	u, err := url.Parse(e.dsn)
	if err != nil {
		t.Fatalf("DSN is not a URL: %v", err)
	}
	p := testenv.NewProxy(t, u.Host)
	u.Host = p.Addr()
	return u.String(), p
}

// cuttableConfig is e's configuration through a proxy, with timeouts
// short enough for a test of a silent path (receive timeout 3s).
func cuttableConfig(t *testing.T, e *pgEnv) (Config, *testenv.Proxy) {
	dsn, proxy := viaProxy(t, e)
	cfg := e.config()
	cfg.DSN = dsn
	cfg.WalSenderTimeout = 2 * time.Second
	cfg.ReceiveTimeout = 3 * time.Second
	cfg.ConnectTimeout = 2 * time.Second
	cfg.QueryTimeout = 3 * time.Second
	return cfg, proxy
}

// TestSilentPeerReconnects: the path to the server goes silent both ways
// (no FIN, no RST) for longer than the receive timeout while rows are
// committed. The source notices within the bound (not ready, connected 0),
// keeps retrying without returning, and once the path heals delivers every
// row committed meanwhile, once and in order.
func TestSilentPeerReconnects(t *testing.T) {
	e := newPgEnv(t)
	cfg, proxy := cuttableConfig(t, e)
	src, m := e.source(cfg, seedCols)
	r := start(t, src, "", 1024)
	r.waitReady()
	e.insertTx("p0")
	src.Ack(r.next(10 * time.Second).End)

	const bound = 3 * time.Second // the receive timeout
	oldPID := e.activePID()
	silenced := time.Now()
	proxy.Silence()
	var want []string
	var detected, walsenderGone time.Duration
	for i := 1; time.Since(silenced) < 3*bound || detected == 0; i++ {
		if walsenderGone == 0 && e.activePID() != oldPID {
			walsenderGone = time.Since(silenced) // the server ended it: wal_sender_timeout
		}
		id := fmt.Sprintf("p%d", i)
		e.insertTx(id)
		want = append(want, id)
		if detected == 0 && src.Ready() != nil && counter(m.Connected) == 0 {
			detected = time.Since(silenced)
			t.Logf("silence detected after %s: %v", detected.Round(time.Millisecond), src.Ready())
		}
		if time.Since(silenced) > bound+10*time.Second {
			t.Fatalf("silence not detected within %s (receive timeout %s)", time.Since(silenced).Round(time.Second), bound)
		}
		select {
		case err := <-r.done:
			t.Fatalf("Run returned during the silence: %v", err)
		case tx := <-r.out:
			if len(tx.Events) > 0 {
				t.Fatalf("received %s through a silent path", ids(tx))
			}
		case <-time.After(100 * time.Millisecond):
		}
	}
	if detected > bound+5*time.Second {
		t.Fatalf("detection took %s, bound %s", detected, bound)
	}
	if walsenderGone == 0 || walsenderGone > cfg.WalSenderTimeout+5*time.Second {
		t.Fatalf("the server's walsender of the silent connection (pid %d) still held the slot %s later (wal_sender_timeout %s)",
			oldPID, time.Since(silenced).Round(time.Second), cfg.WalSenderTimeout)
	}
	attempts := proxy.Accepted()
	t.Logf("ready state while silent: %v", src.Ready())

	healed := time.Now()
	proxy.Heal()
	var got []string
	for len(got) < len(want) {
		tx := r.next(60 * time.Second)
		for _, ev := range tx.Events {
			got = append(got, ev.MessageID)
		}
		src.Ack(tx.End)
	}
	catchUp := time.Since(healed)
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("after healing got %v, want %v", got, want)
	}
	r.none(300 * time.Millisecond)
	if counter(m.Reconnects) < 1 || counter(m.Connected) != 1 || src.Ready() != nil {
		t.Fatalf("reconnects %v connected %v ready %v", counter(m.Reconnects), counter(m.Connected), src.Ready())
	}
	t.Logf("receive timeout %s: detected after %s; the server ended its walsender after %s (wal_sender_timeout %s); "+
		"%d connection attempts while silent; %d rows committed meanwhile, all delivered %s after healing",
		bound, detected.Round(time.Millisecond), walsenderGone.Round(100*time.Millisecond), cfg.WalSenderTimeout,
		proxy.Accepted()-attempts, len(want), catchUp.Round(time.Millisecond))
}

// TestHugeTransactionBoundedHeap: one transaction of 300,000 outbox rows
// of about 1 KB (300 MB) streams through the source in fragments, each
// within the bounds, in order, complete, the last one carrying the end,
// while the process heap stays far below the transaction's size.
func TestHugeTransactionBoundedHeap(t *testing.T) {
	if testing.Short() {
		t.Skip("300 MB transaction")
	}
	const rows = 300000
	// The queue (8 MiB), the channel, the fragment being decoded and the
	// one the consumer holds, each a few MiB; the garbage collector may let
	// the heap grow to about twice what is live.
	const heapBound = 128 << 20
	e := newPgEnv(t)
	src, _ := e.source(e.config(), seedCols)
	r := start(t, src, "", 1)
	r.waitReady()

	var peak atomic.Uint64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		var ms runtime.MemStats
		for {
			runtime.ReadMemStats(&ms)
			if ms.HeapAlloc > peak.Load() {
				peak.Store(ms.HeapAlloc)
			}
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	runtime.GC()
	var base runtime.MemStats
	runtime.ReadMemStats(&base)

	began := time.Now()
	e.exec(`INSERT INTO `+e.table+` (message_id, aggregate_type, aggregate_id, event_type, payload)
		SELECT 'h-'||g, 'ORDER', 'agg-'||(g % 97), 'CREATED', json_build_object('i', g, 'pad', repeat('x', 1000))
		FROM generate_series(1, $1::int) g`, rows)
	committed := time.Since(began)

	next, pieces, maxEvents := 1, 0, 0
	var end outboxcdc.Position
	for end.IsZero() {
		tx := r.next(5 * time.Minute)
		pieces++
		if len(tx.Events) > outboxcdc.MaxFragmentEvents {
			t.Fatalf("fragment %d has %d events, bound %d", pieces, len(tx.Events), outboxcdc.MaxFragmentEvents)
		}
		maxEvents = max(maxEvents, len(tx.Events))
		payload := 0
		for _, ev := range tx.Events {
			if ev.MessageID != fmt.Sprintf("h-%d", next) {
				t.Fatalf("fragment %d: %s, want h-%d", pieces, ev.MessageID, next)
			}
			payload += len(ev.Payload)
			next++
		}
		if payload > outboxcdc.MaxFragmentBytes {
			t.Fatalf("fragment %d carries %d payload bytes, bound %d", pieces, payload, outboxcdc.MaxFragmentBytes)
		}
		if tx.More == !tx.End.IsZero() {
			t.Fatalf("fragment %d: More %v End %q", pieces, tx.More, tx.End)
		}
		end = tx.End
	}
	took := time.Since(began)
	close(stop)
	<-sampled
	if next-1 != rows {
		t.Fatalf("%d rows arrived, want %d", next-1, rows)
	}
	src.Ack(end)
	r.none(300 * time.Millisecond)
	p := peak.Load()
	t.Logf("%d rows in one transaction (committed in %s): %d pieces of at most %d events, all streamed %s after the INSERT began; "+
		"heap %d MiB before, peak %d MiB (bound %d MiB)",
		rows, committed.Round(time.Millisecond), pieces, maxEvents, took.Round(time.Millisecond),
		base.HeapAlloc>>20, p>>20, heapBound>>20)
	if p > heapBound {
		t.Fatalf("heap peaked at %d MiB while the transaction streamed, bound %d MiB", p>>20, heapBound>>20)
	}
}

// TestFragmentedTransactionKeepaliveAndResume: while the consumer holds a
// fragmented transaction's first fragment far longer than
// wal_sender_timeout, the walsender is not timed out (status updates go
// on). Then the walsender is killed in the middle of the transaction: the
// source reconnects, the server sends the transaction again, and the
// consumer gets each event exactly once, in order, with the end on the
// last fragment.
func TestFragmentedTransactionKeepaliveAndResume(t *testing.T) {
	const rows = 5*outboxcdc.MaxFragmentEvents + 100
	e := newPgEnv(t)
	cfg := e.config()
	cfg.BufferBytes = 1 // one fragment queued at a time
	cfg.StatusInterval = 500 * time.Millisecond
	cfg.WalSenderTimeout = 2 * time.Second
	src, m := e.source(cfg, seedCols)
	r := start(t, src, "", 0)
	r.waitReady()
	pid := e.activePID()
	e.exec(`INSERT INTO `+e.table+` (message_id, aggregate_type, aggregate_id, event_type, payload)
		SELECT 'f-'||g, 'ORDER', 'agg-'||(g % 7), 'CREATED', '{}' FROM generate_series(1, $1::int) g`, rows)

	next := 1
	take := func(tx outboxcdc.Tx) {
		t.Helper()
		for _, ev := range tx.Events {
			if ev.MessageID != fmt.Sprintf("f-%d", next) {
				t.Fatalf("%s, want f-%d (duplicate or gap)", ev.MessageID, next)
			}
			next++
		}
	}
	first := r.next(30 * time.Second)
	if !first.More || !first.End.IsZero() {
		t.Fatalf("first piece: More %v End %q, want a fragment", first.More, first.End)
	}
	take(first)
	time.Sleep(6 * time.Second) // 3x wal_sender_timeout with the consumer blocked mid-transaction
	if got := e.activePID(); got != pid || pid == 0 || counter(m.Reconnects) != 0 {
		t.Fatalf("walsender pid %d -> %d, %v reconnects: the stream was dropped while a fragment waited", pid, got, counter(m.Reconnects))
	}

	e.exec(`SELECT pg_terminate_backend($1)`, pid)
	testenv.Eventually(t, 20*time.Second, "reconnected", func() bool { return counter(m.Reconnects) >= 1 && src.Ready() == nil })
	var end outboxcdc.Position
	for end.IsZero() {
		tx := r.next(30 * time.Second)
		if tx.More == !tx.End.IsZero() {
			t.Fatalf("More %v End %q", tx.More, tx.End)
		}
		take(tx)
		end = tx.End
	}
	if next-1 != rows {
		t.Fatalf("%d events, want %d", next-1, rows)
	}
	src.Ack(end)
	e.insertTx("after")
	if got := ids(r.next(10 * time.Second)); got != "after" {
		t.Fatalf("got %s after the transaction", got)
	}
}

// TestCheckpointBehindSlotRefused: a checkpoint behind the slot's
// confirmed_flush_lsn (moved back by hand) makes Run stop with
// ErrBehindSlot naming both positions and the remedy, instead of
// streaming from the slot's position and skipping what is in between;
// `check` fails postgres.position the same way.
func TestCheckpointBehindSlotRefused(t *testing.T) {
	e := newPgEnv(t)
	src, _ := e.source(e.config(), seedCols)
	r := start(t, src, "", 16)
	r.waitReady()
	e.insertTx("b1")
	e.insertTx("b2")
	e.insertTx("b3")
	b1 := r.next(10 * time.Second)
	r.next(10 * time.Second)
	b3 := r.next(10 * time.Second)
	src.Ack(b3.End)
	testenv.Eventually(t, 10*time.Second, "slot confirmed b3", func() bool { return e.confirmedFlush() >= lsnOf(t, b3.End) })
	_ = r.stop()
	testenv.Eventually(t, 10*time.Second, "slot released", func() bool { return e.activePID() == 0 })
	confirmed := e.confirmedFlush()

	src2, _ := e.source(e.config(), seedCols)
	r2 := start(t, src2, b1.End, 16)
	select {
	case err := <-r2.done:
		r2.once.Do(func() {})
		if !errors.Is(err, ErrBehindSlot) || !isPermanent(err) ||
			!strings.Contains(err.Error(), lsnOf(t, b1.End).String()) || !strings.Contains(err.Error(), "position set --to "+string(MakePosition(confirmed))) {
			t.Fatalf("want ErrBehindSlot naming %s and %s, got %v", b1.End, confirmed, err)
		}
		t.Logf("error: %v", err)
	case tx := <-r2.out:
		t.Fatalf("streamed %q from a checkpoint behind the slot", ids(tx))
	case <-time.After(15 * time.Second):
		t.Fatal("Run did not stop")
	}

	var found bool
	for _, c := range Check(context.Background(), e.config(), "test", seedCols, b1.End) {
		if c.Name == "postgres.position" {
			found = true
			if c.OK || !strings.Contains(c.Detail, "behind") {
				t.Errorf("check: %+v", c)
			}
		}
	}
	if !found {
		t.Error("check reported no postgres.position")
	}
}

// TestDerivedNamesDoNotCollide: connectors named "<x>-ob" and "<x>_ob"
// used to derive one slot, so the second waited for the first forever.
// They now stream side by side from their own slots and publications.
func TestDerivedNamesDoNotCollide(t *testing.T) {
	e := newPgEnv(t)
	names := []string{e.name + "-ob", e.name + "_ob"}
	slots := map[string]bool{}
	var rs []*running
	for _, n := range names {
		cfg := e.config()
		cfg.Slot, cfg.Publication = "", ""
		s, err := New(cfg, n, seedCols, testLog(t), nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		slots[s.Slot()] = true
		dropSlotAtEnd(t, e, s.Slot(), s.Publication())
		r := start(t, s, "", 16)
		rs = append(rs, r)
	}
	if len(slots) != 2 {
		t.Fatalf("%v derive %v", names, slots)
	}
	for _, r := range rs {
		r.waitReady()
	}
	e.insertTx("both")
	for i, r := range rs {
		if got := ids(r.next(10 * time.Second)); got != "both" {
			t.Fatalf("connector %s got %s", names[i], got)
		}
	}
}

// TestDerivedSlotRenamedRefused: a connector whose name had to be altered
// (derived slot now hash-suffixed) that has a checkpoint, finds its new
// slot missing and the slot of the old derivation present: it stops with
// ErrNameChanged telling how to pin the old names, and creates nothing.
func TestDerivedSlotRenamedRefused(t *testing.T) {
	e := newPgEnv(t)
	name := e.name + "-Renamed"
	old := legacyName(name)
	dropSlotAtEnd(t, e, old, "")
	e.exec(`SELECT pg_create_logical_replication_slot($1, 'pgoutput')`, old)
	cfg := e.config()
	cfg.Slot, cfg.Publication = "", e.pub // the publication is set explicitly
	s, err := New(cfg, name, seedCols, testLog(t), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if s.Slot() == old {
		t.Fatalf("derived slot %s is the old one", old)
	}
	dropSlotAtEnd(t, e, s.Slot(), "")
	r := start(t, s, MakePosition(e.confirmedFlushOf(old)), 16)
	select {
	case err := <-r.done:
		r.once.Do(func() {})
		if !errors.Is(err, ErrNameChanged) || !strings.Contains(err.Error(), "source.slot: "+old) || strings.Contains(err.Error(), "source.publication") {
			t.Fatalf("want ErrNameChanged pinning source.slot: %s, got %v", old, err)
		}
		t.Logf("error: %v", err)
	case <-time.After(15 * time.Second):
		t.Fatal("Run did not stop")
	}
	var n int
	if err := e.db.QueryRow(context.Background(), `SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1`, s.Slot()).Scan(&n); err != nil || n != 0 {
		t.Fatalf("slot %s created (%d, %v)", s.Slot(), n, err)
	}
}

// TestInvalidLogicalMessageIsABadRow: a logical message with the outbox
// prefix whose content is not a JSON object does not stop the stream: it
// arrives as an event with Invalid set and its content as payload, in its
// transaction, and the next transaction follows.
func TestInvalidLogicalMessageIsABadRow(t *testing.T) {
	e := newPgEnv(t)
	cfg := e.config()
	prefix := "outbox_" + e.name
	cfg.Messages.Prefix = prefix
	src, _ := e.source(cfg, seedCols)
	r := start(t, src, "", 16)
	r.waitReady()
	e.exec(`SELECT pg_logical_emit_message(true, $1, 'this is not json')`, prefix)
	e.insertTx("good")
	tx := r.next(10 * time.Second)
	if len(tx.Events) != 1 || tx.Events[0].Invalid == "" || string(tx.Events[0].Payload) != "this is not json" ||
		!strings.Contains(tx.Events[0].Origin, "logical message") {
		t.Fatalf("bad message: %+v", tx.Events)
	}
	if got := ids(r.next(10 * time.Second)); got != "good" {
		t.Fatalf("got %s after the bad message", got)
	}
}

func testLog(t *testing.T) zerolog.Logger {
	return zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.InfoLevel)
}

func (e *pgEnv) confirmedFlushOf(slot string) pglogrepl.LSN {
	e.t.Helper()
	var s string
	if err := e.db.QueryRow(context.Background(), `SELECT coalesce(confirmed_flush_lsn::text, '0/0') FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&s); err != nil {
		e.t.Fatalf("confirmed_flush_lsn of %s: %v", slot, err)
	}
	l, _ := pglogrepl.ParseLSN(s)
	return l
}

// dropSlotAtEnd drops a slot (and publication) other than e's at test end.
func dropSlotAtEnd(t *testing.T, e *pgEnv, slot, pub string) {
	t.Cleanup(func() {
		ctx := context.Background()
		for i := 0; i < 100; i++ {
			_, err := e.db.Exec(ctx, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1`, slot)
			if err == nil {
				break
			}
			time.Sleep(100 * time.Millisecond) // the walsender may still be exiting
		}
		if pub != "" {
			_, _ = e.db.Exec(ctx, `DROP PUBLICATION IF EXISTS `+pub)
		}
	})
}

// TestDerivedPublicationRenamedRefused: with the slot set explicitly but
// the publication derived, an upgraded connector with a checkpoint finds
// its new publication missing and the old one present: it stops with
// ErrNameChanged naming source.publication, instead of creating a
// publication that does not exist at the slot's position.
func TestDerivedPublicationRenamedRefused(t *testing.T) {
	e := newPgEnv(t)
	name := e.name + "-Pub"
	old := legacyName(name)
	e.exec(`CREATE PUBLICATION ` + old + ` FOR TABLE ` + e.table)
	dropSlotAtEnd(t, e, e.slot, old)
	src, _ := e.source(e.config(), seedCols) // creates the slot
	r := start(t, src, "", 16)
	r.waitReady()
	_ = r.stop()
	testenv.Eventually(t, 10*time.Second, "slot released", func() bool { return e.activePID() == 0 })

	cfg := e.config()
	cfg.Publication = ""
	s, err := New(cfg, name, seedCols, testLog(t), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	r2 := start(t, s, MakePosition(e.confirmedFlush()), 16)
	select {
	case err := <-r2.done:
		r2.once.Do(func() {})
		if !errors.Is(err, ErrNameChanged) || !strings.Contains(err.Error(), "source.publication: "+old) {
			t.Fatalf("want ErrNameChanged pinning source.publication: %s, got %v", old, err)
		}
		t.Logf("error: %v", err)
	case <-time.After(15 * time.Second):
		t.Fatal("Run did not stop")
	}
	var n int
	if err := e.db.QueryRow(context.Background(), `SELECT count(*) FROM pg_publication WHERE pubname = $1`, s.Publication()).Scan(&n); err != nil || n != 0 {
		t.Fatalf("publication %s created (%d, %v)", s.Publication(), n, err)
	}
}

// TestSlotRecreatedWhileCutRefused: the path to the server is cut (silent
// both ways) while rows are committed and the slot is dropped and created
// again under its name; when the path heals, the reconnect finds a slot
// whose confirmed position is past the last position the source
// confirmed. Run stops with ErrSlotChanged naming both positions, the
// runbook and the re-publish (source.start: pending), delivers none of
// the rows, and `check` fails postgres.position. Before the proof ran on
// every connect the reconnect streamed on from the new slot's creation,
// and every row committed during the cut was lost without a word.
func TestSlotRecreatedWhileCutRefused(t *testing.T) {
	e := newPgEnv(t)
	cfg, proxy := cuttableConfig(t, e)
	src, m := e.source(cfg, seedCols)
	r := start(t, src, "", 1024)
	r.waitReady()
	e.insertTx("c0")
	tx := r.next(10 * time.Second)
	src.Ack(tx.End)
	testenv.Eventually(t, 10*time.Second, "the slot to confirm c0", func() bool { return e.confirmedFlush() >= lsnOf(t, tx.End) })
	acked := e.confirmedFlush()

	proxy.Silence()
	testenv.Eventually(t, 20*time.Second, "the source to notice the cut", func() bool { return counter(m.Connected) == 0 })
	const rows = 100
	for i := 1; i <= rows; i++ {
		e.insertTx(fmt.Sprintf("c%d", i))
	}
	// The walsender of the cut connection holds the slot until
	// wal_sender_timeout; an operator (or a failover script) ends it.
	testenv.Eventually(t, 20*time.Second, "the old walsender gone", func() bool {
		if pid := e.activePID(); pid != 0 {
			_, _ = e.db.Exec(context.Background(), `SELECT pg_terminate_backend($1)`, pid)
			return false
		}
		return true
	})
	e.exec(`SELECT pg_drop_replication_slot($1)`, e.slot)
	e.exec(`SELECT pg_create_logical_replication_slot($1, 'pgoutput')`, e.slot)
	created := e.confirmedFlush()
	proxy.Heal()

	var err error
	deadline := time.After(60 * time.Second)
wait:
	for {
		select {
		case err = <-r.done:
			r.once.Do(func() {})
			break wait
		case tx := <-r.out:
			if len(tx.Events) > 0 {
				t.Fatalf("delivered %s from the recreated slot", ids(tx))
			}
		case <-deadline:
			t.Fatalf("Run did not stop after the path healed: the rows committed during the cut were skipped (ready: %v)", src.Ready())
		}
	}
	if !errors.Is(err, ErrSlotChanged) || !isPermanent(err) {
		t.Fatalf("want a permanent ErrSlotChanged, got %v", err)
	}
	for _, want := range []string{created.String(), acked.String(), "dropped and created again", "source.start: pending", `source.pending.where: "1 = 1"`, "Failover runbook"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not say %q: %v", want, err)
		}
	}
	t.Logf("error: %v", err)

	var found bool
	for _, c := range Check(context.Background(), e.config(), "test", seedCols, tx.End) {
		if c.Name == "postgres.position" {
			found = true
			if c.OK {
				t.Errorf("check passes the checkpoint against the recreated slot: %+v", c)
			}
		}
	}
	if !found {
		t.Error("check reported no postgres.position")
	}
}

// TestFailoverSlotRefusedBefore17: source.failover_slot on a server
// without failover slots (the PostgreSQL 15 here) stops the source with
// a permanent error naming the version and the alternative, creates no
// slot, and `check` fails postgres.failover_slot: an ordinary slot created
// silently would leave the operator believing it survives a promotion.
func TestFailoverSlotRefusedBefore17(t *testing.T) {
	e := newPgEnv(t)
	var version int
	if err := e.db.QueryRow(context.Background(), `SELECT current_setting('server_version_num')::int`).Scan(&version); err != nil {
		t.Fatal(err)
	}
	if version >= failoverVersion {
		t.Skipf("the server is %d: it has failover slots", version)
	}
	cfg := e.config()
	cfg.FailoverSlot = true
	src, _ := e.source(cfg, seedCols)
	r := start(t, src, "", 16)
	select {
	case err := <-r.done:
		r.once.Do(func() {})
		if !isPermanent(err) || !strings.Contains(err.Error(), "failover slots need PostgreSQL 17") || !strings.Contains(err.Error(), "Patroni permanent slots") {
			t.Fatalf("want a permanent refusal naming PostgreSQL 17 and Patroni, got %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("Run did not stop")
	}
	if e.slotExists() {
		t.Fatal("a slot was created")
	}
	var found bool
	for _, c := range Check(context.Background(), cfg, "test", seedCols, "") {
		if c.Name == "postgres.failover_slot" {
			found = true
			if c.OK || !strings.Contains(c.Detail, "no failover slots") {
				t.Errorf("check: %+v", c)
			}
		}
	}
	if !found {
		t.Error("check reported no postgres.failover_slot")
	}
}

// TestShortFormCheckpointAdopted: a checkpoint in the short form (earlier
// versions, `position set --to 0/...`, a Debezium import) resumes; the
// next position carries the server's identity, and `check` says what it
// could not prove with a warning.
func TestShortFormCheckpointAdopted(t *testing.T) {
	e := newPgEnv(t)
	src, _ := e.source(e.config(), seedCols)
	r := start(t, src, "", 16)
	r.waitReady()
	e.insertTx("s1")
	tx := r.next(10 * time.Second)
	if _, id, err := ParsePositionIdentity(tx.End); err != nil || !id.Known() {
		t.Fatalf("position %q carries no identity (%v)", tx.End, err)
	}
	src.Ack(tx.End)
	_ = r.stop()
	testenv.Eventually(t, 10*time.Second, "slot released", func() bool { return e.activePID() == 0 })

	short := MakePosition(lsnOf(t, tx.End))
	for _, c := range Check(context.Background(), e.config(), "test", seedCols, short) {
		if c.Name == "postgres.position" && (c.Status != outboxcdc.CheckWarn || !c.OK || !strings.Contains(c.Detail, "carries no server identity")) {
			t.Errorf("check of a short-form checkpoint: %+v", c)
		}
	}
	src2, _ := e.source(e.config(), seedCols)
	r2 := start(t, src2, short, 16)
	r2.waitReady()
	e.insertTx("s2")
	tx2 := r2.next(10 * time.Second)
	_, id, err := ParsePositionIdentity(tx2.End)
	_, want, _ := ParsePositionIdentity(tx.End)
	if ids(tx2) != "s2" || err != nil || id != want {
		t.Fatalf("after a short-form checkpoint: %s at %q, want s2 with the identity %+v", ids(tx2), tx2.End, want)
	}
}

// TestCheckpointOfAnotherSystemRefused: a checkpoint that names another
// system identifier (source.dsn reaches another cluster) is refused by
// Run with ErrSlotChanged naming both systems, by `position set` (the
// resume check) and by `check`; nothing is streamed.
func TestCheckpointOfAnotherSystemRefused(t *testing.T) {
	e := newPgEnv(t)
	src, _ := e.source(e.config(), seedCols)
	r := start(t, src, "", 16)
	r.waitReady()
	e.insertTx("o1")
	tx := r.next(10 * time.Second)
	_ = r.stop()
	testenv.Eventually(t, 10*time.Second, "slot released", func() bool { return e.activePID() == 0 })
	foreign := Identity{System: 42, Timeline: 1}.Position(lsnOf(t, tx.End))

	src2, _ := e.source(e.config(), seedCols)
	r2 := start(t, src2, foreign, 16)
	select {
	case err := <-r2.done:
		r2.once.Do(func() {})
		if !errors.Is(err, ErrSlotChanged) || !isPermanent(err) || !strings.Contains(err.Error(), "system 42, this server is system") {
			t.Fatalf("want ErrSlotChanged naming both systems, got %v", err)
		}
	case tx := <-r2.out:
		t.Fatalf("streamed %q from another system's checkpoint", ids(tx))
	case <-time.After(15 * time.Second):
		t.Fatal("Run did not stop")
	}
	if err := CheckResume(context.Background(), e.config(), "test", foreign); !errors.Is(err, ErrSlotChanged) {
		t.Fatalf("CheckResume: %v, want ErrSlotChanged", err)
	}
	for _, c := range Check(context.Background(), e.config(), "test", seedCols, foreign) {
		if c.Name == "postgres.position" && c.OK {
			t.Errorf("check passes another system's checkpoint: %+v", c)
		}
	}
}
