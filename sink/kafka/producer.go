package kafka

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
	"github.com/outbox-cdc/outbox-cdc/sink"
)

// kafkaSink is what the at-least-once sink (Kafka) and the exactly-once
// sink (Transactional) share: the configuration, one set of metrics
// (outboxcdc.SinkMetrics), the blocked-topic bookkeeping, readiness, and
// the producer lifecycle (producers).
type kafkaSink struct {
	cfg     KafkaConfig
	log     zerolog.Logger
	m       *outboxcdc.SinkMetrics
	blocked *blockedTopics

	// headerKeys caches header keys as bytes; used by the writing
	// goroutine only (under writing).
	headerKeys headerKeyCache
	// preset: uncompressed batches, whose records the sink encodes
	// itself (recordenc.go); pendings then skip the sarama headers.
	preset bool

	// writing is held by every Write (and Load), so Close can wait for
	// the one in progress: sarama panics on a send to a closed producer.
	writing sync.Mutex

	producers *producers
	stop      chan struct{} // closed by Close

	// mem bounds the bytes of records sent and not yet answered.
	mem *outboxcdc.ByteBudget
	// Used by the writing goroutine only (direct.go).
	roundRobin int32                   // partition of the next null-key record
	oneByOne   map[topicPartition]bool // partitions whose batch was refused whole in this write
	bufs       writeBufs
	sending    atomic.Int32 // goroutines sending requests (of this or an abandoned write)

	probing   atomic.Bool   // a probe's request is pending
	probeDone chan struct{} // closed when probeLoop returns

	// fence, when set, is asked before every produce request (SetFence).
	fence atomic.Pointer[func() error]

	health *sink.Health
}

func newKafkaSink(cfg KafkaConfig, log zerolog.Logger, reg prometheus.Registerer, notYet, upMsg string,
	start func() (*sarama.Config, error)) *kafkaSink {
	s := &kafkaSink{
		cfg:        cfg,
		log:        log,
		m:          outboxcdc.NewSinkMetrics(reg),
		blocked:    newBlockedTopics(cfg.UnwritableTopicTimeout, reg),
		headerKeys: headerKeyCache{},
		stop:       make(chan struct{}),
		probeDone:  make(chan struct{}),
		mem:        outboxcdc.NewByteBudget(cfg.MaxInFlightBytes),
		oneByOne:   map[topicPartition]bool{},
	}
	var codec sarama.CompressionCodec
	s.preset = codec.UnmarshalText([]byte(cfg.Compression)) == nil && presetting(codec)
	s.health = sink.NewHealth("kafka", notYet, upMsg, s.m, log)
	s.producers = &producers{brokers: cfg.Brokers, config: start, stop: s.stop}
	cfg.warnSecurity(log)
	return s
}

// Ready returns nil while the brokers answer and no topic is blocked.
func (s *kafkaSink) Ready() error {
	if err := s.blocked.ready(); err != nil {
		return err
	}
	return s.health.Ready()
}

