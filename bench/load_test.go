package main

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Tests of issue 29's measurement code: distributions, progress rates, the
// CPU split, the new owner's detection, the report and plots of the
// sustained, multi, drain-pair and HA scenarios. No service is needed.

func TestTimeline(t *testing.T) {
	start := int64(1_000_000_000)
	var sent []int64
	var lat []float64
	// Second 0: 100 rows of 1..100 ms; second 2: 10 rows, one never
	// delivered; a row before the start goes to window -1.
	for i := range 100 {
		sent, lat = append(sent, start+int64(i)*10_000), append(lat, float64(i+1))
	}
	for i := range 10 {
		v := 5.0
		if i == 9 {
			v = math.Inf(1)
		}
		sent, lat = append(sent, start+2_000_000+int64(i)), append(lat, v)
	}
	sent, lat = append(sent, start-1), append(lat, 7)
	got := timeline(start, time.Second, sent, lat)
	if len(got) != 3 {
		t.Fatalf("%d windows, want 3: %+v", len(got), got)
	}
	if got[0].Second != -1 || got[0].Rows != 1 {
		t.Errorf("window before the start: %+v", got[0])
	}
	w := got[1]
	if w.Second != 0 || w.Rows != 100 || w.P50 != 50 || w.P99 != 99 || w.P999 != 100 || w.Max != 100 {
		t.Errorf("second 0: %+v, want 100 rows, p50 50, p99 99, p99.9 and max 100", w)
	}
	w = got[2]
	if w.Second != 2 || w.Rows != 10 || w.P50 != 5 || !math.IsInf(float64(w.Max), 1) || !math.IsInf(float64(w.P99), 1) {
		t.Errorf("second 2: %+v, want p50 5 and an unbounded p99 and max", w)
	}
	// The caller's latencies keep their order (they pair with sent).
	if lat[0] != 1 || lat[99] != 100 {
		t.Fatal("timeline reordered its input")
	}
	if timeline(start, time.Second, nil, nil) != nil {
		t.Error("no rows, yet windows")
	}
}

func TestQuantiles(t *testing.T) {
	qs := cdfQuantiles()
	if qs[0] != 0 || qs[len(qs)-1] != 1 || math.Abs(qs[10]-0.9) > 1e-9 || math.Abs(qs[20]-0.99) > 1e-9 || math.Abs(qs[40]-0.9999) > 1e-9 {
		t.Fatalf("quantiles %v: want 0, 0.9 at 10, 0.99 at 20, 0.9999 at 40, 1 last", qs)
	}
	v := make([]float64, 10_000)
	for i := range v {
		v[i] = float64(i + 1)
	}
	v[len(v)-1] = math.Inf(1)
	got := quantiles(v)
	if len(got) != len(qs) {
		t.Fatalf("%d points for %d quantiles", len(got), len(qs))
	}
	for i := 1; i < len(got); i++ {
		if got[i].Ms < got[i-1].Ms {
			t.Fatalf("not monotone at %d: %+v", i, got)
		}
	}
	if got[0].Ms != 1 || got[10].Ms != 9000 || got[20].Ms != 9900 || !math.IsInf(float64(got[len(got)-1].Ms), 1) {
		t.Errorf("first %v, p90 %v, p99 %v, max %v; want 1, 9000, 9900, +Inf", got[0].Ms, got[10].Ms, got[20].Ms, got[len(got)-1].Ms)
	}
	if quantiles(nil) != nil {
		t.Error("quantiles of nothing")
	}
}

func TestSpreadOf(t *testing.T) {
	if got := spreadOf([]float64{3, 1, math.NaN(), 2}); got != (spread{1, 2, 3}) {
		t.Errorf("odd: %+v", got)
	}
	if got := spreadOf([]float64{4, 1, 2, 3}); got != (spread{1, 2.5, 4}) {
		t.Errorf("even: %+v", got)
	}
	if got := spreadOf([]float64{math.NaN()}); got != (spread{}) {
		t.Errorf("nothing measured: %+v, want zeros (JSON has no NaN)", got)
	}
}

