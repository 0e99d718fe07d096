// Command bench measures outbox-cdc on this machine against the physical
// limits (raw source read, raw produce), against itself in other delivery
// modes and broker counts, and against two polling relays, and writes
// bench/RESULTS.md, bench/latency.svg, bench/drain.svg and
// bench/results.json. Run it through `make bench` (see bench/README.md).
//
// The connector runs as the real binary, the broker as its own process
// (test/cmd/kfake-broker), and the relays as a child process of this one,
// so the CPU and memory read from /proc belong to each alone. The load
// generators, the consumers and the raw readers and producers run inside
// this process.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

type options struct {
	rows        int
	txRows      int
	aggregates  int
	bigRows     int
	bigRowBytes int
	bigAnnotate bool
	dbs         []string
	scenarios   map[string]bool
	relays      []string
	rates       []int // 0 = the maximum with -writers writers
	writers     int
	liveFor     time.Duration
	warmup      time.Duration
	bin         string
	brokerBin   string
	kafkaPort   int
	httpPort    int
	partitions  int
	mysqlAddr   string
	pgDSN       string
	out         string
	work        string
	profile     string
	noReport    bool
	merge       bool
	reportOnly  bool
	verify      bool
	baseline    string
	env         []string
	// The sustained scenario (also the multi scenario's durations).
	susRates      []int
	susDeliveries []string
	susWarmup     time.Duration
	susFor        time.Duration
	susTxRows     int
	susWriters    int
	susFallback   bool
	// The multi scenario.
	multiN, multiRate, multiWriters int
	// The drain scenario: raw read and at-least-once drain pairs.
	repeat int
	// The ha scenario.
	haTrials     int
	haFaults     []string
	haRate       int
	haDeliveries []string
	haTimeout    time.Duration
	commandLine  string
	runID        string // suffix of every database, slot and connector name
}

