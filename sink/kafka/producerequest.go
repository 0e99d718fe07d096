package kafka

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/IBM/sarama"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
)

// Both Kafka sinks build their produce requests themselves, with sarama's
// client (metadata, leaders, connections, TLS, SASL) and sarama's protocol
// types (ProduceRequest, RecordBatch), instead of handing records one at a
// time to sarama's AsyncProducer: the profile of a drain showed its
// per-message channels, goroutine switches and copies as the largest share
// of the connector's CPU. An attempt cuts each partition's records into
// record batches of up to requestTarget (max_message_bytes at most); each
// leader gets rounds of requests, one batch per partition in a round, up to
// pipelineDepth of them in flight on its connection; the brokers are written
// to side by side. The producer is idempotent as sarama's is: a producer id
// from InitProducerId, and per partition a sequence number that every batch
// continues, so the broker appends a partition's batches in order and drops
// a batch it already holds. The exactly-once sink's transaction protocol is
// in directtxn.go.

// idempotence is one producer's identity at the brokers and its next
// sequence number per partition. Used by the writing goroutine only.
type idempotence struct {
	id    int64
	epoch int16
	seq   map[topicPartition]int32
	txn   *txnState // transactional producers only
}

type topicPartition struct {
	topic     string
	partition int32
}

// initIdempotence asks a broker for a producer id.
func initIdempotence(client sarama.Client) (*idempotence, error) {
	res, err := client.InitProducerID()
	if err != nil {
		return nil, err
	}
	if !errors.Is(res.Err, sarama.ErrNoError) {
		return nil, res.Err
	}
	return &idempotence{id: res.ProducerID, epoch: res.ProducerEpoch, seq: map[topicPartition]int32{}}, nil
}

// next returns the first sequence number of a batch of n records for tp
// and advances tp's sequence (it wraps at 2^31, as Kafka's does).
func (s *idempotence) next(tp topicPartition, n int) int32 {
	first := s.seq[tp]
	s.seq[tp] = int32((int64(first) + int64(n)) & 0x7fffffff)
	return first
}

// pendings makes the pending records of a write: records in order, and
// extra (exactly-once: the progress record) last, with index -1.
func (k *kafkaSink) pendings(records []outboxcdc.Record, extra *outboxcdc.Record) []*pending {
	n := len(records)
	if extra != nil {
		n++
	}
	nh := 0
	for i := range records {
		nh += len(records[i].Headers)
	}
	if extra != nil {
		nh += len(extra.Headers)
	}
	// The previous write's slices when no request of it is in flight any
	// more (an abandoned attempt's may be).
	b := &k.bufs
	if k.preset {
		nh = 0 // the records are encoded from their own headers (recordenc.go)
	}
	if k.sending.Load() != 0 || cap(b.pend) < n || cap(b.hdrs) < nh {
		b.pend = make([]pending, n)
		b.todo = make([]*pending, n)
		b.hdrs = make([]sarama.RecordHeader, 0, nh)
		b.encs = nil
	}
	pend, todo, hdrs := b.pend[:n], b.todo[:n], b.hdrs[:0]
	for i := range pend {
		r, index := extra, -1
		if i < len(records) {
			r, index = &records[i], i
		}
		p := &pend[i]
		*p = pending{rec: r, index: index, size: int64(r.Size())}
		if len(r.Headers) > 0 && !k.preset {
			from := len(hdrs)
			for _, h := range r.Headers {
				hdrs = append(hdrs, sarama.RecordHeader{Key: k.headerKeys.get(h.Key), Value: h.Value})
			}
			p.headers = hdrs[from:len(hdrs):len(hdrs)]
		}
		todo[i] = p
	}
	return todo
}

// writeBufs are the slices a write needs, kept for the next one.
type writeBufs struct {
	pend []pending
	todo []*pending
	hdrs []sarama.RecordHeader
	encs []*encodeBuf // one per broker of an attempt
}

// release drops what the finished write's slices point to (records of a
// batch the pipeline reuses, or of a huge transaction's fragment).
func (b *writeBufs) release() {
	clear(b.pend)
	clear(b.todo)
	clear(b.hdrs[:cap(b.hdrs)])
	for _, e := range b.encs {
		e.reset()
	}
}

// releaseBufs drops what the write's slices point to, unless requests of
// an abandoned attempt still use them.
func (k *kafkaSink) releaseBufs() {
	if k.sending.Load() == 0 {
		k.bufs.release()
	}
}