func TestProgressRates(t *testing.T) {
	t0 := time.Unix(1000, 0)
	p := newProgress(t0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	// Start-up of 500 ms, then 1,000 units every 100 ms up to 10,000 (a
	// sample repeating a count is kept once).
	p.add(at(100), 0)
	p.add(at(400), 0)
	for k := 1; k <= 10; k++ {
		p.add(at(500+100*(k-1)), float64(1000*k))
	}
	r := p.rates(10_000, 1_000_000) // each unit stands for 100 rows
	if r.FirstSeconds != 0.5 || r.LastSeconds != 1.4 {
		t.Errorf("first %v s, last %v s; want 0.5 and 1.4", r.FirstSeconds, r.LastSeconds)
	}
	// 9,000 units in 0.9 s = 10,000 units/s = 1M rows/s.
	if math.Abs(r.FirstToLast-1e6) > 1 {
		t.Errorf("first to last %v rows/s, want 1e6", r.FirstToLast)
	}
	// 10 % (1,000 units) at 500 ms, 90 % at 1,300 ms: 800k rows in 0.8 s.
	if math.Abs(r.Middle-1e6) > 1 {
		t.Errorf("middle %v rows/s, want 1e6", r.Middle)
	}
	// Interpolated between samples: 10 % of 5,000 between 0 at 0 ms and
	// 5,000 at 1,000 ms.
	q := newProgress(t0)
	q.add(t0, 0)
	q.add(at(1000), 5000)
	if c, ok := q.crossing(500); !ok || c != 100*time.Millisecond {
		t.Errorf("crossing %v, %v; want 100ms", c, ok)
	}
	// Not finished: nothing is reported.
	u := newProgress(t0)
	u.add(at(100), 10)
	if got := u.rates(100, 100); got != (progressRates{}) {
		t.Errorf("an unfinished reader has rates %+v", got)
	}
}

func TestSustainedAndFallback(t *testing.T) {
	for _, c := range []struct {
		achieved, rate, lag float64
		want                bool
	}{
		{10_000, 10_000, 1, true},
		{9_800, 10_000, 1, true},
		{9_700, 10_000, 1, false},    // below 98 %
		{17_600, 17_000, 950, false}, // caught up after falling behind
	} {
		if got := sustained(c.achieved, c.rate, c.lag); got != c.want {
			t.Errorf("sustained(%v, %v, lag %v) = %v", c.achieved, c.rate, c.lag, got)
		}
	}
	for _, c := range []struct {
		rate     int
		achieved float64
		want     int
	}{
		{50_000, 19_769, 16_000},
		{10_000, 10_000, 8_000}, // rate reached but the generator fell behind
		{2_000, 1_500, 1_200},
		{100, 100, 0},
	} {
		if got := fallbackRate(c.rate, c.achieved); got != c.want {
			t.Errorf("fallbackRate(%d, %v) = %d, want %d", c.rate, c.achieved, got, c.want)
		}
	}
}

func TestParseProcStat(t *testing.T) {
	stat := []byte("cpu  1000 20 300 9000 50 7 3 10 0 0\ncpu0 500 10 150 4500 25 3 1 5 0 0\n")
	got, err := parseProcStatBusy(stat)
	if err != nil {
		t.Fatal(err)
	}
	if want := float64(1000+20+300+7+3+10) / clockTicks; got != want {
		t.Fatalf("busy %v s, want %v (idle and iowait left out)", got, want)
	}
	if _, err := parseProcStatBusy([]byte("intr 1 2 3\n")); err == nil {
		t.Fatal("a file without the cpu line parsed")
	}
	pp, err := parsePPid([]byte("77 (postgres: walsender (x)) S 42 77 77 0 -1 4194560"))
	if err != nil || pp != 42 {
		t.Fatalf("ppid %d, %v; want 42", pp, err)
	}
}

// A /proc of three processes: a postmaster (10) with two children, and a
// mariadbd.
func fakeProc(t *testing.T) string {
	dir := t.TempDir()
	for _, p := range []struct{ pid, comm, stat string }{
		{"10", "postgres", "10 (postgres) S 1 10 10 0 -1 0 0 0 0 0 100 50"},
		{"11", "postgres", "11 (postgres) S 10 10 10 0 -1 0 0 0 0 0 7 3"},
		{"12", "postgres", "12 (postgres) S 10 10 10 0 -1 0 0 0 0 0 1 1"},
		{"20", "mariadbd", "20 (mariadbd) S 1 20 20 0 -1 0 0 0 0 0 900 100"},
	} {
		must := func(err error) {
			if err != nil {
				t.Fatal(err)
			}
		}
		must(os.MkdirAll(filepath.Join(dir, p.pid), 0o755))
		must(os.WriteFile(filepath.Join(dir, p.pid, "stat"), []byte(p.stat), 0o644))
		must(os.WriteFile(filepath.Join(dir, p.pid, "comm"), []byte(p.comm+"\n"), 0o644))
	}
	os.MkdirAll(filepath.Join(dir, "self"), 0o755) // not a pid
	return dir
}

func TestProcessDiscovery(t *testing.T) {
	proc := fakeProc(t)
	if got := childrenOf(proc, 10); len(got) != 2 || got[0] != 11 || got[1] != 12 {
		t.Errorf("children of 10: %v", got)
	}
	if got := processesNamed(proc, "mariadbd", "mysqld"); len(got) != 1 || got[0] != 20 {
		t.Errorf("mariadbd: %v", got)
	}
}

func TestSplitCPU(t *testing.T) {
	groups := []cpuGroup{{name: "server"}, {name: "ours", of: "server"}, {name: "connector"}}
	t0 := time.Unix(100, 0)
	a := cpuSnap{at: t0, machine: 100, procs: []map[int]float64{{1: 10, 2: 5}, {2: 5}, {9: 1}}}
	// 10 s later: the server's pid 2 used 4 s and a new pid 3 2 s (counted
	// whole), pid 1 exited (not counted); the connector 5 s; the machine
	// 15 s.
	b := cpuSnap{at: t0.Add(10 * time.Second), machine: 115, procs: []map[int]float64{{2: 9, 3: 2}, {2: 9}, {9: 6}}}
	w := splitCPU(groups, a, b)
	if w.Seconds != 10 || w.MachineCores != 1.5 {
		t.Fatalf("window %v s, machine %v cores", w.Seconds, w.MachineCores)
	}
	want := map[string]float64{"server": 0.6, "ours": 0.4, "connector": 0.5}
	for _, sh := range w.Shares {
		if math.Abs(sh.Cores-want[sh.Name]) > 1e-9 {
			t.Errorf("%s: %v cores, want %v", sh.Name, sh.Cores, want[sh.Name])
		}
	}
	// "ours" is part of the server: the rest is 1.5 - 0.6 - 0.5.
	if math.Abs(w.OtherCores-0.4) > 1e-9 {
		t.Errorf("other %v cores, want 0.4", w.OtherCores)
	}
	if sh, ok := w.share("conn"); !ok || sh.Name != "connector" {
		t.Errorf("share(conn) = %+v, %v", sh, ok)
	}
	if w := splitCPU(groups, a, a); w.Error == "" {
		t.Error("an empty window has no error")
	}
}

func TestOwnerWatch(t *testing.T) {
	w := newOwnerWatch()
	rec := func(id, epoch int64) *kgo.Record { return &kgo.Record{ProducerID: id, ProducerEpoch: int16(epoch)} }
	w.record(rec(5, 0), 1)
	w.record(rec(7, 0), 2)
	w.arm()
	w.record(rec(7, 0), 10) // the old owner's last records: not the new owner
	w.record(rec(5, 0), 11)
	if w.first() != 0 {
		t.Fatalf("an old producer counted as the new owner at %d", w.first())
	}
	w.record(rec(7, 1), 20) // the same producer id with a new epoch (exactly-once)
	w.record(rec(9, 0), 30)
	if w.first() != 20 {
		t.Fatalf("first record of the new owner at %d, want 20", w.first())
	}
	// The next trial: the new owner is an old one now.
	w.arm()
	w.record(rec(7, 1), 40)
	if w.first() != 0 {
		t.Fatal("the previous trial's owner counted again")
	}
}

// Every results.json field is JSON: a run whose figures could not all be
// taken still marshals, and loads back.
func TestLoadResultsRoundTrip(t *testing.T) {
	res := sampleResults()
	res.DBs[0].Sustained = append(res.DBs[0].Sustained, sustainedResult{Rate: 1000, Delivery: modeALO.label, Error: "connector exited",
		P50: msec(math.NaN()), P99: msec(math.Inf(1)), P999: msec(math.NaN()), Max: msec(math.NaN()), CommitP50: msec(math.NaN()), CommitP99: msec(math.NaN())})
	raw, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "results.json")
	if err := os.WriteFile(path, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	back, err := loadResults(path)
	if err != nil {
		t.Fatal(err)
	}
	a, b := keyFigures(res), keyFigures(back)
	if len(a) != len(b) {
		t.Fatalf("%d figures before, %d after loading", len(a), len(b))
	}
	for i := range a {
		if a[i] != b[i] {
			t.Errorf("figure %d: %+v, loaded %+v", i, a[i], b[i])
		}
	}
	if got := back.DBs[0].Sustained[0].Timeline; len(got) != 3 || !math.IsInf(float64(got[2].P99), 1) {
		t.Errorf("timeline loaded as %+v", got)
	}
	if got := back.DBs[0].Sustained[0].CDF; len(got) != len(cdfQuantiles()) {
		t.Errorf("CDF of %d points loaded", len(got))
	}
}

func TestLoadTargets(t *testing.T) {
	got := map[string]target{}
	for _, tt := range loadTargets(sampleResults()) {
		got[tt.measure] = tt
	}
	for measure, want := range map[string]string{
		"MariaDB sustained 10k rows/s, at-least-once: p99":                                      holds, // 4 ms
		"MariaDB sustained 50k rows/s, at-least-once: p99 (or the highest rate sustained here)": holds + " (at the highest rate sustained)",
		"MariaDB 6 connectors in one process, 5000 rows/s each: p99":                            miss, // 60 ms
		"MariaDB 6 connectors in one process, 5000 rows/s each: peak RSS":                       holds,
		"MariaDB drain vs raw binlog read, same run, start-up excluded":                         miss, // 0.57×
		"MariaDB connector CPU per 1M rows (at-least-once drain)":                               miss, // 2.0 s
		"MariaDB takeover: HA pair, active killed (kill -9), at-least-once":                     reported,
		"MariaDB takeover: HA pair, active frozen (SIGSTOP), at-least-once":                     miss, // a trial failed
		"PostgreSQL sustained 10k rows/s, at-least-once: p99":                                   miss, // 25 ms
		"PostgreSQL 6 connectors in one process, 5000 rows/s each: p99":                         miss, // failed
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
	if tt := got["MariaDB drain vs raw binlog read, same run, start-up excluded"]; !strings.HasPrefix(tt.now, "0.57× median from the first row to the last (0.55–0.67× over 3 pairs)") {
		t.Errorf("drain ratio text %q", tt.now)
	}
	if tt := got["MariaDB sustained 50k rows/s, at-least-once: p99 (or the highest rate sustained here)"]; !strings.Contains(tt.now, "not sustained: 21000 rows/s achieved") || !strings.Contains(tt.now, "at 17000 rows/s: p99 30.0 ms") {
		t.Errorf("the unsustained rate does not name what was achieved and the rate measured instead: %q", tt.now)
	}
	// A smoke run says its window was short.
	res := sampleResults()
	res.DBs[0].Sustained[0].Seconds = 10
	for _, tt := range loadTargets(res) {
		if tt.measure == "MariaDB sustained 10k rows/s, at-least-once: p99" && !strings.Contains(tt.now, "(10 s window, not 60 s)") {
			t.Errorf("a 10 s window is not marked: %q", tt.now)
		}
	}
}

func TestLoadBeforeAfter(t *testing.T) {
	before, after := sampleResults(), sampleResults()
	after.DBs[0].Sustained[0].P99 = 8
	after.DBs[0].HA[0].ToRecord.Median = 0.5
	after.Baseline = &baseline{Started: before.Started, Command: before.Command, Path: "old.json", Rows: before.Rows, Figures: keyFigures(before)}
	var out bytes.Buffer
	writeComparison(&out, after)
	for _, want := range []string{
		"| MariaDB sustained 10k rows/s, at-least-once: p99 (ms) | 4.00 | 8.00 | +100 % (worse) |",
		"| MariaDB sustained 17k rows/s, at-least-once: achieved (rows/s) | 17000 | 17000 | +0 % (same) |",
		"| MariaDB 6 connectors × 5k rows/s: peak RSS (MiB) | 88.0 | 88.0 | +0 % (same) |",
		"| MariaDB drain / raw read, first to last (median) | 0.57 | 0.57 | +0 % (same) |",
		"| MariaDB drain CPU s per 1M rows (at-least-once, median) | 2.00 | 2.00 | +0 % (same) |",
		"| MariaDB takeover, kill, at-least-once: first record p50 (s) | 0.25 | 0.50 | +100 % (worse) |",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("missing %q in\n%s", want, out.String())
		}
	}
}

func TestLoadSVGs(t *testing.T) {
	res := sampleResults()
	elems, text := svgElements(t, sustainedSVG(res))
	for _, want := range []string{"MariaDB: 10k rows/s, at-least-once", "MariaDB: 17k rows/s, at-least-once (50k not sustained)",
		"MariaDB: 6 connectors × 5k rows/s, all", "PostgreSQL: 10k rows/s, at-least-once", "warm-up", "p99 target 20 ms", "p99 target 100 ms",
		"asked 10k", "seconds since the writers began", "a row not delivered by the end of the run"} {
		if !strings.Contains(text, want) {
			t.Errorf("sustained plot lacks %q", want)
		}
	}
	// Six panels (five MariaDB runs, one PostgreSQL), each with one second
	// whose p99 and max are unbounded: two triangles each, and the
	// legend's.
	if elems["polygon"] != 6*2+1 {
		t.Errorf("%d triangles, want 13", elems["polygon"])
	}
	_, text = svgElements(t, cdfSVG(res))
	for _, want := range []string{"MariaDB: latency CDF, measured windows", "PostgreSQL: latency CDF, measured windows", "99.9 %", "50 %", "10 s",
		"10k rows/s, exactly-once", "6 connectors × 5k rows/s, all"} {
		if !strings.Contains(text, want) {
			t.Errorf("CDF plot lacks %q", want)
		}
	}
	// Nothing to draw: still valid documents, and no files are written.
	svgElements(t, sustainedSVG(&results{}))
	svgElements(t, cdfSVG(&results{}))
	dir := t.TempDir()
	if err := writeLoadPlots(dir, &results{}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "sustained.svg")); !os.IsNotExist(err) {
		t.Error("sustained.svg written without a sustained run")
	}
}

