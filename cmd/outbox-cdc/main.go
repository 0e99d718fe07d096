// Command outbox-cdc streams committed outbox rows from the MySQL/MariaDB
// binlog or the PostgreSQL WAL to Kafka.
//
//	outbox-cdc run --config FILE     stream until SIGINT/SIGTERM
//	outbox-cdc check --config FILE   preflight: PASS/FAIL per prerequisite
//	outbox-cdc help                  every command (cli.go)
//
// Exit status: 0 after a clean stop, 1 on a runtime failure, 2 on a
// configuration or usage error (reported before connecting anywhere).
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strings"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = ""

func buildVersion() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "dev"
}

// defaultMemoryLimit is the Go runtime's soft memory limit unless
// GOMEMLIMIT says otherwise: the garbage collector works harder near it
// instead of letting the heap double, which keeps a backlog drain's
// resident memory near the connector's real needs (bounded batches and
// buffers). It is soft: the process may exceed it rather than fail.
//
// Whenever the live heap exceeds half of it (a drain, a large transaction
// in fragments: 55-64 MiB live with the defaults), the peak resident set
// is about this limit plus 14-17 MiB the limit does not govern (the
// binary's pages, non-heap runtime memory): 125-129 MiB with 112 MiB,
// 113-117 MiB with 100 MiB, measured on a 100 MB transaction and a
// 300k-row drain, at the same drain rate. 100 MiB keeps the 128 MiB
// target with a margin.
const defaultMemoryLimit = 100 << 20

// defaultGCPercent is GOGC unless the environment sets it. The memory
// limit above caps the heap, so a higher GOGC changes nothing near the
// limit; below it (a PostgreSQL drain holds 10-20 MiB live, a live stream
// less) it lets the heap grow five times the live heap instead of twice
// before a collection, and every collection has a fixed cost besides
// marking the live heap. Measured (bench drains of 500k rows, connector
// process, load average 5-8): PostgreSQL GC share of the connector's CPU
// 12-13 % -> 6-7 %, peak RSS 53-63 -> 77-95 MiB; MariaDB, whose drain
// runs at the limit, 21-23 % -> 18 %, RSS unchanged. 200 before that
// (100 -> 200: MariaDB drain of 300k rows in process, 32 -> 17
// collections). The resident set stays under the limit's 128 MiB bound.
const defaultGCPercent = 400

func main() {
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(defaultMemoryLimit)
	}
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(defaultGCPercent)
	}
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage())
		return 2
	}
	switch args[0] {
	case "version", "--version", "-v":
		c := findCommand("version")
		if code, ok := c.parse(c.flags(), args[1:], stdout, stderr); !ok {
			return code
		}
		fmt.Fprintf(stdout, "outbox-cdc %s\n", buildVersion())
		return 0
	case "help", "--help", "-h", "-help":
		return runHelp(args[1:], stdout, stderr)
	case "run":
		return runRun(args[1:], stdout, stderr)
	case "check":
		return runCheck(args[1:], stdout, stderr)
	case "position":
		return runGroup("position", args[1:], stdout, stderr, func(sub string, rest []string) int {
			return runPosition(sub, rest, stdout, stderr)
		})
	case "migrate":
		return runGroup("migrate", args[1:], stdout, stderr, func(_ string, rest []string) int {
			return runMigrate(rest, os.Stdin, stdout, stderr)
		})
	case "config":
		return runGroup("config", args[1:], stdout, stderr, func(_ string, rest []string) int {
			return runConfigPrint(rest, stdout, stderr)
		})
	default:
		return unknownCommand("", args[0], stderr)
	}
}

// runFlags defines the run command's own flags.
func runFlags(opts *runOptions) func(*flag.FlagSet) {
	return func(fs *flag.FlagSet) {
		fs.BoolVar(&opts.freshStart, "fresh-start", false,
			"exactly-once: start where source.start says although the progress record is missing and the connector ran before (rows committed in between are not sent)")
	}
}

// runRun is `outbox-cdc run`: every connector until the first SIGINT or
// SIGTERM; a second one exits at once (see stopOnSignals).
func runRun(args []string, stdout, stderr io.Writer) int {
	var opts runOptions
	pc, code, ok := parseProcessFlags(findCommand("run"), args, stdout, stderr, runFlags(&opts))
	if !ok {
		return code
	}
	ctx, stop := stopOnSignals(newLogger(pc.Log, stderr), os.Exit)
	defer stop()
	if err := runProcess(ctx, pc, opts, stderr); err != nil {
		var ce *configError
		var done logged
		if errors.As(err, &ce) {
			if !errors.As(err, &done) {
				fmt.Fprintf(stderr, "outbox-cdc: %v\n", err)
			}
			return 2
		}
		return 1 // logged where it happened
	}
	return 0
}

// runConfigPrint is `outbox-cdc config print`.
func runConfigPrint(args []string, stdout, stderr io.Writer) int {
	var name string
	pc, code, ok := parseProcessFlags(findCommand("config print"), args, stdout, stderr, connectorFlag(&name, "the connector to print"))
	if !ok {
		return code
	}
	cfg, err := pickConnector(pc, name)
	if err != nil {
		fmt.Fprintf(stderr, "outbox-cdc config print: %v\n", err)
		return 2
	}
	var plc *PlacementConfig
	if pc.Placement.Enabled {
		plc = &pc.Placement
	}
	if err := printConfigPlaced(stdout, cfg, plc); err != nil {
		fmt.Fprintf(stderr, "outbox-cdc: %v\n", err)
		return 1
	}
	return 0
}

// parseProcessFlags parses --config and the flags define adds, and loads
// every connector of the configuration. ok false means the command is
// done with code (see command.parse; 2 also for a configuration error,
// already printed).
func parseProcessFlags(c *command, args []string, stdout, stderr io.Writer, define ...func(*flag.FlagSet)) (pc processConfig, code int, ok bool) {
	var path string
	fs := c.flags(append([]func(*flag.FlagSet){configFlag(&path)}, define...)...)
	if code, ok := c.parse(fs, args, stdout, stderr); !ok {
		return processConfig{}, code, false
	}
	pc, err := loadProcessConfig(path, environ())
	if err != nil {
		fmt.Fprintf(stderr, "outbox-cdc: %v\n", err)
		return processConfig{}, 2, false
	}
	return pc, 0, true
}

func environ() map[string]string {
	env := map[string]string{}
	for _, kv := range os.Environ() {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}
	return env
}
