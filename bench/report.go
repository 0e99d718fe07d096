package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"time"
)

// results is results.json: everything one run measured. Fields are only
// ever added, so a results.json of an earlier version still loads (as a
// -baseline, or with -report-only).
type results struct {
	Started, Finished time.Time
	Command           string
	Rows              int
	Machine           machine
	DBs               []dbResult
	// Baseline holds the key figures of an earlier run (-baseline) for the
	// before/after table.
	Baseline *baseline `json:",omitempty"`
}

type machine struct{ Nproc, Free, LSCPU, Kernel, Go, LoadAvg, Commit string }

type dbResult struct {
	Kind, Version string
	Drain         *drainResult
	BigTx         *bigTxResult `json:",omitempty"`
	Live          []liveResult
	Sustained     []sustainedResult `json:",omitempty"`
	Multi         *multiResult      `json:",omitempty"`
	HA            []haResult        `json:",omitempty"`
}

// drainResult is one backlog, its physical limits and the connector's
// drains of it.
type drainResult struct {
	Rows                    int
	LoadSeconds             float64
	RawReadSeconds          float64
	RawReadRows             int
	RawProduceFranzSeconds  float64
	RawProduceSaramaSeconds float64
	// DrainSeconds, CPUSeconds, PeakRSSMiB and Checkpoint repeat the
	// at-least-once, one-broker run (the only one of earlier versions).
	DrainSeconds           float64
	CPUSeconds, PeakRSSMiB float64
	Checkpoint             string
	LoadAvgBefore          string
	Runs                   []drainRun `json:",omitempty"`
	// Repeats are the raw read and the at-least-once drain of each
	// repetition (-repeat), in turn on the same backlog; the first is the
	// raw read above and the at-least-once run of Runs.
	Repeats []drainPair `json:",omitempty"`
}

// drainPair is one raw read of a backlog and the drain after it.
type drainPair struct {
	Raw   rawReadRun
	Drain drainRun
}

// rawReadRun is one raw source read.
type rawReadRun struct {
	Seconds float64
	Rows    int
	// FirstSeconds is from the start to the first row (PostgreSQL: the
	// walsender's first WAL past the backlog's start); FirstToLast and
	// Middle are rates in rows/s (progressRates).
	FirstSeconds, FirstToLast, Middle float64
	LoadAvgBefore                     string `json:",omitempty"`
}

func (r rawReadRun) rate() float64 {
	if r.Seconds <= 0 {
		return math.NaN()
	}
	return float64(r.Rows) / r.Seconds
}

// drainRun is one drain of a backlog by the connector.
type drainRun struct {
	Mode        string // at-least-once, exactly-once, ..., 3 brokers
	Brokers     int
	ExactlyOnce bool
	Rows        int
	// Seconds is from the connector's exec to
	// outbox_cdc_records_delivered_total reaching Rows.
	Seconds float64
	// FirstSeconds is from the exec to the first sample of /metrics with a
	// record delivered; FirstToLast is the rate from that sample to the
	// last, Middle between 10 % and 90 % of the rows (rows/s): the drain
	// without its start-up.
	FirstSeconds, FirstToLast, Middle float64
	CPUSeconds, PeakRSSMiB            float64
	// AllocBytes and Mallocs are the process's go_memstats_alloc_bytes_total
	// and go_memstats_mallocs_total at the end of the drain (start-up
	// included), and per row.
	AllocBytes, Mallocs             float64
	AllocBytesPerRow, MallocsPerRow float64
	// GC from GODEBUG=gctrace=1: cycles, CPU of every phase, its share of
	// the process CPU, and the runtime's own percentage of available CPU.
	GCCycles                         int
	GCCPUSeconds, GCShare, GCPercent float64
	Consumed, Distinct               int // what a consumer read back (read_committed for exactly-once)
	Checkpoint                       string
	// LoadAvgBefore is the 1-minute load average when the run began.
	LoadAvgBefore string `json:",omitempty"`
	Error         string `json:",omitempty"`
}

func (r *drainRun) rate() float64 {
	if r == nil || r.Seconds <= 0 || r.Error != "" {
		return math.NaN()
	}
	return float64(r.Rows) / r.Seconds
}

// run returns the drain in the given mode, or nil.
func (d *drainResult) run(mode string) *drainRun {
	if d == nil {
		return nil
	}
	for i := range d.Runs {
		if d.Runs[i].Mode == mode {
			return &d.Runs[i]
		}
	}
	return nil
}

func (d *drainResult) rawReadRate() float64 { return float64(d.Rows) / d.RawReadSeconds }

