// Command bench measures outbox-cdc on this machine against the physical
// limits (raw source read, raw produce) and against the seed's polling
// relay, and writes bench/RESULTS.md and bench/latency.png. Run it through
// `make bench` (see bench/README.md).
//
// The connector runs as the real binary, the broker as its own process
// (test/cmd/kfake-broker), so the CPU and memory read from /proc belong to
// the connector alone. The load generators, the consumer, the raw readers
// and the polling relay run inside this process.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

type options struct {
	rows        int
	txRows      int
	aggregates  int
	dbs         []string
	scenarios   map[string]bool
	rates       []int // 0 = the maximum with -writers writers
	writers     int
	liveFor     time.Duration
	warmup      time.Duration
	bin         string
	brokerBin   string
	kafkaPort   int
	httpPort    int
	mysqlAddr   string
	pgDSN       string
	out         string
	work        string
	profile     string
	noReport    bool
	merge       bool
	reportOnly  bool
	env         []string
	commandLine string
}

func main() {
	var o options
	var dbs, scen, rates, env string
	flag.IntVar(&o.rows, "rows", 1_000_000, "rows in the backlog-drain scenario")
	flag.IntVar(&o.txRows, "tx-rows", 1000, "rows per transaction in the backlog")
	flag.IntVar(&o.aggregates, "aggregates", 10_000, "distinct aggregate ids")
	flag.StringVar(&dbs, "dbs", "mysql,postgres", "databases to measure: mysql, postgres")
	flag.StringVar(&scen, "scenarios", "drain,live,relay", "scenarios: drain (with raw limits), live, relay")
	flag.StringVar(&rates, "rates", "50,1000,10000,max", "live loads in rows/s; max = as fast as -writers writers commit")
	flag.IntVar(&o.writers, "writers", 8, "writer connections in the live scenarios")
	flag.DurationVar(&o.liveFor, "live-duration", 20*time.Second, "length of each live load")
	flag.DurationVar(&o.warmup, "warmup", 2*time.Second, "samples of the first part of each live load that are discarded")
	flag.StringVar(&o.bin, "bin", "bin/outbox-cdc", "connector binary")
	flag.StringVar(&o.brokerBin, "broker-bin", "bin/kfake-broker", "broker binary")
	flag.IntVar(&o.kafkaPort, "kafka-port", 19392, "broker port")
	flag.IntVar(&o.httpPort, "http-port", 19464, "connector metrics port")
	flag.StringVar(&o.mysqlAddr, "mysql", "root:@tcp(127.0.0.1:3306)/", "MariaDB/MySQL DSN without a database")
	flag.StringVar(&o.pgDSN, "postgres", "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable", "PostgreSQL admin DSN (the bench creates its own database)")
	flag.StringVar(&o.out, "out", "bench", "directory for RESULTS.md, latency.png and results.json")
	flag.StringVar(&o.profile, "profile", "", "instead of the scenarios: drain the backlog with the pipeline in-process and write a CPU profile to this file (one database, -dbs)")
	flag.BoolVar(&o.noReport, "no-report", false, "print results only; do not rewrite RESULTS.md and the plot")
	flag.StringVar(&env, "connector-env", "", "extra environment for the connector, comma-separated (OUTBOX_CDC_SINK_LINGER=5ms,...): try a setting")
	flag.BoolVar(&o.reportOnly, "report-only", false, "rewrite RESULTS.md and latency.png from results.json without measuring")
	flag.BoolVar(&o.merge, "merge", false, "keep the other databases' results from the previous results.json (to re-run one database)")
	flag.Parse()
	o.dbs = strings.Split(dbs, ",")
	if env != "" {
		o.env = strings.Split(env, ",")
	}
	o.scenarios = map[string]bool{}
	for _, s := range strings.Split(scen, ",") {
		o.scenarios[s] = true
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
	o.commandLine = strings.Join(os.Args[1:], " ")

	if o.reportOnly {
		raw, err := os.ReadFile(filepath.Join(o.out, "results.json"))
		must(err)
		var res results
		must(json.Unmarshal(raw, &res))
		must(writePlot(filepath.Join(o.out, "latency.png"), &res))
		must(writeResults(filepath.Join(o.out, "RESULTS.md"), &res))
		return
	}

	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	var err error
	if o.work, err = os.MkdirTemp("", "outbox-cdc-bench"); err != nil {
		fatalf("%v", err)
	}
	defer os.RemoveAll(o.work)

	if o.profile != "" {
		if err := runProfile(ctx, &o); err != nil {
			fatalf("profile: %v", err)
		}
		return
	}

	res := &results{Started: time.Now(), Command: "go run ./bench " + o.commandLine, Rows: o.rows}
	res.Machine = describeMachine()
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
			if dr == nil {
				os.Exit(1)
			}
		}
	}
	res.Finished = time.Now()
	if o.merge {
		mergePrevious(filepath.Join(o.out, "results.json"), res)
	}
	printSummary(os.Stdout, res)
	if o.noReport {
		return
	}
	raw, _ := json.MarshalIndent(res, "", "  ")
	must(os.WriteFile(filepath.Join(o.out, "results.json"), raw, 0o644))
	must(writePlot(filepath.Join(o.out, "latency.png"), res))
	must(writeResults(filepath.Join(o.out, "RESULTS.md"), res))
	fmt.Printf("wrote %s, %s, %s\n", filepath.Join(o.out, "RESULTS.md"), filepath.Join(o.out, "latency.png"), filepath.Join(o.out, "results.json"))
}

// runDatabase runs every chosen scenario against one database, each with a
// fresh broker process (kfake keeps everything in memory).
func runDatabase(ctx context.Context, o *options, kind string) (*dbResult, error) {
	be, err := openBackend(ctx, o, kind)
	if err != nil {
		return nil, err
	}
	defer be.close()
	dr := &dbResult{Kind: kind, Version: be.version}
	logf("== %s (%s)", kind, be.version)
	if o.scenarios["drain"] {
		br, err := startBroker(ctx, o)
		if err != nil {
			return dr, err
		}
		d, err := runDrain(ctx, o, be, br)
		br.stop()
		if err != nil {
			return dr, fmt.Errorf("drain: %w", err)
		}
		dr.Drain = d
	}
	for _, rate := range o.rates {
		for _, relay := range []bool{false, true} {
			if (!relay && !o.scenarios["live"]) || (relay && !o.scenarios["relay"]) || ctx.Err() != nil {
				continue
			}
			br, err := startBroker(ctx, o)
			if err != nil {
				return dr, err
			}
			l, err := runLive(ctx, o, be, br, rate, relay)
			br.stop()
			if err != nil {
				return dr, fmt.Errorf("live %s: %w", rateName(rate), err)
			}
			dr.Live = append(dr.Live, *l)
		}
	}
	return dr, nil
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
	os.Exit(1)
}

func must(err error) {
	if err != nil {
		fatalf("%v", err)
	}
}

// mergePrevious adds the databases of an earlier results.json that this run
// did not measure, in the earlier order.
func mergePrevious(path string, res *results) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return
	}
	var prev results
	if err := json.Unmarshal(raw, &prev); err != nil {
		logf("-merge: %s: %v", path, err)
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