// allScenarios are the scenario names -scenarios takes.
var allScenarios = []string{"drain", "eos", "cluster", "live", "relay", "tuned", "sustained", "multi", "ha", "bigtx"}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "-relay-child" {
		relayChildMain(os.Args[1:])
		return
	}
	var o options
	var dbs, scen, rates, env, susRates, susDeliveries, haFaults, haDeliveries string
	var bigtx bool
	flag.IntVar(&o.rows, "rows", 1_000_000, "rows in the backlog-drain scenario (the reference load is 1,000,000)")
	flag.IntVar(&o.txRows, "tx-rows", 1000, "rows per transaction in the backlog")
	flag.IntVar(&o.aggregates, "aggregates", 10_000, "distinct aggregate ids")
	flag.StringVar(&dbs, "dbs", "mysql,postgres", "databases to measure: mysql, postgres")
	flag.StringVar(&scen, "scenarios", "drain,eos,cluster,live,relay,tuned,sustained,multi,ha",
		"scenarios: drain (at-least-once, with the raw limits), eos (exactly-once drain), cluster (drains against 3 brokers), live (outbox-cdc latency), relay (seed polling relay), tuned (tuned polling relay), sustained (latency at a fixed rate for a minute), multi (several connectors in one process), ha (takeover times), bigtx (one huge transaction; or -bigtx)")
	flag.BoolVar(&bigtx, "bigtx", false, "add the huge-transaction scenario (heavy: ~1 GB per database in the table and again in the binlog/WAL; see bench/README.md)")
	flag.IntVar(&o.bigRows, "bigtx-rows", 1_000_000, "rows of the huge transaction")
	flag.IntVar(&o.bigRowBytes, "bigtx-row-bytes", 1024, "payload bytes per row of the huge transaction")
	flag.BoolVar(&o.bigAnnotate, "bigtx-annotate", false, "MariaDB: keep the server's binlog_annotate_row_events for the huge transaction's load (on by default in MariaDB: the INSERTs' text is logged too, twice the binary log the bench leaves behind)")
	flag.StringVar(&rates, "rates", "50,1000,5000,max", "live loads in rows/s; max = as fast as -writers writers commit")
	flag.IntVar(&o.writers, "writers", 8, "writer connections in the live scenarios")
	flag.DurationVar(&o.liveFor, "live-duration", 20*time.Second, "length of each live load")
	flag.DurationVar(&o.warmup, "warmup", 2*time.Second, "samples of the first part of each live load that are discarded")
	flag.StringVar(&o.bin, "bin", "bin/outbox-cdc", "connector binary")
	flag.StringVar(&o.brokerBin, "broker-bin", "bin/kfake-broker", "broker binary")
	flag.IntVar(&o.kafkaPort, "kafka-port", 0, "first broker port (0: a free one)")
	flag.IntVar(&o.httpPort, "http-port", 0, "connector metrics port (0: a free one)")
	flag.IntVar(&o.partitions, "partitions", 3, "partitions of the topics")
	flag.StringVar(&o.mysqlAddr, "mysql", "root:@tcp(127.0.0.1:3306)/", "MariaDB/MySQL DSN without a database")
	flag.StringVar(&o.pgDSN, "postgres", "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable", "PostgreSQL admin DSN (the bench creates its own database)")
	flag.StringVar(&o.out, "out", "bench", "directory for RESULTS.md, the plots and results.json")
	flag.StringVar(&o.profile, "profile", "", "instead of the scenarios: drain the backlog with the pipeline in-process and write a CPU profile to this file (one database, -dbs)")
	flag.BoolVar(&o.noReport, "no-report", false, "print results only; do not rewrite RESULTS.md, the plots and results.json")
	flag.StringVar(&env, "connector-env", "", "extra environment for the connector, comma-separated (OUTBOX_CDC_SINK_LINGER=5ms,...): try a setting")
	flag.BoolVar(&o.reportOnly, "report-only", false, "rewrite RESULTS.md and the plots from results.json without measuring")
	flag.BoolVar(&o.merge, "merge", false, "keep the other databases' results from the previous results.json (to re-run one database)")
	flag.BoolVar(&o.verify, "verify", true, "read every drain back with a consumer and check that no row is missing (exactly-once: none twice)")
	flag.StringVar(&o.baseline, "baseline", "", "an earlier results.json: print and report a before/after table against it")
	flag.IntVar(&o.repeat, "repeat", 1, "drain: repeat the raw source read and the at-least-once drain of the backlog this many times, alternating, and report min/median/max")
	flag.StringVar(&susRates, "sustained-rates", "10000,50000", "sustained: the rates in rows/s")
	flag.StringVar(&susDeliveries, "sustained-delivery", "at-least-once,exactly-once", "sustained: delivery modes")
	flag.DurationVar(&o.susWarmup, "sustained-warmup", 10*time.Second, "sustained and multi: load before the measured window (discarded)")
	flag.DurationVar(&o.susFor, "sustained-duration", 60*time.Second, "sustained and multi: the measured window")
	flag.IntVar(&o.susTxRows, "sustained-tx-rows", 10, "sustained and multi: rows per transaction (one multi-row INSERT each)")
	flag.IntVar(&o.susWriters, "sustained-writers", 8, "sustained: writer connections")
	flag.BoolVar(&o.susFallback, "sustained-fallback", true, "sustained: after a rate that was not sustained, measure again at 90 % of what was achieved")
	flag.IntVar(&o.multiN, "multi-connectors", 6, "multi: connectors in the one process, each with its own outbox table")
	flag.IntVar(&o.multiRate, "multi-rate", 5000, "multi: rows/s per connector")
	flag.IntVar(&o.multiWriters, "multi-writers", 2, "multi: writer connections per connector")
	flag.IntVar(&o.haTrials, "ha-trials", 20, "ha: trials per fault")
	flag.StringVar(&haFaults, "ha-faults", strings.Join(haFaultNames, ","), "ha: kill (kill -9 of the active instance of an HA pair), sigstop (the same frozen), move (placement: the owning replica stopped with SIGTERM), move-kill (placement: the owning replica killed)")
	flag.IntVar(&o.haRate, "ha-rate", 200, "ha: rows/s written throughout (single-row transactions)")
	flag.StringVar(&haDeliveries, "ha-delivery", "at-least-once", "ha: delivery modes (at-least-once keeps its checkpoint in a table of the source database; exactly-once in Kafka)")
	flag.DurationVar(&o.haTimeout, "ha-trial-timeout", 2*time.Minute, "ha: a trial whose takeover takes longer fails")
	flag.Parse()
	if bigtx {
		scen += ",bigtx"
	}
	o.dbs = strings.Split(dbs, ",")
	if env != "" {
		o.env = strings.Split(env, ",")
	}
	o.scenarios = map[string]bool{}
	for _, s := range strings.Split(scen, ",") {
		if !slices.Contains(allScenarios, s) {
			fatalf("-scenarios: %q is not one of %s", s, strings.Join(allScenarios, ", "))
		}
		o.scenarios[s] = true
	}
	if o.scenarios["eos"] || o.scenarios["cluster"] {
		o.scenarios["drain"] = true // they drain the same backlog
	}
	o.relays = nil
	if o.scenarios["relay"] {
		o.relays = append(o.relays, sysSeed)
	}
	if o.scenarios["tuned"] {
		o.relays = append(o.relays, sysTuned)
	}
	for _, r := range strings.Split(rates, ",") {
		if r == "max" {
			o.rates = append(o.rates, 0)
			continue
		}
		n, err := strconv.Atoi(r)
		if err != nil || n <= 0 {
			fatalf("-rates: %q is not a positive number or max", r)
		}
		o.rates = append(o.rates, n)
	}
	o.susRates = positiveInts("-sustained-rates", susRates)
	o.multiN = max(1, o.multiN)
	o.repeat = max(1, o.repeat)
	o.susDeliveries = deliveries("-sustained-delivery", susDeliveries)
	o.haDeliveries = deliveries("-ha-delivery", haDeliveries)
	for _, f := range strings.Split(haFaults, ",") {
		if !slices.Contains(haFaultNames, f) {
			fatalf("-ha-faults: %q is not one of %s", f, strings.Join(haFaultNames, ", "))
		}
		o.haFaults = append(o.haFaults, f)
	}
	if o.susTxRows < 1 || o.susWriters < 1 || o.multiWriters < 1 || o.haTrials < 1 || o.haRate < 1 {
		fatalf("-sustained-tx-rows, -sustained-writers, -multi-writers, -ha-trials and -ha-rate must be positive")
	}
	o.commandLine = strings.Join(os.Args[1:], " ")
	var id [3]byte
	rand.Read(id[:])
	o.runID = hex.EncodeToString(id[:])

	var base *baseline
	if o.baseline != "" {
		b, err := loadResults(o.baseline)
		if err != nil {
			fatalf("-baseline: %v", err)
		}
		base = &baseline{Started: b.Started, Command: b.Command, Path: o.baseline, Rows: b.Rows, Figures: keyFigures(b)}
	}

	if o.reportOnly {
		res, err := loadResults(filepath.Join(o.out, "results.json"))
		must(err)
		if base != nil {
			res.Baseline = base
		}
		printSummary(os.Stdout, res)
		must(writePlots(o.out, res))
		must(writeResults(filepath.Join(o.out, "RESULTS.md"), res))
		return
	}

	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	var err error
	if o.work, err = os.MkdirTemp("", "outbox-cdc-bench"); err != nil {
		fatalf("%v", err)
	}
	workDir = o.work
	defer os.RemoveAll(o.work)

	if o.profile != "" {
		if err := runProfile(ctx, &o); err != nil {
			fatalf("profile: %v", err)
		}
		return
	}

	res := &results{Started: time.Now(), Command: "go run ./bench " + o.commandLine, Rows: o.rows, Baseline: base}
	res.Machine = describeMachine()
	failed := false
	for _, kind := range o.dbs {
		if ctx.Err() != nil {
			break
		}
		dr, err := runDatabase(ctx, &o, kind)
		if dr != nil {
			res.DBs = append(res.DBs, *dr)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "bench %s: %v\n", kind, err)
			failed = true
		}
	}
	res.Finished = time.Now()
	if o.merge {
		mergePrevious(filepath.Join(o.out, "results.json"), res)
	}
	printSummary(os.Stdout, res)
	if o.noReport || len(res.DBs) == 0 {
		if failed {
			exit(1)
		}
		return
	}
	raw, err := json.MarshalIndent(res, "", "  ")
	must(err)
	must(os.WriteFile(filepath.Join(o.out, "results.json"), raw, 0o644))
	must(writePlots(o.out, res))
	must(writeResults(filepath.Join(o.out, "RESULTS.md"), res))
	fmt.Printf("wrote %s, %s, %s, %s\n", filepath.Join(o.out, "RESULTS.md"), filepath.Join(o.out, "latency.svg"), filepath.Join(o.out, "drain.svg"), filepath.Join(o.out, "results.json"))
	if hasSustained(res) {
		fmt.Printf("wrote %s, %s\n", filepath.Join(o.out, "sustained.svg"), filepath.Join(o.out, "cdf.svg"))
	}
	if failed {
		exit(1)
	}
}

