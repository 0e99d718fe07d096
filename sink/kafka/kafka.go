// Package kafka is the Kafka sink: an idempotent producer (Kafka) and a
// transactional one for exactly-once delivery (Transactional), both
// outboxcdc.Sink, with the check and progress-topic tools cmd uses.
package kafka

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"
	outboxcdc "github.com/outbox-cdc/outbox-cdc"
	"github.com/outbox-cdc/outbox-cdc/retry"
	"github.com/outbox-cdc/outbox-cdc/sink"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// Kafka writes records to Kafka as an idempotent producer (acks=all),
// choosing the partition of a keyed record as the Java client does
// (JavaPartition). It builds the produce requests itself on sarama's client
// (direct.go): a Write's records of one partition become record batches of
// up to 256 KiB (max_message_bytes at most), each broker gets requests
// holding its partitions' batches, up to four in flight per connection, and
// the brokers are written to side by side.
//
// # Retries and ordering
//
// A Write is a series of attempts. An attempt sends the records still to be
// delivered, in order, and waits for an answer to every one of them. A
// partition's batches carry consecutive sequence numbers, so the broker
// appends them in order and refuses a batch that follows a refused one;
// once a batch of a partition failed, the attempt sends nothing more of it.
// A batch may still have been appended although its answer was lost, so
// re-sending only the failed records could write a key's records out of
// order. After an attempt the sink therefore re-sends, for every partition
// that saw a failure, the first failed record and every record after it in
// that partition — including ones already acknowledged — in their original
// order. When the partition is unknown (the record failed before one was
// chosen) the same rule applies to the whole topic.
//
// The consequence is at-least-once: after a failure a consumer may see some
// records of a partition twice (at most the records of that partition in
// one Write), and the copies written last are always in order. Between
// attempts the sink backs off exponentially (retry_backoff_min doubling up to
// retry_backoff_max) and starts a new producer, which gets a new producer id
// from the broker, fresh metadata and connections, and recovers from
// sequence errors after a broker lost its state. Retryable failures are
// retried until ctx is done; a permanent failure (see IsPermanent) ends the
// Write at once with an *Error naming the record, topic, partition and Kafka
// error code. A broker refuses a batch as a whole (MESSAGE_TOO_LARGE,
// INVALID_RECORD, ...); when such a batch held several records, the
// partition is sent again one record per batch, so that the error names the
// record at fault.
//
// # Memory
//
// The bytes (Record.Size) of records sent and not yet answered are bounded
// by max_in_flight_bytes; an attempt waits before a request while the bound
// is reached. Records of an abandoned Write (ctx done) stay counted until
// their requests are answered or fail.
type Kafka struct {
	*kafkaSink
}

// NewKafka validates cfg and returns a Kafka sink. It does not wait for the
// brokers: it connects in the background (Ready says when it has) and Write
// waits for the connection, so starting while Kafka is down is not an error.
// Metrics are registered on reg (nil registers none).
func NewKafka(cfg KafkaConfig, log zerolog.Logger, reg prometheus.Registerer) (*Kafka, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	k := &Kafka{}
	log = log.With().Str("component", "sink").Str("sink", "kafka").Logger()
	k.kafkaSink = newKafkaSink(cfg, log, reg, "kafka: not connected yet", "kafka reachable", cfg.clientConfig)
	k.producers.onStart = func(*producer) {
		k.reached()
		k.log.Debug().Msg("kafka producer started")
	}
	k.log.Info().Strs("brokers", cfg.Brokers).Str("client_id", cfg.ClientID).
		Str("compression", cfg.Compression).Dur("linger", cfg.Linger).
		Msg("kafka sink starting (idempotent producer, acks=all, Java murmur2 partitioning)")
	go k.probeLoop(true)
	return k, nil
}

// pending is one record of a Write.
type pending struct {
	rec     *outboxcdc.Record
	headers []sarama.RecordHeader
	index   int
	size    int64
	// Set by each attempt: the answer, the partition chosen and the
	// number of records in the batch that carried the record.
	err       error
	partition int32
	batched   int
}

