// Command consume-amqp applies the order events from RabbitMQ, read with
// amqp091-go, to its own database, each exactly once (examples/shop,
// outboxconsumer):
//
//	consume-amqp -url amqp://guest:guest@127.0.0.1:5672/ -exchange outbox -queue orders-view -mode dedupe
//
// It declares its queue and binds it to the relay's exchange with "#"
// (start it before the relay publishes: RabbitMQ keeps nothing for a queue
// that does not exist yet), and acknowledges a message only after it was
// applied.
package main

import (
	"context"
	"errors"
	"flag"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outbox-cdc/outbox-cdc/examples/shop"
	"github.com/outbox-cdc/outbox-cdc/outboxconsumer"
)

func main() {
	var f shop.ConsumerFlags
	f.Register(flag.CommandLine)
	url := flag.String("url", "amqp://guest:guest@127.0.0.1:5672/", "AMQP URL")
	exchange := flag.String("exchange", "outbox", "the relay's exchange (declared as a topic exchange if missing)")
	queue := flag.String("queue", "", "the queue (default: the consumer's -name)")
	del := flag.Bool("delete", false, "delete the queue and the exchange when done (for a one-off run)")
	flag.Parse()
	if *queue == "" {
		*queue = f.Name
	}
	f.Run(func(ctx context.Context, handle func(outboxconsumer.Message) error) error {
		conn, err := amqp.Dial(*url)
		if err != nil {
			return err
		}
		defer conn.Close()
		ch, err := conn.Channel()
		if err != nil {
			return err
		}
		if err := ch.ExchangeDeclare(*exchange, "topic", true, false, false, false, nil); err != nil {
			return err
		}
		if _, err := ch.QueueDeclare(*queue, true, false, false, false, nil); err != nil {
			return err
		}
		if *del {
			defer func() {
				if c, err := conn.Channel(); err == nil {
					c.QueueDelete(*queue, false, false, false)
					c.ExchangeDelete(*exchange, false, false)
				}
			}()
		}
		if err := ch.QueueBind(*queue, "#", *exchange, false, nil); err != nil {
			return err
		}
		if err := ch.Qos(100, 0, false); err != nil {
			return err
		}
		ds, err := ch.Consume(*queue, f.Name, false, false, false, false, nil)
		if err != nil {
			return err
		}
		for {
			select {
			case <-ctx.Done():
				return nil
			case d, ok := <-ds:
				if !ok {
					return errors.New("the channel closed")
				}
				m, err := outboxconsumer.FromAMQP(d.MessageId, d.Type, d.Headers, d.Body, shop.Fields())
				if err == nil {
					err = handle(m)
				}
				if err != nil {
					d.Nack(false, true) // back to the queue, applied later
					return err
				}
				if err := d.Ack(false); err != nil {
					return err
				}
			}
		}
	})
}