// linger holds a write of fewer than batch_bytes for sink.linger (see
// KafkaConfig.Linger); it returns ctx's error, or a permanent error after
// Close.
func (k *kafkaSink) linger(ctx context.Context, bytes float64) error {
	if k.cfg.Linger <= 0 || bytes >= float64(k.cfg.BatchBytes) {
		return nil
	}
	return k.sleep(ctx, k.cfg.Linger)
}

// sleep waits d; it returns ctx's error, or a permanent error after Close.
func (k *kafkaSink) sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-k.stop:
		return closedError()
	}
}

// produceVersion is the ProduceRequest version for the configured Kafka
// version, as sarama's own producer chooses it (record batches need v3).
func produceVersion(v sarama.KafkaVersion) int16 {
	switch {
	case v.IsAtLeast(sarama.V3_7_0_0):
		return 10
	case v.IsAtLeast(sarama.V2_8_0_0):
		return 9
	case v.IsAtLeast(sarama.V2_4_0_0):
		return 8
	case v.IsAtLeast(sarama.V2_1_0_0):
		return 7
	case v.IsAtLeast(sarama.V2_0_0_0):
		return 6
	case v.IsAtLeast(sarama.V1_0_0_0):
		return 5
	default:
		return 3
	}
}

// pipelineDepth is how many produce requests one attempt keeps in flight
// on a broker connection (Kafka keeps an idempotent producer's batches in
// order for up to five).
const pipelineDepth = 4

// requestTarget is the size at which a partition's records are cut into
// a further batch (and so a further request), so that a large write goes
// out as several requests that overlap (pipelineDepth).
const requestTarget = 256 << 10

// batchOverhead and recordOverhead bound the encoded size of a record batch
// and of one record in it beyond their keys, values and headers (sarama's
// own conservative estimates).
const (
	batchOverhead  = 49
	recordOverhead = 5*5 + 10 + 1 // five varint32s, one varint64, attributes
	headerOverhead = 2 * 5
)

// wireBytes is the most a record can take in a record batch.
func wireBytes(p *pending) int {
	n := recordOverhead + len(p.rec.Key) + len(p.rec.Value)
	for _, h := range p.rec.Headers {
		n += headerOverhead + len(h.Key) + len(h.Value)
	}
	return n
}

// errNotSent marks the records of a partition after one of its batches
// failed: they were not sent in this attempt.
var errNotSent = errors.New("not sent: an earlier batch of the same partition failed in this attempt")

// partBatch is a run of one partition's records that goes out as one
// record batch.
type partBatch struct {
	tp   topicPartition
	recs []*pending
	size int64 // Record.Size of the records, for the in-flight bound
	seq  int32 // first sequence number
}

// brokerWork is what one attempt sends to one broker: rounds of batches,
// at most one per partition in a round (a produce request holds one batch
// per partition), sent one request after the other.
type brokerWork struct {
	broker *sarama.Broker
	rounds [][]*partBatch
}

