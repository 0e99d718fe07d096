package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"reflect"
	"sort"
	"strings"
)

// command is one command line of outbox-cdc, as --help shows it.
type command struct {
	name    string // "position set"
	summary string // one line: what it does
	args    string // what follows the name in the usage line
	details string // optional paragraphs after the flags
}

// commands are every command, in the order the top-level usage lists
// them.
var commands = []*command{
	{name: "run", summary: "stream committed outbox rows to the sink, for every connector of the configuration, until SIGINT or SIGTERM",
		args: "--config FILE [--fresh-start]",
		details: `On SIGINT or SIGTERM the connectors stop reading, deliver and checkpoint
every whole transaction received (bounded by pipeline.shutdown_timeout) and
the process exits 0. A second signal during that drain exits at once with
status 1: what was not checkpointed is sent again at the next start.

Exit status: 0 after a clean stop, 1 on a runtime failure, 2 on a
configuration or usage error (reported before anything is contacted).`},
	{name: "check", summary: "connect to the source, the sink and the checkpoint store and check every prerequisite (exit 0: none failed)",
		args: "--config FILE [--connector NAME] [--json]",
		details: `It changes nothing anywhere. Every connector of the file is checked, one block
each, unless --connector names one. Each line is PASS (proven), WARN (could
not be proven from here: read its fix) or FAIL (run will fail). Exit status:
0 when none failed (warnings included), 1 when one failed, 2 on a
configuration or usage error.`},
	{name: "config print", summary: "print the effective configuration, passwords redacted, with the values derived from it",
		args: "--config FILE [--connector NAME]"},
	{name: "position show", summary: "print the connector's saved position and where it is kept",
		args: "--config FILE [--connector NAME] [--json] [--log-level LEVEL]"},
	{name: "position set", summary: "replace the connector's position (stop the connector first)",
		args: "--config FILE [--connector NAME] --to POS|latest [--force] [--dry-run] [--log-level LEVEL]",
		details: `POS is a full position (mysql:file:mysql-bin.000003:4, postgres:0/16B3748) or
a short form for the configured source: mysql-bin.000003:4, a MySQL GTID set
3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5, a MariaDB GTID list 0-1-42,1-7-9,
an LSN 0/16B3748. latest asks the database for its current position.

Replacing an existing position needs --force; stop the connector first.
--dry-run prints the old and the new position and which way the move goes,
and writes nothing (with or without --force).`},
	{name: "position import-debezium", summary: "take a Debezium connector's offset as the connector's position",
		args: "--config FILE [--connector NAME] --offset FILE|- [--debezium-connector NAME] [--force] [--dry-run] [--log-level LEVEL]",
		details: `The input is a dump of Kafka Connect's offsets topic, one offset value, or a
Debezium Server offsets file. With several connectors in it, the one named
--debezium-connector (default: --connector) is taken. Replacing an existing
position needs --force; --dry-run writes nothing.`},
	{name: "migrate debezium-config", summary: "translate a Debezium connector's configuration into an outbox-cdc configuration",
		args: "[--input FILE|-] [--strict]",
		details: `Reads Kafka Connect's GET /connectors/<name>/config JSON, or Debezium
Server's application.properties, and prints the equivalent outbox-cdc
configuration. Keys outbox-cdc cannot honour are listed by name, with the
reason, in the comments at the top; --strict exits 1 when there is any.`},
	{name: "version", summary: "print the version", args: ""},
	{name: "help", summary: "print this usage, or a command's help", args: "[COMMAND [SUBCOMMAND]]"},
}

// commandGroups are the commands that only hold subcommands.
var commandGroups = map[string]struct{ summary, details string }{
	"config": {summary: "inspect the configuration"},
	"position": {summary: "show or replace a connector's saved position", details: `The commands act on the position store run uses: the checkpoint file or
table (delivery at-least-once, also with HA on), or the progress topic
(delivery exactly-once; writing it fences a running instance of the
connector). With ha.enabled, set and import-debezium take the HA lock first
and refuse while an instance holds it; otherwise a running instance cannot
be detected: stop it first.`},
	"migrate": {summary: "move from another relay to outbox-cdc"},
}

func findCommand(name string) *command {
	for _, c := range commands {
		if c.name == name {
			return c
		}
	}
	return nil
}