// attempt is one attempt's progress, for the stall watch.
type attempt struct {
	last atomic.Int64 // unix nanos of the last answer (or the start)
}

// Write sends records and returns nil once every one is acknowledged by all
// in-sync replicas. See the type's documentation for retries and ordering.
// It returns a permanent *Error, or ctx's error (wrapping the last
// retryable failure in its message) when ctx ends first.
func (k *Kafka) Write(ctx context.Context, records []outboxcdc.Record) error {
	if len(records) == 0 {
		return nil
	}
	k.writing.Lock()
	defer k.writing.Unlock()
	defer k.releaseBufs()
	clear(k.oneByOne)
	start := time.Now()
	todo := k.pendings(records, nil)
	bytes := sink.PayloadBytes(records)
	if err := k.linger(ctx, bytes); err != nil {
		return err
	}

	b := retry.New(k.cfg.retryPolicy())
	var lastErr error
	var warns outboxcdc.LogThrottle
	for n := 1; ; n++ {
		again, failErr, err := k.attempt(ctx, todo)
		if err != nil {
			if ctxErr := ctx.Err(); ctxErr != nil && errors.Is(err, ctxErr) {
				if lastErr != nil {
					return sink.GaveUp("kafka", len(todo), len(records), n, lastErr, ctxErr)
				}
				return fmt.Errorf("kafka: %d of %d records not acknowledged: %w", len(todo), len(records), ctxErr)
			}
			return err
		}
		if k.blocked.any() {
			k.unblock(todo)
		}
		if again == nil {
			k.m.Bytes.Add(bytes)
			k.m.WriteSeconds.Observe(time.Since(start).Seconds())
			k.reached()
			if n > 1 {
				k.log.Info().Int("records", len(records)).Int("attempts", n).
					Dur("took", time.Since(start)).Msg("kafka write succeeded after retries")
			}
			return nil
		}
		lastErr = failErr
		if err := k.checkBlocked(again); err != nil {
			return err
		}
		wait := b.Next()
		// One warning when a Write starts failing, then one per
		// WarnInterval while it keeps failing; every attempt at debug.
		ev := warns.Event(&k.log).Int("attempt", n).Int("resend", len(again)).Int("records", len(records)).
			Dur("failing_for", time.Since(start).Round(time.Millisecond)).Dur("backoff", wait)
		if logBlocked(ev, failErr, k.cfg.UnwritableTopicTimeout) {
			ev.Msg("a kafka topic cannot be written yet: its records wait up to sink.unwritable_topic_timeout, then pipeline.on_error decides; nothing is checkpointed meanwhile")
		} else {
			ev.Err(failErr).Msg("kafka write failed, retrying; nothing is checkpointed until it succeeds")
		}
		todo = again
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return sink.GaveUp("kafka", len(todo), len(records), n, lastErr, ctx.Err())
		case <-k.stop:
			t.Stop()
			return k.stopped(ctx, sink.ErrClosed)
		}
	}
}

// checkBlocked notes the records of retry that failed because their topic
// is unknown or not authorized. When a topic has been blocked for
// UnwritableTopicTimeout it returns a permanent *Error naming its first
// record (and, in Others, its other records), so that pipeline.on_error
// decides.
func (k *Kafka) checkBlocked(retry []*pending) error {
	var expired *Error
	seen := map[string]bool{}
	for _, p := range retry {
		if p.err == nil || !blockedCode(p.err) {
			continue
		}
		topic := p.rec.Topic
		if expired != nil {
			if topic == expired.Topic {
				expired.Others = append(expired.Others, p.index)
			}
			continue
		}
		if seen[topic] {
			continue
		}
		seen[topic] = true
		waited, over := k.blocked.fail(topic, p.err)
		if over {
			expired = &Error{Index: p.index, Topic: topic, Partition: p.partition, Permanent: true,
				Err: &TopicBlockedError{Topic: topic, Waited: waited, Err: p.err}}
		}
	}
	if expired == nil {
		return nil
	}
	k.m.Permanent.Add(float64(1 + len(expired.Others)))
	// Returned, not logged: the pipeline decides (on_error) and reports.
	k.log.Debug().Err(expired).Int("records", 1+len(expired.Others)).Msg("records for a topic that cannot be written: giving up on them")
	return expired
}

