package kafka

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
	"github.com/outbox-cdc/outbox-cdc/test/testenv"
)

func ids(prefix string, from, n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s%d", prefix, from+i)
	}
	return ids
}

// TestTransactionalOpenTransactionInvisibleUntilEnd: the fragments of one
// source transaction go into one Kafka transaction that stays open across
// WriteAtomic calls with a zero end; read_committed consumers see none of
// it (and the progress does not move) until the call with the end commits
// it, then all of it at once.
func TestTransactionalOpenTransactionInvisibleUntilEnd(t *testing.T) {
	_, brokers := testenv.Kafka(t)
	ctx := context.Background()
	s := txnSink(t, brokers, "conn")
	if _, err := s.Load(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.WriteAtomic(ctx, recs("events", "w1"), "mysql:0-1-1"); err != nil {
		t.Fatal(err)
	}
	for f := 0; f < 5; f++ {
		if err := s.WriteAtomic(ctx, recs("events", ids("f", f*10, 10)...), ""); err != nil {
			t.Fatalf("fragment %d: %v", f, err)
		}
	}
	if got := values(readAll(t, brokers, "events", true)); got != "w1" {
		t.Fatalf("read_committed sees %q before the transaction's end", got)
	}
	if got := readAll(t, brokers, "events", false); len(got) != 51 {
		t.Fatalf("read_uncommitted sees %d records; the fragments were not written as they came", len(got))
	}
	if p, err := ReadProgress(ctx, s.cfg, "progress", "conn", "mysql"); err != nil || p.Position != "mysql:0-1-1" {
		t.Fatalf("progress while open = %q, %v", p.Position, err)
	}
	if err := s.WriteAtomic(ctx, recs("events", "last"), "mysql:0-1-2"); err != nil {
		t.Fatal(err)
	}
	want := "w1," + strings.Join(ids("f", 0, 50), ",") + ",last"
	if got := values(readAll(t, brokers, "events", true)); got != want {
		t.Fatalf("read_committed after the end = %q", got)
	}
	s.Close()
	if pos, err := txnSink(t, brokers, "conn").Load(ctx); err != nil || pos != "mysql:0-1-2" {
		t.Fatalf("Load = %q, %v", pos, err)
	}
}

// TestTransactionalOpenTransactionAbortedInvisibleForever: an open
// transaction whose end never comes is aborted (on Close, or when a later
// call fails) and none of its records is ever visible to read_committed,
// while transactions committed after it are.
func TestTransactionalOpenTransactionAbortedInvisibleForever(t *testing.T) {
	t.Run("close", func(t *testing.T) {
		_, brokers := testenv.Kafka(t)
		ctx := context.Background()
		s := txnSink(t, brokers, "conn")
		if _, err := s.Load(ctx); err != nil {
			t.Fatal(err)
		}
		for f := 0; f < 3; f++ {
			if err := s.WriteAtomic(ctx, recs("events", ids("a", f*10, 10)...), ""); err != nil {
				t.Fatal(err)
			}
		}
		s.Close() // SIGTERM inside the source transaction
		again := txnSink(t, brokers, "conn")
		if pos, err := again.Load(ctx); err != nil || !pos.IsZero() {
			t.Fatalf("Load = %q, %v; want no progress", pos, err)
		}
		if err := again.WriteAtomic(ctx, recs("events", "later"), "mysql:0-1-9"); err != nil {
			t.Fatal(err)
		}
		if got := values(readAll(t, brokers, "events", true)); got != "later" {
			t.Fatalf("read_committed = %q; the aborted fragments must never be visible", got)
		}
	})
	t.Run("failure", func(t *testing.T) {
		c, brokers := testenv.Kafka(t)
		ctx := context.Background()
		s := txnSink(t, brokers, "conn")
		if _, err := s.Load(ctx); err != nil {
			t.Fatal(err)
		}
		for f := 0; f < 3; f++ {
			if err := s.WriteAtomic(ctx, recs("events", ids("a", f*10, 10)...), ""); err != nil {
				t.Fatal(err)
			}
		}
		// The 4th fragment fails (a retryable error, twice: sarama retries
		// once): the open transaction cannot be completed any more.
		c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: "events", Err: kerr.NotEnoughReplicas, Count: 2})
		err := s.WriteAtomic(ctx, recs("events", ids("a", 30, 10)...), "")
		if !errors.Is(err, outboxcdc.ErrOpenWriteAborted) {
			t.Fatalf("WriteAtomic = %v; want ErrOpenWriteAborted", err)
		}
		// The pipeline stops; a restart loads the old progress and commits
		// something else.
		s.Close()
		again := txnSink(t, brokers, "conn")
		if pos, err := again.Load(ctx); err != nil || !pos.IsZero() {
			t.Fatalf("Load = %q, %v; want no progress", pos, err)
		}
		if err := again.WriteAtomic(ctx, recs("events", "later"), "mysql:0-1-9"); err != nil {
			t.Fatal(err)
		}
		if got := values(readAll(t, brokers, "events", true)); got != "later" {
			t.Fatalf("read_committed = %q; the aborted fragments must never be visible", got)
		}
	})
}