// untilClosed returns ctx, cancelled also when the sink is closed.
func (s *kafkaSink) untilClosed(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		select {
		case <-s.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

// isClosed reports whether Close was called.
func (s *kafkaSink) isClosed() bool {
	select {
	case <-s.stop:
		return true
	default:
		return false
	}
}

// reached records that a broker answered.
func (s *kafkaSink) reached() { s.health.Reached() }

// failed records a failed attempt or check.
func (s *kafkaSink) failed(err error) { s.health.Failed(err) }

// closeProducers shuts the producers down (after stop is closed and the
// writing goroutine has stopped), waiting until deadline at most.
func (s *kafkaSink) closeProducers(deadline time.Time) {
	if !s.producers.close(deadline) {
		s.log.Warn().Dur("waited", closeWait).Msg("kafka producer did not shut down in time; abandoning it")
	}
	s.health.Closed(sink.ErrClosed)
}

// acquire takes n bytes of the in-flight budget (max_in_flight_bytes),
// waiting while it is spent; sink.ErrClosed once the sink is closed.
func (s *kafkaSink) acquire(ctx context.Context, n int64) error {
	err := s.mem.Acquire(ctx, s.stop, n)
	if errors.Is(err, outboxcdc.ErrBudgetStopped) {
		return sink.ErrClosed
	}
	return err
}

// closedError is what a Write returns once the sink is closed.
func closedError() error {
	return &Error{Index: -1, Partition: -1, Err: sink.ErrClosed, Permanent: true}
}

// producer is one sarama client with the producer identity the sink got
// at its start: a producer id and epoch from InitProducerId (for the
// exactly-once sink, of its transactional id), and the sequence numbers
// continued from them. The sink builds its produce requests itself
// (direct.go).
type producer struct {
	client sarama.Client
	idem   *idempotence
}

func startProducer(brokers []string, sc *sarama.Config) (*producer, error) {
	// sarama's own producer settings are not used: the sink keeps the
	// producer id and sequences itself, with several requests in flight
	// per connection (sarama's client refuses that for its idempotent
	// producer, which keeps one).
	tid, timeout := sc.Producer.Transaction.ID, sc.Producer.Transaction.Timeout
	sc.Producer.Idempotent = false
	sc.Producer.Transaction.ID = ""
	sc.Net.MaxOpenRequests = pipelineDepth
	client, err := sarama.NewClient(brokers, sc)
	if err != nil {
		return nil, err
	}
	var idem *idempotence
	if tid != "" {
		idem, err = initTransactional(client, tid, timeout)
	} else {
		idem, err = initIdempotence(client)
	}
	if err != nil {
		_ = client.Close()
		return nil, err
	}
	return &producer{client: client, idem: idem}, nil
}

// shutdown closes the producer's client; requests still in flight fail.
func (p *producer) shutdown() {
	_ = p.client.Close()
}

// producers holds a sink's current producer. It starts one when there is
// none — in its own goroutine, as sarama's start is not cancellable,
// shared by concurrent callers — and retires producers in the background.
// After a failed attempt a sink retires its producer and the next get
// starts a fresh one: a new producer id (or, transactional, a new epoch),
// fresh metadata and connections, no stale sequence numbers.
type producers struct {
	brokers []string
	config  func() (*sarama.Config, error)
	// onStart is called once per started producer, before any caller
	// gets it (set before first use).
	onStart func(*producer)
	stop    <-chan struct{}

	mu     sync.Mutex
	cur    *producer
	dial   *dialing
	closed bool
	bg     sync.WaitGroup // retiring producers
}

type dialing struct {
	done chan struct{}
	p    *producer
	err  error
}

// get returns the current producer, starting one if there is none. It
// returns sink.ErrClosed after close, and ctx's error when ctx ends first (a
// start under way goes on and its producer becomes current).
func (ps *producers) get(ctx context.Context) (*producer, error) {
	ps.mu.Lock()
	if ps.closed {
		ps.mu.Unlock()
		return nil, sink.ErrClosed
	}
	if ps.cur != nil {
		p := ps.cur
		ps.mu.Unlock()
		return p, nil
	}
	d := ps.dial
	if d == nil {
		d = &dialing{done: make(chan struct{})}
		ps.dial = d
		go ps.start(d)
	}
	ps.mu.Unlock()
	select {
	case <-d.done:
		return d.p, d.err
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-ps.stop:
		return nil, sink.ErrClosed
	}
}

func (ps *producers) start(d *dialing) {
	var p *producer
	sc, err := ps.config()
	if err == nil {
		p, err = startProducer(ps.brokers, sc)
	}
	ps.mu.Lock()
	ps.dial = nil
	closed := ps.closed
	if err == nil && !closed {
		ps.cur = p
	}
	ps.mu.Unlock()
	switch {
	case err != nil:
		d.err = err
	case closed:
		d.err = sink.ErrClosed
		ps.retire(p)
	default:
		if ps.onStart != nil {
			ps.onStart(p)
		}
		d.p = p
	}
	close(d.done)
}

// shut refuses further gets; it reports false when already shut.
func (ps *producers) shut() bool {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	was := ps.closed
	ps.closed = true
	return !was
}

// hasCurrent reports whether a producer is up.
func (ps *producers) hasCurrent() bool {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	return ps.cur != nil
}

// current reports whether p is the current producer.
func (ps *producers) current(p *producer) bool {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	return ps.cur == p
}

// retire makes p no longer current and shuts it down in the background,
// after its in-flight records are answered.
func (ps *producers) retire(p *producer) {
	ps.mu.Lock()
	if ps.cur == p {
		ps.cur = nil
	}
	ps.bg.Add(1)
	ps.mu.Unlock()
	go func() {
		defer ps.bg.Done()
		p.shutdown()
	}()
}

// close refuses further gets, retires the current producer and waits
// until deadline for every producer to shut down; it reports whether they
// did. Call it once the writing goroutine is done with the producers.
func (ps *producers) close(deadline time.Time) bool {
	ps.mu.Lock()
	ps.closed = true
	d := ps.dial
	ps.mu.Unlock()
	if d != nil {
		waitUntil(d.done, deadline) // a producer that came up is retired by start
	}
	ps.mu.Lock()
	p := ps.cur
	ps.mu.Unlock()
	if p != nil {
		ps.retire(p)
	}
	done := make(chan struct{})
	go func() { ps.bg.Wait(); close(done) }()
	return waitUntil(done, deadline)
}

const closeWait = 10 * time.Second

// waitUntil waits for ch to close until deadline; it reports whether it did.
func waitUntil(ch <-chan struct{}, deadline time.Time) bool {
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case <-ch:
		return true
	case <-t.C:
		return false
	}
}

// headerKeyCache caches header keys as bytes, so a record's headers do not
// allocate a key each; bounded, as keys come from configuration. Not safe
// for concurrent use: each sink uses it from its writing goroutine only.
type headerKeyCache map[string][]byte

func (h headerKeyCache) get(s string) []byte {
	if b, ok := h[s]; ok {
		return b
	}
	b := []byte(s)
	if len(h) < 256 {
		h[s] = b
	}
	return b
}

// byteRef is a sarama.Encoder over a byte slice. Used by pointer so that
// storing it in the Encoder interface does not allocate.
type byteRef struct{ b []byte }

func (r *byteRef) Encode() ([]byte, error) { return r.b, nil }
func (r *byteRef) Length() int             { return len(r.b) }

// probeLoop keeps Ready current while no Write proves the connection: when
// no broker answered for ready_interval, it asks one. With start it also
// starts the producer early (so the first Write does not wait for it);
// without (the transactional sink, whose producer start fences other
// instances and is Load's to do) it asks through the current producer
// only.
func (k *kafkaSink) probeLoop(start bool) {
	defer close(k.probeDone)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-k.stop
		cancel()
	}()
	t := time.NewTicker(k.cfg.ReadyInterval)
	defer t.Stop()
	for {
		k.probe(ctx, start)
		select {
		case <-k.stop:
			return
		case <-t.C:
		}
	}
}