// unblock forgets the blocked topics that records of todo were written to.
func (k *Kafka) unblock(todo []*pending) {
	done := map[string]bool{}
	for _, p := range todo {
		if p.err == nil && !done[p.rec.Topic] {
			done[p.rec.Topic] = true
			k.blocked.ok(p.rec.Topic)
		}
	}
	k.blocked.ok(clusterWide)
}

// attempt sends todo (in record order) over one producer and waits for
// every answer. It returns the records to send again with the failure that
// caused it (retry nil: all acknowledged), or err to end the Write
// (permanent, ctx, closed).
func (k *Kafka) attempt(ctx context.Context, todo []*pending) (retry []*pending, failure, err error) {
	c, err := k.producers.get(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil, nil, ctx.Err()
		}
		if errors.Is(err, sink.ErrClosed) {
			return nil, nil, k.stopped(ctx, err)
		}
		e := &Error{Index: -1, Partition: -1, Err: fmt.Errorf("starting the producer: %w", err), Permanent: permanent(err)}
		if blockedCode(err) {
			waited, expired := k.blocked.fail(clusterWide, err)
			e.Permanent = expired
			if expired {
				e.Err = &TopicBlockedError{Topic: clusterWide, Waited: waited, Err: e.Err}
			}
		}
		if e.Permanent {
			k.m.Permanent.Add(float64(len(todo)))
			return nil, nil, e
		}
		if !blockedCode(err) { // the brokers answered: refused, not unreachable
			k.failed(e)
		}
		k.m.Retryable.Add(float64(len(todo)))
		return todo, e, nil
	}

	a := &attempt{}
	a.last.Store(time.Now().UnixNano())
	for _, p := range todo {
		p.err = nil
		p.partition = -1
		p.batched = 0
	}
	works := k.plan(c, todo)
	done := k.sendAll(c, works, a, func(n int64) error { return k.acquire(ctx, n) })
	watch := newStallWatch(k.cfg.stallAfter(), &a.last)
	defer watch.stop()
wait:
	for {
		select {
		case <-done:
			break wait
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		case <-k.stop:
			return nil, nil, k.stopped(ctx, sink.ErrClosed)
		case <-watch.tick():
			if err := watch.check(); err != nil {
				k.failed(err) // Ready reports it; the read deadline ends the attempt
			}
		}
	}
	if ctx.Err() != nil {
		return nil, nil, ctx.Err()
	}
	if k.isClosed() {
		return nil, nil, k.stopped(ctx, sink.ErrClosed)
	}
	if p := k.split(todo); p != nil {
		// A batch of several records was refused whole: the next attempt
		// sends its partition's records one per batch, which finds the
		// record at fault.
		retry, _, failures := resendSet(todo)
		k.m.Retryable.Add(float64(failures))
		// The brokers answered (they refused a batch): not an outage.
		e := &Error{Index: p.index, Topic: p.rec.Topic, Partition: p.partition, Err: p.err}
		k.producers.retire(c)
		return retry, e, nil
	}
	for _, p := range todo {
		if p.err != nil && permanent(p.err) && !blockedCode(p.err) {
			return nil, nil, k.permanentRecord(p)
		}
	}
	retry, first, failures := resendSet(todo)
	if first == nil {
		return nil, nil, nil
	}
	k.m.Retryable.Add(float64(failures))
	e := &Error{Index: first.index, Topic: first.rec.Topic, Partition: first.partition, Err: first.err}
	if !onlyBlocked(todo) {
		// A topic that does not exist or may not be written is no
		// outage: the brokers answered, and Ready names the topic.
		k.failed(e)
	}
	// A fresh producer for the next attempt (see the type's documentation).
	k.producers.retire(c)
	return retry, e, nil
}

