package e2e

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-cdc/outbox-cdc/examples/shop"
	"github.com/outbox-cdc/outbox-cdc/outboxconsumer"
	"github.com/outbox-cdc/outbox-cdc/test/testenv"
)

// The consumer kit end to end: the order service of examples/shop writes
// orders and their events with outboxwriter (committing and rolling back)
// into MariaDB or PostgreSQL, the relay binary delivers them to a broker
// while it is killed with SIGKILL three times, and three consumers apply
// them to their own database: with the dedupe table, with Redis in front
// of it (a private Redis, killed and restarted empty mid-run), and with the
// state machine alone. Each must end with every committed event applied
// exactly once (0 missing, 0 twice, none of a rolled-back transaction),
// the orders in their final states, and duplicates seen and skipped:
// without duplicates the run would prove nothing.

// kitBroker is one broker of the test: the relay's sink and topic, and a
// subscriber that hands each delivered message to handle, one at a time in
// delivery order, acknowledging it only after handle returned.
type kitBroker struct {
	sink, topic string
	// subscribe starts a consumer called name before the relay writes.
	subscribe func(t *testing.T, name string, client string, handle func(outboxconsumer.Message) error)
}

func TestConsumerKitKafka(t *testing.T)    { runConsumerKit(t, kafkaKit) }
func TestConsumerKitRabbitMQ(t *testing.T) { runConsumerKit(t, rabbitKit) }
func TestConsumerKitNATS(t *testing.T)     { runConsumerKit(t, natsKit) }
func TestConsumerKitRedis(t *testing.T)    { runConsumerKit(t, redisKit) }

// kitConsumers are the three consumers, and the client each reads with
// where the broker has more than one (Kafka: sarama and franz-go).
var kitConsumers = []struct {
	mode   shop.Mode
	client string
}{{shop.ModeDedupe, "sarama"}, {shop.ModeRedis, "franz"}, {shop.ModeMachine, "franz"}}

