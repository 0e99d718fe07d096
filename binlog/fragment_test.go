package binlog

// Transactions larger than the source may hold (issue 12 item 11): sent in
// fragments (Tx.More) that are bounded, in order, complete, and free of
// rows a ROLLBACK TO SAVEPOINT or ROLLBACK takes back, in bounded memory.

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
	"github.com/rs/zerolog"
)

// startUnbuffered runs a Source whose out channel holds nothing, so the
// source blocks on every Tx until the test takes it. mutate may set test
// hooks before Run.
func (f *fixture) startUnbuffered(cfg Config, from outboxcdc.Position, mutate func(*Source)) *running {
	f.t.Helper()
	m := outboxcdc.NewSourceMetrics(nil)
	src, err := New(cfg, uniqueName("test"), seedColumns, zerolog.New(zerolog.NewTestWriter(f.t)).Level(zerolog.InfoLevel), m, nil)
	if err != nil {
		f.t.Fatal(err)
	}
	if mutate != nil {
		mutate(src)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{t: f.t, src: src, m: m, out: make(chan outboxcdc.Tx), done: make(chan struct{}), stop: cancel}
	go func() {
		r.err = src.Run(ctx, from, r.out)
		close(r.done)
	}()
	f.t.Cleanup(func() {
		cancel()
		<-r.done
	})
	return r
}

// fragments reads one whole transaction with events: its fragments and the
// Tx that ends it. It checks the fragment contract on the way: More set
// and End zero on all but the last, each within the bounds.
func (r *running) fragments(each func(outboxcdc.Tx)) []outboxcdc.Tx {
	r.t.Helper()
	var txs []outboxcdc.Tx
	timeout := time.NewTimer(5 * time.Minute)
	defer timeout.Stop()
	for {
		select {
		case tx := <-r.out:
			if len(txs) == 0 && len(tx.Events) == 0 && !tx.More {
				continue // an empty transaction before it
			}
			if tx.More != tx.End.IsZero() {
				r.t.Fatalf("fragment %d: More=%v with End %q", len(txs), tx.More, tx.End)
			}
			if n := len(tx.Events); n > outboxcdc.MaxFragmentEvents {
				r.t.Fatalf("fragment %d holds %d rows, bound %d", len(txs), n, outboxcdc.MaxFragmentEvents)
			}
			size, last := 0, 0
			for i := range tx.Events {
				last = eventSize(&tx.Events[i])
				size += last
			}
			if size-last >= outboxcdc.MaxFragmentBytes {
				r.t.Fatalf("fragment %d holds %d bytes, bound %d (plus one row)", len(txs), size, outboxcdc.MaxFragmentBytes)
			}
			if each != nil {
				each(tx)
				tx.Events = nil
			}
			txs = append(txs, tx)
			if !tx.More {
				return txs
			}
		case <-r.done:
			r.t.Fatalf("source stopped: %v", r.err)
		case <-timeout.C:
			r.t.Fatalf("transaction not complete after 5 minutes (%d fragments)", len(txs))
		}
	}
}

func idsOf(txs []outboxcdc.Tx) []string {
	var s []string
	for _, tx := range txs {
		s = append(s, ids(tx)...)
	}
	return s
}

// bigInsert inserts, on s, the message ids prefix+from .. prefix+(to-1)
// with payloads of about size bytes, 500 rows a statement.
func (f *fixture) bigInsert(s *session, prefix string, from, to, size int) {
	f.t.Helper()
	pad := strings.Repeat("x", max(size-20, 0))
	for i := from; i < to; {
		var b strings.Builder
		b.WriteString("INSERT INTO " + f.table + " (message_id, aggregate_type, aggregate_id, event_type, payload) VALUES ")
		for j := 0; j < 500 && i < to; j++ {
			if j > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, "('%s%07d', 'BIG', 'a%d', 'E', '{\"p\": \"%s\"}')", prefix, i, i%13, pad)
			i++
		}
		s.run(b.String())
	}
}

func testenvInt(name string) int {
	n, _ := strconv.Atoi(os.Getenv(name))
	return n
}

func seq(prefix string, from, to int) []string {
	var s []string
	for i := from; i < to; i++ {
		s = append(s, fmt.Sprintf("%s%07d", prefix, i))
	}
	return s
}

func sameIDs(t *testing.T, got, want []string) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d rows, want %d", len(got), len(want))
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("row %d is %s, want %s", i, got[i], want[i])
		}
	}
}

