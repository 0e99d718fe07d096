package e2e

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
	"github.com/outbox-cdc/outbox-cdc/test/testenv"
)

// TestCheckCommand runs `outbox-cdc check` against the real databases and
// kfake: a good configuration passes every check and exits 0 (text and
// --json); a missing table, a role column the table lacks, an unreachable
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
		for _, name := range []string{"checkpoint", b.kind + ".connect", b.kind + ".table", "kafka.reachable", "kafka.topics"} {
			if !regexp.MustCompile(`(?m)^PASS\s+` + regexp.QuoteMeta(name) + `\s`).MatchString(out) {
				t.Fatalf("no PASS line for %s:\n%s", name, out)
			}
		}
		code, out = testenv.Run(t, 60*time.Second, nil, "check", "--config", cfg, "--json")
		var results []outboxcdc.CheckResult
		if err := json.Unmarshal([]byte(out), &results); err != nil || code != 0 || len(results) < 5 {
			t.Fatalf("--json: exit %d, %d results, %v:\n%s", code, len(results), err, out)
		}
		for _, r := range results {
			if !r.OK {
				t.Fatalf("--json: failed %+v", r)
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
