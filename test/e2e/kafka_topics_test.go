package e2e

// Records Kafka cannot take as routed (issue 12 items 6 and 7): a topic
// that does not exist on a cluster without auto-create, and timestamps a
// topic's limits refuse. Both are sink behaviour; they run against the
// MariaDB source.

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/outbox-cdc/outbox-cdc/test/testenv"
)

func mysqlOnly(t *testing.T, test func(t *testing.T, b *backend)) {
	t.Run("mysql", func(t *testing.T) { test(t, mysqlBackend(t)) })
}

// insertTyped commits one row per id with the given aggregate type.
func (b *backend) insertTyped(t *testing.T, aggType string, idList ...string) {
	t.Helper()
	for i, id := range idList {
		b.insertTx(t, []row{{id, aggType, fmt.Sprintf("agg-%d", i%3), "E", fmt.Sprintf(`{"id": %q}`, id)}}, true)
	}
}

// TestUnwritableTopicHaltThenDLQ: a row whose topic does not exist, on a
// cluster without auto-create. For sink.unwritable_topic_timeout the
// connector waits (delivery of every aggregate stalls, as the issue says):
// /readyz answers 503 naming the topic, outbox_cdc_sink_blocked_topics is
// 1 and outbox_cdc_sink_blocked_seconds grows, /healthz stays 200. Then
// pipeline.on_error decides: halt exits 1 naming the row and the topic
// after checkpointing everything before it; dlq dead-letters the row and
// carries on.
func TestUnwritableTopicHaltThenDLQ(t *testing.T) {
	const wait = 4 * time.Second
	for _, policy := range []string{"halt", "dlq"} {
		t.Run(policy, func(t *testing.T) {
			mysqlOnly(t, func(t *testing.T, b *backend) {
				name := connName(t, "e2e-unwritable-"+policy)
				c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.DefaultNumPartitions(3),
					kfake.SeedTopics(3, "outbox.event.ORDER", name+".dlq"))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(c.Close)
				brokers := c.ListenAddrs()
				cfg := b.config(t, name, brokers)
				env := []string{"OUTBOX_CDC_SINK_UNWRITABLE_TOPIC_TIMEOUT=" + wait.String(), "OUTBOX_CDC_PIPELINE_ON_ERROR=" + policy,
					"OUTBOX_CDC_SINK_RETRY_BACKOFF_MAX=500ms"}
				conn := testenv.Start(t, cfg, env...)
				before := ids("before", 1, 5)
				b.insertTyped(t, "ORDER", before...)
				cons := newConsumer(t, brokers, `outbox\.event\..*|`+name+`\.dlq`)
				cons.waitFor(t, len(before), 30*time.Second)

				b.insertTyped(t, "NEWTYPE", "new-1")
				blockedAt := time.Now()
				testenv.Eventually(t, wait, "outbox_cdc_sink_blocked_topics 1", func() bool { return conn.Metric("outbox_cdc_sink_blocked_topics") == 1 })
				// Committed while the write of new-1 waits: they stall too.
				// (Committed before that write started, they could share its
				// batch and be produced beside it.)
				after := ids("after", 1, 5)
				b.insertTyped(t, "ORDER", after...)
				code, body := conn.Readyz()
				if code != 503 || !strings.Contains(body, "outbox.event.NEWTYPE") || !strings.Contains(body, "sink.unwritable_topic_timeout") {
					t.Fatalf("/readyz during the wait: %d %q", code, body)
				}
				if s := conn.Status("/healthz"); s != 200 {
					t.Fatalf("/healthz %d during the wait", s)
				}
				time.Sleep(time.Second) // a deliberate gap: the blocked time grows
				if s := conn.Metric("outbox_cdc_sink_blocked_seconds"); s < 0.5 {
					t.Fatalf("outbox_cdc_sink_blocked_seconds = %v during the wait", s)
				}

				if policy == "halt" {
					code := conn.WaitExit(wait + 30*time.Second)
					took := time.Since(blockedAt)
					log := conn.Log()
					if code != 1 || !strings.Contains(log, "message id new-1") || !strings.Contains(log, `outbox.event.NEWTYPE`) ||
						!strings.Contains(log, "sink.unwritable_topic_timeout") {
						t.Fatalf("exit %d; want a halt naming the row and the topic:\n%s", code, log)
					}
					if took < wait {
						t.Fatalf("halted after %v, before the configured wait of %v", took, wait)
					}
					t.Logf("halted %v after the row was committed (bound %v)", took.Round(100*time.Millisecond), wait)
					got := cons.quiet(t, time.Second)
					checkDelivery(t, got, before, 3, false)
					return
				}
				want := append(append([]string{}, before...), after...)
				got := cons.waitFor(t, len(want)+1, wait+30*time.Second)
				var dead int
				var rest []consumed
				for _, r := range got {
					if r.Topic == name+".dlq" {
						if r.Headers["outbox_cdc.message_id"] != "new-1" || r.Headers["outbox_cdc.topic"] != "outbox.event.NEWTYPE" ||
							!strings.Contains(r.Headers["outbox_cdc.error"], "sink.unwritable_topic_timeout") {
							t.Fatalf("dead letter %+v", r)
						}
						dead++
						continue
					}
					rest = append(rest, r)
				}
				if dead != 1 {
					t.Fatalf("%d dead letters for the row, want 1", dead)
				}
				checkDelivery(t, rest, want, 3, false)
				testenv.Eventually(t, 20*time.Second, "/readyz 200 after the dead letter", func() bool { return conn.Status("/readyz") == 200 })
				if v := conn.Metric("outbox_cdc_sink_blocked_topics"); v != 0 {
					t.Fatalf("outbox_cdc_sink_blocked_topics = %v after the row was dead-lettered", v)
				}
				// Later rows for the missing topic are dead-lettered at once.
				b.insertTyped(t, "NEWTYPE", "new-2")
				b.insertTyped(t, "ORDER", "last")
				more := cons.waitFor(t, len(got)+2, 10*time.Second)
				if len(more) < len(got)+2 {
					t.Fatalf("the next row for the missing topic waited again (or was lost): %+v", more[len(got):])
				}
				if err := conn.Stop(20 * time.Second); err != nil {
					t.Fatal(err)
				}
			})
		})
	}
}