func runConsumerKit(t *testing.T, prepare func(t *testing.T) kitBroker) {
	for _, kind := range []string{"mysql", "postgres"} {
		t.Run(kind, func(t *testing.T) {
			ctx := context.Background()
			name := testObjectName(t)
			var src, dst *sql.DB
			var srcDSN, prefix, dstPrefix, sourceYAML string
			if kind == "mysql" {
				src, srcDSN = testenv.ScratchMySQL(t, name)
				dst, _ = testenv.ScratchMySQL(t, testenv.UniqueName(t, "kc"))
				sourceYAML = fmt.Sprintf("  type: mysql\n  dsn: %q\n  table: outbox_message\n  start: latest\n", srcDSN)
			} else {
				src, srcDSN = testenv.ScratchPostgres(t, name)
				dstName := testenv.UniqueName(t, "kc")
				dst, _ = testenv.ScratchPostgres(t, dstName)
				prefix, dstPrefix = name+".", dstName+"."
				sourceYAML = fmt.Sprintf("  type: postgres\n  dsn: %q\n  table: %s.outbox_message\n  slot: %s\n  publication: %s\n", srcDSN, name, name, name)
			}
			svc, err := shop.NewService(src, kind, prefix)
			if err != nil {
				t.Fatal(err)
			}
			if err := svc.Setup(ctx); err != nil {
				t.Fatal(err)
			}

			rs := testenv.StartPrivateRedis(t)
			rc := redis.NewClient(&redis.Options{Addr: rs.Addr(), MaxRetries: -1, DialTimeout: 200 * time.Millisecond,
				ReadTimeout: 200 * time.Millisecond, WriteTimeout: 200 * time.Millisecond})
			t.Cleanup(func() { rc.Close() })

			b := prepare(t)
			type running struct {
				c       *shop.Consumer
				retries atomic.Int64
			}
			var consumers []*running
			for _, k := range kitConsumers {
				c, err := shop.NewConsumer(dst, kind, dstPrefix, "kit_"+string(k.mode), k.mode, rc)
				if err != nil {
					t.Fatal(err)
				}
				if err := c.Setup(ctx); err != nil {
					t.Fatal(err)
				}
				r := &running{c: c}
				consumers = append(consumers, r)
				cctx, cancel := context.WithCancel(ctx)
				b.subscribe(t, "kit_"+string(k.mode), k.client, func(m outboxconsumer.Message) error {
					return c.HandleRetrying(cctx, m, func(err error) {
						if r.retries.Add(1) <= 3 {
							t.Logf("%s: %s retried: %v", k.mode, m, err)
						}
					})
				})
				t.Cleanup(cancel) // runs before the subscriber's cleanup, which waits for handle
			}

			cfg := writeConfig(t, fmt.Sprintf(`
name: %s
source:
%sroute:
  preset: seed
  topic: %q
  headers: [%s]
sink:
%spipeline:
  checkpoint_interval: 1s
checkpoint:
  type: file
  path: %q
`, connName(t, "e2e-kit"), sourceYAML, b.topic, shop.SequenceHeader, b.sink, filepath.Join(t.TempDir(), "checkpoint")))
			relay := testenv.Start(t, cfg)

			w := startShop(t, svc, 3, 40)
			// The relay is killed three times mid-run (after the first,
			// the filter's Redis dies too, and comes back empty a little
			// later).
			for i := 0; i < 3; i++ {
				time.Sleep(time.Duration(600+rand.Intn(400)) * time.Millisecond)
				relay.Kill()
				if i == 1 {
					rs.Kill()
				}
				time.Sleep(100 * time.Millisecond)
				relay = testenv.Start(t, cfg)
				if i == 1 {
					time.Sleep(300 * time.Millisecond) // replays meet a dead Redis
					rs.Restart()
				}
			}
			want := w.wait(t)

			for i, r := range consumers {
				mode := kitConsumers[i].mode
				testenv.Eventually(t, 90*time.Second, fmt.Sprintf("consumer %s to apply all %d committed events", mode, len(want.committed)), func() bool {
					l, err := r.c.Ledger(ctx)
					if err != nil {
						t.Fatal(err)
					}
					n := 0
					for _, id := range want.committed {
						if l[id] > 0 {
							n++
						}
					}
					return n == len(want.committed)
				})
			}
			time.Sleep(time.Second) // late copies still arrive and are skipped
			if err := relay.Stop(15 * time.Second); err != nil {
				t.Fatalf("SIGTERM exit: %v", err)
			}
			for i, r := range consumers {
				mode := kitConsumers[i].mode
				l, err := r.c.Ledger(ctx)
				if err != nil {
					t.Fatal(err)
				}
				committed := map[string]bool{}
				for _, id := range want.committed {
					committed[id] = true
					if l[id] != 1 {
						t.Errorf("%s: event %s applied %d times", mode, id, l[id])
					}
				}
				for id := range l {
					if !committed[id] {
						t.Errorf("%s: applied %s, which no committed transaction wrote (rolled back: %v)", mode, id, want.rolledBack[id])
					}
				}
				states, err := r.c.States(ctx)
				if err != nil {
					t.Fatal(err)
				}
				for no, st := range want.states {
					if states[no] != st {
						t.Errorf("%s: order %s is %q, want %q", mode, no, states[no], st)
					}
				}
				if len(states) != len(want.states) {
					t.Errorf("%s: %d orders in the view, %d committed", mode, len(states), len(want.states))
				}
				s := r.c.Stats()
				t.Logf("%s: %d events applied, %d duplicates skipped, %d retries; dedupe %+v redis %+v machine %+v order %+v",
					mode, len(l), s.Duplicates, r.retries.Load(), s.Dedupe, s.Redis, s.Machine, s.Order)
				if s.Duplicates == 0 {
					t.Errorf("%s: no duplicate arrived, so the run proves nothing: the kills did not make the relay send anything again", mode)
				}
				if s.Order.Gaps != 0 || s.Order.Stale != 0 {
					t.Errorf("%s: the order check found %d gaps and %d reorders", mode, s.Order.Gaps, s.Order.Stale)
				}
				if mode == shop.ModeRedis && s.Redis.Errors+s.Redis.Misses == 0 {
					t.Errorf("redis: neither an error nor a miss: the Redis restart was not exercised")
				}
			}
			t.Logf("%d events committed, %d rolled back, %d orders", len(want.committed), len(want.rolledBack), len(want.states))
		})
	}
}

// shopRun is what the order service committed.
type shopRun struct {
	committed  []string // message ids, in commit order per writer
	rolledBack map[string]bool
	states     map[string]string // order -> final state
}

type shopWriter struct {
	done chan struct{}
	mu   sync.Mutex
	run  shopRun
	err  error
}