// plan groups todo by partition, in record order, and by leader. Records
// whose partition or leader cannot be found are answered with the error
// at once (they are then in the attempt's resend set).
func (k *kafkaSink) plan(c *producer, todo []*pending) []*brokerWork {
	type topicMeta struct {
		n        int32
		writable []int32
		err      error
	}
	metas := map[string]*topicMeta{}
	meta := func(topic string) *topicMeta {
		if m, ok := metas[topic]; ok {
			return m
		}
		m := &topicMeta{}
		all, err := c.client.Partitions(topic)
		switch {
		case err != nil:
			m.err = err
		case len(all) == 0:
			m.err = sarama.ErrUnknownTopicOrPartition
		default:
			m.n = int32(len(all))
			m.writable, _ = c.client.WritablePartitions(topic)
		}
		metas[topic] = m
		return m
	}

	// Partition of every record, then the per-partition runs in order of
	// first appearance.
	// The last record's topic and partition are looked up first: a
	// write's records mostly share a topic.
	var order []topicPartition
	var runs [][]*pending // per partition, in order's order
	index := map[topicPartition]int{}
	var lastTopic string
	var lastMeta *topicMeta
	var lastTP topicPartition
	last := -1
	for _, p := range todo {
		m := lastMeta
		if m == nil || p.rec.Topic != lastTopic {
			m = meta(p.rec.Topic)
			lastTopic, lastMeta = p.rec.Topic, m
		}
		if m.err != nil {
			p.err, p.partition = m.err, -1
			continue
		}
		var part int32
		switch {
		case p.rec.Partition != nil:
			part = *p.rec.Partition
			if part < 0 || part >= m.n {
				p.err, p.partition = sarama.ErrInvalidPartition, -1
				continue
			}
		case p.rec.Key != nil:
			part = JavaPartition(p.rec.Key, m.n)
		case len(m.writable) > 0:
			part = m.writable[k.roundRobin%int32(len(m.writable))]
			k.roundRobin = (k.roundRobin + 1) & 0x7fffffff
		default:
			part = k.roundRobin % m.n
			k.roundRobin = (k.roundRobin + 1) & 0x7fffffff
		}
		p.partition = part
		tp := topicPartition{p.rec.Topic, part}
		if last < 0 || tp != lastTP {
			i, ok := index[tp]
			if !ok {
				i = len(order)
				index[tp] = i
				order = append(order, tp)
				runs = append(runs, nil)
			}
			last, lastTP = i, tp
		}
		runs[last] = append(runs[last], p)
	}

	limit := k.cfg.MaxMessageBytes
	target := min(limit, requestTarget)
	works := map[*sarama.Broker]*brokerWork{}
	var out []*brokerWork
	for i, tp := range order {
		recs := runs[i]
		leader, err := c.client.Leader(tp.topic, tp.partition)
		if err != nil {
			for _, p := range recs {
				p.err = err
			}
			continue
		}
		w := works[leader]
		if w == nil {
			w = &brokerWork{broker: leader}
			works[leader] = w
			out = append(out, w)
		}
		// Cut the run into batches under max_message_bytes (of one
		// record when a batch of tp was refused whole in this Write).
		oneByOne := k.oneByOne[tp]
		round := 0
		cur := &partBatch{tp: tp}
		bytes := batchOverhead
		flush := func() {
			if len(cur.recs) == 0 {
				return
			}
			for len(w.rounds) <= round {
				w.rounds = append(w.rounds, nil)
			}
			w.rounds[round] = append(w.rounds[round], cur)
			for _, p := range cur.recs {
				p.batched = len(cur.recs)
			}
			round++
			cur = &partBatch{tp: tp}
			bytes = batchOverhead
		}
		for _, p := range recs {
			n := wireBytes(p)
			if batchOverhead+n > limit {
				// As sarama: a record that alone exceeds the limit is
				// refused before it is sent.
				p.err = sarama.ConfigurationError(fmt.Sprintf(
					"Attempt to produce message larger than configured Producer.MaxMessageBytes: %d > %d", batchOverhead+n, limit))
				continue
			}
			if len(cur.recs) > 0 && (bytes+n > target || oneByOne) {
				flush()
			}
			cur.recs = append(cur.recs, p)
			cur.size += p.size
			bytes += n
		}
		flush()
	}
	return out
}

// request builds the produce request of one round.
func (k *kafkaSink) request(c *producer, round []*partBatch, enc *encodeBuf) *sarama.ProduceRequest {
	sc := c.client.Config()
	req := &sarama.ProduceRequest{
		Version:      produceVersion(sc.Version),
		RequiredAcks: sarama.WaitForAll,
		Timeout:      int32(sc.Producer.Timeout / time.Millisecond),
	}
	if c.idem.txn != nil {
		req.TransactionalID = &c.idem.txn.id
	}
	now := time.Now()
	preset := k.preset
	enc.raw = enc.raw[:0]
	for _, b := range round {
		ptrs := enc.pointers(len(b.recs))
		var recs []sarama.Record
		if !preset {
			recs = enc.records(len(b.recs))
		}
		from := len(enc.raw)
		var first time.Time
		var maxDelta time.Duration
		for i, p := range b.recs {
			ts := p.rec.Timestamp
			if ts.IsZero() {
				ts = now
			}
			ts = ts.Truncate(time.Millisecond)
			if i == 0 {
				first = ts
			}
			delta := ts.Sub(first)
			maxDelta = max(maxDelta, delta)
			if preset {
				// ptrs[i] stays nil: sarama only counts Records.
				enc.raw = appendRecord(enc.raw, int64(delta/time.Millisecond), int64(i), p.rec.Key, p.rec.Value, p.rec.Headers)
				continue
			}
			r := &recs[i]
			*r = sarama.Record{Key: p.rec.Key, Value: p.rec.Value, TimestampDelta: delta, OffsetDelta: int64(i)}
			if len(p.headers) > 0 {
				r.Headers = enc.headers(p.headers)
			}
			ptrs[i] = r
		}
		batch := &sarama.RecordBatch{
			Version:          2,
			Codec:            sc.Producer.Compression,
			CompressionLevel: sc.Producer.CompressionLevel,
			FirstTimestamp:   first,
			MaxTimestamp:     first.Add(maxDelta),
			LastOffsetDelta:  int32(len(ptrs) - 1),
			ProducerID:       c.idem.id,
			ProducerEpoch:    c.idem.epoch,
			FirstSequence:    b.seq,
			Records:          ptrs,
			IsTransactional:  c.idem.txn != nil,
		}
		if preset {
			setRecords(batch, enc.raw[from:len(enc.raw):len(enc.raw)])
		}
		req.AddBatch(b.tp.topic, b.tp.partition, batch)
	}
	return req
}