// bigTxResult is the one-huge-transaction scenario.
type bigTxResult struct {
	Rows, RowBytes int
	PayloadBytes   int64
	LoadSeconds    float64
	// LogBytes is the transaction's size in the binary log (MariaDB), or
	// how far the server's WAL advanced while it was written (PostgreSQL,
	// every database's traffic included); LogError says why it is missing.
	LogBytes int64  `json:",omitempty"`
	LogError string `json:",omitempty"`
	// RawReadSeconds is the plain client's read of the same transaction
	// (as in the drain scenario's raw read); RawReadError says why it is
	// missing.
	RawReadSeconds float64 `json:",omitempty"`
	RawReadError   string  `json:",omitempty"`
	Runs           []drainRun
}

func (b *bigTxResult) rawReadRate() float64 {
	if b.RawReadSeconds <= 0 {
		return math.NaN()
	}
	return float64(b.Rows) / b.RawReadSeconds
}

func (b *bigTxResult) run(mode string) *drainRun {
	if b == nil {
		return nil
	}
	for i := range b.Runs {
		if b.Runs[i].Mode == mode {
			return &b.Runs[i]
		}
	}
	return nil
}

type liveResult struct {
	// System is outbox-cdc, seed relay or tuned relay. Relay is true for
	// the seed relay (the only relay of earlier versions).
	System                              string
	Relay                               bool
	Rate                                int // 0 = max
	Seconds, WriteSeconds, AchievedRate float64
	Written, Delivered, Samples         int
	// WriterRetries are INSERTs the writers repeated because the server
	// chose them as a deadlock victim.
	WriterRetries        int64
	P50, P99, P999, Max  msec
	CommitP50, CommitP99 msec
	// CPUSeconds and PeakRSSMiB are the system's own process (connector or
	// relay child).
	CPUSeconds, PeakRSSMiB            float64
	RelayQueries, RelayRowsRead       int64
	RelayRowsUpdated, RelayEmptyPolls int64
	// Load is nil in results of earlier versions.
	Load *dbLoad `json:",omitempty"`
	// LoadAvgBefore/After are /proc/loadavg's 1-minute figure: other work
	// on the machine shows up here.
	LoadAvgBefore, LoadAvgAfter string
}

// normalize fills what results of earlier versions lack.
func (res *results) normalize() {
	for i := range res.DBs {
		db := &res.DBs[i]
		if d := db.Drain; d != nil && len(d.Runs) == 0 && d.DrainSeconds > 0 {
			d.Runs = []drainRun{{Mode: modeALO.label, Brokers: 1, Rows: d.Rows, Seconds: d.DrainSeconds,
				CPUSeconds: d.CPUSeconds, PeakRSSMiB: d.PeakRSSMiB, Checkpoint: d.Checkpoint}}
		}
		for j := range db.Live {
			if l := &db.Live[j]; l.System == "" {
				l.System = sysCDC
				if l.Relay {
					l.System = sysSeed
				}
			}
		}
	}
}

func loadResults(path string) (*results, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var res results
	if err := json.Unmarshal(raw, &res); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	res.normalize()
	return &res, nil
}

// msec is milliseconds; +Inf (not delivered) is written as "inf" in JSON.
type msec float64

func (m msec) MarshalJSON() ([]byte, error) {
	switch v := float64(m); {
	case math.IsInf(v, 1):
		return []byte(`"inf"`), nil
	case math.IsNaN(v):
		return []byte("null"), nil
	default:
		return []byte(fmt.Sprintf("%.3f", v)), nil
	}
}

func (m *msec) UnmarshalJSON(b []byte) error {
	switch string(b) {
	case `"inf"`:
		*m = msec(math.Inf(1))
	case "null":
		*m = msec(math.NaN())
	default:
		v, err := strconv.ParseFloat(string(b), 64)
		*m = msec(v)
		return err
	}
	return nil
}

func (m msec) String() string { return fmtMS(float64(m)) }

func dbLabel(kind string) string {
	if kind == "mysql" {
		return "MariaDB"
	}
	return "PostgreSQL"
}

// Verdicts.
const (
	holds    = "holds"
	miss     = "**miss**"
	reported = "reported"
	notRun   = "not measured"
)

// target is one line of issue 17's targets table.
type target struct {
	measure, now, want, verdict string
}

func verdict(ok bool) string {
	if ok {
		return holds
	}
	return miss
}

// referenceRows is the bench's reference load for the drain targets.
const referenceRows = 1_000_000