// TestTransactionalOpenTransactionOutlivesTimeout: a source transaction
// that cannot be written and committed within sink.transaction_timeout
// fails with an error that says so and what to raise, and is aborted.
func TestTransactionalOpenTransactionOutlivesTimeout(t *testing.T) {
	_, brokers := testenv.Kafka(t)
	ctx := context.Background()
	s := txnSink(t, brokers, "conn", func(_ *KafkaConfig, tc *TxnConfig) { tc.TransactionTimeout = time.Second })
	if _, err := s.Load(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.WriteAtomic(ctx, recs("events", "a0", "a1"), ""); err != nil {
		t.Fatal(err)
	}
	time.Sleep(900 * time.Millisecond) // the source is slow to send the rest
	err := s.WriteAtomic(ctx, recs("events", "a2"), "mysql:0-1-1")
	if !errors.Is(err, errTxnBudget) || !errors.Is(err, outboxcdc.ErrOpenWriteAborted) ||
		!strings.Contains(err.Error(), "raise sink.transaction_timeout") || !strings.Contains(err.Error(), "transaction.max.timeout.ms") {
		t.Fatalf("WriteAtomic = %v; want the transaction timeout error naming what to raise", err)
	}
	s.Close()
	if got := readAll(t, brokers, "events", true); len(got) != 0 {
		t.Fatalf("read_committed sees %q", values(got))
	}
}

// TestTransactionalOpenTransactionTooLargeRecord: a record larger than
// max_message_bytes in a fragment is refused before it is sent, so the open
// transaction survives: the pipeline replaces it with a dead letter and the
// transaction commits whole.
func TestTransactionalOpenTransactionTooLargeRecord(t *testing.T) {
	_, brokers := testenv.Kafka(t)
	ctx := context.Background()
	s := txnSink(t, brokers, "conn", func(k *KafkaConfig, _ *TxnConfig) { k.MaxMessageBytes = 2048 })
	if _, err := s.Load(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.WriteAtomic(ctx, recs("events", "a0", "a1"), ""); err != nil {
		t.Fatal(err)
	}
	big := append(recs("events", "a2"), outboxcdc.Record{Topic: "events", Key: []byte("agg"), Value: make([]byte, 4096)})
	err := s.WriteAtomic(ctx, big, "")
	var e *Error
	if !errors.As(err, &e) || !e.Permanent || e.Index != 1 || errors.Is(err, outboxcdc.ErrOpenWriteAborted) {
		t.Fatalf("WriteAtomic = %v; want a permanent error for record 1 that leaves the transaction open", err)
	}
	if err := s.WriteAtomic(ctx, append(recs("events", "a2"), recs("dlq", "dead")...), "mysql:0-1-3"); err != nil {
		t.Fatal(err)
	}
	if got := values(readAll(t, brokers, "events", true)); got != "a0,a1,a2" {
		t.Fatalf("read_committed = %q", got)
	}
}
