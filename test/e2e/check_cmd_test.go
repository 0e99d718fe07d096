package e2e

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
	"github.com/outbox-cdc/outbox-cdc/test/testenv"
)

// TestCheckCommand runs `outbox-cdc check` against the real databases and
// kfake: a good configuration passes every check but the topics (kfake
// does not say whether it creates them: a warning) and exits 0 (text and
// --json, which carries each result's status); a missing table, a role column the table lacks, an unreachable
// broker and (Postgres) a missing slot with source.create false each exit
// 1 with the matching FAIL line and its fix.
func TestCheckCommand(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		_, brokers := testenv.Kafka(t)
		cfg := b.config(t, connName(t, "e2e-check-"+b.kind), brokers)

		code, out := testenv.Run(t, 60*time.Second, nil, "check", "--config", cfg)
		if code != 0 || strings.Contains(out, "FAIL") {
			t.Fatalf("good configuration: exit %d, want 0:\n%s", code, out)
		}
		for _, name := range []string{"checkpoint", b.kind + ".connect", b.kind + ".table", "kafka.reachable"} {
			if !regexp.MustCompile(`(?m)^PASS\s+` + regexp.QuoteMeta(name) + `\s`).MatchString(out) {
				t.Fatalf("no PASS line for %s:\n%s", name, out)
			}
		}
		// kfake does not report auto.create.topics.enable and no topic
		// exists yet: whether the first write can create one is unknown, a
		// warning (exit 0) with what to do, not a pass.
		if !regexp.MustCompile(`(?m)^WARN\s+kafka\.topics\s.*not reported.*-> fix: create the topics`).MatchString(out) ||
			!regexp.MustCompile(`(?m)^\d+ checks, 0 failed, 1 warnings$`).MatchString(out) {
			t.Fatalf("no WARN line for kafka.topics, or no count of it:\n%s", out)
		}
		code, out = testenv.Run(t, 60*time.Second, nil, "check", "--config", cfg, "--json")
		var results []outboxcdc.CheckResult
		if err := json.Unmarshal([]byte(out), &results); err != nil || code != 0 || len(results) < 5 {
			t.Fatalf("--json: exit %d, %d results, %v:\n%s", code, len(results), err, out)
		}
		for _, r := range results {
			want := outboxcdc.CheckPass
			if r.Name == "kafka.topics" {
				want = outboxcdc.CheckWarn
			}
			if !r.OK || r.Status != want || r.Connector == "" {
				t.Fatalf("--json: %+v, want %s with its connector", r, want)
			}
		}

		table := b.table()
		if b.kind == "postgres" {
			table = strings.Split(table, ".")[0] + ".no_such_table"
		} else {
			table = "no_such_table"
		}
		broken := []struct {
			name  string
			env   []string
			fail  string
			wants []string
		}{
			{"missing table", []string{"OUTBOX_CDC_SOURCE_TABLE=" + table}, b.kind + ".table", []string{"no_such_table", "does not exist"}},
			{"wrong role column", []string{"OUTBOX_CDC_ROUTE_COLUMNS_PAYLOAD=body"}, b.kind + ".table", []string{"no column body", "fix:"}},
			{"kafka unreachable", []string{"OUTBOX_CDC_SINK_BROKERS=127.0.0.1:1"}, "kafka.reachable", []string{"127.0.0.1:1", "fix: check sink.brokers"}},
		}
		if b.kind == "postgres" {
			broken = append(broken, struct {
				name  string
				env   []string
				fail  string
				wants []string
			}{"missing slot, create false", []string{"OUTBOX_CDC_SOURCE_CREATE=false"}, "postgres.slot", []string{"does not exist and source.create is false", "pg_create_logical_replication_slot"}})
		}
		for _, tc := range broken {
			t.Run(tc.name, func(t *testing.T) {
				code, out := testenv.Run(t, 60*time.Second, tc.env, "check", "--config", cfg)
				if code != 1 {
					t.Fatalf("exit %d, want 1:\n%s", code, out)
				}
				line := regexp.MustCompile(`(?m)^FAIL\s+` + regexp.QuoteMeta(tc.fail) + `\s.*$`).FindString(out)
				if line == "" {
					t.Fatalf("no FAIL line for %s:\n%s", tc.fail, out)
				}
				mustContain(t, line, tc.wants...)
				code, out = testenv.Run(t, 60*time.Second, tc.env, "check", "--config", cfg, "--json")
				var results []outboxcdc.CheckResult
				if err := json.Unmarshal([]byte(out), &results); err != nil || code != 1 {
					t.Fatalf("--json: exit %d, %v:\n%s", code, err, out)
				}
			})
		}
		if b.kind == "postgres" && srcSlotExists(t, b.db, srcSlot(t)) {
			t.Fatal("check created a slot")
		}
	})
}

