package backfill

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/rs/zerolog"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
	"github.com/outbox-cdc/outbox-cdc/retry"
)

// memSnapshot serves keys 1..n; the read after failAfter rows fails once
// with fail.
type memSnapshot struct {
	n, failAfter *int
	fail         error
	opens        *int
}

func (m memSnapshot) Read(_ context.Context, st State, limit int) ([]Row, error) {
	if m.fail != nil && int(st.Last) >= *m.failAfter {
		*m.failAfter = 1 << 30
		return nil, m.fail
	}
	var rows []Row
	for k := max(st.Last+1, 1); k <= st.High && k <= int64(*m.n) && len(rows) < limit; k++ {
		rows = append(rows, Row{Key: k, Event: outboxcdc.Event{MessageID: string(rune('a' + k))}})
	}
	return rows, nil
}
func (memSnapshot) Finish(context.Context, State, int) error { return nil }
func (memSnapshot) Close()                                   {}
func (m memSnapshot) Count(_ context.Context, st State) (int64, error) {
	var c int64
	for k := max(st.Last+1, 1); k <= st.High && k <= int64(*m.n); k++ {
		c++
	}
	return c, nil
}

func runLoop(t *testing.T, from outboxcdc.Position, fail error) ([]outboxcdc.Tx, outboxcdc.Position, int, error) {
	n, failAfter, opens := 7, 4, 0
	l := Loop{
		Kind: "mysql", Start: StartPending, Batch: 3,
		Retry:       retry.Policy{Min: time.Millisecond, Max: time.Millisecond},
		CheckStream: func(outboxcdc.Position) error { return nil },
		Open: func(_ context.Context, st **State) (Snapshot, error) {
			opens++
			if *st == nil {
				*st = &State{Last: -1 << 63, High: 7, Stream: "file:bin.000001:4"}
			}
			return memSnapshot{n: &n, failAfter: &failAfter, fail: fail, opens: &opens}, nil
		},
	}
	out := make(chan outboxcdc.Tx, 100)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pos, err := l.Run(ctx, from, out)
	close(out)
	var txs []outboxcdc.Tx
	for tx := range out {
		txs = append(txs, tx)
	}
	return txs, pos, opens, err
}

// A transient failure resumes after the last batch handed on: every key is
// sent once, every batch but the last ends at a pending position, the last
// at the stream position.
func TestLoopResumesAfterLastBatch(t *testing.T) {
	txs, pos, opens, err := runLoop(t, "", outboxcdc.Transient(errors.New("connection reset")))
	if err != nil || pos != "mysql:file:bin.000001:4" || opens != 2 {
		t.Fatalf("Run = %q, %v after %d opens", pos, err, opens)
	}
	var keys []string
	for i, tx := range txs {
		for _, ev := range tx.Events {
			keys = append(keys, ev.MessageID)
		}
		if last := i == len(txs)-1; IsPending(tx.End) == last {
			t.Errorf("tx %d ends at %s", i, tx.End)
		}
	}
	if got := len(keys); got != 7 || keys[0] != "b" || keys[6] != "h" {
		t.Fatalf("keys sent %v, want 1..7 once", keys)
	}
}

func TestLoopStopsOnPermanent(t *testing.T) {
	_, _, opens, err := runLoop(t, "", errors.New("syntax error in pending.where"))
	if err == nil || opens != 1 {
		t.Fatalf("Run = %v after %d opens, want the error at once", err, opens)
	}
}

func TestLoopFromCheckpoint(t *testing.T) {
	txs, pos, _, err := runLoop(t, "mysql:pending:5:7:file:bin.000001:4", nil)
	if err != nil || pos != "mysql:file:bin.000001:4" || len(txs) != 1 || len(txs[0].Events) != 2 {
		t.Fatalf("Run = %q, %v, %d txs", pos, err, len(txs))
	}
	if _, pos, opens, err := runLoop(t, "mysql:file:bin.000001:4", nil); err != nil || opens != 0 || pos != "mysql:file:bin.000001:4" {
		t.Fatalf("a plain checkpoint ran a backfill: %q %v %d", pos, err, opens)
	}
}