// runDatabase runs every chosen scenario against one database. Every
// connector and relay run gets a fresh broker process (kfake keeps
// everything in memory).
func runDatabase(ctx context.Context, o *options, kind string) (*dbResult, error) {
	be, err := openBackend(ctx, o, kind)
	if err != nil {
		return nil, err
	}
	defer be.close()
	if err := be.enableLoadStats(ctx); err != nil {
		logf("%s: %v", kind, err)
	}
	dr := &dbResult{Kind: kind, Version: be.version}
	logf("== %s (%s), database %s", kind, be.version, be.name)
	if o.scenarios["drain"] {
		d, err := runDrain(ctx, o, be)
		dr.Drain = d
		if err != nil {
			return dr, fmt.Errorf("drain: %w", err)
		}
	}
	systems := []string{}
	if o.scenarios["live"] {
		systems = append(systems, sysCDC)
	}
	systems = append(systems, o.relays...)
	for _, rate := range o.rates {
		for _, sys := range systems {
			if ctx.Err() != nil {
				return dr, ctx.Err()
			}
			l, err := runLive(ctx, o, be, rate, sys)
			if err != nil {
				return dr, fmt.Errorf("live %s %s: %w", sys, rateName(rate), err)
			}
			dr.Live = append(dr.Live, *l)
		}
	}
	if o.scenarios["sustained"] {
		r, err := runSustainedAll(ctx, o, be)
		dr.Sustained = r
		if err != nil {
			return dr, fmt.Errorf("sustained: %w", err)
		}
	}
	if o.scenarios["multi"] && ctx.Err() == nil {
		m := runMulti(ctx, o, be)
		dr.Multi = &m
	}
	if o.scenarios["ha"] {
		for _, f := range o.haFaults {
			for _, d := range o.haDeliveries {
				if ctx.Err() != nil {
					return dr, ctx.Err()
				}
				dr.HA = append(dr.HA, runHA(ctx, o, be, f, d))
			}
		}
	}
	if o.scenarios["bigtx"] {
		b, err := runBigTx(ctx, o, be)
		dr.BigTx = b
		if err != nil {
			return dr, fmt.Errorf("bigtx: %w", err)
		}
	}
	return dr, nil
}

