package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-cdc/outbox-cdc/test/testenv"
)

// rawRecords reads every record of the topics matching regex until n are
// read or timeout passes; unlike consumer it keeps null values apart.
func rawRecords(t *testing.T, brokers []string, regex string, n int, timeout time.Duration) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeRegex(), kgo.ConsumeTopics(regex),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.MetadataMinAge(50*time.Millisecond), kgo.MetadataMaxAge(250*time.Millisecond), kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var out []*kgo.Record
	for len(out) < n && ctx.Err() == nil {
		cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) { out = append(out, r) })
	}
	return out
}

func header(r *kgo.Record, key string) (string, bool) {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value), true
		}
	}
	return "", false
}

// byID indexes records by their id header.
func byID(recs []*kgo.Record) map[string]*kgo.Record {
	m := map[string]*kgo.Record{}
	for _, r := range recs {
		id, _ := header(r, "id")
		if id == "" {
			id, _ = header(r, "outbox_cdc.message_id")
		}
		m[id] = r
	}
	return m
}

// insertRaw commits one outbox row on its own with statement q (b's
// insertOutbox or a variant); payload nil is SQL NULL.
func (b *backend) insertRaw(t *testing.T, q, id, aggID string, payload any) {
	t.Helper()
	if _, err := b.db.Exec(q, id, "ORDER", aggID, "E", payload); err != nil {
		t.Fatal(err)
	}
}

// TestFaultRecordTooLargeHaltThenDLQ and TestFaultBadRowsHaltThenDLQ cover the rows the route cannot map and
// the records Kafka refuses, under both on_error policies:
//
//   - "record too large": the broker's message.max.bytes rejects a row's
//     record (MESSAGE_TOO_LARGE, permanent).
//   - "bad rows": with route.payload_format json and
//     route.tombstone_on_empty_payload on, a NULL payload becomes a
//     tombstone, while a payload that is not JSON and an empty aggregate id
//     make bad rows.
//
// With on_error: halt (the default) the connector exits 1 naming the first
// poison row (message id and position) with every earlier row delivered.
// Restarted with on_error: dlq it sends each poison row to "<name>.dlq"
// with the error headers (the too-large one without its payload, since the
// dead-letter topic refuses it too), counts them in
// outbox_cdc_dlq_records_total, and delivers every other row.
func TestFaultRecordTooLargeHaltThenDLQ(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		{
			_, brokers := testenv.Kafka(t, kfake.BrokerConfigs(map[string]string{"message.max.bytes": "20000"}))
			name := connName(t, "e2e-toolarge-"+b.kind)
			cfg := b.config(t, name, brokers)
			big := fmt.Sprintf(`{"pad": %q}`, strings.Repeat("x", 40000))
			c := testenv.Start(t, cfg)
			b.insertRaw(t, b.insertOutbox, "ok-1", "A-1", `{"n": 1}`)
			cons := newConsumer(t, brokers, `outbox\.event\..*`)
			cons.waitFor(t, 1, 20*time.Second)
			b.insertRaw(t, b.insertOutbox, "big-1", "A-1", big)
			time.Sleep(300 * time.Millisecond) // a deliberate gap: ok-2 commits after the big row reached the sink
			b.insertRaw(t, b.insertOutbox, "ok-2", "A-1", `{"n": 2}`)
			code := c.WaitExit(30 * time.Second)
			log := c.Log()
			if code != 1 || !strings.Contains(log, "(message id big-1) was rejected by the sink") ||
				!strings.Contains(log, "on_error is halt") || !strings.Contains(log, "kafka error code 10") {
				t.Fatalf("exit %d, want 1 naming big-1 and MESSAGE_TOO_LARGE:\n%s", code, log)
			}
			if strings.Contains(log, strings.Repeat("x", 100)) {
				t.Fatal("the payload was logged")
			}

			c = testenv.Start(t, cfg, "OUTBOX_CDC_PIPELINE_ON_ERROR=dlq")
			b.insertRaw(t, b.insertOutbox, "ok-3", "A-1", `{"n": 3}`)
			got := cons.waitFor(t, 3, 20*time.Second)
			got = append(got, cons.quiet(t, 500*time.Millisecond)[len(got):]...)
			checkDelivery(t, got, []string{"ok-1", "ok-2", "ok-3"}, 3, false)
			dlq := byID(rawRecords(t, brokers, name+`\.dlq`, 1, 10*time.Second))
			r := dlq["big-1"]
			if r == nil {
				t.Fatalf("no dead letter for big-1 in %s.dlq", name)
			}
			class, _ := header(r, "outbox_cdc.error.class")
			topic, _ := header(r, "outbox_cdc.topic")
			omitted, _ := header(r, "outbox_cdc.value_omitted_bytes")
			msg, _ := header(r, "outbox_cdc.error")
			origin, _ := header(r, "outbox_cdc.origin")
			if class != "rejected" || topic != "outbox.event.ORDER" || omitted != fmt.Sprint(len(big)) || len(r.Value) != 0 ||
				string(r.Key) != "A-1" || !strings.Contains(msg, "kafka error code 10") || origin == "" {
				t.Fatalf("dead letter: class %q topic %q omitted %q value %d bytes key %q error %q origin %q",
					class, topic, omitted, len(r.Value), r.Key, msg, origin)
			}
			if v := c.Metric(`outbox_cdc_dlq_records_total{class="rejected"}`); v != 1 {
				t.Fatalf(`outbox_cdc_dlq_records_total{class="rejected"} = %v, want 1`, v)
			}
			if err := c.Stop(15 * time.Second); err != nil {
				t.Fatalf("SIGTERM exit: %v", err)
			}
		}
	})
}

