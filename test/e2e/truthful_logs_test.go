package e2e

// What the connector logs is true and said once (issue 24, points 6-9 and
// 12): a clean stop logs nothing at warn or above, a fatal error is one
// line with its remedy in a field of its own, a missing topic is named as
// such (the brokers answer) and a broker down at the start is logged, both
// at the documented rate.

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/outbox-cdc/outbox-cdc/test/testenv"
)

// logLine is one JSON log line, decoded.
type logLine map[string]any

func (l logLine) str(k string) string { s, _ := l[k].(string); return s }

// logLines decodes every line of a connector's log.
func logLines(t *testing.T, log string) []logLine {
	t.Helper()
	var out []logLine
	for _, s := range strings.Split(log, "\n") {
		if strings.TrimSpace(s) == "" {
			continue
		}
		var l logLine
		if err := json.Unmarshal([]byte(s), &l); err != nil {
			t.Fatalf("not a JSON line (%v): %s", err, s)
		}
		out = append(out, l)
	}
	return out
}

// atLeastWarn returns the lines at level warn, error or fatal.
func atLeastWarn(lines []logLine) []logLine {
	var out []logLine
	for _, l := range lines {
		switch l.str("level") {
		case "warn", "error", "fatal", "panic":
			out = append(out, l)
		}
	}
	return out
}

func dump(lines []logLine) string {
	var b strings.Builder
	for _, l := range lines {
		j, _ := json.Marshal(l)
		b.Write(j)
		b.WriteByte('\n')
	}
	return b.String()
}

// TestCleanStopLogsNoWarning: rows delivered, then SIGTERM. The process
// exits 0 and logs nothing at warn or above: before, every stop of a MySQL
// connector logged the binlog driver's "io.ReadFull(header) failed ... use
// of closed network connection" as an error and two warnings. The
// pipeline's stop line says what it knows: the checkpoint's position.
func TestCleanStopLogsNoWarning(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		_, brokers := testenv.Kafka(t)
		c := testenv.Start(t, b.config(t, connName(t, "e2e-cleanstop-"+b.kind), brokers))
		want := ids("clean", 1, 5)
		b.insertRows(t, want, 100)
		cons := newConsumer(t, brokers, `outbox\.event\..*`)
		checkDelivery(t, cons.waitFor(t, len(want), 30*time.Second), want, 3, false)
		if err := c.Stop(15 * time.Second); err != nil {
			t.Fatalf("SIGTERM exit: %v", err)
		}
		lines := logLines(t, c.Log())
		if bad := atLeastWarn(lines); len(bad) > 0 {
			t.Fatalf("a clean stop logged %d lines at warn or above:\n%s", len(bad), dump(bad))
		}
		stopped := false
		for _, l := range lines {
			if l.str("message") == "stopped: the checkpoint holds the last transaction written" && l.str("position") != "" {
				stopped = true
			}
		}
		if !stopped {
			t.Fatalf("no stop line naming the checkpoint's position:\n%s", c.Log())
		}
	})
}

