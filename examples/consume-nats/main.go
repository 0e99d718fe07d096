// Command consume-nats applies the order events from NATS JetStream, read
// with nats.go, to its own database, each exactly once (examples/shop,
// outboxconsumer):
//
//	consume-nats -url nats://127.0.0.1:4222 -stream OUTBOX -mode dedupe
//
// It reads through a durable consumer of its own name and acknowledges a
// message only after it was applied.
package main

import (
	"context"
	"errors"
	"flag"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-cdc/outbox-cdc/examples/shop"
	"github.com/outbox-cdc/outbox-cdc/outboxconsumer"
)

func main() {
	var f shop.ConsumerFlags
	f.Register(flag.CommandLine)
	url := flag.String("url", nats.DefaultURL, "NATS URL")
	stream := flag.String("stream", "OUTBOX", "the relay's stream (sink.stream)")
	flag.Parse()
	f.Run(func(ctx context.Context, handle func(outboxconsumer.Message) error) error {
		nc, err := nats.Connect(*url)
		if err != nil {
			return err
		}
		defer nc.Close()
		js, err := jetstream.New(nc)
		if err != nil {
			return err
		}
		var st jetstream.Stream
		for st == nil { // the relay creates the stream (sink.create_stream) when it starts
			if st, err = js.Stream(ctx, *stream); err != nil {
				if !errors.Is(err, jetstream.ErrStreamNotFound) {
					return err
				}
				select {
				case <-ctx.Done():
					return nil
				case <-time.After(200 * time.Millisecond):
				}
			}
		}
		cons, err := st.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{Durable: f.Name,
			AckPolicy: jetstream.AckExplicitPolicy, DeliverPolicy: jetstream.DeliverAllPolicy})
		if err != nil {
			return err
		}
		it, err := cons.Messages()
		if err != nil {
			return err
		}
		defer context.AfterFunc(ctx, it.Stop)()
		for {
			msg, err := it.Next()
			if err != nil {
				if ctx.Err() != nil || errors.Is(err, jetstream.ErrMsgIteratorClosed) {
					return nil
				}
				return err
			}
			m, err := outboxconsumer.FromNATS(msg.Headers(), msg.Data(), shop.Fields())
			if err == nil {
				err = handle(m)
			}
			if err != nil {
				msg.Nak()
				return err
			}
			if err := msg.Ack(); err != nil {
				return err
			}
		}
	})
}