// targets is issue 17's table, judged on res.
func targets(res *results) []target {
	var t []target
	for _, db := range res.DBs {
		name := dbLabel(db.Kind)
		d := db.Drain
		alo, eos := d.run(modeALO.label), d.run(modeEOS.label)
		smoke := ""
		if d != nil && d.Rows != referenceRows {
			smoke = fmt.Sprintf(" (%d rows, not the reference load)", d.Rows)
		}
		switch db.Kind {
		case "mysql":
			tt := target{measure: "MariaDB drain vs raw binlog read, same run", want: "≥ 0.45×", verdict: notRun, now: "–"}
			if alo != nil && !math.IsNaN(alo.rate()) {
				r := alo.rate() / d.rawReadRate()
				tt.now = fmt.Sprintf("%.2f× (%.0f vs %.0f rows/s)%s", r, alo.rate(), d.rawReadRate(), smoke)
				tt.verdict = verdict(r >= 0.45)
			}
			t = append(t, tt)
		case "postgres":
			tt := target{measure: "PostgreSQL drain vs `pg_recvlogical`, same backlog", want: "≥ 1×", verdict: notRun, now: "–"}
			tr := target{measure: "PostgreSQL drain on the reference load (1M rows, 1,000-row transactions)", want: "≥ 150k rows/s", verdict: notRun, now: "–"}
			if alo != nil && !math.IsNaN(alo.rate()) {
				r := alo.rate() / d.rawReadRate()
				tt.now = fmt.Sprintf("%.2f× (%.0f vs %.0f rows/s)%s", r, alo.rate(), d.rawReadRate(), smoke)
				tt.verdict = verdict(r >= 1)
				tr.now = fmt.Sprintf("%.0f rows/s%s", alo.rate(), smoke)
				tr.verdict = verdict(alo.rate() >= 150_000)
				if smoke != "" {
					tr.verdict = "n/a"
				}
			}
			t = append(t, tt, tr)
		}
		te := target{measure: name + " exactly-once drain vs at-least-once drain, same backlog", want: "≥ 0.8×", verdict: notRun, now: "–"}
		if eos != nil && eos.Error != "" {
			te.now, te.verdict = "exactly-once drain failed: "+firstLine(eos.Error), miss
		} else if alo != nil && eos != nil && !math.IsNaN(alo.rate()) {
			r := eos.rate() / alo.rate()
			te.now = fmt.Sprintf("%.2f× (%.0f vs %.0f rows/s)%s", r, eos.rate(), alo.rate(), smoke)
			te.verdict = verdict(r >= 0.8)
		}
		t = append(t, te)
		for _, m := range []drainMode{modeALO, modeEOS} {
			tb := target{measure: fmt.Sprintf("%s peak RSS, one 1,000,000-row transaction of ~1 KB rows, %s", name, m.label), want: "≤ 128 MiB", verdict: notRun, now: "–"}
			if r := db.BigTx.run(m.label); r != nil {
				note := ""
				if db.BigTx.Rows != referenceRows || db.BigTx.RowBytes < 1000 {
					note = fmt.Sprintf(" (%d rows of ~%d B, not the reference transaction)", db.BigTx.Rows, db.BigTx.RowBytes)
				}
				switch {
				case r.Error != "":
					tb.now = fmt.Sprintf("failed: %s; peak RSS %.0f MiB%s", firstLine(r.Error), r.PeakRSSMiB, note)
					tb.verdict = miss
				default:
					tb.now = fmt.Sprintf("%.1f MiB at %.0f rows/s%s", r.PeakRSSMiB, r.rate(), note)
					tb.verdict = verdict(r.PeakRSSMiB <= 128)
				}
			}
			t = append(t, tb)
		}
		tl := target{measure: name + " live p99 at 1,000 rows/s", want: "≤ 5 ms", verdict: notRun, now: "–"}
		for _, l := range db.Live {
			if l.System == sysCDC && l.Rate == 1000 {
				tl.now = l.P99.String() + " ms"
				tl.verdict = verdict(float64(l.P99) <= 5)
			}
		}
		t = append(t, tl)
		ta := target{measure: name + " drain allocation per row (at-least-once)", want: "lower (3.9 KB/row in PROFILE.md)", verdict: notRun, now: "–"}
		tg := target{measure: name + " drain GC share of the connector's CPU (at-least-once)", want: "lower", verdict: notRun, now: "–"}
		if alo != nil && alo.AllocBytes > 0 {
			ta.now = fmt.Sprintf("%.2f KB, %.1f allocations", alo.AllocBytesPerRow/1000, alo.MallocsPerRow)
			ta.verdict = reported
		}
		if alo != nil && alo.GCCycles > 0 {
			tg.now = fmt.Sprintf("%.0f %% (%d cycles, %.2f of %.2f CPU s)", 100*alo.GCShare, alo.GCCycles, alo.GCCPUSeconds, alo.CPUSeconds)
			tg.verdict = reported
		}
		if res.Baseline != nil {
			if b, ok := res.Baseline.get(name + " drain bytes allocated per row (at-least-once)"); ok && alo != nil && alo.AllocBytes > 0 {
				ta.verdict = fmt.Sprintf("%s (before %.2f KB)", verdict(alo.AllocBytesPerRow < b), b/1000)
			}
			if b, ok := res.Baseline.get(name + " drain GC share of CPU (at-least-once)"); ok && alo != nil && alo.GCCycles > 0 {
				tg.verdict = fmt.Sprintf("%s (before %.0f %%)", verdict(100*alo.GCShare < b), b)
			}
		}
		t = append(t, ta, tg)
	}
	return t
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	if len(l) > 160 {
		l = l[:160] + "…"
	}
	return l
}

