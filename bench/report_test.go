package main

import (
	"bytes"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// A results.json written before the exactly-once, cluster and relay
// scenarios existed still loads, reports and serves as a baseline.
func TestLoadResultsOfAnEarlierVersion(t *testing.T) {
	res, err := loadResults("testdata/results-before-issue17.json")
	if err != nil {
		t.Fatal(err)
	}
	d := res.DBs[0].Drain
	alo := d.run(modeALO.label)
	if alo == nil || alo.Seconds != d.DrainSeconds || alo.Rows != 1_000_000 {
		t.Fatalf("the at-least-once run was not made from the old drain fields: %+v", alo)
	}
	systems := map[string]int{}
	for _, l := range res.DBs[0].Live {
		systems[l.System]++
	}
	if systems[sysCDC] == 0 || systems[sysSeed] == 0 || len(systems) != 2 {
		t.Fatalf("live systems %v, want outbox-cdc and seed relay", systems)
	}
	b := &baseline{Figures: keyFigures(res)}
	v, ok := b.get("MariaDB drain, at-least-once (rows/s)")
	if !ok || math.Abs(v-1e6/d.DrainSeconds) > 1 {
		t.Fatalf("baseline MariaDB drain = %v, %v; want %v", v, ok, 1e6/d.DrainSeconds)
	}
	var out bytes.Buffer
	printSummary(&out, res)
	if !strings.Contains(out.String(), "| MariaDB drain vs raw binlog read, same run | 0.33×") {
		t.Fatalf("the targets table does not judge the old run:\n%s", out.String())
	}
}

func sampleResults() *results {
	run := func(mode string, exactly bool, brokers int, seconds float64) drainRun {
		return drainRun{Mode: mode, ExactlyOnce: exactly, Brokers: brokers, Rows: 1_000_000, Seconds: seconds, CPUSeconds: 4, PeakRSSMiB: 90,
			AllocBytes: 3.5e9, Mallocs: 2e7, AllocBytesPerRow: 3500, MallocsPerRow: 20, GCCycles: 40, GCCPUSeconds: 0.8, GCShare: 0.2, GCPercent: 9,
			Consumed: 1_000_000, Distinct: 1_000_000}
	}
	res := &results{
		Started: time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC), Finished: time.Date(2026, 12, 1, 10, 20, 0, 0, time.UTC),
		Command: "go run ./bench", Rows: 1_000_000,
		DBs: []dbResult{
			{Kind: "mysql", Version: "10.11", Drain: &drainResult{Rows: 1_000_000, RawReadSeconds: 1, RawProduceFranzSeconds: 0.7, RawProduceSaramaSeconds: 3,
				Runs: []drainRun{run(modeALO.label, false, 1, 2), run(modeEOS.label, true, 1, 2.6), run(modeCluster.label, false, 3, 1.8)}},
				BigTx: &bigTxResult{Rows: 1_000_000, RowBytes: 1024, PayloadBytes: 1.03e9, LogBytes: 2.1e9, RawReadSeconds: 8, Runs: []drainRun{
					run(modeALO.label, false, 1, 20),
					{Mode: modeEOS.label, ExactlyOnce: true, Brokers: 1, Rows: 1_000_000, PeakRSSMiB: 700, Error: "connector exited: signal: killed\nlog tail"},
				}},
				Live: []liveResult{
					{System: sysCDC, Rate: 1000, Written: 20000, Delivered: 20000, WriteSeconds: 20, CPUSeconds: 2, P50: 0.8, P99: 2.5, P999: 4, Max: 9, Load: &dbLoad{LogBytes: 12_000_000}},
					{System: sysSeed, Relay: true, Rate: 1000, Written: 20000, Delivered: 2000, WriteSeconds: 20, P50: msec(math.Inf(1)), P99: msec(math.Inf(1)), P999: msec(math.Inf(1)), Max: msec(math.Inf(1)),
						RelayQueries: 2100, Load: &dbLoad{Queries: 2100, RowsRead: 9000, RowsUpdated: 2000, LogBytes: 14_000_000}},
					{System: sysTuned, Rate: 1000, Written: 20000, Delivered: 20000, WriteSeconds: 20, P50: 15, P99: 40, P999: 60, Max: 70,
						Load: &dbLoad{Queries: 2400, RowsRead: 40000, RowsUpdated: 20000, LogBytes: 25_000_000}},
				}},
			{Kind: "postgres", Version: "15", Drain: &drainResult{Rows: 1_000_000, RawReadSeconds: 8, RawProduceFranzSeconds: 0.7, RawProduceSaramaSeconds: 3,
				Runs: []drainRun{run(modeALO.label, false, 1, 7), run(modeEOS.label, true, 1, 7.5)}},
				Live: []liveResult{{System: sysCDC, Rate: 1000, Written: 20000, Delivered: 20000, WriteSeconds: 20, P50: 1, P99: 6, P999: 8, Max: 9}}},
		},
	}
	addLoadResults(res)
	return res
}

