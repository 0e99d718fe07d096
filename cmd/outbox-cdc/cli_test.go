package main

import (
	"strings"
	"testing"
)

// TestHelpEveryCommand: every command and command group answers --help
// and -h with exit 0 on stdout (nothing on stderr): a one-line
// description, the usage and every flag it takes; `help COMMAND` prints
// the same.
func TestHelpEveryCommand(t *testing.T) {
	for _, tc := range []struct {
		cmd   []string
		flags []string
	}{
		{[]string{"run"}, []string{"--config", "--fresh-start"}},
		{[]string{"check"}, []string{"--config", "--connector", "--json"}},
		{[]string{"config", "print"}, []string{"--config", "--connector"}},
		{[]string{"position", "show"}, []string{"--config", "--connector", "--json", "--log-level"}},
		{[]string{"position", "set"}, []string{"--config", "--connector", "--to", "--force", "--dry-run", "--log-level"}},
		{[]string{"position", "import-debezium"}, []string{"--config", "--connector", "--offset", "--debezium-connector", "--force", "--dry-run", "--log-level"}},
		{[]string{"migrate", "debezium-config"}, []string{"--input", "--strict"}},
		{[]string{"version"}, nil},
		{[]string{"config"}, []string{"config print"}},
		{[]string{"position"}, []string{"position show", "position set", "position import-debezium"}},
		{[]string{"migrate"}, []string{"migrate debezium-config"}},
	} {
		name := strings.Join(tc.cmd, " ")
		var first string
		for _, h := range []string{"--help", "-h"} {
			code, out, errs := runCmd(t, append(append([]string{}, tc.cmd...), h)...)
			if code != 0 || errs != "" {
				t.Errorf("%s %s: exit %d, stderr %q; want 0 and the help on stdout", name, h, code, errs)
				continue
			}
			head, _, _ := strings.Cut(out, "\n")
			if !strings.HasPrefix(head, "outbox-cdc "+name+": ") || len(head) < len("outbox-cdc "+name+": ")+10 {
				t.Errorf("%s %s: first line %q, want \"outbox-cdc %s: <what it does>\"", name, h, head, name)
			}
			if !strings.Contains(out, "usage:\n  outbox-cdc "+name) {
				t.Errorf("%s %s: no usage line:\n%s", name, h, out)
			}
			for _, f := range tc.flags {
				if !strings.Contains(out, f) {
					t.Errorf("%s %s: %s not described:\n%s", name, h, f, out)
				}
			}
			if strings.Contains(out, "outbox-cdc "+buildVersion()+"\n") && name == "version" {
				t.Errorf("version --help printed the version: %q", out)
			}
			if first == "" {
				first = out
			} else if out != first {
				t.Errorf("%s: --help and -h differ", name)
			}
		}
		if code, out, _ := runCmd(t, append([]string{"help"}, tc.cmd...)...); code != 0 || out != first {
			t.Errorf("help %s: exit %d, and not the same as %s --help:\n%s", name, code, name, out)
		}
	}
	for _, top := range []string{"--help", "-h", "help"} {
		code, out, errs := runCmd(t, top)
		if code != 0 || errs != "" || !strings.Contains(out, "outbox-cdc position import-debezium") {
			t.Errorf("%s: exit %d stderr %q out %q", top, code, errs, out)
		}
	}
}

// TestUnknownCommandDidYouMean: a mistyped command or subcommand is a
// usage error (exit 2, stderr) that names the nearest one.
func TestUnknownCommandDidYouMean(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"posiiton", "show"}, `unknown command "posiiton" (did you mean "position"?)`},
		{[]string{"chekc"}, `unknown command "chekc" (did you mean "check"?)`},
		{[]string{"position", "shwo"}, `unknown subcommand "shwo" (did you mean "show"?)`},
		{[]string{"position", "sett"}, `unknown subcommand "sett" (did you mean "set"?)`},
		{[]string{"config", "prnt"}, `unknown subcommand "prnt" (did you mean "print"?)`},
		{[]string{"migrate", "debezium-conf"}, `unknown subcommand "debezium-conf" (did you mean "debezium-config"?)`},
		{[]string{"help", "positon"}, `unknown command "positon" (did you mean "position"?)`},
		{[]string{"frobnicate"}, `unknown command "frobnicate"`},
	} {
		code, out, errs := runCmd(t, tc.args...)
		if code != 2 || out != "" || !strings.Contains(errs, tc.want) {
			t.Errorf("%q: exit %d stdout %q stderr %q; want 2 and %q", tc.args, code, out, errs, tc.want)
		}
	}
	if _, _, errs := runCmd(t, "frobnicate"); strings.Contains(errs, "did you mean") {
		t.Errorf("frobnicate: a suggestion for a word near nothing: %q", errs)
	}
}

// TestFlagErrorsSayUsage: a wrong flag is a usage error on stderr that
// shows the usage line and where the help is.
func TestFlagErrorsSayUsage(t *testing.T) {
	code, out, errs := runCmd(t, "check", "--bogus")
	if code != 2 || out != "" || !strings.Contains(errs, "flag provided but not defined: -bogus") ||
		!strings.Contains(errs, "usage: outbox-cdc check --config FILE") || !strings.Contains(errs, "outbox-cdc check --help") {
		t.Errorf("check --bogus: exit %d stdout %q stderr %q", code, out, errs)
	}
	if code, _, errs := runCmd(t, "position", "show", "--log-level", "loud"); code != 2 || !strings.Contains(errs, "--log-level") {
		t.Errorf("--log-level loud: exit %d stderr %q", code, errs)
	}
}