// The configurations the scenarios generate load in the real binary
// (`outbox-cdc config print`, which contacts nothing): one connector, an
// HA instance with a table checkpoint, a placement replica, several
// connectors in one process.
func TestGeneratedConfigsLoad(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "outbox-cdc")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/outbox-cdc").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	o := &options{bin: bin, work: t.TempDir()}
	br := &broker{addr: "127.0.0.1:1", addrs: []string{"127.0.0.1:1", "127.0.0.1:2"}}
	my := &backend{kind: "mysql", dsn: "root:@tcp(127.0.0.1:1)/outbox_bench_x"}
	pg := &backend{kind: "postgres", dsn: "postgres://postgres@127.0.0.1:1/outbox_bench_x?sslmode=disable"}
	base := connSpec{name: "bench-a", sourceYAML: my.sourceYAML("", ""), topic: "bench.a", br: br}
	ha := base
	ha.instance, ha.extraYAML, ha.checkpointYAML = "1", "ha:\n  enabled: true\n", "  type: table\n"
	eos := base
	eos.exactly, eos.sourceYAML = true, pg.sourceYAMLTable("outbox_multi_1", "slot_b", "slot_b")
	eos.name = "bench-b"
	cases := []struct {
		name, yaml string
		conns      []string
		want       []string
	}{
		{"single", entryYAML(base, "/tmp/cp") + processYAML(&connector{http: "127.0.0.1:9"}), nil, []string{"name: bench-a", "delivery: at-least-once"}},
		{"ha", entryYAML(ha, "/tmp/cp") + processYAML(&connector{http: "127.0.0.1:9"}), nil, []string{"type: table", "enabled: true"}},
		{"exactly-once", entryYAML(eos, "/tmp/cp") + processYAML(&connector{http: "127.0.0.1:9"}), nil, []string{"delivery: exactly-once", "slot: slot_b", "public.outbox_multi_1"}},
	}
	// The list forms, as startConnectors writes them.
	for _, lc := range []struct {
		name, top string
		specs     []connSpec
	}{
		{"placement", "placement:\n  enabled: true\n  deployment: bench-x\n  brokers: [\"127.0.0.1:1\"]\n", []connSpec{ha}},
		{"multi", "", []connSpec{base, eos}},
	} {
		yaml := listYAML(&connector{http: "127.0.0.1:9", cpPath: filepath.Join(o.work, "checkpoint")}, lc.top, lc.specs)
		var names []string
		for _, s := range lc.specs {
			names = append(names, s.name)
		}
		cases = append(cases, struct {
			name, yaml string
			conns      []string
			want       []string
		}{lc.name, yaml, names, []string{"name: " + names[0]}})
	}
	for _, c := range cases {
		path := filepath.Join(t.TempDir(), "c.yaml")
		if err := os.WriteFile(path, []byte(c.yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		conns := c.conns
		if conns == nil {
			conns = []string{""}
		}
		for _, name := range conns {
			args := []string{"config", "print", "--config", path}
			if len(c.conns) > 1 {
				args = append(args, "--connector", name)
			}
			out, err := exec.Command(bin, args...).CombinedOutput()
			if err != nil {
				t.Errorf("%s: outbox-cdc %s: %v\n%s\nconfiguration:\n%s", c.name, strings.Join(args, " "), err, out, c.yaml)
				continue
			}
			for _, w := range c.want {
				if name == "" || name == conns[0] {
					if !strings.Contains(string(out), w) {
						t.Errorf("%s: the effective configuration lacks %q:\n%s", c.name, w, out)
					}
				}
			}
		}
	}
}