// subcommands returns the names of group's subcommands ("show", "set", ...).
func subcommands(group string) []string {
	var subs []string
	for _, c := range commands {
		if g, sub, ok := strings.Cut(c.name, " "); ok && g == group {
			subs = append(subs, sub)
		}
	}
	return subs
}

// topLevel returns the first words of every command.
func topLevel() []string {
	var names []string
	for _, c := range commands {
		g, _, _ := strings.Cut(c.name, " ")
		if len(names) == 0 || names[len(names)-1] != g {
			names = append(names, g)
		}
	}
	return names
}

func isHelp(arg string) bool {
	return arg == "help" || arg == "--help" || arg == "-h" || arg == "-help"
}

// usage is the top-level help.
func usage() string {
	var b strings.Builder
	b.WriteString("outbox-cdc streams committed outbox rows from the MySQL/MariaDB binlog or the\n" +
		"PostgreSQL WAL to Kafka, RabbitMQ, NATS JetStream, Redis Streams, Amazon SQS, Amazon SNS or HTTP webhooks.\n\nusage:\n")
	for _, c := range commands {
		fmt.Fprintf(&b, "  outbox-cdc %s\n        %s\n", strings.TrimSpace(c.name+" "+c.args), c.summary)
	}
	b.WriteString(`
Every command takes --help (or: outbox-cdc help COMMAND). --connector is
required when the configuration lists several connectors.

Every configuration key can be set from the environment: source.dsn is
OUTBOX_CDC_SOURCE_DSN, sink.brokers is OUTBOX_CDC_SINK_BROKERS (comma-separated).
`)
	return b.String()
}

// groupUsage is the help of a command group such as position.
func groupUsage(group string) string {
	g := commandGroups[group]
	var b strings.Builder
	fmt.Fprintf(&b, "outbox-cdc %s: %s\n\nusage:\n", group, g.summary)
	for _, sub := range subcommands(group) {
		c := findCommand(group + " " + sub)
		fmt.Fprintf(&b, "  outbox-cdc %s %s\n        %s\n", c.name, c.args, c.summary)
	}
	fmt.Fprintf(&b, "\noutbox-cdc %s SUBCOMMAND --help prints its flags.\n", group)
	if g.details != "" {
		b.WriteString("\n" + g.details + "\n")
	}
	return b.String()
}

// unknownCommand reports word, an unknown command (within group, unless
// group is empty), on stderr with a did-you-mean and the usage; its exit
// status is 2.
func unknownCommand(group, word string, stderr io.Writer) int {
	if group == "" {
		fmt.Fprintf(stderr, "outbox-cdc: unknown command %q%s\n\n%s", word, suggest(word, topLevel()), usage())
		return 2
	}
	fmt.Fprintf(stderr, "outbox-cdc %s: unknown subcommand %q%s\n\n%s", group, word, suggest(word, subcommands(group)), groupUsage(group))
	return 2
}

// runGroup dispatches the subcommands of group: args start after the
// group's name; do runs a known subcommand with the arguments after it.
func runGroup(group string, args []string, stdout, stderr io.Writer, do func(sub string, args []string) int) int {
	switch {
	case len(args) == 0:
		fmt.Fprint(stderr, groupUsage(group))
		return 2
	case isHelp(args[0]):
		if len(args) > 1 {
			return runHelp(append([]string{group}, args[1:]...), stdout, stderr)
		}
		fmt.Fprint(stdout, groupUsage(group))
		return 0
	case findCommand(group+" "+args[0]) == nil:
		return unknownCommand(group, args[0], stderr)
	}
	return do(args[0], args[1:])
}

// runHelp is `outbox-cdc help [COMMAND [SUBCOMMAND]]`.
func runHelp(args []string, stdout, stderr io.Writer) int {
	switch {
	case len(args) == 0:
		fmt.Fprint(stdout, usage())
		return 0
	case len(args) == 1:
		if _, ok := commandGroups[args[0]]; ok {
			fmt.Fprint(stdout, groupUsage(args[0]))
			return 0
		}
		if c := findCommand(args[0]); c != nil {
			c.help(stdout)
			return 0
		}
		return unknownCommand("", args[0], stderr)
	}
	if _, ok := commandGroups[args[0]]; !ok {
		return unknownCommand("", args[0], stderr)
	}
	if c := findCommand(args[0] + " " + args[1]); c != nil {
		c.help(stdout)
		return 0
	}
	return unknownCommand(args[0], args[1], stderr)
}