// startShop runs writers goroutines, each taking orders orders through
// their lives: created (one in eight rolled back: the order never exists),
// paid (one in three first declined: rolled back, then paid), then shipped
// or cancelled.
func startShop(t *testing.T, svc *shop.Service, writers, orders int) *shopWriter {
	w := &shopWriter{done: make(chan struct{}), run: shopRun{rolledBack: map[string]bool{}, states: map[string]string{}}}
	var wg sync.WaitGroup
	for g := 0; g < writers; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rnd := rand.New(rand.NewSource(int64(g)))
			ctx := context.Background()
			step := func(no, event string, commit bool) bool {
				id, err := svc.Step(ctx, no, event, int64(100+rnd.Intn(900)), commit)
				w.mu.Lock()
				defer w.mu.Unlock()
				if err != nil {
					if w.err == nil {
						w.err = fmt.Errorf("%s %s: %w", no, event, err)
					}
					return false
				}
				if commit {
					w.run.committed = append(w.run.committed, id)
					w.run.states[no] = map[string]string{shop.Created: "CREATED", shop.Paid: "PAID", shop.Shipped: "SHIPPED", shop.Cancelled: "CANCELLED"}[event]
				} else {
					w.run.rolledBack[id] = true
				}
				time.Sleep(10 * time.Millisecond)
				return true
			}
			for i := 0; i < orders; i++ {
				no := fmt.Sprintf("O-%d-%d", g, i)
				if rnd.Intn(8) == 0 {
					step(no, shop.Created, false)
					continue
				}
				if !step(no, shop.Created, true) {
					return
				}
				if rnd.Intn(3) == 0 && !step(no, shop.Paid, false) {
					return
				}
				if !step(no, shop.Paid, true) {
					return
				}
				last := shop.Shipped
				if rnd.Intn(3) == 0 {
					last = shop.Cancelled
				}
				if !step(no, last, true) {
					return
				}
			}
		}()
	}
	go func() { wg.Wait(); close(w.done) }()
	return w
}

func (w *shopWriter) wait(t *testing.T) shopRun {
	<-w.done
	if w.err != nil {
		t.Fatal(w.err)
	}
	return w.run
}

// consumeLoop runs f until the test ends, failing the test if f returns
// an error before that.
func consumeLoop(t *testing.T, what string, f func(ctx context.Context) error) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := f(ctx); err != nil && ctx.Err() == nil {
			t.Errorf("%s: %v", what, err)
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
}

func kafkaKit(t *testing.T) kitBroker {
	_, brokers := testenv.Kafka(t)
	const topic = "outbox.event.ORDER"
	// sarama reads partitions that exist: create the topic first (the
	// relay would auto-create it with the same 3 partitions).
	cfg := sarama.NewConfig()
	cfg.Version = sarama.V2_8_0_0
	admin, err := sarama.NewClusterAdmin(brokers, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := admin.CreateTopic(topic, &sarama.TopicDetail{NumPartitions: 3, ReplicationFactor: 1}, false); err != nil {
		t.Fatal(err)
	}
	admin.Close()
	return kitBroker{
		sink:  fmt.Sprintf("  type: kafka\n  brokers: [%q]\n", brokers[0]),
		topic: "outbox.event.{aggregate_type}",
		subscribe: func(t *testing.T, name, client string, handle func(outboxconsumer.Message) error) {
			if client == "sarama" {
				saramaConsume(t, brokers, topic, handle)
				return
			}
			cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic),
				kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(cl.Close)
			consumeLoop(t, name, func(ctx context.Context) error {
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
						m, e := outboxconsumer.FromKafka(r.Key, r.Value, hs, shop.Fields())
						if e == nil {
							e = handle(m)
						}
						err = e
					})
					if err != nil {
						return err
					}
				}
				return nil
			})
		},
	}
}

// saramaConsume reads every partition of topic from the start, one
// goroutine per partition (order holds per partition, which is per
// aggregate).
func saramaConsume(t *testing.T, brokers []string, topic string, handle func(outboxconsumer.Message) error) {
	cfg := sarama.NewConfig()
	cfg.Version = sarama.V2_8_0_0
	cfg.Consumer.Offsets.Initial = sarama.OffsetOldest
	c, err := sarama.NewConsumer(brokers, cfg)
	if err != nil {
		t.Fatal(err)
	}
	parts, err := c.Partitions(topic)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range parts {
		pc, err := c.ConsumePartition(topic, p, sarama.OffsetOldest)
		if err != nil {
			t.Fatal(err)
		}
		consumeLoop(t, fmt.Sprintf("sarama partition %d", p), func(ctx context.Context) error {
			for {
				select {
				case <-ctx.Done():
					return nil
				case r, ok := <-pc.Messages():
					if !ok {
						return nil
					}
					hs := make([]outboxconsumer.Header, len(r.Headers))
					for i, h := range r.Headers {
						hs[i] = outboxconsumer.Header{Key: string(h.Key), Value: h.Value}
					}
					m, err := outboxconsumer.FromKafka(r.Key, r.Value, hs, shop.Fields())
					if err == nil {
						err = handle(m)
					}
					if err != nil {
						return err
					}
				}
			}
		})
		t.Cleanup(func() { pc.Close() })
	}
	t.Cleanup(func() { c.Close() })
}

