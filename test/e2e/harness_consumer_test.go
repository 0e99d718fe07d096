package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-cdc/outbox-cdc/test/testenv"
)

// endedAfterPoll is a context whose deadline passes at the moment
// PollFetches returns: Done never fires (the poll waits for a fetch as
// under a live deadline), Err already reports the deadline. It is the
// race of a short wait (consumer.quiet) whose timer fires between the
// client handing a fetch over and the caller looking at the context.
type endedAfterPoll struct{ context.Context }

func (endedAfterPoll) Err() error { return context.DeadlineExceeded }

// TestConsumerKeepsAFetchReturnedAsItsWaitEnds: the harness consumer must
// keep the records of a fetch PollFetches returned even when its wait has
// ended by then. The client hands each fetch over once; dropping it made
// records the connector had delivered count as lost (the e2e tests would
// report committed rows that never arrived).
func TestConsumerKeepsAFetchReturnedAsItsWaitEnds(t *testing.T) {
	_, brokers := testenv.Kafka(t)
	topic := "outbox.event.HARNESS"
	pr, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	const n = 30
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for i := range n {
		id := fmt.Sprintf("h-%d", i)
		r := &kgo.Record{Topic: topic, Key: []byte(id), Value: []byte(id), Headers: []kgo.RecordHeader{{Key: "id", Value: []byte(id)}}}
		if err := pr.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}

	cons := newConsumer(t, brokers, `outbox\.event\.HARNESS`)
	first := cons.poll(endedAfterPoll{context.Background()}, n)
	got := cons.waitFor(t, n, 10*time.Second)
	if len(got) != n {
		t.Fatalf("the consumer read %d of %d records (%d from the poll whose wait ended as it returned): the records of that fetch were dropped",
			len(got), n, len(first))
	}
	t.Logf("%d records from the poll whose wait ended as it returned, %d in all", len(first), len(got))
}