// positiveInts parses a comma-separated list of positive numbers.
func positiveInts(flagName, list string) []int {
	var out []int
	for _, r := range strings.Split(list, ",") {
		n, err := strconv.Atoi(r)
		if err != nil || n <= 0 {
			fatalf("%s: %q is not a positive number", flagName, r)
		}
		out = append(out, n)
	}
	return out
}

// deliveries parses a comma-separated list of delivery modes.
func deliveries(flagName, list string) []string {
	var out []string
	for _, d := range strings.Split(list, ",") {
		if d != modeALO.label && d != modeEOS.label {
			fatalf("%s: %q is not at-least-once or exactly-once", flagName, d)
		}
		out = append(out, d)
	}
	return out
}

func rateName(rate int) string {
	if rate == 0 {
		return "max"
	}
	return strconv.Itoa(rate) + "/s"
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s bench: %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

func fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "bench: "+format+"\n", args...)
	exit(1)
}

// workDir is the run's work directory (connector configurations,
// checkpoints, logs), removed by exit: os.Exit skips deferred calls.
var workDir string

func exit(code int) {
	if workDir != "" {
		os.RemoveAll(workDir)
	}
	os.Exit(code)
}

func must(err error) {
	if err != nil {
		fatalf("%v", err)
	}
}

// mergePrevious adds the databases of an earlier results.json that this run
// did not measure, in the earlier order.
func mergePrevious(path string, res *results) {
	prev, err := loadResults(path)
	if err != nil {
		logf("-merge: %v", err)
		return
	}
	var all []dbResult
	for _, p := range prev.DBs {
		replaced := false
		for _, d := range res.DBs {
			if d.Kind == p.Kind {
				all, replaced = append(all, d), true
			}
		}
		if !replaced {
			all = append(all, p)
			res.Command += fmt.Sprintf(" (%s figures from the run of %s: %s)", dbLabel(p.Kind), prev.Started.UTC().Format("2006-01-02 15:04 MST"), prev.Command)
		}
	}
	for _, d := range res.DBs {
		found := false
		for _, a := range all {
			found = found || a.Kind == d.Kind
		}
		if !found {
			all = append(all, d)
		}
	}
	res.DBs = all
}
