package sinktest

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outbox-cdc/outbox-cdc/sink/rabbitmq"
	"github.com/outbox-cdc/outbox-cdc/test/testenv"
)

// TestRabbitMQ holds the RabbitMQ sink to the contract. The connector
// reaches the broker through a testenv.Proxy (silenced and cut for an
// outage); an independent amqp091 consumer reads a queue bound to the
// test's exchange with "#" (rabbitmqadmin needs the management plugin,
// which is not enabled on the shared broker).
func TestRabbitMQ(t *testing.T) { Run(t, rabbitTarget{}) }

type rabbitTarget struct{}

func (rabbitTarget) Prepare(t *testing.T, o Options) *Setup {
	u := testenv.RabbitMQURL(t)
	conn, err := amqp.Dial(u)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	exchange := fmt.Sprintf("sinktest.%d", rand.Int64())
	if err := ch.ExchangeDeclare(exchange, "topic", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if c, err := amqp.Dial(u); err == nil {
			if ch, err := c.Channel(); err == nil {
				ch.ExchangeDelete(exchange, false, false)
			}
			c.Close()
		}
	})
	q, err := ch.QueueDeclare("", false, true, true, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind(q.Name, "#", exchange, false, nil); err != nil {
		t.Fatal(err)
	}
	ds, err := ch.Consume(q.Name, "", true, true, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var got []Message
	go func() {
		for d := range ds {
			h := map[string]string{}
			for k, v := range d.Headers {
				switch v := v.(type) {
				case string:
					h[k] = v
				case []byte:
					h[k] = string(v)
				}
			}
			mu.Lock()
			got = append(got, Message{Stream: d.RoutingKey, Key: h[rabbitmq.HeaderKey], DedupeID: d.MessageId, Value: string(d.Body), Headers: h})
			mu.Unlock()
		}
	}()

	p := testenv.NewProxy(t, testenv.HostOf(t, u))
	s := &Setup{
		Topic:    "{aggregate_type}",
		DLQTopic: "dead.letters",
		Sink: fmt.Sprintf("  type: rabbitmq\n  url: %q\n  exchange: %q\n  ack_timeout: 5s\n  heartbeat: 2s\n  dial_timeout: 8s\n  retry_backoff_max: 1s\n  ready_interval: 500ms\n",
			testenv.WithHost(t, u, p.Addr()), exchange),
		Down: func(*testing.T) { p.Silence(); p.Cut() },
		Up:   func(*testing.T) { p.Heal() },
	}
	if o.MaxMessageBytes > 0 {
		s.Sink += fmt.Sprintf("  max_message_bytes: %d\n", o.MaxMessageBytes)
	}
	s.Read = func(t *testing.T, n int, timeout time.Duration) []Message {
		deadline := time.Now().Add(timeout)
		for {
			mu.Lock()
			have := len(got)
			mu.Unlock()
			if have >= n && n > 0 || time.Now().After(deadline) {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		mu.Lock()
		defer mu.Unlock()
		return append([]Message(nil), got...)
	}
	return s
}