// TestRecordTimestampLimits: a backlog replayed after its rows are older
// than the topic allows (message.timestamp.before.max.ms). With
// route.timestamp commit the broker refuses the records with
// INVALID_TIMESTAMP, a permanent per-record error: halt stops naming the
// row, dlq dead-letters the rows (dead letters carry the production time,
// so they are accepted). With the default, production time, every row is
// delivered.
func TestRecordTimestampLimits(t *testing.T) {
	const limit = 3 * time.Second
	for _, tc := range []struct{ name, timestamp, policy string }{
		{"commit-halt", "commit", "halt"},
		{"commit-dlq", "commit", "dlq"},
		{"produce", "", "halt"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mysqlOnly(t, func(t *testing.T, b *backend) {
				c, brokers := testenv.Kafka(t)
				testenv.RejectOldTimestamps(c, "outbox.event.ORDER", limit)
				name := connName(t, "e2e-ts-"+tc.name)
				cfg := b.config(t, name, brokers)
				env := []string{"OUTBOX_CDC_PIPELINE_ON_ERROR=" + tc.policy}
				if tc.timestamp != "" {
					env = append(env, "OUTBOX_CDC_ROUTE_TIMESTAMP="+tc.timestamp)
				}
				// Run once so that the checkpoint is before the backlog.
				conn := testenv.Start(t, cfg, env...)
				b.insertTyped(t, "WARMUP", "warm-1")
				newConsumer(t, brokers, `outbox\.event\.WARMUP`).waitFor(t, 1, 30*time.Second)
				if err := conn.Stop(20 * time.Second); err != nil {
					t.Fatal(err)
				}
				backlog := ids("old", 1, 6)
				b.insertTyped(t, "ORDER", backlog...)
				time.Sleep(limit + 2*time.Second) // MySQL commit times have second precision
				cons := newConsumer(t, brokers, `outbox\.event\.ORDER|`+name+`\.dlq`)
				switch {
				case tc.timestamp == "":
					conn = testenv.Start(t, cfg, env...)
					got := cons.waitFor(t, len(backlog), 30*time.Second)
					checkDelivery(t, got, backlog, 3, false)
					conn.Stop(20 * time.Second)
				case tc.policy == "halt":
					code, out := testenv.Run(t, 60*time.Second, env, "run", "--config", cfg)
					if code != 1 || !strings.Contains(out, "message id old-1") || !strings.Contains(out, "kafka error code 32") {
						t.Fatalf("exit %d; want a halt naming row old-1 and INVALID_TIMESTAMP:\n%s", code, out)
					}
				default:
					conn = testenv.Start(t, cfg, env...)
					got := cons.waitFor(t, len(backlog), 30*time.Second)
					got = append(got, cons.quiet(t, time.Second)[len(got):]...)
					dead := map[string]bool{}
					for _, r := range got {
						if r.Topic != name+".dlq" || !strings.Contains(r.Headers["outbox_cdc.error"], "code 32") {
							t.Fatalf("want only dead letters for INVALID_TIMESTAMP, got %+v", r)
						}
						dead[r.Headers["outbox_cdc.message_id"]] = true
					}
					// A rejection writes the batch again: a dead letter may
					// come twice (at-least-once), but every row has one.
					for _, id := range backlog {
						if !dead[id] {
							t.Fatalf("row %s has no dead letter (%d records read)", id, len(got))
						}
					}
					conn.Stop(20 * time.Second)
				}
			})
		})
	}
}