// encodeBuf holds the sarama records of one attempt in a few large
// slices rather than one allocation per record and header, or, for
// uncompressed batches, the records encoded (raw, reused by every request:
// sarama copies it into the request before AsyncProduce returns).
type encodeBuf struct {
	recs []sarama.Record
	ptrs []*sarama.Record
	hdrs []*sarama.RecordHeader
	raw  []byte
}

// maxKeptRaw is the most of raw kept between writes.
const maxKeptRaw = 4 << 20

// reset empties e for the next attempt, dropping what it pointed to.
func (e *encodeBuf) reset() {
	clear(e.recs)
	clear(e.ptrs)
	clear(e.hdrs)
	e.recs, e.ptrs, e.hdrs = e.recs[:0], e.ptrs[:0], e.hdrs[:0]
	if cap(e.raw) > maxKeptRaw {
		e.raw = nil
	}
	e.raw = e.raw[:0]
}

func (e *encodeBuf) records(n int) []sarama.Record {
	if cap(e.recs)-len(e.recs) < n {
		e.recs = make([]sarama.Record, 0, max(n, 2*cap(e.recs)))
	}
	out := e.recs[len(e.recs) : len(e.recs)+n]
	e.recs = e.recs[:len(e.recs)+n]
	return out
}

func (e *encodeBuf) pointers(n int) []*sarama.Record {
	if cap(e.ptrs)-len(e.ptrs) < n {
		e.ptrs = make([]*sarama.Record, 0, max(n, 2*cap(e.ptrs)))
	}
	out := e.ptrs[len(e.ptrs) : len(e.ptrs)+n : len(e.ptrs)+n]
	e.ptrs = e.ptrs[:len(e.ptrs)+n]
	return out
}

func (e *encodeBuf) headers(hs []sarama.RecordHeader) []*sarama.RecordHeader {
	n := len(hs)
	if cap(e.hdrs)-len(e.hdrs) < n {
		e.hdrs = make([]*sarama.RecordHeader, 0, max(n, 2*cap(e.hdrs), 1024))
	}
	out := e.hdrs[len(e.hdrs) : len(e.hdrs)+n : len(e.hdrs)+n]
	e.hdrs = e.hdrs[:len(e.hdrs)+n]
	for i := range hs {
		out[i] = &hs[i]
	}
	return out
}