// addLoadResults gives the sample the figures of issue 29's scenarios:
// MariaDB sustained 10k/s both ways, 50k/s not sustained and measured
// again lower, six connectors, three drain pairs, two HA series;
// PostgreSQL one sustained run whose p99 misses and a failed multi run.
func addLoadResults(res *results) {
	tl := []timePoint{{Second: 0, Rows: 10000, P50: 1.2, P99: 9, P999: 12, Max: 15}, {Second: 1, Rows: 10000, P50: 1.1, P99: 4, P999: 6, Max: 8},
		{Second: 2, Rows: 9990, P50: 1.1, P99: msec(math.Inf(1)), P999: msec(math.Inf(1)), Max: msec(math.Inf(1))}}
	sorted := make([]float64, 1000)
	for i := range sorted {
		sorted[i] = 0.5 + float64(i)/50
	}
	cdf := quantiles(sorted)
	cpu := &cpuWindow{Seconds: 60, MachineCores: 1.8, OtherCores: 0.1, Shares: []cpuShare{
		{Name: "MariaDB server (mariadbd, all sessions)", Seconds: 36, Cores: 0.6}, {Name: "broker (kfake-broker)", Seconds: 12, Cores: 0.2},
		{Name: "connector (outbox-cdc)", Seconds: 30, Cores: 0.5}, {Name: "bench process (load generator and consumer)", Seconds: 24, Cores: 0.4}}}
	sus := func(rate int, delivery string, achieved float64, p99 msec, fallbackOf int) sustainedResult {
		return sustainedResult{Rate: rate, Delivery: delivery, TxRows: 10, Writers: 8, WarmupSeconds: 10, Seconds: 60, FallbackOf: fallbackOf,
			Achieved: achieved, Sustained: sustained(achieved, float64(rate), 2), Written: int(achieved * 70), Delivered: int(achieved * 70), Samples: int(achieved * 60),
			P50: 1.1, P99: p99, P999: p99 * 2, Max: p99 * 3, CommitP50: 0.7, CommitP99: 2.5, LagP99Ms: 2, LagMaxMs: 6,
			ConnectorCPUSeconds: 30, PeakRSSMiB: 45, CPU: cpu, Timeline: tl, CDF: cdf, LoadAvgBefore: "1.0", LoadAvgAfter: "1.5"}
	}
	my := &res.DBs[0]
	my.Sustained = []sustainedResult{
		sus(10_000, modeALO.label, 10_000, 4, 0),
		sus(10_000, modeEOS.label, 9_990, 6, 0),
		sus(50_000, modeALO.label, 21_000, 40, 0),
		sus(17_000, modeALO.label, 17_000, 30, 50_000),
	}
	my.Multi = &multiResult{Connectors: 6, RatePerConnector: 5000, TxRows: 10, WritersPerConnector: 2, WarmupSeconds: 10, Seconds: 60,
		Achieved: 30_000, Sustained: true, Written: 2_100_000, Delivered: 2_100_000, P50: 3, P99: 60, P999: 90, Max: 120,
		PeakRSSMiB: 88, RSSMiB: 70, ConnectorCPUSeconds: 45, CPU: cpu, Timeline: tl, CDF: cdf, LoadAvgBefore: "2.0", LoadAvgAfter: "2.5"}
	for i := range 6 {
		my.Multi.Per = append(my.Multi.Per, multiConnResult{Name: fmt.Sprintf("bench-multi-mysql-%d", i), Achieved: 5000, LagP99Ms: 1.5,
			Written: 350_000, Delivered: 350_000, P50: 3, P99: msec(40 + 5*i), P999: 80, Max: 110})
	}
	pair := func(rawSecs, rawF2L, rawMid, drainSecs, drainF2L, drainMid, cpu float64) drainPair {
		return drainPair{Raw: rawReadRun{Seconds: rawSecs, Rows: 1_000_000, FirstSeconds: 0.01, FirstToLast: rawF2L, Middle: rawMid, LoadAvgBefore: "1.1"},
			Drain: drainRun{Mode: modeALO.label, Brokers: 1, Rows: 1_000_000, Seconds: drainSecs, FirstSeconds: 0.2, FirstToLast: drainF2L, Middle: drainMid,
				CPUSeconds: cpu, LoadAvgBefore: "1.2"}}
	}
	my.Drain.Repeats = []drainPair{pair(1, 1_020_000, 1_050_000, 2, 560_000, 600_000, 2.2),
		pair(1.1, 930_000, 950_000, 1.8, 620_000, 640_000, 2.0), pair(0.9, 1_150_000, 1_180_000, 1.7, 650_000, 700_000, 1.9)}
	trials := func(rec, act []float64) []haTrial {
		var out []haTrial
		for i := range rec {
			out = append(out, haTrial{AtSeconds: float64(3 * i), ToRecordSeconds: rec[i], ToActiveSeconds: act[i]})
		}
		return out
	}
	k := haResult{Fault: "kill", Delivery: modeALO.label, Trials: trials([]float64{0.2, 0.3, 0.25}, []float64{0.01, 0.02, 0.01}), Written: 900, Delivered: 900, LoadAvgBefore: "1.0"}
	st := haResult{Fault: "sigstop", Delivery: modeALO.label, Trials: append(trials([]float64{10.1, 10.3}, []float64{10, 10.1}), haTrial{Error: "no takeover within 2m0s"}),
		Written: 5000, Delivered: 5000, LoadAvgBefore: "1.0"}
	for _, h := range []*haResult{&k, &st} {
		var rec, act []float64
		for _, tr := range h.Trials {
			if tr.Error != "" {
				h.Failed++
				continue
			}
			rec, act = append(rec, tr.ToRecordSeconds), append(act, tr.ToActiveSeconds)
		}
		h.ToRecord, h.ToActive = spreadOf(rec), spreadOf(act)
	}
	my.HA = []haResult{k, st}
	pg := &res.DBs[1]
	pg.Sustained = []sustainedResult{sus(10_000, modeALO.label, 10_000, 25, 0)}
	pg.Multi = &multiResult{Connectors: 6, RatePerConnector: 5000, Error: "environment: 4 of the server's 10 replication slots are free (max_replication_slots), the multi scenario needs 6"}
}

