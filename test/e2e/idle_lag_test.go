package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/outbox-cdc/outbox-cdc/test/testenv"
)

// idleScrape is how long TestIdleLagStaysZero scrapes an idle connector.
// The shipped alert needs lag above 60 s for 5 minutes: the scraped series
// is extended in time at its own slope and evaluated by promtool.
const idleScrape = 20 * time.Second

// findPromtool returns promtool from $PROMTOOL, $PATH or $(go env
// GOPATH)/bin (scripts/prepare-services.sh installs it there). Missing, it
// skips on a laptop and fails in CI.
func findPromtool(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("PROMTOOL"); p != "" {
		return p
	}
	if p, err := exec.LookPath("promtool"); err == nil {
		return p
	}
	if out, err := exec.Command("go", "env", "GOPATH").Output(); err == nil {
		p := filepath.Join(strings.TrimSpace(string(out)), "bin", "promtool")
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	testenv.Unavailable(t, "promtool (run scripts/prepare-services.sh promtool, or set PROMTOOL)")
	return ""
}

// promtoolRules runs `promtool test rules` on a test file evaluating the
// shipped deploy/prometheus/alerts.yaml.
func promtoolRules(t *testing.T, promtool, tests string) {
	t.Helper()
	dir := t.TempDir()
	rules, err := filepath.Abs(filepath.Join(deployDir, "prometheus", "alerts.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(dir, "lag_test.yaml")
	if err := os.WriteFile(f, []byte(fmt.Sprintf("rule_files:\n  - %s\nevaluation_interval: 1m\ntests:\n%s", rules, tests)), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(promtool, "test", "rules", f).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool test rules: %v\n%s\ntest file:\n%s", err, out, tests)
	}
}

// lagAlertTest is one promtool test: series (promtool's expanding
// notation, one value a minute) for the lag of one connector, and whether
// OutboxCdcLagHigh fires at 12m (with a lag of 120 s).
func lagAlertTest(series string, fires bool) string {
	exp := "        exp_alerts: []\n"
	if fires {
		exp = `        exp_alerts:
          - exp_labels: {severity: warning, job: outbox-cdc, connector: c}
            exp_annotations:
              summary: "outbox-cdc outbox-cdc: events reach Kafka 2m 0s after their commit"
              description: "A transaction committed over 60s ago is not yet delivered and checkpointed (or the last one took that long). Check sink write latency and Kafka. An idle connector reads 0."
`
	}
	return fmt.Sprintf(`  - interval: 1m
    input_series:
      - series: 'outbox_cdc_lag_seconds{job="outbox-cdc", instance="i", connector="c"}'
        values: '%s'
    alert_rule_test:
      - eval_time: 12m
        alertname: OutboxCdcLagHigh
%s`, series, exp)
}

// TestIdleLagStaysZero delivers one row on each source, then lets the
// connector idle while scraping /metrics: outbox_cdc_lag_seconds must
// settle at 0 (or the delay of a transaction of another database on a
// shared server, read past just now) and stay there (it grew one second per second on Postgres,
// and stayed at the last row's delay on MySQL). The scraped series,
// extended at its own slope to 12 minutes, is fed with the shipped alert
// rules to promtool, which must not fire OutboxCdcLagHigh; a truly stuck
// lag fires it.
func TestIdleLagStaysZero(t *testing.T) {
	promtool := findPromtool(t)
	// The rule itself: a stuck lag fires, a lag of 0 does not.
	promtoolRules(t, promtool, lagAlertTest("120x12", true)+lagAlertTest("0x12", false))

	forEachBackend(t, func(t *testing.T, b *backend) {
		_, brokers := testenv.Kafka(t)
		name := connName(t, "e2e-idlelag")
		cfg := b.config(t, name, brokers)
		var env []string
		if b.kind == "postgres" {
			env = append(env, "OUTBOX_CDC_SOURCE_HEARTBEAT_INTERVAL=1s")
		} else {
			env = append(env, "OUTBOX_CDC_SOURCE_HEARTBEAT_PERIOD=1s")
		}
		p := testenv.Start(t, cfg, env...)
		testenv.Eventually(t, 60*time.Second, "ready", func() bool { return p.Status("/readyz") == 200 })
		cons := newConsumer(t, brokers, `outbox\.event\..*`)
		b.insertTx(t, []row{{"idle-1", "ORDER", "A-1", "ORDER_CREATED", `{"n": 1}`}}, true)
		checkDelivery(t, cons.waitFor(t, 1, 30*time.Second), []string{"idle-1"}, 3, false)
		testenv.Eventually(t, 30*time.Second, "the row checkpointed", func() bool {
			_, s := scrape(t, p.Addr())
			return s["outbox_cdc_checkpoint_saves_total"] >= 1
		})

		var samples []float64
		start := time.Now()
		for time.Since(start) < idleScrape {
			_, s := scrape(t, p.Addr())
			samples = append(samples, s["outbox_cdc_lag_seconds"])
			time.Sleep(time.Second)
		}
		last := samples[len(samples)-1]
		// The slope over the second half (after the first quiet-spell
		// marker is checkpointed), per minute, continues the series.
		half := samples[len(samples)/2]
		slope := (last - half) / (idleScrape.Seconds() / 2) * 60
		t.Logf("%s: lag samples %v, slope %.1f s/min", b.kind, samples, slope)
		// 0, or on a shared server the true delay of other databases'
		// transactions the source reads past (a second at most with the
		// binlog's one-second timestamps), never growing.
		for i, v := range samples[len(samples)/2:] {
			if v > 5 {
				t.Errorf("%s: outbox_cdc_lag_seconds is %v after %s idle (sample %d), want 0 or the delay of a transaction just read", b.kind, v, time.Duration(len(samples)/2+i)*time.Second, len(samples)/2+i)
			}
		}
		series := fmt.Sprintf("%g+%gx12", last, max(slope, 0))
		promtoolRules(t, promtool, lagAlertTest(series, false))
	})
}