// send runs one broker's rounds, one request after the other, and
// answers every record of them. A partition whose batch failed sends
// nothing more in this attempt: its later records are answered errNotSent
// (the attempt's resend set takes them, in order, with a fresh producer).
// Before each request it asks fence (nil: none) and takes room under
// max_in_flight_bytes (room); when either refuses (fence, ctx, Close), the
// rest is answered errNotSent too.
func (k *kafkaSink) send(c *producer, w *brokerWork, enc *encodeBuf, a *attempt, fence func() error, wait func(int64) error) {
	type answer struct {
		res *sarama.ProduceResponse
		err error
	}
	n := len(w.rounds)
	answers := make([]chan answer, n) // nil: not sent
	sizes := make([]int64, n)
	var failed map[topicPartition]bool
	var stopped, connErr error
	// settle waits for round r's answer and answers its records, in
	// round order.
	settle := func(r int) {
		var ans answer
		if answers[r] != nil {
			ans = <-answers[r]
			a.last.Store(time.Now().UnixNano())
			if ans.err != nil && connErr == nil {
				// The connection is in doubt: the next attempt's
				// producer opens a new one.
				connErr = ans.err
				_ = w.broker.Close()
			}
			k.mem.Release(sizes[r])
		}
		for _, b := range w.rounds[r] {
			berr := ans.err
			switch {
			case answers[r] == nil, failed[b.tp]:
				berr = errNotSent
			case berr == nil:
				blk := ans.res.GetBlock(b.tp.topic, b.tp.partition)
				switch {
				case blk == nil:
					berr = sarama.ErrIncompleteResponse
				case errors.Is(blk.Err, sarama.ErrNoError), errors.Is(blk.Err, sarama.ErrDuplicateSequenceNumber):
					berr = nil
				default:
					berr = blk.Err
				}
			}
			if berr != nil {
				if failed == nil {
					failed = map[topicPartition]bool{}
				}
				failed[b.tp] = true
			}
			for _, p := range b.recs {
				p.err = berr
			}
		}
	}
	// Up to pipelineDepth requests in flight on the connection: the
	// broker works on one while the next is encoded and sent. The
	// sequence numbers keep a partition's batches in order at the broker
	// (a batch after a refused one is refused too).
	next := 0
	for r, round := range w.rounds {
		for r-next >= pipelineDepth {
			settle(next)
			next++
		}
		if stopped == nil && connErr == nil {
			for _, b := range round {
				sizes[r] += b.size
			}
			if fence != nil {
				stopped = fence() // refused: not sent, answered errNotSent
			}
			if stopped == nil {
				stopped = k.room(sizes[r], wait, func() bool {
					if next == r {
						return false
					}
					settle(next)
					next++
					return true
				})
				if stopped == nil && connErr != nil {
					k.mem.Release(sizes[r]) // a settled answer put the connection in doubt: not sent
				}
			}
		}
		if stopped != nil || connErr != nil {
			continue
		}
		ch := make(chan answer, 1)
		err := w.broker.AsyncProduce(k.request(c, round, enc), func(res *sarama.ProduceResponse, err error) {
			ch <- answer{res, err} // on the broker's reader goroutine: only hand it over
		})
		if err != nil {
			ch <- answer{nil, err} // not sent: no callback comes
		}
		answers[r] = ch
	}
	for ; next < n; next++ {
		settle(next)
	}
}

// room takes n bytes of max_in_flight_bytes for a request. The bytes this
// broker's unanswered requests hold come back only when this goroutine
// settles them, so while n does not fit it settles the oldest of them
// (settleOldest; false: none left) and waits (wait) only when it holds
// none: a bound below a few requests' size slows a write down instead of
// stalling it until its context ends.
func (k *kafkaSink) room(n int64, wait func(int64) error, settleOldest func() bool) error {
	for !k.mem.TryAcquire(n) {
		if !settleOldest() {
			return wait(n)
		}
	}
	return nil
}

// SetFence implements outboxcdc.FencedSink: fence is asked right before
// every produce request, the first one of a write and every retry, on the
// goroutine that would send it; when it refuses, the request and the rest
// of the attempt are not sent. fence must not call into the sink.
func (k *kafkaSink) SetFence(fence func() error) { k.fence.Store(&fence) }

// sendAll hands the planned work to the brokers, one goroutine per broker
// so that the requests to different brokers overlap, and returns a channel
// closed when every record has its answer.
func (k *kafkaSink) sendAll(c *producer, works []*brokerWork, a *attempt, wait func(int64) error) <-chan struct{} {
	var fence func() error
	if f := k.fence.Load(); f != nil {
		fence = *f
	}
	var wg sync.WaitGroup
	if k.sending.Load() != 0 {
		k.bufs.encs = nil // an abandoned attempt's goroutines still use them
	}
	for len(k.bufs.encs) < len(works) {
		k.bufs.encs = append(k.bufs.encs, &encodeBuf{})
	}
	for i, w := range works {
		enc := k.bufs.encs[i]
		enc.reset()
		// Sequence numbers in send order, before any goroutine runs.
		for _, round := range w.rounds {
			for _, b := range round {
				b.seq = c.idem.next(b.tp, len(b.recs))
			}
		}
		wg.Add(1)
		k.sending.Add(1)
		go func() {
			defer wg.Done()
			defer k.sending.Add(-1)
			k.send(c, w, enc, a, fence, wait)
		}()
	}
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	return done
}