func TestTargets(t *testing.T) {
	got := map[string]target{}
	for _, tt := range targets(sampleResults()) {
		got[tt.measure] = tt
	}
	for measure, want := range map[string]string{
		"MariaDB drain vs raw binlog read, same run":                                      holds, // 500k vs 1M rows/s
		"MariaDB exactly-once drain vs at-least-once drain, same backlog":                 miss,  // 2 s vs 2.6 s: 0.77×
		"MariaDB peak RSS, one 1,000,000-row transaction of ~1 KB rows, at-least-once":    holds, // 90 MiB
		"MariaDB peak RSS, one 1,000,000-row transaction of ~1 KB rows, exactly-once":     miss,  // failed
		"MariaDB live p99 at 1,000 rows/s":                                                holds, // 2.5 ms
		"PostgreSQL drain vs `pg_recvlogical`, same backlog":                              holds, // 8 s vs 7 s
		"PostgreSQL drain on the reference load (1M rows, 1,000-row transactions)":        miss,  // 142,857 rows/s
		"PostgreSQL exactly-once drain vs at-least-once drain, same backlog":              holds, // 0.93×
		"PostgreSQL peak RSS, one 1,000,000-row transaction of ~1 KB rows, at-least-once": notRun,
		"PostgreSQL live p99 at 1,000 rows/s":                                             miss, // 6 ms
		"MariaDB drain allocation per row (at-least-once)":                                reported,
		"PostgreSQL drain GC share of the connector's CPU (at-least-once)":                reported,
	} {
		tt, ok := got[measure]
		if !ok {
			t.Errorf("no target %q", measure)
			continue
		}
		if tt.verdict != want {
			t.Errorf("%s: verdict %q (now %q), want %q", measure, tt.verdict, tt.now, want)
		}
	}
	if tt := got["MariaDB peak RSS, one 1,000,000-row transaction of ~1 KB rows, exactly-once"]; !strings.Contains(tt.now, "failed: connector exited: signal: killed;") {
		t.Errorf("a failed run does not say why in one line: %q", tt.now)
	}
	// A smoke run is not judged against the absolute drain target.
	res := sampleResults()
	res.DBs[1].Drain.Rows = 20_000
	for i := range res.DBs[1].Drain.Runs {
		res.DBs[1].Drain.Runs[i].Rows = 20_000
	}
	for _, tt := range targets(res) {
		if strings.HasPrefix(tt.measure, "PostgreSQL drain on the reference load") && tt.verdict != "n/a" {
			t.Errorf("a 20,000-row drain was judged against the reference target: %+v", tt)
		}
	}
}