func (k *kafkaSink) probe(ctx context.Context, start bool) {
	if k.health.AnsweredWithin(k.cfg.ReadyInterval) {
		return
	}
	if !start && !k.producers.hasCurrent() {
		return
	}
	c, err := k.producers.get(ctx)
	if err != nil {
		if ctx.Err() == nil && !errors.Is(err, sink.ErrClosed) {
			k.failed(err)
		}
		return
	}
	if k.health.AnsweredWithin(k.cfg.ReadyInterval) {
		return // just connected
	}
	// sarama tries every known address in turn, each with its read
	// deadline: a silent broker would take a multiple of it to fail. The
	// probe waits one deadline, then reports the brokers silent; the
	// request goes on in the background (one at a time).
	if !k.probing.CompareAndSwap(false, true) {
		k.failed(fmt.Errorf("no answer from the brokers for more than %s (a metadata request is still pending)", k.cfg.stallAfter()))
		return
	}
	res := make(chan error, 1)
	go func() {
		defer k.probing.Store(false)
		topics, err := c.client.Topics()
		if err == nil {
			if len(topics) > 0 {
				err = c.client.RefreshMetadata(topics...)
			} else if b := c.client.LeastLoadedBroker(); b == nil {
				err = sarama.ErrOutOfBrokers
			} else {
				_, err = b.ApiVersions(&sarama.ApiVersionsRequest{})
			}
		}
		res <- err
	}()
	t := time.NewTimer(k.cfg.stallAfter())
	select {
	case err = <-res:
		t.Stop()
	case <-t.C:
		err = fmt.Errorf("no answer from the brokers within %s (produce_timeout + 10s): the network path may be cut", k.cfg.stallAfter())
	case <-ctx.Done():
		t.Stop()
		return
	}
	if ctx.Err() != nil {
		return
	}
	if k.producers.current(c) { // else retired meanwhile; the Write that retired it reports
		k.health.Probed(err, k.cfg.ReadyInterval)
	}
}