// TestLargeTransactionFragments: a transaction of 2.5 × MaxFragmentEvents
// rows, and one of rows large enough that MaxFragmentBytes bounds the
// fragments, arrive whole and in order as bounded fragments. MariaDB marks
// them transactional-only, so they stream as they are read
// ("final"); the same transactions read as MySQL reads them (no such
// flag) take the look-ahead and arrive the same.
func TestLargeTransactionFragments(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name    string
		noFinal bool
	}{{"final", false}, {"lookahead", true}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			r := f.startUnbuffered(f.config(), "", func(s *Source) { s.noFinalFlag = c.noFinal })
			r.waitReady()
			s := f.session()
			n := outboxcdc.MaxFragmentEvents*2 + outboxcdc.MaxFragmentEvents/2
			s.run("BEGIN")
			f.bigInsert(s, "n", 0, n, 40)
			s.run("COMMIT")
			txs := r.fragments(nil)
			if len(txs) != 3 {
				t.Errorf("%d fragments, want 3", len(txs))
			}
			sameIDs(t, idsOf(txs), seq("n", 0, n))

			// ~2 KiB rows: MaxFragmentBytes bounds each fragment.
			const m = 5000
			s.run("BEGIN")
			f.bigInsert(s, "b", 0, m, 2048)
			s.run("COMMIT")
			txs = r.fragments(nil)
			if len(txs) < 3 {
				t.Errorf("%d fragments of 2 KiB rows, want >= 3", len(txs))
			}
			sameIDs(t, idsOf(txs), seq("b", 0, m))
			f.insertTx("small")
			expectIDs(t, r.next(), "small")
			if got := counter(t, r.m.Reconnects); got != 0 {
				t.Errorf("Reconnects = %v; reading a transaction again is not a reconnect", got)
			}
		})
	}
}

// TestLargeTransactionRollbacks: large transactions that also write a
// MyISAM table, so the server keeps rows it takes back: ROLLBACK TO
// SAVEPOINT ranges across fragment boundaries (and the bound) are never
// sent, and a large transaction the server logs as rolled back sends
// nothing. The source cannot know this before the transaction's end: it
// reads ahead, then again.
func TestLargeTransactionRollbacks(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	my := f.myisam()
	r := f.startUnbuffered(f.config(), "", nil)
	r.waitReady()
	s := f.session()
	const k = outboxcdc.MaxFragmentEvents
	s.run("BEGIN")
	f.bigInsert(s, "k", 0, k+100, 40)
	s.run("SAVEPOINT a", "INSERT INTO "+my+" (v) VALUES (1)")
	f.bigInsert(s, "gone", 0, k, 40)
	s.run("ROLLBACK TO SAVEPOINT a")
	f.bigInsert(s, "k", k+100, 2*k, 40)
	s.run("SAVEPOINT b")
	f.bigInsert(s, "gone", k, k+50, 40)
	s.run("SAVEPOINT c")
	f.bigInsert(s, "gone", k+50, k+60, 40)
	s.run("ROLLBACK TO b")
	f.bigInsert(s, "k", 2*k, 2*k+10, 40)
	s.run("COMMIT")
	txs := r.fragments(nil)
	sameIDs(t, idsOf(txs), seq("k", 0, 2*k+10))

	// A savepoint before any change and a MyISAM row: MariaDB logs the
	// rows of the rollback to it and a ROLLBACK.
	s.run("BEGIN", "SAVEPOINT s0", "INSERT INTO "+my+" (v) VALUES (2)")
	f.bigInsert(s, "gone", 10000, 10000+k+k/2, 40)
	s.run("ROLLBACK TO s0")
	s.run(f.ins("kept"), "COMMIT")
	expectIDs(t, r.next(), "kept")
}

// TestLargeTransactionReconnect: the replication connection is killed
// after the first fragments of a large transaction went out; after the
// reconnect the rest follows, without the rows already sent, so the
// transaction arrives whole and once. Both ways of sending (final, and
// after the look-ahead) are covered.
func TestLargeTransactionReconnect(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name    string
		noFinal bool
	}{{"final", false}, {"lookahead", true}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			r := f.startUnbuffered(f.config(), "", func(s *Source) { s.noFinalFlag = c.noFinal })
			r.waitReady()
			s := f.session()
			n := 5 * outboxcdc.MaxFragmentEvents
			s.run("BEGIN")
			f.bigInsert(s, "r", 0, n, 40)
			s.run("COMMIT")
			killed := false
			txs := r.fragments(func(tx outboxcdc.Tx) {
				if killed || !tx.More {
					return
				}
				killed = true
				id := r.src.connID.Load()
				if id == 0 {
					t.Fatal("no dump connection id")
				}
				f.exec(fmt.Sprintf("KILL %d", id))
			})
			if !killed {
				t.Fatal("no fragment to kill the connection after")
			}
			t.Logf("%d fragments", len(txs))
			f.insertTx("after")
			expectIDs(t, r.next(), "after")
			if got := counter(t, r.m.Reconnects); got < 1 {
				t.Fatalf("Reconnects = %v: the kill did not land mid-transaction", got)
			}
		})
	}
}