// TestLoopReportsStartBeforeFirstRow: a first backfill reports its
// position (nothing published yet, the high key, the stream position)
// once its snapshot is open and before it reads a row, so a crash before
// the first batch is checkpointed resumes this backfill; a backfill
// resumed from a checkpoint reports nothing (its position is saved).
func TestLoopReportsStartBeforeFirstRow(t *testing.T) {
	reads := 0
	var reported []outboxcdc.Position
	l := Loop{
		Kind: "mysql", Start: StartPending, Batch: 10,
		Retry:       retry.Policy{Min: time.Millisecond, Max: time.Millisecond},
		CheckStream: func(outboxcdc.Position) error { return nil },
		Open: func(_ context.Context, st **State) (Snapshot, error) {
			if *st == nil {
				*st = &State{Last: -1 << 63, High: 3, Stream: "mariadb-gtid:0-1-9"}
			}
			n, fa := 3, 1<<30
			return countingSnapshot{memSnapshot{n: &n, failAfter: &fa}, &reads}, nil
		},
		Started: func(_ context.Context, p outboxcdc.Position) error {
			if reads != 0 {
				t.Errorf("start %s reported after %d reads", p, reads)
			}
			reported = append(reported, p)
			return nil
		},
	}
	out := make(chan outboxcdc.Tx, 10)
	if _, err := l.Run(context.Background(), "", out); err != nil {
		t.Fatal(err)
	}
	want := outboxcdc.Position("mysql:pending:-9223372036854775808:3:mariadb-gtid:0-1-9")
	if len(reported) != 1 || reported[0] != want {
		t.Fatalf("reported %v, want [%s]", reported, want)
	}
	if st, err := Parse(want, "mysql"); err != nil || st.Last != -1<<63 || st.High != 3 {
		t.Fatalf("the reported start does not parse back: %+v %v", st, err)
	}
	reported = nil
	if _, err := l.Run(context.Background(), want, make(chan outboxcdc.Tx, 10)); err != nil || len(reported) != 0 {
		t.Fatalf("a resumed backfill: %v, reported %v", err, reported)
	}
	l.Started = func(context.Context, outboxcdc.Position) error { return errors.New("disk full") }
	reads = 0
	if _, err := l.Run(context.Background(), "", make(chan outboxcdc.Tx, 10)); err == nil || reads != 0 {
		t.Fatalf("a failed report: %v after %d reads; want the error before any read", err, reads)
	}
}

type countingSnapshot struct {
	memSnapshot
	reads *int
}

func (c countingSnapshot) Read(ctx context.Context, st State, limit int) ([]Row, error) {
	*c.reads++
	return c.memSnapshot.Read(ctx, st, limit)
}

// TestLoopProgressMetrics: the rows published and expected are exported
// as the backfill goes, across a retry, and every batch sets the lag to
// the snapshot's age, not 0; a batch sent once the interval has passed
// logs a progress line with the counts.
func TestLoopProgressMetrics(t *testing.T) {
	n, failAfter := 7, 4
	pm, err := outboxcdc.NewProgressMetrics(nil)
	if err != nil {
		t.Fatal(err)
	}
	lag := prometheus.NewGauge(prometheus.GaugeOpts{Name: "lag"})
	var buf bytes.Buffer
	log := zerolog.New(&buf)
	var expected []float64
	l := Loop{
		Kind: "mysql", Start: StartPending, Batch: 3,
		Retry:       retry.Policy{Min: time.Millisecond, Max: time.Millisecond},
		CheckStream: func(outboxcdc.Position) error { return nil },
		Open: func(_ context.Context, st **State) (Snapshot, error) {
			if *st == nil {
				*st = &State{Last: -1 << 63, High: 7, Stream: "file:bin.000001:4"}
			}
			time.Sleep(2 * time.Millisecond) // the snapshot has an age
			return memSnapshot{n: &n, failAfter: &failAfter, fail: outboxcdc.Transient(errors.New("gone")), opens: new(int)}, nil
		},
		Sent: func([]Row) {
			expected = append(expected, gaugeValue(pm.BackfillExpected))
		},
		Log: &log, Every: time.Nanosecond, Metrics: pm, LagSeconds: lag,
	}
	out := make(chan outboxcdc.Tx, 100)
	if _, err := l.Run(context.Background(), "", out); err != nil {
		t.Fatal(err)
	}
	if got := gaugeValue(pm.BackfillPublished); got != 7 {
		t.Fatalf("published %v, want 7", got)
	}
	if got := gaugeValue(pm.BackfillExpected); got != 7 {
		t.Fatalf("expected %v, want 7 (after a retry too)", got)
	}
	for _, e := range expected {
		if e != 7 {
			t.Fatalf("expected rows during the backfill %v, want 7 throughout", expected)
		}
	}
	if gaugeValue(lag) <= 0 {
		t.Fatal("lag 0 during the backfill")
	}
	lines := strings.Count(buf.String(), `"message":"pending backfill: progress"`)
	if lines == 0 || !strings.Contains(buf.String(), `"rows_expected":7`) {
		t.Fatalf("no progress line with the expected rows:\n%s", buf.String())
	}
}

func gaugeValue(g prometheus.Gauge) float64 {
	var m dto.Metric
	if err := g.Write(&m); err != nil {
		panic(err)
	}
	return m.GetGauge().GetValue()
}
