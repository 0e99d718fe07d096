// Command outbox-cdc streams committed outbox rows from the MySQL/MariaDB
// binlog or the PostgreSQL WAL to Kafka.
//
//	outbox-cdc run --config FILE     stream until SIGINT/SIGTERM
//	outbox-cdc check --config FILE   preflight: PASS/FAIL per prerequisite
//	outbox-cdc version               print the version
//
// Exit status: 0 after a clean stop, 1 on a runtime failure, 2 on a
// configuration or usage error (reported before connecting anywhere).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"
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

const usage = `usage:
  outbox-cdc run --config FILE [--fresh-start]
                                         stream committed outbox rows to the sink (every connector)
  outbox-cdc config print --config FILE [--connector NAME]
                                         print the effective configuration, secrets redacted
  outbox-cdc position show --config FILE [--connector NAME] [--json]
                                         print the checkpoint's position
  outbox-cdc position set --config FILE [--connector NAME] --to POS|latest [--force]
                                         replace it (stop the connector first)
  outbox-cdc position import-debezium --config FILE [--connector NAME] --offset FILE|- [--force]
                                         take over a Debezium connector's offset
  outbox-cdc migrate debezium-config [--input FILE|-] [--strict]
                                         translate a Debezium connector's configuration
  outbox-cdc check --config FILE [--connector NAME] [--json]
                                         connect and check every prerequisite (exit 0: all pass)

--connector is required when the configuration lists several connectors.
  outbox-cdc version                     print the version

Every configuration key can be set from the environment: source.dsn is
OUTBOX_CDC_SOURCE_DSN, sink.brokers is OUTBOX_CDC_SINK_BROKERS (comma-separated).
`

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "version", "--version", "-v":
		fmt.Fprintf(stdout, "outbox-cdc %s\n", buildVersion())
		return 0
	case "help", "--help", "-h":
		fmt.Fprint(stdout, usage)
		return 0
	case "run":
		var opts runOptions
		pc, code := parseProcessFlags("run", args[1:], stderr, func(fs *flag.FlagSet) {
			fs.BoolVar(&opts.freshStart, "fresh-start", false,
				"exactly-once: start where source.start says although the progress record is missing and the connector ran before (rows committed in between are not sent)")
		})
		if code != 0 {
			return code
		}
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
		defer stop()
		if err := runProcess(ctx, pc, opts, stderr); err != nil {
			var ce *configError
			if errors.As(err, &ce) {
				fmt.Fprintf(stderr, "outbox-cdc: %v\n", err)
				return 2
			}
			return 1 // already logged
		}
		return 0
	case "check":
		return runCheck(args[1:], stdout, stderr)
	case "position":
		return runPosition(args[1:], stdout, stderr)
	case "migrate":
		return runMigrate(args[1:], os.Stdin, stdout, stderr)
	case "config":
		if len(args) < 2 || args[1] != "print" {
			fmt.Fprintf(stderr, "outbox-cdc config: want 'config print --config FILE'\n")
			return 2
		}
		var name string
		pc, code := parseProcessFlags("config print", args[2:], stderr, func(fs *flag.FlagSet) {
			fs.StringVar(&name, "connector", "", "the connector to print, by name (required when the configuration lists several)")
		})
		if code != 0 {
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
	default:
		fmt.Fprintf(stderr, "outbox-cdc: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
}

// parseConfigFlags parses --config and --connector and loads that
// connector's configuration (--connector may be left out when the file
// holds one); a non-zero code means the caller exits with it (the problem
// is already printed).
func parseConfigFlags(cmd string, args []string, stderr io.Writer, more ...func(*flag.FlagSet)) (Config, int) {
	var name string
	pc, code := parseProcessFlags(cmd, args, stderr, append(more, func(fs *flag.FlagSet) {
		fs.StringVar(&name, "connector", "", "the connector to act on, by name (required when the configuration lists several)")
	})...)
	if code != 0 {
		return Config{}, code
	}
	cfg, err := pickConnector(pc, name)
	if err != nil {
		fmt.Fprintf(stderr, "outbox-cdc %s: %v\n", cmd, err)
		return Config{}, 2
	}
	return cfg, 0
}

// parseProcessFlags parses --config and loads every connector of the
// configuration.
func parseProcessFlags(cmd string, args []string, stderr io.Writer, more ...func(*flag.FlagSet)) (processConfig, int) {
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfgPath := fs.String("config", "", "configuration file (YAML); optional when everything is set from the environment")
	for _, m := range more {
		m(fs)
	}
	if err := fs.Parse(args); err != nil {
		return processConfig{}, 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "outbox-cdc %s: unexpected argument %q\n", cmd, fs.Arg(0))
		return processConfig{}, 2
	}
	pc, err := loadProcessConfig(*cfgPath, environ())
	if err != nil {
		fmt.Fprintf(stderr, "outbox-cdc: %v\n", err)
		return processConfig{}, 2
	}
	return pc, 0
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