// TestLargeTransactionBoundedHeap: one transaction of 300,000 outbox rows
// of about 1 KiB (300 MB; it took the process to 674 MiB when sources held
// transactions whole) streams through the source while the heap in use is
// sampled. Bound: 96 MiB above the baseline, a third of the transaction;
// what the source holds is two fragments (8 MiB) plus go-mysql's queue of
// 1,024 decoded events. Run for the final way of sending and for the
// look-ahead (which reads the transaction twice). OUTBOX_CDC_TEST_BIG_ROWS
// overrides the row count.
func TestLargeTransactionBoundedHeap(t *testing.T) {
	if testing.Short() {
		t.Skip("300 MB transaction")
	}
	f := newFixture(t)
	rows := 300_000
	if v := testenvInt("OUTBOX_CDC_TEST_BIG_ROWS"); v > 0 {
		rows = v
	}
	start := f.startUnbuffered(f.config(), "", nil)
	start.waitReady()
	f.insertTx("mark")
	from := start.next().End
	start.stop()
	<-start.done

	s := f.session()
	t0 := time.Now()
	s.run("BEGIN")
	f.bigInsert(s, "h", 0, rows, 1024)
	s.run("COMMIT")
	t.Logf("committed %d rows of ~1 KiB in one transaction in %v", rows, time.Since(t0).Round(time.Millisecond))

	for _, c := range []struct {
		name    string
		noFinal bool
	}{{"final", false}, {"lookahead", true}} {
		t.Run(c.name, func(t *testing.T) {
			runtime.GC()
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			base := ms.HeapInuse
			var peak atomic.Uint64
			stop := make(chan struct{})
			sampled := make(chan struct{})
			go func() {
				defer close(sampled)
				tk := time.NewTicker(20 * time.Millisecond)
				defer tk.Stop()
				var ms runtime.MemStats
				for {
					select {
					case <-stop:
						return
					case <-tk.C:
						runtime.ReadMemStats(&ms)
						if ms.HeapInuse > peak.Load() {
							peak.Store(ms.HeapInuse)
						}
					}
				}
			}()
			r := f.startUnbuffered(f.config(), from, func(s *Source) { s.noFinalFlag = c.noFinal })
			t1 := time.Now()
			next, frags := 0, 0
			r.fragments(func(tx outboxcdc.Tx) {
				frags++
				for i := range tx.Events {
					if want := fmt.Sprintf("h%07d", next); tx.Events[i].MessageID != want {
						t.Fatalf("row %d is %s, want %s", next, tx.Events[i].MessageID, want)
					}
					next++
				}
			})
			el := time.Since(t1)
			close(stop)
			<-sampled
			r.stop()
			<-r.done
			if next != rows {
				t.Fatalf("%d rows arrived, want %d", next, rows)
			}
			grew := int64(peak.Load()) - int64(base)
			t.Logf("%s: %d rows in %d fragments in %v (%.0f rows/s); heap in use %.1f MiB before, peak %.1f MiB (+%.1f MiB)",
				c.name, rows, frags, el.Round(time.Millisecond), float64(rows)/el.Seconds(),
				float64(base)/(1<<20), float64(peak.Load())/(1<<20), float64(grew)/(1<<20))
			if bound := int64(96 << 20); grew > bound {
				t.Fatalf("heap grew by %.1f MiB streaming a %d-row transaction, bound %d MiB", float64(grew)/(1<<20), rows, bound>>20)
			}
		})
	}
}

// TestLargeXATransaction: a prepared XA transaction with more outbox rows
// than the source holds is not kept in memory; at its XA COMMIT the source
// reads it again and sends its rows in fragments, after the transactions
// committed while it was prepared. Also after a restart between XA PREPARE
// and XA COMMIT.
func TestLargeXATransaction(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	cfg := f.config()
	r := f.startUnbuffered(cfg, "", nil)
	r.waitReady()
	n := outboxcdc.MaxFragmentEvents*2 + 100
	xid := uniqueName("xa")
	s1, s2 := f.session(), f.session()
	t.Cleanup(func() {
		s1.conn.ExecContext(context.Background(), "XA ROLLBACK '"+xid+"1'")
		s2.conn.ExecContext(context.Background(), "XA ROLLBACK '"+xid+"2'")
	})
	s1.run("XA START '" + xid + "1'")
	f.bigInsert(s1, "x", 0, n, 40)
	s1.run("XA END '"+xid+"1'", "XA PREPARE '"+xid+"1'")
	f.insertTx("mid1")
	expectIDs(t, r.next(), "mid1")
	s1.run("XA COMMIT '" + xid + "1'")
	txs := r.fragments(nil)
	sameIDs(t, idsOf(txs), seq("x", 0, n))

	s2.run("XA START '" + xid + "2'")
	f.bigInsert(s2, "y", 0, n, 40)
	s2.run("XA END '"+xid+"2'", "XA PREPARE '"+xid+"2'")
	f.insertTx("mid2")
	mid := r.next()
	expectIDs(t, mid, "mid2")
	r.stop()
	<-r.done
	r2 := f.startUnbuffered(cfg, mid.End, nil)
	r2.waitReady()
	f.insertTx("mid3")
	expectIDs(t, r2.next(), "mid3")
	s2.run("XA COMMIT '" + xid + "2'")
	txs = r2.fragments(nil)
	sameIDs(t, idsOf(txs), seq("y", 0, n))
	f.insertTx("end")
	expectIDs(t, r2.next(), "end")
}