// stopped turns sink.ErrClosed into a permanent Error (ctx errors pass).
func (k *Kafka) stopped(ctx context.Context, err error) error {
	if errors.Is(err, sink.ErrClosed) {
		return closedError()
	}
	return err
}

// resendSet returns, after an attempt in which every record was answered,
// the records to send again: per partition, the first failed record and all
// records after it (per topic when the failed record has no partition). It
// also returns the first failed record and the number of failures; first is
// nil when every record was acknowledged. todo is in record order.
func resendSet(todo []*pending) (retry []*pending, first *pending, failures int) {
	type tp struct {
		topic     string
		partition int32
	}
	var fromTP map[tp]int
	var fromTopic map[string]int
	for _, p := range todo {
		if p.err == nil {
			continue
		}
		failures++
		if first == nil {
			first = p
			fromTP = make(map[tp]int)
			fromTopic = make(map[string]int)
		}
		if p.partition >= 0 {
			if _, ok := fromTP[tp{p.rec.Topic, p.partition}]; !ok {
				fromTP[tp{p.rec.Topic, p.partition}] = p.index
			}
		} else if _, ok := fromTopic[p.rec.Topic]; !ok {
			fromTopic[p.rec.Topic] = p.index
		}
	}
	if first == nil {
		return nil, nil, 0
	}
	for _, p := range todo {
		again := p.err != nil
		if from, ok := fromTP[tp{p.rec.Topic, p.partition}]; ok && p.partition >= 0 && p.index > from {
			again = true
		}
		if from, ok := fromTopic[p.rec.Topic]; ok && p.index > from {
			again = true
		}
		if again {
			retry = append(retry, p)
		}
	}
	return retry, first, failures
}

// permanentRecord returns the permanent failure of p.
func (k *Kafka) permanentRecord(p *pending) error {
	e := &Error{Index: p.index, Topic: p.rec.Topic, Partition: p.partition, Err: p.err, Permanent: true}
	k.m.Permanent.Inc()
	k.log.Debug().Err(e).Msg("kafka rejected a record permanently") // the pipeline reports it (on_error)
	return e
}

// Close stops the sink: a Write in progress returns a permanent error, and
// records still in flight (of abandoned Writes) get up to closeWait to be
// answered before the producer is abandoned.
func (k *Kafka) Close() error {
	if !k.producers.shut() {
		return nil
	}
	close(k.stop)
	deadline := time.Now().Add(closeWait)
	// The probe may be inside a metadata request; it ends by itself.
	waitUntil(k.probeDone, deadline)
	// Wait for a Write to notice stop: sarama panics on a send to a closed
	// producer.
	k.writing.Lock()
	defer k.writing.Unlock()
	// Requests a stopped Write left in flight are answered (or fail)
	// before the producer goes: once Close returns, none of them can
	// still land, after records of this key that a successor writes.
	for k.mem.InUse() > 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	k.closeProducers(deadline)
	k.log.Info().Msg("kafka sink closed")
	return nil
}

// split finds a record that failed permanently in a batch of several
// records: the broker refuses a batch whole (MESSAGE_TOO_LARGE, INVALID_RECORD,
// ...), so the record at fault is not known. Its partition is then sent one
// record per batch for the rest of the Write, and split returns the record;
// nil when there is none.
func (k *kafkaSink) split(todo []*pending) *pending {
	var first *pending
	for _, p := range todo {
		if p.err == nil || p.batched < 2 || !permanent(p.err) || blockedCode(p.err) {
			continue
		}
		k.oneByOne[topicPartition{p.rec.Topic, p.partition}] = true
		if first == nil {
			first = p
		}
	}
	return first
}
