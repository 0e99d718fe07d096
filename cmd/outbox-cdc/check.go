package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
	"github.com/outbox-cdc/outbox-cdc/router"
	"github.com/outbox-cdc/outbox-cdc/sink/kafka"
)

// runCheck is `outbox-cdc check --config FILE [--connector NAME] [--json]`:
// it connects to the source, the sink and the checkpoint store of every
// connector of the file (or the one --connector names) and prints one line
// per check, in one block per connector. Exit status 0 when no check
// failed (warnings included), 1 when one failed, 2 for a usage or
// configuration error. It changes nothing anywhere.
func runCheck(args []string, stdout, stderr io.Writer) int {
	var o checkOptions
	c := findCommand("check")
	if code, ok := c.parse(c.flags(checkFlags(&o)), args, stdout, stderr); !ok {
		return code
	}
	pc, err := loadProcessConfig(o.config, environ())
	if err != nil {
		fmt.Fprintf(stderr, "outbox-cdc: %v\n", err)
		return 2
	}
	cfgs := pc.Connectors
	if o.connector != "" || len(cfgs) == 1 {
		cfg, err := pickConnector(pc, o.connector)
		if err != nil {
			fmt.Fprintf(stderr, "outbox-cdc: %v\n", err)
			return 2
		}
		cfgs = []Config{cfg}
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	var all []outboxcdc.CheckResult
	blocks := make([][]outboxcdc.CheckResult, len(cfgs))
	for i, cfg := range cfgs {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		blocks[i] = checkAll(cctx, cfg)
		cancel()
		for j := range blocks[i] {
			blocks[i][j].Connector = cfg.Name
		}
		all = append(all, blocks[i]...)
	}
	failed, warned := countChecks(all)
	if o.json {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if all == nil {
			all = []outboxcdc.CheckResult{}
		}
		if err := enc.Encode(all); err != nil {
			fmt.Fprintf(stderr, "outbox-cdc check: %v\n", err)
			return 1
		}
	} else {
		for i, cfg := range cfgs {
			if len(cfgs) > 1 {
				if i > 0 {
					fmt.Fprintln(stdout)
				}
				f, w := countChecks(blocks[i])
				fmt.Fprintf(stdout, "== connector %s: %s\n", cfg.Name, checkSummary(len(blocks[i]), f, w))
			}
			printChecks(stdout, blocks[i])
		}
		if len(cfgs) > 1 {
			fmt.Fprintln(stdout)
			fmt.Fprintf(stdout, "%d connectors, ", len(cfgs))
		}
		fmt.Fprintln(stdout, checkSummary(len(all), failed, warned))
	}
	if failed > 0 {
		return 1
	}
	return 0
}

// countChecks counts the failures and the warnings among results.
func countChecks(results []outboxcdc.CheckResult) (failed, warned int) {
	for _, r := range results {
		switch {
		case !r.OK:
			failed++
		case r.Warned():
			warned++
		}
	}
	return failed, warned
}

func checkSummary(n, failed, warned int) string {
	return fmt.Sprintf("%d checks, %d failed, %d warnings", n, failed, warned)
}

// checkOptions are the check command's flags.
type checkOptions struct {
	config, connector string
	json              bool
}

func checkFlags(o *checkOptions) func(*flag.FlagSet) {
	return func(fs *flag.FlagSet) {
		configFlag(&o.config)(fs)
		fs.StringVar(&o.connector, "connector", "", "check only the connector called `name` (default: every connector of the file)")
		fs.BoolVar(&o.json, "json", false, "print the results as a JSON array (each with its connector and status: pass, warn or fail)")
	}
}

// checkAll runs every check of cfg: the checkpoint first (the source checks
// need its position), then the source, then the sink.
func checkAll(ctx context.Context, cfg Config) []outboxcdc.CheckResult {
	if err := cfg.Route.Validate(); err != nil {
		return []outboxcdc.CheckResult{outboxcdc.Fail("route", sectionError("route", err).Error(), "fix the route section")}
	}
	cols := cfg.Route.Columns()
	kind := cfg.Source.Type

	var out []outboxcdc.CheckResult
	from, cpResult := checkCheckpoint(ctx, cfg, kind)
	out = append(out, cpResult)
	if cfg.Route.NeedsTable() {
		out = append(out, checkRouteTable(ctx, cfg))
	}

	out = append(out, cfg.source().check(ctx, cfg, cols, from)...) // sources.go

	return append(out, sinkKinds[cfg.Sink.Type].check(ctx, cfg)...) // sinks.go
}

// checkRouteTable reads the outbox table's column types as run does for
// route.converters, and checks the converters can write every column.
func checkRouteTable(ctx context.Context, cfg Config) outboxcdc.CheckResult {
	const name = "route converters"
	table, err := readOutboxTable(ctx, cfg)
	if err != nil {
		return outboxcdc.Fail(name, err.Error(), "the converters read the outbox table's column types at start: make source.table readable")
	}
	if _, err := router.NewForTable(cfg.Route, table); err != nil {
		return outboxcdc.Fail(name, sectionError("route", err).Error(), "change the route.converters settings or the column (see docs/routing.md, Kafka Connect converters)")
	}
	return outboxcdc.Pass(name, fmt.Sprintf("columns %s of %s.%s have types the converters write as Debezium does",
		strings.Join(cfg.Route.TypedColumns(), ", "), table.Schema, table.Name))
}

// checkCheckpoint reads the checkpoint as run would; an unreadable or
// foreign one fails (run refuses it too) and yields no position.
func checkCheckpoint(ctx context.Context, cfg Config, kind string) (outboxcdc.Position, outboxcdc.CheckResult) {
	const name = "checkpoint"
	cp, witness, closeCP, err := newCheckpoint(cfg, kind, zerolog.Nop())
	if err != nil {
		return "", outboxcdc.Fail(name, err.Error(), "fix the checkpoint section")
	}
	defer closeCP()
	if cp == nil {
		return checkProgress(ctx, cfg, kind, witness)
	}
	pos, err := cp.Load(ctx)
	if err != nil {
		return "", outboxcdc.Fail(name, err.Error(),
			"restore the checkpoint from a backup, or move it away deliberately to start where source.start says")
	}
	if pos.IsZero() {
		return "", outboxcdc.Pass(name, fmt.Sprint(cp)+": none yet (a first run starts where source.start says)")
	}
	return pos, outboxcdc.Pass(name, fmt.Sprint(cp)+": "+string(pos))
}

// checkProgress reads, in exactly-once mode, the committed progress (without
// fencing a running connector) and its witness, as run would.
func checkProgress(ctx context.Context, cfg Config, kind string, witness outboxcdc.Checkpointer) (outboxcdc.Position, outboxcdc.CheckResult) {
	const name = "checkpoint"
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	seen, werr := witness.Load(ctx)
	p, err := kafka.ReadProgress(ctx, cfg.Sink.KafkaConfig, cfg.Sink.ProgressTopic, cfg.Name, kind)
	switch {
	case err != nil && !errors.Is(err, kafka.ErrProgressUntrusted) && !errors.Is(err, outboxcdc.ErrForeignPosition):
		return "", outboxcdc.Warn(name, fmt.Sprintf("progress topic %s not readable here (%v); witness %s: %s; the source's position checks cannot judge the saved position",
			cfg.Sink.ProgressTopic, err, fmt.Sprint(witness), orNone(seen)),
			"check sink.brokers and that the connector's user may read "+cfg.Sink.ProgressTopic+", then run check again")
	case err != nil:
		return "", outboxcdc.Fail(name, err.Error(), "write a valid progress record with `outbox-cdc position set`, or a tombstone for the connector's key deliberately")
	case !p.Position.IsZero():
		return p.Position, outboxcdc.Pass(name, fmt.Sprintf("progress topic %s: %s (witness in %s: %s)", cfg.Sink.ProgressTopic, p.Position, fmt.Sprint(witness), orNone(seen)))
	case werr != nil || !seen.IsZero():
		why := string(seen)
		if werr != nil {
			why = "unreadable: " + werr.Error()
		}
		return "", outboxcdc.Fail(name, fmt.Sprintf("progress topic %s has no record for %q, but the witness in %s shows the connector ran before (%s): run refuses to start",
			cfg.Sink.ProgressTopic, cfg.Name, fmt.Sprint(witness), why),
			"resume from the witness with `outbox-cdc position set --to <position>`, or start fresh deliberately with `outbox-cdc run --fresh-start`")
	}
	return "", outboxcdc.Pass(name, fmt.Sprintf("progress topic %s: no progress yet, and no witness (a first run starts where source.start says)", cfg.Sink.ProgressTopic))
}

func orNone(p outboxcdc.Position) string {
	if p.IsZero() {
		return "none"
	}
	return string(p)
}

// topicNeeds lists the topic families the route (and the dead-letter
// policy) writes to: a template's literal text before its first
// placeholder, or the whole name when it has none.
func topicNeeds(cfg Config) []kafka.TopicNeed {
	tmpl := cfg.Route.Topic
	if tmpl == "" {
		tmpl = router.DefaultTopic
	}
	if cfg.Route.TopicRegex != "" || cfg.Route.TopicReplacement != "" {
		// Debezium's regex routing: the replacement's text before its first
		// group reference (a routing value the regex does not match is its
		// own topic, which cannot be known in advance).
		tmpl = cfg.Route.TopicReplacement
		if tmpl == "" {
			tmpl = "outbox.event.$"
		}
		if i := strings.IndexAny(tmpl, `$\`); i >= 0 {
			tmpl = tmpl[:i] + "{"
		}
	}
	var needs []kafka.TopicNeed
	if i := strings.IndexByte(tmpl, '{'); i >= 0 {
		needs = append(needs, kafka.TopicNeed{Prefix: tmpl[:i]})
	} else {
		needs = append(needs, kafka.TopicNeed{Prefix: tmpl, Exact: true})
	}
	if cfg.Pipeline.OnError == outboxcdc.OnErrorDLQ && cfg.Pipeline.DLQTopic != "" {
		needs = append(needs, kafka.TopicNeed{Prefix: cfg.Pipeline.DLQTopic, Exact: true})
	}
	return needs
}

// printChecks prints one line per check: PASS, WARN or FAIL, the name,
// what was found and, for a failure or a warning, the fix.
func printChecks(w io.Writer, results []outboxcdc.CheckResult) {
	width := 0
	for _, r := range results {
		width = max(width, len(r.Name))
	}
	for _, r := range results {
		status := "PASS"
		switch {
		case !r.OK:
			status = "FAIL"
		case r.Warned():
			status = "WARN"
		}
		line := fmt.Sprintf("%s  %-*s  %s", status, width, r.Name, oneLine(r.Detail))
		if status != "PASS" && r.Fix != "" {
			line += "  -> fix: " + oneLine(r.Fix)
		}
		fmt.Fprintln(w, strings.TrimRight(line, " "))
	}
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
