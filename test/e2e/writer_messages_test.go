package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-cdc/outbox-cdc/outboxconsumer"
	"github.com/outbox-cdc/outbox-cdc/outboxwriter"
	"github.com/outbox-cdc/outbox-cdc/test/testenv"
)

// TestWriterLogicalMessagesThroughRelay: events the writer emits as
// logical decoding messages (no outbox table), through pgx, reach Kafka
// through the relay's source.messages.prefix with their ids, keys, types,
// payloads and the sequence header; a rolled-back transaction's never do.
func TestWriterLogicalMessagesThroughRelay(t *testing.T) {
	name := testObjectName(t)
	_, dsn := testenv.ScratchPostgres(t, name)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, outboxwriter.SequenceTableDDL(outboxwriter.Postgres, name+".outbox_sequence")); err != nil {
		t.Fatal(err)
	}
	prefix := "outbox_" + testSuffix(t)
	layout := outboxwriter.SeedLayout("")
	layout.Headers = map[string]string{"aggregate_seq": "aggregate_seq", "tenant": "tenant"}
	w, err := outboxwriter.New(outboxwriter.Config{Dialect: outboxwriter.Postgres, Layout: layout, MessagePrefix: prefix,
		Sequence: &outboxwriter.SequenceConfig{Header: "aggregate_seq", Table: name + ".outbox_sequence"}})
	if err != nil {
		t.Fatal(err)
	}
	_, brokers := testenv.Kafka(t)
	cfg := writeConfig(t, fmt.Sprintf(`
name: %s
source:
  type: postgres
  dsn: %q
  table: ""          # no outbox table: logical decoding messages only
  slot: %s
  publication: %s
  messages:
    prefix: %s
route:
  preset: seed
  topic: "outbox.event.{aggregate_type}"
  headers: [aggregate_seq, tenant]
sink:
  type: kafka
  brokers: [%q]
checkpoint:
  type: file
  path: %q
`, connName(t, "e2e-writer-messages"), dsn, name, name, prefix, brokers[0], filepath.Join(t.TempDir(), "checkpoint")))
	c := testenv.Start(t, cfg)
	cons := newConsumer(t, brokers, `outbox\.event\..*`)

	var want []string
	for i := 0; i < 10; i++ {
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		ids, err := w.RecordPgx(ctx, tx,
			outboxwriter.Event{AggregateType: "ORDER", AggregateID: fmt.Sprintf("A-%d", i%3), EventType: "ORDER_CHANGED",
				Payload: map[string]int{"i": i}, Headers: map[string]any{"tenant": "acme"}},
			outboxwriter.Event{AggregateType: "ORDER", AggregateID: fmt.Sprintf("A-%d", i%3), EventType: "ORDER_NOTED", Payload: "note"})
		if err != nil {
			t.Fatal(err)
		}
		if i%4 == 3 {
			if err := tx.Rollback(ctx); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		want = append(want, ids...)
	}
	got := cons.waitFor(t, len(want), 20*time.Second)
	got = append(got, cons.quiet(t, 500*time.Millisecond)[len(got):]...)
	checkDelivery(t, got, want, 3, true)
	last := map[string]int64{}
	for _, r := range got {
		var hs []outboxconsumer.Header
		for k, v := range r.Headers {
			hs = append(hs, outboxconsumer.Header{Key: k, Value: []byte(v)})
		}
		m, err := outboxconsumer.FromKafka([]byte(r.Key), []byte(r.Value), hs, outboxconsumer.Fields{Sequence: "aggregate_seq"})
		if err != nil {
			t.Fatal(err)
		}
		if m.Sequence != last[m.AggregateID]+1 {
			t.Fatalf("%s: sequence %d after %d", m, m.Sequence, last[m.AggregateID])
		}
		last[m.AggregateID] = m.Sequence
		switch m.EventType {
		case "ORDER_CHANGED":
			if r.Headers["tenant"] != "acme" || r.Value[0] != '{' {
				t.Fatalf("record %+v", r)
			}
		case "ORDER_NOTED":
			if r.Value != `"note"` {
				t.Fatalf("record %+v", r)
			}
		}
	}
	if err := c.Stop(10 * time.Second); err != nil {
		t.Fatalf("SIGTERM exit: %v", err)
	}
}