// TestFatalErrorLoggedOnce: a connector that cannot start (its outbox
// table does not exist; a damaged checkpoint file) logs one error line:
// the cause in "error", the remedy in "hint", not repeated in the cause,
// and no "resume position" without a position. Before: two lines of the
// same error, the remedy inside the text, "resume position )". In a
// process with two connectors, the halted one is logged once too, and the
// exit line names it without repeating its error.
func TestFatalErrorLoggedOnce(t *testing.T) {
	checkOnce := func(t *testing.T, log string, hint string) logLine {
		t.Helper()
		bad := atLeastWarn(logLines(t, log))
		if len(bad) != 1 || bad[0].str("level") != "error" {
			t.Fatalf("want one error line, got %d lines at warn or above:\n%s", len(bad), dump(bad))
		}
		l := bad[0]
		if !strings.Contains(l.str("hint"), hint) || strings.Contains(l.str("error"), l.str("hint")) {
			t.Fatalf("want the remedy (%q) as the hint only: %s", hint, dump(bad))
		}
		if strings.Contains(l.str("error"), "resume position )") || strings.Contains(l.str("error"), "resume position ,") {
			t.Fatalf("an empty resume position: %s", l.str("error"))
		}
		return l
	}
	forEachBackend(t, func(t *testing.T, b *backend) {
		_, brokers := testenv.Kafka(t)
		cfg := b.config(t, connName(t, "e2e-fatal-"+b.kind), brokers)
		hint := map[string]string{"mysql": "create it, or fix source.table(s)", "postgres": "check the database in source.dsn"}[b.kind]
		t.Run("missing table", func(t *testing.T) {
			code, out := testenv.Run(t, 30*time.Second, []string{"OUTBOX_CDC_SOURCE_TABLE=nosuch_table"}, "run", "--config", cfg)
			if code != 1 {
				t.Fatalf("exit %d, want 1:\n%s", code, out)
			}
			l := checkOnce(t, out, hint)
			if !strings.Contains(l.str("error"), "nosuch_table") {
				t.Fatalf("the error does not name the table: %s", l.str("error"))
			}
		})
		t.Run("damaged checkpoint", func(t *testing.T) {
			cp := filepath.Join(t.TempDir(), "checkpoint")
			if err := os.WriteFile(cp, []byte("garbage\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			code, out := testenv.Run(t, 30*time.Second, []string{"OUTBOX_CDC_CHECKPOINT_PATH=" + cp}, "run", "--config", cfg)
			if code != 1 {
				t.Fatalf("exit %d, want 1:\n%s", code, out)
			}
			l := checkOnce(t, out, "restore the file from a backup")
			if !strings.Contains(l.str("error"), "cannot be trusted") || len(l.str("error")) > 400 {
				t.Fatalf("want a short cause, got %d characters: %s", len(l.str("error")), l.str("error"))
			}
		})
	})
	t.Run("two connectors", func(t *testing.T) {
		b := mysqlBackend(t)
		_, brokers := testenv.Kafka(t)
		good, broken := connName(t, "e2e-fatal-good"), connName(t, "e2e-fatal-broken")
		var entries strings.Builder
		for _, c := range []struct{ name, table string }{{good, "outbox_message"}, {broken, "nosuch_table"}} {
			fmt.Fprintf(&entries, "  - name: %s\n    source:\n%s    route:\n      preset: seed\n      topic: %q\n    sink:\n      brokers: [%q]\n    checkpoint:\n      type: file\n      path: %q\n",
				c.name, indent(strings.Replace(b.sourceYAML(c.name), "outbox_message", c.table, 1), "    "), "outbox.event.{aggregate_type}", brokers[0],
				filepath.Join(t.TempDir(), c.name))
		}
		c := testenv.Launch(t, writeConfig(t, "connectors:\n"+entries.String()))
		testenv.Eventually(t, 30*time.Second, "the broken connector halted", func() bool {
			return strings.Contains(c.Log(), "connector halted; the others keep running")
		})
		testenv.Eventually(t, 30*time.Second, "the good connector streaming", func() bool {
			code, _ := c.Get("/readyz?connector=" + good)
			return code == 200
		})
		b.insertTx(t, []row{{"two-1", "ORDER", "A-1", "E", `{}`}}, true)
		checkDelivery(t, newConsumer(t, brokers, `outbox\.event\..*`).waitFor(t, 1, 30*time.Second), []string{"two-1"}, 3, false)
		if err := c.Stop(15 * time.Second); err == nil {
			t.Fatal("exit 0 with a halted connector, want 1")
		}
		lines := logLines(t, c.Log())
		var mention []logLine
		for _, l := range lines {
			j, _ := json.Marshal(l)
			if strings.Contains(string(j), "nosuch_table") {
				mention = append(mention, l)
			}
		}
		if len(mention) != 1 || mention[0].str("connector") != broken || mention[0].str("hint") == "" {
			t.Fatalf("the halted connector's error is in %d lines, want one with its hint:\n%s", len(mention), dump(mention))
		}
		exit := false
		for _, l := range lines {
			if l.str("message") == "every connector has stopped; exiting" {
				exit = strings.Contains(fmt.Sprint(l["halted"]), broken)
			}
		}
		if !exit {
			t.Fatalf("no exit line naming the halted connector:\n%s", c.Log())
		}
	})
}

// indent puts prefix before every line of s.
func indent(s, prefix string) string {
	lines := strings.Split(strings.TrimSuffix(s, "\n"), "\n")
	for i := range lines {
		lines[i] = prefix + lines[i]
	}
	return strings.Join(lines, "\n") + "\n"
}

// TestMissingTopicLogsCause: a row for a topic that does not exist, on a
// broker without auto-create, retried every 200 ms. The brokers answer, so
// nothing says Kafka is unreachable and outbox_cdc_sink_connected stays 1;
// one warning names the topic, the cause and the remedy (at most one per
// 30 s, as docs/sinks.md says). Before: "kafka not reachable" on every
// attempt (13 times in 70 s). Once the topic is created the row arrives.
func TestMissingTopicLogsCause(t *testing.T) {
	mysqlOnly(t, func(t *testing.T, b *backend) {
		name := connName(t, "e2e-missingtopic")
		k, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.DefaultNumPartitions(3), kfake.SeedTopics(3, "outbox.event.ORDER"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(k.Close)
		brokers := k.ListenAddrs()
		c := testenv.Start(t, b.config(t, name, brokers), "OUTBOX_CDC_SINK_UNWRITABLE_TOPIC_TIMEOUT=10m",
			"OUTBOX_CDC_SINK_RETRY_BACKOFF_MAX=200ms", "OUTBOX_CDC_SINK_READY_INTERVAL=500ms")
		b.insertTyped(t, "NEWTYPE", "new-1")
		testenv.Eventually(t, 15*time.Second, "outbox_cdc_sink_blocked_topics 1", func() bool { return c.Metric("outbox_cdc_sink_blocked_topics") == 1 })
		time.Sleep(10 * time.Second) // about 50 attempts
		if v := c.Metric("outbox_cdc_sink_connected"); v != 1 {
			t.Fatalf("outbox_cdc_sink_connected %v while the brokers answer", v)
		}
		bad := atLeastWarn(logLines(t, c.Log()))
		if len(bad) != 1 {
			t.Fatalf("%d lines at warn or above in 10 s of retries, want 1:\n%s", len(bad), dump(bad))
		}
		l := bad[0]
		if l.str("topic") != "outbox.event.NEWTYPE" || !strings.Contains(l.str("reason"), "does not exist") ||
			!strings.Contains(l.str("hint"), `create topic "outbox.event.NEWTYPE"`) || strings.Contains(l.str("message"), "reachable") {
			t.Fatalf("the warning does not name the topic, the cause and the remedy: %s", dump(bad))
		}

		cfg := sarama.NewConfig()
		cfg.Version = sarama.V2_8_0_0
		admin, err := sarama.NewClusterAdmin(brokers, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := admin.CreateTopic("outbox.event.NEWTYPE", &sarama.TopicDetail{NumPartitions: 3, ReplicationFactor: 1}, false); err != nil {
			t.Fatal(err)
		}
		admin.Close()
		got := newConsumer(t, brokers, `outbox\.event\..*`).waitFor(t, 1, 30*time.Second)
		checkDelivery(t, got, []string{"new-1"}, 3, false)
		if err := c.Stop(15 * time.Second); err != nil {
			t.Fatalf("SIGTERM exit: %v", err)
		}
	})
}

// TestKafkaDownAtStartLogged: the broker is down when the connector starts
// and nothing is to be sent. One warning says Kafka is unreachable, with
// the error, although no write is failing (before: nothing was logged,
// only /readyz said it); no second one within 30 s although the sink
// checks every 500 ms; "kafka reachable" once the broker is up.
func TestKafkaDownAtStartLogged(t *testing.T) {
	mysqlOnly(t, func(t *testing.T, b *backend) {
		k := newBroker(t)
		k.stop()
		c := testenv.Launch(t, b.config(t, connName(t, "e2e-kafkadownstart"), k.brokers()), "OUTBOX_CDC_SINK_READY_INTERVAL=500ms")
		testenv.Eventually(t, 15*time.Second, "a warning that Kafka is unreachable", func() bool {
			return strings.Contains(c.Log(), `"message":"kafka unreachable or failing"`)
		})
		time.Sleep(8 * time.Second) // about 16 checks
		bad := atLeastWarn(logLines(t, c.Log()))
		if len(bad) != 1 || !strings.Contains(bad[0].str("error"), "connection refused") {
			t.Fatalf("want one warning with the error, got %d lines at warn or above:\n%s", len(bad), dump(bad))
		}
		if code, _ := c.Readyz(); code != 503 {
			t.Fatalf("/readyz %d while Kafka is down", code)
		}
		k.start()
		testenv.Eventually(t, 30*time.Second, `"kafka reachable"`, func() bool {
			return strings.Contains(c.Log(), `"message":"kafka reachable"`)
		})
		c.WaitStreaming(30 * time.Second)
		if err := c.Stop(15 * time.Second); err != nil {
			t.Fatalf("SIGTERM exit: %v", err)
		}
	})
}

// TestPostgresSlotsExhaustedHint: every replication slot of the server is
// taken (a private server: max_replication_slots 10) when the connector
// creates its own. The retry's message names that cause's remedy, freeing
// a slot or raising max_replication_slots, not the REPLICATION attribute
// the role has (before, every failed creation said "the role needs the
// REPLICATION attribute"); once a slot is freed it streams.
func TestPostgresSlotsExhaustedHint(t *testing.T) {
	p := testenv.PrivatePostgres(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, p.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for _, q := range append(testenv.SeedTablePostgres("public.outbox_message"),
		"SELECT pg_create_physical_replication_slot('taken_' || g) FROM generate_series(1, current_setting('max_replication_slots')::int) g") {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	_, brokers := testenv.Kafka(t)
	slot := "e2e_slots_full"
	cfg := writeConfig(t, fmt.Sprintf(`
name: %s
source:
  type: postgres
  dsn: %q
  table: public.outbox_message
  slot: %s
  publication: %s
route:
  preset: seed
  topic: "outbox.event.{aggregate_type}"
sink:
  type: kafka
  brokers: [%q]
checkpoint:
  type: file
  path: %q
`, connName(t, "e2e-slotsfull"), p.DSN(), slot, slot, brokers[0], filepath.Join(t.TempDir(), "checkpoint")))
	c := testenv.Launch(t, cfg, "OUTBOX_CDC_SOURCE_RECONNECT_MAX=1s")
	testenv.Eventually(t, 30*time.Second, "the slot creation refused", func() bool {
		return strings.Contains(c.Log(), "all replication slots are in use")
	})
	for _, l := range logLines(t, c.Log()) {
		j, _ := json.Marshal(l)
		if !strings.Contains(string(j), "all replication slots are in use") {
			continue
		}
		if strings.Contains(string(j), "REPLICATION attribute") || !strings.Contains(string(j), "max_replication_slots") ||
			!strings.Contains(string(j), "pg_drop_replication_slot") {
			t.Fatalf("the line does not give the remedy of its cause: %s", j)
		}
	}
	if _, err := conn.Exec(ctx, "SELECT pg_drop_replication_slot('taken_1')"); err != nil {
		t.Fatal(err)
	}
	c.WaitStreaming(30 * time.Second)
	if err := c.Stop(15 * time.Second); err != nil {
		t.Fatalf("SIGTERM exit: %v", err)
	}
}