func ratioText(r float64) string {
	switch {
	case math.IsInf(r, 1):
		return "unbounded"
	case math.IsNaN(r):
		return "–"
	}
	return fmt.Sprintf("%.0f×", r)
}

// figure is one key number of a run, for before/after comparisons.
type figure struct {
	Name  string
	Value float64
	// Higher says a higher value is better.
	Higher bool
}

// baseline is an earlier run's key figures.
type baseline struct {
	Started time.Time
	Command string
	Path    string
	Rows    int // the backlog of its drains
	Figures []figure
}

func (b *baseline) get(name string) (float64, bool) {
	for _, f := range b.Figures {
		if f.Name == name {
			return f.Value, true
		}
	}
	return 0, false
}

// keyFigures lists the numbers a before/after table compares.
func keyFigures(res *results) []figure {
	var fs []figure
	add := func(name string, v float64, higher bool) {
		if !math.IsNaN(v) && !math.IsInf(v, 0) && v != 0 {
			fs = append(fs, figure{name, v, higher})
		}
	}
	for _, db := range res.DBs {
		name := dbLabel(db.Kind)
		if d := db.Drain; d != nil {
			add(name+" raw source read (rows/s)", d.rawReadRate(), true)
			for _, r := range d.Runs {
				if r.Error != "" {
					continue
				}
				add(fmt.Sprintf("%s drain, %s (rows/s)", name, r.Mode), r.rate(), true)
				add(fmt.Sprintf("%s drain, %s: peak RSS (MiB)", name, r.Mode), r.PeakRSSMiB, false)
				add(fmt.Sprintf("%s drain, %s: CPU s per 1M rows", name, r.Mode), r.CPUSeconds/float64(r.Rows)*1e6, false)
			}
			if alo := d.run(modeALO.label); alo != nil && alo.Error == "" {
				add(name+" drain / raw read", alo.rate()/d.rawReadRate(), true)
				add(name+" drain bytes allocated per row (at-least-once)", alo.AllocBytesPerRow, false)
				add(name+" drain allocations per row (at-least-once)", alo.MallocsPerRow, false)
				if alo.GCCycles > 0 {
					add(name+" drain GC share of CPU (at-least-once)", 100*alo.GCShare, false)
				}
				if eos := d.run(modeEOS.label); eos != nil && eos.Error == "" {
					add(name+" exactly-once / at-least-once drain", eos.rate()/alo.rate(), true)
				}
			}
		}
		for _, r := range db.BigTx.runs() {
			if r.Error == "" {
				add(fmt.Sprintf("%s 1M-row transaction, %s: peak RSS (MiB)", name, r.Mode), r.PeakRSSMiB, false)
				add(fmt.Sprintf("%s 1M-row transaction, %s (rows/s)", name, r.Mode), r.rate(), true)
			}
		}
		for _, l := range db.Live {
			if math.IsInf(float64(l.P99), 1) {
				continue
			}
			add(fmt.Sprintf("%s %s p99 at %s (ms)", name, l.System, rateName(l.Rate)), float64(l.P99), false)
		}
		loadFigures(db, add)
	}
	return fs
}

func (b *bigTxResult) runs() []drainRun {
	if b == nil {
		return nil
	}
	return b.Runs
}