// flags returns the command's flag set, with what define adds to it: the
// flags are defined where they are used, and help lists them.
func (c *command) flags(define ...func(*flag.FlagSet)) *flag.FlagSet {
	fs := flag.NewFlagSet(c.name, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // parse prints what is wrong
	fs.Usage = func() {}
	for _, d := range define {
		d(fs)
	}
	return fs
}

// parse parses args with fs. ok false means the command is done with
// code: 0 after --help (printed on stdout), 2 after a usage error
// (printed on stderr).
func (c *command) parse(fs *flag.FlagSet, args []string, stdout, stderr io.Writer) (code int, ok bool) {
	err := fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		c.helpWith(stdout, fs)
		return 0, false
	case err != nil:
		c.usageError(stderr, err.Error())
		return 2, false
	case fs.NArg() > 0:
		c.usageError(stderr, fmt.Sprintf("unexpected argument %q", fs.Arg(0)))
		return 2, false
	}
	return 0, true
}

func (c *command) usageError(w io.Writer, msg string) {
	fmt.Fprintf(w, "outbox-cdc %s: %s\nusage: outbox-cdc %s\n(outbox-cdc %s --help describes every flag)\n",
		c.name, msg, strings.TrimSpace(c.name+" "+c.args), c.name)
}

// help prints the command's help with the flags its run defines.
func (c *command) help(w io.Writer) {
	c.helpWith(w, commandFlags(c))
}

func (c *command) helpWith(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprintf(w, "outbox-cdc %s: %s\n\nusage:\n  outbox-cdc %s\n", c.name, c.summary, strings.TrimSpace(c.name+" "+c.args))
	var lines []string
	fs.VisitAll(func(f *flag.Flag) {
		arg, text := flag.UnquoteUsage(f)
		line := "  --" + f.Name
		if arg != "" {
			line += " " + strings.ToUpper(arg)
		}
		line += "\n        " + text
		if !zeroDefault(f) {
			line += fmt.Sprintf(" (default %s)", f.DefValue)
		}
		lines = append(lines, line)
	})
	if len(lines) > 0 {
		sort.Strings(lines)
		fmt.Fprintf(w, "\nflags:\n%s\n", strings.Join(lines, "\n"))
	}
	if c.details != "" {
		fmt.Fprintf(w, "\n%s\n", c.details)
	}
}

// zeroDefault reports whether f's default is its type's zero value (not
// worth printing).
func zeroDefault(f *flag.Flag) bool {
	t := reflect.TypeOf(f.Value)
	var z reflect.Value
	if t.Kind() == reflect.Pointer {
		z = reflect.New(t.Elem())
	} else {
		z = reflect.Zero(t)
	}
	return f.DefValue == z.Interface().(flag.Value).String()
}

// commandFlags is the flag set c's run parses with (for help outside a
// run: `outbox-cdc help position set`).
func commandFlags(c *command) *flag.FlagSet {
	switch c.name {
	case "run":
		return c.flags(configFlag(new(string)), runFlags(&runOptions{}))
	case "check":
		return c.flags(checkFlags(new(checkOptions)))
	case "config print":
		return c.flags(configFlag(new(string)), connectorFlag(new(string), "the connector to print"))
	case "migrate debezium-config":
		return c.flags(migrateFlags(new(migrateOptions)))
	}
	if sub, ok := strings.CutPrefix(c.name, "position "); ok {
		return c.flags(positionFlags(sub, new(positionOptions)))
	}
	return c.flags()
}

// configFlag defines --config.
func configFlag(path *string) func(*flag.FlagSet) {
	return func(fs *flag.FlagSet) {
		fs.StringVar(path, "config", "", "the configuration `file` (YAML); optional when everything is set from the environment")
	}
}

// connectorFlag defines --connector.
func connectorFlag(name *string, what string) func(*flag.FlagSet) {
	return func(fs *flag.FlagSet) {
		fs.StringVar(name, "connector", "", what+", by `name` (required when the configuration lists several)")
	}
}

// suggest returns a did-you-mean for word among cands, or "".
func suggest(word string, cands []string) string {
	if best := closest(word, cands, max(1, len(word)/2)); best != "" {
		return fmt.Sprintf(" (did you mean %q?)", best)
	}
	return ""
}
