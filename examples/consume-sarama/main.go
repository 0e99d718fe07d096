// Command consume-sarama applies the order events from Kafka, read with
// sarama's consumer group, to its own database, each exactly once
// (examples/shop, outboxconsumer):
//
//	consume-sarama -brokers 127.0.0.1:9092 -topic outbox.event.ORDER -mode dedupe
//
// A record is marked (its offset committed) only after it was applied.
package main

import (
	"context"
	"errors"
	"flag"
	"strings"

	"github.com/IBM/sarama"

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
		cfg := sarama.NewConfig()
		cfg.Version = sarama.V2_8_0_0
		cfg.Consumer.Offsets.Initial = sarama.OffsetOldest
		g, err := sarama.NewConsumerGroup(strings.Split(*brokers, ","), *group, cfg)
		if err != nil {
			return err
		}
		defer g.Close()
		h := &groupHandler{handle: handle}
		for ctx.Err() == nil {
			if err := g.Consume(ctx, []string{*topic}, h); err != nil && !errors.Is(err, sarama.ErrClosedConsumerGroup) {
				return err
			}
			if h.err != nil {
				return h.err
			}
		}
		return nil
	})
}

// groupHandler applies each claimed partition's records in order.
type groupHandler struct {
	handle func(outboxconsumer.Message) error
	err    error
}

func (h *groupHandler) Setup(sarama.ConsumerGroupSession) error   { return nil }
func (h *groupHandler) Cleanup(sarama.ConsumerGroupSession) error { return nil }

func (h *groupHandler) ConsumeClaim(s sarama.ConsumerGroupSession, c sarama.ConsumerGroupClaim) error {
	for {
		select {
		case <-s.Context().Done():
			return nil
		case r, ok := <-c.Messages():
			if !ok {
				return nil
			}
			hs := make([]outboxconsumer.Header, len(r.Headers))
			for i, x := range r.Headers {
				hs[i] = outboxconsumer.Header{Key: string(x.Key), Value: x.Value}
			}
			m, err := outboxconsumer.FromKafka(r.Key, r.Value, hs, shop.Fields())
			if err == nil {
				err = h.handle(m)
			}
			if err != nil {
				h.err = err
				return err
			}
			s.MarkMessage(r, "")
		}
	}
}