// TestCheckEveryConnector: `check` on a file with several connectors
// checks each, one block per connector with its own verdict, without
// --connector; exit 1 when one of them fails. --connector still checks
// one, and --json names each result's connector.
func TestCheckEveryConnector(t *testing.T) {
	_, brokers := testenv.Kafka(t)
	suffix := testSuffix(t)
	my := mysqlBackendNamed(t, "e2e_chk_my_"+suffix)
	pg := postgresBackendNamed(t, "e2e_chk_pg_"+suffix)
	good, bad := "chk-my-"+suffix, "chk-pg-"+suffix
	entry := func(name string, b *backend, extra string) string {
		src := strings.ReplaceAll(strings.TrimRight(b.sourceYAML(name)+extra, "\n"), "\n", "\n    ")
		return fmt.Sprintf(`  - name: %s
    source:
    %s
    route:
      preset: seed
    sink:
      type: kafka
      brokers: [%q]
    checkpoint:
      type: file
      path: %q
`, name, src, brokers[0], filepath.Join(t.TempDir(), "checkpoint"))
	}
	// The Postgres connector may not create its missing slot: it fails.
	cfg := writeConfig(t, "connectors:\n"+entry(good, my, "")+entry(bad, pg, "  create: false\n"))

	code, out := testenv.Run(t, 60*time.Second, nil, "check", "--config", cfg)
	if code != 1 {
		t.Fatalf("exit %d, want 1 (one connector fails):\n%s", code, out)
	}
	iGood := strings.Index(out, "== connector "+good+": ")
	iBad := strings.Index(out, "== connector "+bad+": ")
	if iGood < 0 || iBad < iGood {
		t.Fatalf("want a block for %s, then one for %s:\n%s", good, bad, out)
	}
	goodBlock, badBlock := out[iGood:iBad], out[iBad:]
	if strings.Contains(goodBlock, "FAIL") || !strings.Contains(goodBlock, "PASS  mysql.connect") || !strings.Contains(goodBlock, " 0 failed") {
		t.Fatalf("%s's block:\n%s", good, goodBlock)
	}
	if !regexp.MustCompile(`(?m)^FAIL\s+postgres\.slot\s.*source\.create is false`).MatchString(badBlock) || !strings.Contains(badBlock, "PASS  postgres.connect") {
		t.Fatalf("%s's block:\n%s", bad, badBlock)
	}
	if !regexp.MustCompile(`(?m)^2 connectors, \d+ checks, 2 failed, \d+ warnings$`).MatchString(out) {
		t.Fatalf("no summary over both connectors:\n%s", out)
	}

	code, out = testenv.Run(t, 60*time.Second, nil, "check", "--config", cfg, "--connector", good)
	if code != 0 || strings.Contains(out, "postgres.") || strings.Contains(out, "== connector") {
		t.Fatalf("--connector %s: exit %d, want 0 and its checks only:\n%s", good, code, out)
	}

	code, out = testenv.Run(t, 60*time.Second, nil, "check", "--config", cfg, "--json")
	var results []outboxcdc.CheckResult
	if err := json.Unmarshal([]byte(out), &results); err != nil || code != 1 {
		t.Fatalf("--json: exit %d, %v:\n%s", code, err, out)
	}
	seen := map[string]bool{}
	for _, r := range results {
		seen[r.Connector] = true
		if r.Name == "postgres.slot" && (r.Connector != bad || r.Status != outboxcdc.CheckFail) {
			t.Fatalf("--json: %+v, want the failure of %s", r, bad)
		}
	}
	if len(seen) != 2 || !seen[good] || !seen[bad] {
		t.Fatalf("--json names the connectors %v, want %s and %s", seen, good, bad)
	}
}
