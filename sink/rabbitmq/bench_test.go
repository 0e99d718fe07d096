package rabbitmq

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/rs/zerolog"

	"github.com/outbox-cdc/outbox-cdc/test/testenv"
)

// BenchmarkWrite: batches of 1000 confirmed records (about 100 bytes each)
// to the local RabbitMQ, into a queue that keeps only the newest 1000
// (drop-head: nothing is nacked, the shared broker holds little).
func BenchmarkWrite(b *testing.B) {
	u := testenv.RabbitMQURL(b)
	c, err := amqp.Dial(u)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	ch, err := c.Channel()
	if err != nil {
		b.Fatal(err)
	}
	ex := fmt.Sprintf("bench.%d", rand.Int64())
	if err := ch.ExchangeDeclare(ex, "topic", false, true, false, false, nil); err != nil {
		b.Fatal(err)
	}
	q, err := ch.QueueDeclare("", false, true, true, false, amqp.Table{"x-max-length": int32(1000)})
	if err != nil {
		b.Fatal(err)
	}
	if err := ch.QueueBind(q.Name, "#", ex, false, nil); err != nil {
		b.Fatal(err)
	}
	s, err := New(testConfig(u, ex), zerolog.Nop(), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	recs := records(1000, 7)
	b.SetBytes(int64(len(recs) * recs[0].Size()))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := s.Write(context.Background(), recs); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*len(recs))/b.Elapsed().Seconds(), "records/s")
}
