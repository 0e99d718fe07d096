package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/outbox-cdc/outbox-cdc/debezium"
)

// migrateOptions are the flags of migrate debezium-config.
type migrateOptions struct {
	input  string
	strict bool
}

func migrateFlags(o *migrateOptions) func(*flag.FlagSet) {
	return func(fs *flag.FlagSet) {
		fs.StringVar(&o.input, "input", "-", "the Debezium configuration `file` (- for standard input)")
		fs.BoolVar(&o.strict, "strict", false, "exit 1 when a key cannot be honoured")
	}
}

// runMigrate is `outbox-cdc migrate debezium-config`; args follow it.
func runMigrate(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	var o migrateOptions
	c := findCommand("migrate debezium-config")
	if code, ok := c.parse(c.flags(migrateFlags(&o)), args, stdout, stderr); !ok {
		return code
	}
	var raw []byte
	var err error
	if o.input == "-" {
		raw, err = io.ReadAll(stdin)
	} else {
		raw, err = os.ReadFile(o.input)
	}
	if err != nil {
		fmt.Fprintf(stderr, "outbox-cdc migrate debezium-config: %v\n", err)
		return 2
	}
	tr, err := debezium.TranslateDebeziumConfig(raw)
	if err != nil {
		fmt.Fprintf(stderr, "outbox-cdc migrate debezium-config: %v\n", err)
		return 2
	}
	stdout.Write(debeziumConfigReport(tr))
	if len(tr.Unsupported) > 0 {
		fmt.Fprintf(stderr, "outbox-cdc migrate debezium-config: %d setting(s) cannot be honoured; they are listed at the top of the output\n", len(tr.Unsupported))
		if o.strict {
			return 1
		}
	}
	return 0
}

// debeziumConfigReport is the translated YAML under a comment block that
// lists what was not carried over and why.
func debeziumConfigReport(tr *debezium.Translation) []byte {
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
