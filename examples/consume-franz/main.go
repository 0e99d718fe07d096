// Command consume-franz applies the order events from Kafka, read with
// franz-go, to its own database, each exactly once (examples/shop,
// outboxconsumer):
//
//	consume-franz -brokers 127.0.0.1:9092 -topic outbox.event.ORDER -mode dedupe
//
// Records are handled one at a time in partition order; the offsets are
// committed (by the group) only for records already applied.
package main

import (
	"context"
	"flag"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-cdc/outbox-cdc/examples/shop"
	"github.com/outbox-cdc/outbox-cdc/outboxconsumer"
)

func main() {
	var f shop.ConsumerFlags
	f.Register(flag.CommandLine)
	brokers := flag.String("brokers", "127.0.0.1:9092", "comma-separated bootstrap brokers")
	topic := flag.String("topic", "outbox.event.ORDER", "the topic the relay writes the orders to")
	group := flag.String("group", "", "consumer group (default: the consumer's -name)")
	flag.Parse()
	if *group == "" {
		*group = f.Name
	}
	f.Run(func(ctx context.Context, handle func(outboxconsumer.Message) error) error {
		cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(*brokers, ",")...), kgo.ConsumeTopics(*topic),
			kgo.ConsumerGroup(*group), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
			kgo.DisableAutoCommit()) // commit only what was applied
		if err != nil {
			return err
		}
		defer cl.Close()
		for ctx.Err() == nil {
			fs := cl.PollFetches(ctx)
			var err error
			fs.EachRecord(func(r *kgo.Record) {
				if err != nil {
					return
				}
				hs := make([]outboxconsumer.Header, len(r.Headers))
				for i, h := range r.Headers {
					hs[i] = outboxconsumer.Header(h)
				}
				var m outboxconsumer.Message
				if m, err = outboxconsumer.FromKafka(r.Key, r.Value, hs, shop.Fields()); err == nil {
					err = handle(m)
				}
			})
			if err != nil {
				return err
			}
			if err := cl.CommitUncommittedOffsets(context.WithoutCancel(ctx)); err != nil {
				return err
			}
		}
		return nil
	})
}
