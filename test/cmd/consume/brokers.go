package main

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"
)

func exit(err error) {
	if err != nil {
		fmt.Fprintf(os.Stderr, "consume: %v\n", err)
		os.Exit(1)
	}
	os.Exit(0)
}

func consumeRabbitMQ(url, exchange string, n int, timeout time.Duration) error {
	c, err := amqp.Dial(url)
	if err != nil {
		return err
	}
	defer c.Close()
	ch, err := c.Channel()
	if err != nil {
		return err
	}
	// Auto-deleted with the queue's binding when the consumer goes.
	if err := ch.ExchangeDeclare(exchange, "topic", false, true, false, false, nil); err != nil {
		return err
	}
	q, err := ch.QueueDeclare("", false, true, true, false, nil)
	if err != nil {
		return err
	}
	if err := ch.QueueBind(q.Name, "#", exchange, false, nil); err != nil {
		return err
	}
	ds, err := ch.Consume(q.Name, "", true, true, false, false, nil)
	if err != nil {
		return err
	}
	fmt.Fprintln(os.Stderr, "ready")
	deadline := time.After(timeout)
	for seen := 0; n == 0 || seen < n; seen++ {
		select {
		case d := <-ds:
			var hs []string
			for k, v := range d.Headers {
				hs = append(hs, fmt.Sprintf("%s=%v", k, v))
			}
			sort.Strings(hs)
			fmt.Printf("%s routing_key=%s message_id=%s type=%s headers={%s} body=%s\n",
				exchange, d.RoutingKey, d.MessageId, d.Type, strings.Join(hs, ","), d.Body)
		case <-deadline:
			if n > 0 {
				return fmt.Errorf("only %d of %d messages within %s", seen, n, timeout)
			}
			return nil
		}
	}
	return nil
}

func consumeNATS(url, stream string, n int, timeout time.Duration, del bool) error {
	nc, err := nats.Connect(url)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	seen := 0
	for seq := uint64(1); n == 0 || seen < n; {
		st, err := js.Stream(ctx, stream)
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			return err
		}
		m, err := st.GetMsg(ctx, seq)
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			time.Sleep(100 * time.Millisecond)
			continue
		}
		var hs []string
		for k := range m.Header {
			hs = append(hs, k+"="+m.Header.Get(k))
		}
		sort.Strings(hs)
		fmt.Printf("%s seq=%d subject=%s headers={%s} data=%s\n", stream, m.Sequence, m.Subject, strings.Join(hs, ","), m.Data)
		seen++
		seq++
	}
	if del {
		if err := js.DeleteStream(context.Background(), stream); err != nil {
			return err
		}
	}
	if n > 0 && seen < n {
		return fmt.Errorf("only %d of %d messages within %s", seen, n, timeout)
	}
	return nil
}