func rabbitKit(t *testing.T) kitBroker {
	u := testenv.RabbitMQURL(t)
	conn, err := amqp.Dial(u)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	exchange := testenv.UniqueName(t, "kit")
	setup, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := setup.ExchangeDeclare(exchange, "topic", false, true, false, false, nil); err != nil {
		t.Fatal(err)
	}
	return kitBroker{
		sink:  fmt.Sprintf("  type: rabbitmq\n  url: %q\n  exchange: %q\n", u, exchange),
		topic: "{aggregate_type}",
		subscribe: func(t *testing.T, name, _ string, handle func(outboxconsumer.Message) error) {
			ch, err := conn.Channel()
			if err != nil {
				t.Fatal(err)
			}
			q, err := ch.QueueDeclare("", false, true, true, false, nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := ch.QueueBind(q.Name, "#", exchange, false, nil); err != nil {
				t.Fatal(err)
			}
			if err := ch.Qos(100, 0, false); err != nil {
				t.Fatal(err)
			}
			ds, err := ch.Consume(q.Name, name, false, true, false, false, nil)
			if err != nil {
				t.Fatal(err)
			}
			consumeLoop(t, name, func(ctx context.Context) error {
				for {
					select {
					case <-ctx.Done():
						return nil
					case d, ok := <-ds:
						if !ok {
							return errors.New("delivery channel closed")
						}
						m, err := outboxconsumer.FromAMQP(d.MessageId, d.Type, d.Headers, d.Body, shop.Fields())
						if err == nil {
							err = handle(m)
						}
						if err != nil {
							return err
						}
						if err := d.Ack(false); err != nil {
							return err
						}
					}
				}
			})
		},
	}
}

func natsKit(t *testing.T) kitBroker {
	u := testenv.NATSURL(t)
	nc, err := nats.Connect(u)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	stream := strings.ToUpper(testenv.UniqueName(t, "kit"))
	subject := strings.ToLower(stream)
	ctx := context.Background()
	// A duplicate window far shorter than a relay restart: the copies the
	// relay sends again after a kill are stored again, as they are when a
	// restart takes longer than the default 2 minutes.
	st, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: stream, Subjects: []string{subject + ".>"},
		Storage: jetstream.MemoryStorage, Duplicates: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { js.DeleteStream(context.Background(), stream) })
	return kitBroker{
		sink:  fmt.Sprintf("  type: nats\n  url: %q\n  stream: %s\n", u, stream),
		topic: subject + ".{aggregate_type}.{aggregate_id}",
		subscribe: func(t *testing.T, name, _ string, handle func(outboxconsumer.Message) error) {
			cons, err := st.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{Durable: name, AckPolicy: jetstream.AckExplicitPolicy,
				DeliverPolicy: jetstream.DeliverAllPolicy, AckWait: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			it, err := cons.Messages()
			if err != nil {
				t.Fatal(err)
			}
			consumeLoop(t, name, func(ctx context.Context) error {
				stop := context.AfterFunc(ctx, it.Stop) // Next does not watch ctx
				defer stop()
				for ctx.Err() == nil {
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
						return err
					}
					if err := msg.Ack(); err != nil {
						return err
					}
				}
				return nil
			})
		},
	}
}

func redisKit(t *testing.T) kitBroker {
	u := testenv.RedisURL(t)
	opt, err := redis.ParseURL(u)
	if err != nil {
		t.Fatal(err)
	}
	rc := redis.NewClient(opt)
	t.Cleanup(func() { rc.Close() })
	prefix := testenv.UniqueName(t, "kit") + ":"
	stream := prefix + "ORDER"
	t.Cleanup(func() { rc.Del(context.Background(), stream) })
	return kitBroker{
		sink:  fmt.Sprintf("  type: redis\n  url: %q\n", u),
		topic: prefix + "{aggregate_type}",
		subscribe: func(t *testing.T, name, _ string, handle func(outboxconsumer.Message) error) {
			if err := rc.XGroupCreateMkStream(context.Background(), stream, name, "0").Err(); err != nil {
				t.Fatal(err)
			}
			consumeLoop(t, name, func(ctx context.Context) error {
				for ctx.Err() == nil {
					res, err := rc.XReadGroup(ctx, &redis.XReadGroupArgs{Group: name, Consumer: name, Streams: []string{stream, ">"},
						Count: 100, Block: 200 * time.Millisecond}).Result()
					if errors.Is(err, redis.Nil) {
						continue
					}
					if err != nil {
						if ctx.Err() != nil {
							return nil
						}
						return err
					}
					for _, s := range res {
						for _, x := range s.Messages {
							m, err := outboxconsumer.FromRedisStream(x.Values, shop.Fields())
							if err == nil {
								err = handle(m)
							}
							if err != nil {
								return err
							}
							if err := rc.XAck(ctx, stream, name, x.ID).Err(); err != nil {
								return err
							}
						}
					}
				}
				return nil
			})
		},
	}
}
