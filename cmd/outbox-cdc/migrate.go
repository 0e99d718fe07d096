package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/outbox-cdc/outbox-cdc/migrate"
)

const migrateUsage = `usage:
  outbox-cdc migrate debezium-config [--input FILE|-] [--strict]

Reads a Debezium connector's configuration (Kafka Connect's
GET /connectors/<name>/config JSON, or Debezium Server's
application.properties) and prints the equivalent outbox-cdc configuration.
Keys outbox-cdc cannot honour are listed by name, with the reason, in the
comments at the top. --strict exits 1 when there is any.
`

// runMigrate is `outbox-cdc migrate debezium-config`.
func runMigrate(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] != "debezium-config" {
		fmt.Fprint(stderr, migrateUsage)
		return 2
	}
	fs := flag.NewFlagSet("migrate debezium-config", flag.ContinueOnError)
	fs.SetOutput(stderr)
	input := fs.String("input", "-", "the Debezium configuration file (- for standard input)")
	strict := fs.Bool("strict", false, "exit 1 when a key cannot be honoured")
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "outbox-cdc migrate debezium-config: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	var raw []byte
	var err error
	if *input == "-" {
		raw, err = io.ReadAll(stdin)
	} else {
		raw, err = os.ReadFile(*input)
	}
	if err != nil {
		fmt.Fprintf(stderr, "outbox-cdc migrate debezium-config: %v\n", err)
		return 2
	}
	tr, err := migrate.TranslateDebeziumConfig(raw)
	if err != nil {
		fmt.Fprintf(stderr, "outbox-cdc migrate debezium-config: %v\n", err)
		return 2
	}
	stdout.Write(debeziumConfigReport(tr))
	if len(tr.Unsupported) > 0 {
		fmt.Fprintf(stderr, "outbox-cdc migrate debezium-config: %d setting(s) cannot be honoured; they are listed at the top of the output\n", len(tr.Unsupported))
		if *strict {
			return 1
		}
	}
	return 0
}

// debeziumConfigReport is the translated YAML under a comment block that
// lists what was not carried over and why.
func debeziumConfigReport(tr *migrate.Translation) []byte {
	var b bytes.Buffer
	b.WriteString("# outbox-cdc configuration translated from a Debezium connector by `outbox-cdc migrate debezium-config`.\n")
	b.WriteString("# Next: outbox-cdc check --config FILE, then outbox-cdc position import-debezium (docs/migration.md, Cut-over runbook).\n")
	section := func(title string, lines []string) {
		if len(lines) == 0 {
			return
		}
		b.WriteString("#\n# " + title + "\n")
		for _, l := range lines {
			b.WriteString("#   " + strings.ReplaceAll(l, "\n", " ") + "\n")
		}
	}
	var unsupported, ignored []string
	for _, f := range tr.Unsupported {
		unsupported = append(unsupported, f.Key+": "+f.Reason)
	}
	for _, f := range tr.Ignored {
		ignored = append(ignored, f.Key+": "+f.Reason)
	}
	var notes []string
	for _, n := range tr.Notes {
		notes = append(notes, "- "+n)
	}
	section("NOT SUPPORTED (outbox-cdc cannot honour these; review before cutting over):", unsupported)
	section("To check or do:", notes)
	section("Ignored (they do not change what outbox-cdc writes):", ignored)
	b.WriteString("\n")
	b.Write(tr.YAML)
	return b.Bytes()
}