// TestFaultBadRowsHaltThenDLQ: see TestFaultRecordTooLargeHaltThenDLQ.
func TestFaultBadRowsHaltThenDLQ(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		{
			_, brokers := testenv.Kafka(t)
			alter := "ALTER TABLE " + b.table() + " MODIFY payload LONGTEXT NULL"
			if b.kind == "postgres" {
				alter = "ALTER TABLE " + b.table() + " ALTER COLUMN payload TYPE text, ALTER COLUMN payload DROP NOT NULL"
			}
			if _, err := b.db.Exec(alter); err != nil {
				t.Fatal(err)
			}
			q := b.insertOutbox
			if b.kind == "postgres" {
				// A new statement text: the driver's cached one has a json parameter.
				q = strings.Replace(q, "$5)", "$5::text)", 1)
			}
			name := connName(t, "e2e-badrows-"+b.kind)
			cfg := b.config(t, name, brokers)
			env := []string{"OUTBOX_CDC_ROUTE_PAYLOAD_FORMAT=json", "OUTBOX_CDC_ROUTE_TOMBSTONE_ON_EMPTY_PAYLOAD=true"}
			c := testenv.Start(t, cfg, env...)
			b.insertRaw(t, q, "b-ok-1", "A-1", `{"n": 1}`)
			b.insertRaw(t, q, "b-tomb-1", "A-2", nil)
			b.insertRaw(t, q, "b-notjson-1", "A-1", "plain text, not JSON")
			b.insertRaw(t, q, "b-noagg-1", "", `{"n": 4}`)
			b.insertRaw(t, q, "b-ok-2", "A-1", `{"n": 2}`)
			code := c.WaitExit(30 * time.Second)
			log := c.Log()
			if code != 1 || !strings.Contains(log, "(message id b-notjson-1)") || !strings.Contains(log, "not valid JSON") ||
				!strings.Contains(log, "on_error is halt") {
				t.Fatalf("exit %d, want 1 naming b-notjson-1:\n%s", code, log)
			}
			if strings.Contains(log, "plain text, not JSON") {
				t.Fatal("the payload was logged")
			}
			main := byID(rawRecords(t, brokers, `outbox\.event\..*`, 2, 10*time.Second))
			if r := main["b-tomb-1"]; r == nil || r.Value != nil || string(r.Key) != "A-2" {
				t.Fatalf("b-tomb-1: want a tombstone keyed A-2, got %+v", r)
			}
			if main["b-ok-1"] == nil || main["b-notjson-1"] != nil || main["b-noagg-1"] != nil {
				t.Fatalf("after the halt the topic holds %v", keys(main))
			}

			c = testenv.Start(t, cfg, append(env, "OUTBOX_CDC_PIPELINE_ON_ERROR=dlq")...)
			cons := newConsumer(t, brokers, `outbox\.event\..*`)
			got := cons.waitFor(t, 3, 20*time.Second)
			got = append(got, cons.quiet(t, 500*time.Millisecond)[len(got):]...)
			checkDelivery(t, got, []string{"b-ok-1", "b-tomb-1", "b-ok-2"}, 3, false)
			dlq := byID(rawRecords(t, brokers, name+`\.dlq`, 2, 10*time.Second))
			for id, want := range map[string]string{"b-notjson-1": "not valid JSON", "b-noagg-1": "aggregate id"} {
				r := dlq[id]
				if r == nil {
					t.Fatalf("no dead letter for %s; dead letters: %v", id, keys(dlq))
				}
				class, _ := header(r, "outbox_cdc.error.class")
				msg, _ := header(r, "outbox_cdc.error")
				_, hasTopic := header(r, "outbox_cdc.topic")
				if class != "bad_row" || !strings.Contains(msg, want) || hasTopic {
					t.Fatalf("dead letter for %s: class %q error %q topic header %v", id, class, msg, hasTopic)
				}
			}
			if r := dlq["b-notjson-1"]; string(r.Value) != "plain text, not JSON" || string(r.Key) != "A-1" {
				t.Fatalf("dead letter for b-notjson-1: key %q value %q, want the row as stored", r.Key, r.Value)
			}
			if r := dlq["b-noagg-1"]; r.Key != nil {
				t.Fatalf("dead letter for b-noagg-1: key %q, want null", r.Key)
			}
			if v := c.Metric(`outbox_cdc_dlq_records_total{class="bad_row"}`); v != 2 {
				t.Fatalf(`outbox_cdc_dlq_records_total{class="bad_row"} = %v, want 2`, v)
			}
			if err := c.Stop(15 * time.Second); err != nil {
				t.Fatalf("SIGTERM exit: %v", err)
			}
		}
	})
}

func keys(m map[string]*kgo.Record) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