// writeComparison prints the before/after table of res against its
// baseline.
func writeComparison(w io.Writer, res *results) {
	b := res.Baseline
	if b == nil {
		return
	}
	fmt.Fprintf(w, "Before: %s (`%s`, %s). After: this run.\n\n", b.Started.UTC().Format("2006-01-02 15:04 MST"), b.Command, b.Path)
	if b.Rows != 0 && res.Rows != 0 && b.Rows != res.Rows {
		fmt.Fprintf(w, "**The backlogs differ** (%d rows before, %d after): drain rates and per-row figures include start-up, which weighs more on the smaller one.\n\n", b.Rows, res.Rows)
	}
	fmt.Fprintln(w, "| measure | before | after | change |")
	fmt.Fprintln(w, "|---|---|---|---|")
	after := keyFigures(res)
	seen := map[string]bool{}
	for _, a := range after {
		seen[a.Name] = true
		bv, ok := b.get(a.Name)
		if !ok {
			fmt.Fprintf(w, "| %s | – | %s | new |\n", a.Name, num(a.Value))
			continue
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s |\n", a.Name, num(bv), num(a.Value), change(bv, a.Value, a.Higher))
	}
	for _, f := range b.Figures {
		if !seen[f.Name] {
			fmt.Fprintf(w, "| %s | %s | – | not measured |\n", f.Name, num(f.Value))
		}
	}
}

// change is the relative change, marked better or worse.
func change(before, after float64, higher bool) string {
	if before == 0 {
		return "–"
	}
	rel := (after - before) / math.Abs(before)
	word := "better"
	if (rel < 0) == higher {
		word = "worse"
	}
	if math.Abs(rel) < 0.005 {
		word = "same"
	}
	return fmt.Sprintf("%+.0f %% (%s)", 100*rel, word)
}

// num prints a figure with sensible precision.
func num(v float64) string {
	switch a := math.Abs(v); {
	case a >= 1000:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case a >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}

func printSummary(w io.Writer, res *results) {
	fmt.Fprintln(w)
	writeTables(w, res)
	fmt.Fprintln(w)
	writeTargets(w, res)
	if hasLoad(res) {
		fmt.Fprintln(w)
		writeLoadTargets(w, res)
	}
	if res.Baseline != nil {
		fmt.Fprintln(w)
		writeComparison(w, res)
	}
}

func writeTargets(w io.Writer, res *results) {
	fmt.Fprintln(w, "| measure | now | target | verdict |")
	fmt.Fprintln(w, "|---|---|---|---|")
	for _, t := range targets(res) {
		fmt.Fprintf(w, "| %s | %s | %s | %s |\n", t.measure, t.now, t.want, t.verdict)
	}
}

func perM(v float64, rows int) string {
	if rows <= 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f", v/float64(rows)*1e6)
}

func writeTables(w io.Writer, res *results) {
	if hasDrain(res) {
		writeDrainTables(w, res)
	}
	if hasBigTx(res) {
		writeBigTxTable(w, res)
	}
	if hasLive(res) {
		writeLiveTables(w, res)
	}
	writeLoadTables(w, res)
}

func hasDrain(res *results) bool {
	for _, db := range res.DBs {
		if db.Drain != nil {
			return true
		}
	}
	return false
}

func hasLive(res *results) bool {
	for _, db := range res.DBs {
		if len(db.Live) > 0 {
			return true
		}
	}
	return false
}

func writeDrainTables(w io.Writer, res *results) {
	fmt.Fprintf(w, "### Scenarios 1, 2: backlog drain (%d rows, 1,000-row transactions, ~200-byte JSON payloads, 10,000 aggregates)\n\n", res.Rows)
	fmt.Fprintln(w, "Physical limits, same backlog, same run:")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| database | load | raw source read | raw produce, franz-go | raw produce, sarama AsyncProducer | load avg |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|")
	for _, db := range res.DBs {
		d := db.Drain
		if d == nil {
			continue
		}
		r := func(s float64) float64 { return float64(d.Rows) / s }
		fmt.Fprintf(w, "| %s | %.1f s | %.0f rows/s (%.2f s) | %.0f rec/s (%.2f s) | %.0f rec/s (%.2f s) | %s |\n",
			dbLabel(db.Kind), d.LoadSeconds, r(d.RawReadSeconds), d.RawReadSeconds, r(d.RawProduceFranzSeconds), d.RawProduceFranzSeconds,
			r(d.RawProduceSaramaSeconds), d.RawProduceSaramaSeconds, d.LoadAvgBefore)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "The connector draining it, each run with a fresh broker (exactly-once: read back with read_committed):")
	fmt.Fprintln(w)
	writeRunHeader(w, true)
	for _, db := range res.DBs {
		d := db.Drain
		if d == nil {
			continue
		}
		alo := d.run(modeALO.label)
		for i := range d.Runs {
			r := &d.Runs[i]
			vsRaw, vsALO := "–", "–"
			if rr := r.rate(); !math.IsNaN(rr) {
				vsRaw = fmt.Sprintf("%.2f×", rr/d.rawReadRate())
				if alo != nil && r != alo && !math.IsNaN(alo.rate()) {
					vsALO = fmt.Sprintf("%.2f×", rr/alo.rate())
				}
			}
			writeRun(w, dbLabel(db.Kind), r, vsRaw, vsALO)
		}
	}
}

func writeBigTxTable(w io.Writer, res *results) {
	fmt.Fprintln(w)
	fmt.Fprintln(w, "### Scenario 6: one huge transaction")
	fmt.Fprintln(w)
	for _, db := range res.DBs {
		b := db.BigTx
		if b == nil {
			continue
		}
		fmt.Fprintf(w, "%s: one transaction of %d rows, %.0f MB of payload (~%d B a row), committed in %.1f s", dbLabel(db.Kind), b.Rows, float64(b.PayloadBytes)/1e6, b.RowBytes, b.LoadSeconds)
		logName, reader := "WAL", "`pg_recvlogical`"
		if db.Kind == "mysql" {
			logName, reader = "binary log", "go-mysql `BinlogSyncer`"
		}
		switch {
		case b.LogError != "":
			fmt.Fprintf(w, "; %s size not measured (%s)", logName, firstLine(b.LogError))
		case b.LogBytes > 0 && db.Kind == "mysql":
			fmt.Fprintf(w, "; %.2f GB in the binary log", float64(b.LogBytes)/1e9)
		case b.LogBytes > 0:
			fmt.Fprintf(w, "; the server's WAL advanced by %.2f GB meanwhile", float64(b.LogBytes)/1e9)
		}
		switch {
		case b.RawReadError != "":
			fmt.Fprintf(w, "; raw read (%s) failed: %s", reader, strings.ReplaceAll(firstLine(b.RawReadError), "|", "/"))
		case b.RawReadSeconds > 0:
			fmt.Fprintf(w, "; raw read (%s) %.0f rows/s (%.2f s)", reader, b.rawReadRate(), b.RawReadSeconds)
		}
		fmt.Fprint(w, ".")
		var la []string
		for _, r := range b.Runs {
			if r.LoadAvgBefore != "" {
				la = append(la, fmt.Sprintf("%s before the %s drain", r.LoadAvgBefore, r.Mode))
			}
		}
		if len(la) > 0 {
			fmt.Fprintf(w, " Load average %s.", strings.Join(la, ", "))
		}
		fmt.Fprint(w, "\n\n")
	}
	writeRunHeader(w, true)
	for _, db := range res.DBs {
		b := db.BigTx
		alo := b.run(modeALO.label)
		for i := range b.runs() {
			r := &b.Runs[i]
			vsRaw, vsALO := "–", "–"
			if rr := r.rate(); !math.IsNaN(rr) {
				if raw := b.rawReadRate(); !math.IsNaN(raw) {
					vsRaw = fmt.Sprintf("%.2f×", rr/raw)
				}
				if alo != nil && r != alo && !math.IsNaN(alo.rate()) {
					vsALO = fmt.Sprintf("%.2f×", rr/alo.rate())
				}
			}
			writeRun(w, dbLabel(db.Kind), r, vsRaw, vsALO)
		}
	}
}

func writeLiveTables(w io.Writer, res *results) {
	fmt.Fprintln(w, "\n### Scenarios 3, 4: live latency, commit → visible to a consumer (ms)")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| database | system | load | achieved rows/s | written | delivered | p50 | p99 | p99.9 | max | INSERT+commit p50 / p99 | CPU s per 1M rows | CPU, % of a core | peak RSS | load avg before → after |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, db := range res.DBs {
		for _, l := range db.Live {
			fmt.Fprintf(w, "| %s | %s | %s | %.0f | %d | %d | %s | %s | %s | %s | %s / %s | %s | %.1f | %.1f MiB | %s → %s |\n",
				dbLabel(db.Kind), l.System, rateName(l.Rate), l.AchievedRate, l.Written, l.Delivered, l.P50, l.P99, l.P999, l.Max, l.CommitP50, l.CommitP99,
				perM(l.CPUSeconds, l.Written), 100*l.CPUSeconds/math.Max(l.WriteSeconds, 1e-9), l.PeakRSSMiB, l.LoadAvgBefore, l.LoadAvgAfter)
		}
	}
	fmt.Fprintln(w, "\n### Scenario 4: what each system costs the database")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Queries are the system's own statements (outbox-cdc sends none: it reads the log). Rows read and updated are the server's count for the outbox table (PostgreSQL `pg_stat_user_tables`) or for the relay's sessions (MariaDB `SHOW SESSION STATUS` Rows_read, Handler_update). Log bytes are the WAL records (PostgreSQL, `pg_walinspect`) or binlog events (MariaDB) of the bench database only, the writers' INSERTs included, so the outbox-cdc row is the cost of the INSERTs alone. Log bytes are per row written; the other columns per row delivered (a relay that falls behind moved fewer rows than were written).")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| database | load | system | delivered | queries per 1k rows (empty polls) | rows read per row | rows updated per row | index and table scans | WAL/binlog bytes per row written | CPU ms per 1k rows |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|")
	for _, db := range res.DBs {
		for _, l := range db.Live {
			if l.Load == nil {
				fmt.Fprintf(w, "| %s | %s | %s | %d | not measured | | | | | |\n", dbLabel(db.Kind), rateName(l.Rate), l.System, l.Delivered)
				continue
			}
			n, moved := float64(max(1, l.Written)), float64(max(1, l.Delivered))
			logb := fmt.Sprintf("%.0f", float64(l.Load.LogBytes)/n)
			if l.Load.LogError != "" {
				logb = "– (" + firstLine(l.Load.LogError) + ")"
			}
			scans := "–"
			if db.Kind == "postgres" {
				scans = fmt.Sprint(l.Load.Scans)
			}
			fmt.Fprintf(w, "| %s | %s | %s | %d | %.1f (%d) | %.2f | %.2f | %s | %s | %.1f |\n", dbLabel(db.Kind), rateName(l.Rate), l.System, l.Delivered,
				float64(l.Load.Queries)/moved*1000, l.RelayEmptyPolls, float64(l.Load.RowsRead)/moved, float64(l.Load.RowsUpdated)/moved, scans, logb, l.CPUSeconds/moved*1e6)
		}
	}
}

func hasBigTx(res *results) bool {
	for _, db := range res.DBs {
		if db.BigTx != nil {
			return true
		}
	}
	return false
}

func writeRunHeader(w io.Writer, ratios bool) {
	if ratios {
		fmt.Fprintln(w, "| database | delivery | brokers | **drain** | vs raw read | vs at-least-once, 1 broker | CPU s per 1M rows | peak RSS | allocated per row | allocations per row | GC cycles | GC share of CPU | read back (records / distinct) |")
		fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|---|---|")
		return
	}
	fmt.Fprintln(w, "| database | delivery | brokers | **drain** | CPU s per 1M rows | peak RSS | allocated per row | allocations per row | GC cycles | GC share of CPU | read back (records / distinct) |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|")
}

func writeRun(w io.Writer, db string, r *drainRun, vsRaw, vsALO string) {
	delivery, _, _ := strings.Cut(r.Mode, ",")
	drain := fmt.Sprintf("**%.0f rows/s** (%.2f s)", r.rate(), r.Seconds)
	if r.Error != "" {
		drain = "failed: " + strings.ReplaceAll(firstLine(r.Error), "|", "/")
	}
	ratios := ""
	if vsRaw != "" || vsALO != "" {
		ratios = fmt.Sprintf(" %s | %s |", vsRaw, vsALO)
	}
	readBack := "–"
	if r.Consumed > 0 {
		readBack = fmt.Sprintf("%d / %d", r.Consumed, r.Distinct)
	}
	gc := "–"
	if r.GCCycles > 0 {
		gc = fmt.Sprintf("%.0f %%", 100*r.GCShare)
	}
	alloc, mallocs := "–", "–"
	if r.AllocBytes > 0 {
		alloc, mallocs = fmt.Sprintf("%.2f KB", r.AllocBytesPerRow/1000), fmt.Sprintf("%.1f", r.MallocsPerRow)
	}
	fmt.Fprintf(w, "| %s | %s | %d | %s |%s %s | %.1f MiB | %s | %s | %d | %s | %s |\n",
		db, delivery, r.Brokers, drain, ratios, perM(r.CPUSeconds, r.Rows), r.PeakRSSMiB, alloc, mallocs, r.GCCycles, gc, readBack)
}

func writeResults(path string, res *results) error {
	var b strings.Builder
	fmt.Fprintf(&b, "# Benchmark results\n\n")
	fmt.Fprintf(&b, "Generated by `make bench` (bench/README.md explains every scenario and how each figure is measured). Profile and hot spots: [PROFILE.md](PROFILE.md).\n\n")
	fmt.Fprintf(&b, "- Date: %s (run took %s), commit %s\n", res.Started.UTC().Format("2006-01-02 15:04 MST"), res.Finished.Sub(res.Started).Round(time.Second), res.Machine.Commit)
	fmt.Fprintf(&b, "- Command: `%s`\n", res.Command)
	for _, db := range res.DBs {
		fmt.Fprintf(&b, "- %s: %s\n", dbLabel(db.Kind), db.Version)
	}
	fmt.Fprintf(&b, "- %s, %s; the databases, the broker (kfake-broker, its own process), the connector, the relays and the load generator all share these CPUs. Load average at the start: %s.\n\n", res.Machine.Kernel, res.Machine.Go, res.Machine.LoadAvg)
	fmt.Fprintf(&b, "```\n$ nproc\n%s\n$ free -m\n%s\n$ lscpu (excerpt)\n%s\n```\n\n", res.Machine.Nproc, res.Machine.Free, res.Machine.LSCPU)
	fmt.Fprintf(&b, "## Targets (issue 17)\n\n")
	writeTargets(&b, res)
	if hasLoad(res) {
		fmt.Fprintf(&b, "\n## Targets under sustained load (issue 29)\n\n")
		writeLoadTargets(&b, res)
	}
	if res.Baseline != nil {
		fmt.Fprintf(&b, "\n## Before and after\n\n")
		writeComparison(&b, res)
	}
	fmt.Fprintf(&b, "\n## Figures\n\n")
	writeTables(&b, res)
	fmt.Fprintf(&b, "\n![drain rates against the physical limits](drain.svg)\n\n![latency percentiles vs load](latency.svg)\n\n")
	if hasSustained(res) {
		fmt.Fprintf(&b, "![latency over time under sustained load](sustained.svg)\n\n![latency CDF under sustained load](cdf.svg)\n\n")
	}
	fmt.Fprintf(&b, "%s", notes)
	if hasLoad(res) {
		fmt.Fprintf(&b, "%s", loadNotes)
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

const notes = `## How to read these numbers

- **Drain** is timed from the connector process start (exec) to the first sample (every 10 ms) of
  /metrics where outbox_cdc_records_delivered_total reaches N. The pipeline counts a batch after
  the broker acknowledged it (exactly-once: after the Kafka transaction committed). Connection
  set-up, the first metadata round trip and any time spent skipping other databases' binlog events
  are included. Every drain is then read back by a consumer (read_committed for exactly-once) that
  must find every row; exactly-once must find each exactly once.
- **Raw source read**: MariaDB, go-mysql's BinlogSyncer from the same binlog position up to the
  end of the backlog, every event read and decoded (rows parsed) and discarded, in the bench
  process; PostgreSQL, ` + "`pg_recvlogical --start -o proto_version=1 -o publication_names=… -E <end LSN> -f /dev/null`" + `
  on a copy of a slot created before the load, wall time of the process (logical decoding happens
  in the walsender; that is the server's limit, not the client's).
- **Raw produce**: the same records (same keys, ~200-byte values, the seed preset's three
  headers) into the same broker from the bench process, idempotent, acks=all; once with franz-go
  defaults, once with sarama's idempotent AsyncProducer (one request in flight, no linger: how sink/
  produced before it built its own requests on sarama's client).
- **Allocation and GC**: go_memstats_alloc_bytes_total and go_memstats_mallocs_total from the
  connector's /metrics at the end of the drain, divided by the rows (start-up included: a few MB,
  under 1 % at 1M rows); GC from the connector's ` + "`GODEBUG=gctrace=1`" + ` lines: the CPU of every
  phase (stop-the-world, assists, background and idle marking) over the process's CPU.
- **Live latency** is from the writer's clock read just *before* it sends the single-row,
  autocommit INSERT (the whole transaction) to the return of the consumer poll that delivered
  the record (franz-go consumer in the same process, same clock). It includes the commit round
  trip (shown as INSERT+commit), so it overstates commit→visible by that much. The first 2 s of
  each run are discarded. A row not delivered by the end of the run (plus 15 s for outbox-cdc and
  the tuned relay, 2 s for the seed relay) counts as infinite latency, shown as ∞.
- **Seed relay**: the article's OutboxRelay (bench/relay.go): every 1 s after the previous run
  ends (fixedDelay), in one transaction, ` + "`SELECT … WHERE status = 0 AND (next_retry_at IS NULL OR next_retry_at <= NOW()) ORDER BY id ASC LIMIT 100 FOR UPDATE SKIP LOCKED`" + `,
  then for each row a synchronous send (3 s timeout) and ` + "`UPDATE … SET status = 1`" + `, then COMMIT.
  Its capacity is therefore at most 100 rows/s; above that its backlog and latency grow without
  bound for as long as the load lasts.
- **Tuned relay**: four workers, each in one transaction: ` + "`SELECT … WHERE status = 0 ORDER BY id LIMIT 1000 FOR UPDATE SKIP LOCKED`" + `
  (served by an index on (status, id), or a partial index on id WHERE status = 0 on PostgreSQL),
  every row produced asynchronously (franz-go, idempotent, no linger) and all acks awaited, one
  ` + "`UPDATE … WHERE id IN (…)`" + `, COMMIT; a full batch polls again at once, otherwise the worker waits
  for its next 100 ms tick (fixed rate; the four are staggered by 25 ms, so the table is polled
  every 25 ms). Four workers do not keep per-aggregate order.
- Both relays run as a child process of the bench, so their CPU and RSS are their own, like the
  connector's. The databases' own CPU is not attributed (the servers are shared).
- **Noise**: the load-average columns show what else ran. On a shared 2-vCPU machine the
  drain rate moved by ±40 % between back-to-back runs (PROFILE.md), and the databases' own
  commit p99 (INSERT+commit column) shows when the machine stalled; compare p99s with it.
- **CPU and memory** are the connector's (or relay's) own process (/proc/<pid>/stat utime+stime,
  /proc/<pid>/status VmHWM), read at the end of each run; the broker is another process.
`
