// Command consume prints the records of Kafka topics, one line each, for the
// demo and for checking a running connector by hand:
//
//	consume -brokers 127.0.0.1:9092 -regex 'outbox\.event\..*' -n 5
//
// It also reads the other brokers the connector writes to:
//
//	consume -rabbitmq amqp://guest:guest@127.0.0.1:5672/ -exchange outbox -n 5
//	consume -nats nats://127.0.0.1:4222 -stream OUTBOX -n 5 [-delete]
//
// With -rabbitmq it declares the exchange (topic, deleted with the
// consumer's queue) and a queue of its own bound with "#", says "ready" on stderr, then consumes. With -nats
// it reads the stream from its start and, with -delete, deletes the stream
// afterwards.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

func main() {
	brokers := flag.String("brokers", "127.0.0.1:9092", "comma-separated bootstrap brokers")
	topics := flag.String("topics", "", "comma-separated topics")
	regex := flag.String("regex", "", "consume every topic matching this regular expression")
	n := flag.Int("n", 0, "stop after this many records (0: until -timeout)")
	timeout := flag.Duration("timeout", 30*time.Second, "give up after this long")
	committed := flag.Bool("read-committed", true, "read only committed records")
	rabbitURL := flag.String("rabbitmq", "", "read from RabbitMQ at this AMQP URL instead of Kafka")
	exchange := flag.String("exchange", "outbox", "RabbitMQ exchange to bind a queue to")
	natsURL := flag.String("nats", "", "read a JetStream stream at this NATS URL instead of Kafka")
	stream := flag.String("stream", "OUTBOX", "JetStream stream to read")
	del := flag.Bool("delete", false, "delete the JetStream stream after reading it")
	flag.Parse()
	switch {
	case *rabbitURL != "":
		exit(consumeRabbitMQ(*rabbitURL, *exchange, *n, *timeout))
	case *natsURL != "":
		exit(consumeNATS(*natsURL, *stream, *n, *timeout, *del))
	}

	opts := []kgo.Opt{kgo.SeedBrokers(strings.Split(*brokers, ",")...), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart())}
	switch {
	case *regex != "":
		opts = append(opts, kgo.ConsumeRegex(), kgo.ConsumeTopics(*regex), kgo.MetadataMinAge(50*time.Millisecond), kgo.MetadataMaxAge(250*time.Millisecond))
	case *topics != "":
		opts = append(opts, kgo.ConsumeTopics(strings.Split(*topics, ",")...))
	default:
		fmt.Fprintln(os.Stderr, "consume: give -topics or -regex")
		os.Exit(2)
	}
	if *committed {
		opts = append(opts, kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		fmt.Fprintf(os.Stderr, "consume: %v\n", err)
		os.Exit(1)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	seen := 0
	for *n == 0 || seen < *n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			break
		}
		fs.EachError(func(t string, p int32, err error) {
			fmt.Fprintf(os.Stderr, "consume: %s[%d]: %v\n", t, p, err)
		})
		fs.EachRecord(func(r *kgo.Record) {
			seen++
			var hs []string
			for _, h := range r.Headers {
				hs = append(hs, h.Key+"="+string(h.Value))
			}
			fmt.Printf("%s[%d]@%d key=%s headers={%s} value=%s\n", r.Topic, r.Partition, r.Offset, r.Key, strings.Join(hs, ","), r.Value)
		})
	}
	if *n > 0 && seen < *n {
		fmt.Fprintf(os.Stderr, "consume: only %d of %d records within %s\n", seen, *n, *timeout)
		os.Exit(1)
	}
}