func TestBeforeAfter(t *testing.T) {
	before, after := sampleResults(), sampleResults()
	after.DBs[0].Drain.Runs[0].Seconds = 1.6           // faster
	after.DBs[0].Drain.Runs[0].AllocBytesPerRow = 4000 // more garbage
	after.DBs[0].Drain.Runs = after.DBs[0].Drain.Runs[:2]
	after.DBs[1].Live = append(after.DBs[1].Live, liveResult{System: sysTuned, Rate: 1000, P99: 30})
	after.Baseline = &baseline{Started: before.Started, Command: before.Command, Path: "old.json", Rows: 200_000, Figures: keyFigures(before)}
	var out bytes.Buffer
	writeComparison(&out, after)
	for _, want := range []string{
		"| MariaDB drain, at-least-once (rows/s) | 500000 | 625000 | +25 % (better) |",
		"| MariaDB drain bytes allocated per row (at-least-once) | 3500 | 4000 | +14 % (worse) |",
		"| MariaDB drain, exactly-once (rows/s) | 384615 | 384615 | +0 % (same) |",
		"| PostgreSQL tuned relay p99 at 1000/s (ms) | – | 30.0 | new |",
		"| MariaDB drain, at-least-once, 3 brokers (rows/s) | 555556 | – | not measured |",
		"**The backlogs differ** (200000 rows before, 1000000 after)",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("missing %q in\n%s", want, out.String())
		}
	}
	// The targets table says how allocation moved against the baseline.
	for _, tt := range targets(after) {
		if tt.measure == "MariaDB drain allocation per row (at-least-once)" && !strings.HasPrefix(tt.verdict, miss+" (before 3.50 KB)") {
			t.Errorf("allocation verdict %q, want a miss against 3.50 KB", tt.verdict)
		}
	}
}

// The report's layout is checked against a golden file; run with -update
// after an intended change and review the diff.
func TestReportGolden(t *testing.T) {
	res := sampleResults()
	res.Machine = machine{Nproc: "2", Free: "total 24105", LSCPU: "CPU(s): 2", Kernel: "Linux 6", Go: "go1.26", LoadAvg: "0.5", Commit: "abc1234"}
	dir := t.TempDir()
	if err := writeResults(filepath.Join(dir, "RESULTS.md"), res); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(dir, "RESULTS.md"))
	if err != nil {
		t.Fatal(err)
	}
	golden := "testdata/RESULTS.golden.md"
	if *update {
		if err := os.WriteFile(golden, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run go test ./bench -run TestReportGolden -update)", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("RESULTS.md differs from %s; run with -update and review the diff.\ngot:\n%s", golden, got)
	}
}

func TestChange(t *testing.T) {
	for _, c := range []struct {
		before, after float64
		higher        bool
		want          string
	}{
		{100, 150, true, "+50 % (better)"},
		{100, 150, false, "+50 % (worse)"},
		{100, 50, false, "-50 % (better)"},
		{100, 100.2, true, "+0 % (same)"},
		{0, 5, true, "–"},
	} {
		if got := change(c.before, c.after, c.higher); got != c.want {
			t.Errorf("change(%v, %v, %v) = %q, want %q", c.before, c.after, c.higher, got, c.want)
		}
	}
}
