package e2e

// Memory independent of transaction size (issue 12 item 11): one source
// transaction of many ~1 KB outbox rows goes through the binary with the
// default settings, in both delivery modes and from both databases; every
// row arrives and the connector's peak resident memory stays at or below
// 128 MiB. This holds only when the source sends a large transaction in
// fragments (outboxcdc.Tx.More); without that the connector holds the
// whole transaction.

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/outbox-cdc/outbox-cdc/test/testenv"
)

// largeTxRows is the size of the transaction: 100,000 rows (~100 MB) by
// default, OUTBOX_CDC_TEST_LARGE_TX_ROWS for more (the 300000).
func largeTxRows(t *testing.T) int {
	if v := os.Getenv("OUTBOX_CDC_TEST_LARGE_TX_ROWS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("OUTBOX_CDC_TEST_LARGE_TX_ROWS=%q", v)
		}
		return n
	}
	return 100_000
}

// peakRSS reads the process's peak resident set (VmHWM) in bytes.
func peakRSS(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmHWM in /proc/<pid>/status")
	return 0
}

// insertLargeTx commits n outbox rows of ~size bytes in one transaction,
// with multi-row INSERTs of 500 rows.
func (b *backend) insertLargeTx(t *testing.T, prefix string, n, size int) []string {
	t.Helper()
	tx, err := b.db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	pad := strings.Repeat("x", max(0, size-40))
	head, _, _ := strings.Cut(b.insertOutbox, "VALUES")
	out := make([]string, 0, n)
	for i := 0; i < n; {
		var sb strings.Builder
		sb.WriteString(head)
		sb.WriteString("VALUES ")
		var args []any
		for j := 0; j < 500 && i < n; j, i = j+1, i+1 {
			id := fmt.Sprintf("%s-%d", prefix, i)
			out = append(out, id)
			if j > 0 {
				sb.WriteString(",")
			}
			if b.kind == "postgres" {
				k := len(args)
				fmt.Fprintf(&sb, "($%d,$%d,$%d,$%d,$%d)", k+1, k+2, k+3, k+4, k+5)
			} else {
				sb.WriteString("(?,?,?,?,?)")
			}
			args = append(args, id, "ORDER", fmt.Sprintf("agg-%d", i%50), "E", fmt.Sprintf(`{"i":%d,"pad":%q}`, i, pad))
		}
		if _, err := tx.Exec(sb.String(), args...); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestLargeTransactionBoundedMemory: see the file comment.
func TestLargeTransactionBoundedMemory(t *testing.T) {
	rows := largeTxRows(t)
	const limit = 128 << 20
	for _, delivery := range []string{"at-least-once", "exactly-once"} {
		t.Run(delivery, func(t *testing.T) {
			forEachBackend(t, func(t *testing.T, b *backend) {
				_, brokers := testenv.Kafka(t)
				name := connName(t, "e2e-largetx-"+delivery+"-"+b.kind)
				cp := "file"
				if delivery == "exactly-once" {
					cp = "kafka"
				}
				cfg := b.modeConfig(t, name, brokers, false, delivery, cp)
				c := testenv.Start(t, cfg)
				before := peakRSS(t, c.Pid())
				began := time.Now()
				want := b.insertLargeTx(t, "big", rows, 1024)
				committed := time.Since(began)
				cons := newConsumer(t, brokers, `outbox\.event\..*`)
				got := cons.waitFor(t, len(want), 10*time.Minute)
				peak := peakRSS(t, c.Pid())
				t.Logf("%d rows (~%d MB) in one transaction: committed in %v, delivered %v later; peak RSS %.1f MiB (%.1f MiB before)",
					rows, rows*1024>>20, committed.Round(time.Millisecond), (time.Since(began) - committed).Round(time.Millisecond),
					float64(peak)/(1<<20), float64(before)/(1<<20))
				checkDelivery(t, got, want, 3, delivery == "exactly-once")
				if peak > limit {
					t.Errorf("peak RSS %.1f MiB is above the bound of 128 MiB (does the source send the transaction in fragments?)", float64(peak)/(1<<20))
				}
				if err := c.Stop(30 * time.Second); err != nil {
					t.Fatalf("stop: %v", err)
				}
			})
		})
	}
}
