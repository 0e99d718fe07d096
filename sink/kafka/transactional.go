package kafka

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/IBM/sarama"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
	"github.com/outbox-cdc/outbox-cdc/retry"
	"github.com/outbox-cdc/outbox-cdc/sink"
)

// TxnConfig is the exactly-once part of the sink section (sink.* keys, used
// only with delivery: exactly-once).
type TxnConfig struct {
	// TransactionalID is the Kafka transactional.id. It must be stable
	// across restarts and shared by every instance of one connector (that
	// is what fences a zombie) and unique per connector. Empty: derived
	// from the connector name ("outbox-cdc-<name>").
	TransactionalID string `yaml:"transactional_id"`
	// ProgressTopic holds one progress record per committed batch, keyed
	// by the connector name. Created if missing with one partition and
	// cleanup.policy=compact. Several connectors may share it; a dedicated
	// one per connector makes reading the progress at start cheapest.
	ProgressTopic string `yaml:"progress_topic"`
	// TransactionTimeout is the Kafka transaction.timeout.ms the producer
	// asks for; the broker caps it at its transaction.max.timeout.ms
	// (15 minutes by default). A batch, or a large source transaction
	// sent in fragments, must be written and committed within it.
	TransactionTimeout time.Duration `yaml:"transaction_timeout"`
}

// DefaultProgressTopic is the progress topic unless configured.
const DefaultProgressTopic = "outbox-cdc.progress"

// DefaultTxnConfig returns the defaults; TransactionalID is derived from the
// connector name by WithName.
func DefaultTxnConfig() TxnConfig {
	return TxnConfig{ProgressTopic: DefaultProgressTopic, TransactionTimeout: time.Minute}
}

// WithName fills TransactionalID from the connector name when it is empty.
func (c TxnConfig) WithName(name string) TxnConfig {
	if c.TransactionalID == "" {
		c.TransactionalID = "outbox-cdc-" + name
	}
	return c
}

// Validate checks the configuration; errors are *outboxcdc.KeyError with
// keys relative to the sink section.
func (c TxnConfig) Validate() error {
	switch {
	case c.ProgressTopic == "":
		return outboxcdc.KeyErrorf("progress_topic", "", "must not be empty")
	case len(c.ProgressTopic) > 249:
		return outboxcdc.KeyErrorf("progress_topic", "", "%q is longer than Kafka's 249 characters", c.ProgressTopic)
	case c.TransactionTimeout < time.Second || c.TransactionTimeout > 15*time.Minute:
		return outboxcdc.KeyErrorf("transaction_timeout", "", "%s is outside 1s..15m", c.TransactionTimeout)
	}
	for _, r := range c.ProgressTopic {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			return outboxcdc.KeyErrorf("progress_topic", "Kafka topic names allow only [a-zA-Z0-9._-]", "%q holds %q", c.ProgressTopic, r)
		}
	}
	return nil
}

// FencedError says that another producer with the same transactional id
// has initialised since this one did (Kafka error PRODUCER_FENCED, code 90,
// or INVALID_PRODUCER_EPOCH, code 47): another instance of the connector
// took over. It is permanent: this instance must exit without writing.
type FencedError struct {
	TransactionalID string
	Err             error
}

func (e *FencedError) Error() string {
	return fmt.Sprintf("kafka: fenced: another instance with transactional id %q took over (%v); this instance stops without writing",
		e.TransactionalID, e.Err)
}

// Unwrap returns the cause marked permanent: this instance must stop.
func (e *FencedError) Unwrap() error {
	return outboxcdc.Permanent(e.Err, "another instance with this transactional id took over; this one exits")
}

// IsFenced reports whether err is or wraps a *FencedError.
func IsFenced(err error) bool {
	var f *FencedError
	return errors.As(err, &f)
}

// fencedCode reports whether err carries PRODUCER_FENCED (90) or
// INVALID_PRODUCER_EPOCH (47). In a transactional producer both mean a
// newer epoch exists for the transactional id. Classified by code, never by
// message text (sarama may print 90 as an unknown error code).
func fencedCode(err error) bool {
	return errors.Is(err, sarama.ErrProducerFenced) || errors.Is(err, sarama.ErrInvalidProducerEpoch)
}

// ErrProgressUntrusted is wrapped by Load errors about a progress record
// that exists but cannot be read.
var ErrProgressUntrusted = errors.New("kafka progress record cannot be trusted")

// Transactional is the exactly-once Kafka sink: an outboxcdc.AtomicSink on
// sarama's transactional producer.
//
// Every WriteAtomic is one Kafka transaction holding the batch's records
// and one progress record (key: the connector name, value: the source
// position after the batch) in the single-partition, compacted progress
// topic. Either all of them become visible to read_committed consumers or
// none does, so the progress record is the checkpoint: after any crash, the
// connector resumes exactly after the last committed batch.
//
// # Start and fencing
//
// Load creates the progress topic if it is missing, starts the producer —
// InitProducerId with the stable transactional id bumps the epoch, which
// fences every older producer with that id (another instance, or this one
// before a kill -9) and aborts its open transaction — and only then reads
// the last committed progress record with read_committed. A fenced
// producer's writes and commits fail with PRODUCER_FENCED (90) or
// INVALID_PRODUCER_EPOCH (47); WriteAtomic then returns a *FencedError and
// the connector exits. This holds even when the HA lock was lost during a
// partition: the transactional id, not the lock, guarantees there is one
// writer.
//
// # Failures
//
// Any other failure of an attempt aborts the transaction (an aborted
// transaction is never visible to read_committed consumers) and the whole
// batch, records and progress, is sent again in a new transaction after a
// backoff (retry_backoff_min doubling to retry_backoff_max), until ctx is
// done. A record Kafka refuses permanently (too large, invalid topic, not
// authorised) ends WriteAtomic with a permanent *Error. When a commit's
// outcome is unknown (the coordinator did not answer), the producer is
// restarted — InitProducerId completes or aborts the pending transaction —
// and the progress record is read back to learn which happened.
//
// # Large source transactions
//
// A source transaction is one Kafka transaction: the progress record can
// only name transaction ends. A transaction the source sends in fragments
// (outboxcdc.Tx.More) reaches WriteAtomic as several calls: those with a
// zero end add their records to the Kafka transaction, which stays open,
// and the first call with an end adds the rest and the progress record
// and commits. Nothing of it is visible to read_committed consumers
// before that commit, and nothing ever if it is aborted. Memory does not
// grow with the transaction: each call's records are released once
// acknowledged.
//
// Kafka aborts a transaction that stays open longer than
// transaction_timeout. The sink gives every transaction a budget of 80% of
// transaction_timeout from its begin to its commit; one that runs past it
// is aborted and WriteAtomic fails permanently with an error saying so
// and what to raise (sink.transaction_timeout, and the broker's
// transaction.max.timeout.ms). At the connector's throughput (tens of
// thousands of records per second) the default 60s fits source
// transactions of about a million rows.
//
// A failure inside a transaction kept open across calls cannot be retried
// here, because the records of the earlier calls are gone with the abort:
// WriteAtomic then returns an error wrapping outboxcdc.ErrOpenWriteAborted
// and the connector restarts from the last committed progress. A record
// larger than max_message_bytes is refused before it is sent, so it never
// spoils an open transaction.
//
// # Consumer contract
//
// Consumers must read with isolation.level=read_committed. They then see
// each outbox row exactly once and in commit order per key, across kill -9
// of the connector at any point, broker restarts and retried sends. With
// read_uncommitted (the Kafka default) they may also see records of aborted
// attempts.
type Transactional struct {
	*kafkaSink
	tcfg      TxnConfig
	connector string // progress record key
	kind      string // expected position kind; "" accepts any
	tm        *txnMetrics

	// open is the transaction WriteAtomic left open for a fragmented
	// source transaction (writing goroutine, under writing).
	open *openTxn
}

var _ outboxcdc.AtomicSink = (*Transactional)(nil)

// NewTransactional validates the configuration and returns the sink. It
// does not connect; Load does. connector names the progress record; kind,
// when not empty, is the position kind Load accepts (a progress record of
// another kind of source is refused with outboxcdc.ErrForeignPosition).
func NewTransactional(cfg KafkaConfig, tcfg TxnConfig, connector, kind string, log zerolog.Logger, reg prometheus.Registerer) (*Transactional, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := tcfg.Validate(); err != nil {
		return nil, err
	}
	if connector == "" {
		return nil, errors.New("sink: transactional sink needs a connector name")
	}
	tcfg = tcfg.WithName(connector)
	if v, _ := sarama.ParseKafkaVersion(cfg.KafkaVersion); !v.IsAtLeast(sarama.V2_5_0_0) {
		return nil, fmt.Errorf("sink.kafka_version: %s is too old for exactly-once delivery; transactions with epoch bumps need 2.5.0 or later", cfg.KafkaVersion)
	}
	t := &Transactional{tcfg: tcfg, connector: connector, kind: kind, tm: newTxnMetrics(reg)}
	log = log.With().Str("component", "sink").Str("sink", "kafka-transactional").Str("transactional_id", tcfg.TransactionalID).Logger()
	t.kafkaSink = newKafkaSink(cfg, log, reg, "kafka: transactional producer not started yet", "kafka reachable, transactional producer ready",
		t.saramaConfig)
	t.producers.onStart = func(*producer) {
		t.tm.inits.Inc()
		t.reached()
		t.log.Info().Msg("transactional producer initialised (older producers with this transactional id are fenced)")
	}
	go t.probeLoop(false)
	return t, nil
}

// TransactionalID returns the transactional id in use.
func (t *Transactional) TransactionalID() string { return t.tcfg.TransactionalID }

// saramaConfig is the transactional producer's client configuration.
func (t *Transactional) saramaConfig() (*sarama.Config, error) {
	s, err := t.cfg.clientConfig()
	if err != nil {
		return nil, err
	}
	s.Producer.Transaction.ID = t.tcfg.TransactionalID
	s.Producer.Transaction.Timeout = t.tcfg.TransactionTimeout
	// The coordinator answers CONCURRENT_TRANSACTIONS while it finishes
	// aborting the previous instance's transaction; wait for it.
	s.Producer.Transaction.Retry.Max = 30
	s.Producer.Transaction.Retry.Backoff = 100 * time.Millisecond
	s.Metadata.Retry.Max = 2
	s.Metadata.Retry.Backoff = 100 * time.Millisecond
	s.Admin.Timeout = t.cfg.ProduceTimeout
	return s, nil
}

// Load ensures the progress topic exists, starts the transactional
// producer (fencing older instances and aborting their open transaction)
// and returns the position of the last committed progress record, or a zero
// Position when there is none. Broker failures are retried until ctx ends;
// a fenced start, a progress topic with more than one partition, or an
// unreadable or foreign progress record is an error.
func (t *Transactional) Load(ctx context.Context) (outboxcdc.Position, error) {
	t.writing.Lock()
	defer t.writing.Unlock()
	ctx, cancel := t.untilClosed(ctx)
	defer cancel()
	var pos outboxcdc.Position
	err := retry.Do(ctx, t.cfg.retryPolicy(), func(ctx context.Context) error {
		var err error
		pos, err = t.load(ctx)
		if err == nil || ctx.Err() != nil || IsFenced(err) || errors.Is(err, ErrProgressUntrusted) ||
			errors.Is(err, outboxcdc.ErrForeignPosition) || errors.Is(err, errProgressLayout) || errors.Is(err, sink.ErrClosed) {
			return err
		}
		t.failed(err)
		return outboxcdc.Transient(err)
	}, func(err error, wait time.Duration) {
		// The sink's health warns (rate-limited) with the same error.
		t.log.Debug().Err(err).Dur("backoff", wait).Msg("cannot start the transactional producer or read progress; retrying")
	})
	if err != nil {
		if t.isClosed() {
			return "", closedError()
		}
		return "", err
	}
	if pos.IsZero() {
		t.log.Info().Str("progress_topic", t.tcfg.ProgressTopic).Msg("no committed progress yet; the source starts where source.start says")
	} else {
		t.log.Info().Str("position", string(pos)).Str("progress_topic", t.tcfg.ProgressTopic).Msg("committed progress loaded")
	}
	return pos, nil
}

func (t *Transactional) load(ctx context.Context) (outboxcdc.Position, error) {
	if err := t.ensureProgressTopic(ctx); err != nil {
		return "", err
	}
	if _, err := t.producer(ctx); err != nil {
		return "", err
	}
	return t.readProgress(ctx)
}

// progressValue is the JSON value of a progress record.
type progressValue struct {
	Format          string `json:"format"`
	Position        string `json:"position"`
	TransactionalID string `json:"transactional_id"`
	SavedAt         string `json:"saved_at"`
}

const progressFormat = "outbox-cdc-progress/1"

func encodeProgress(pos outboxcdc.Position, tid string, now time.Time) []byte {
	b, _ := json.Marshal(progressValue{Format: progressFormat, Position: string(pos), TransactionalID: tid,
		SavedAt: now.UTC().Format(time.RFC3339Nano)}) // strings only: cannot fail
	return b
}

// decodeProgress parses a progress record value; why says what is wrong.
func decodeProgress(v []byte) (p Progress, why string) {
	var pv progressValue
	if err := json.Unmarshal(v, &pv); err != nil {
		return Progress{}, fmt.Sprintf("is not JSON (%v)", err)
	}
	if pv.Format != progressFormat {
		return Progress{}, fmt.Sprintf("has format %q, which this build does not read (it reads %q)", pv.Format, progressFormat)
	}
	pos := outboxcdc.Position(pv.Position)
	if pos.Kind() == "" {
		return Progress{}, fmt.Sprintf("holds position %q, which has no source kind prefix", pv.Position)
	}
	saved, _ := time.Parse(time.RFC3339Nano, pv.SavedAt)
	return Progress{Position: pos, SavedAt: saved, TransactionalID: pv.TransactionalID}, ""
}

// Write sends records in one transaction without a progress record. The
// pipeline uses WriteAtomic; Write exists to satisfy outboxcdc.Sink.
func (t *Transactional) Write(ctx context.Context, records []outboxcdc.Record) error {
	if len(records) == 0 {
		return nil
	}
	t.writing.Lock()
	defer t.writing.Unlock()
	if t.open != nil {
		return &Error{Index: -1, Partition: -1, Err: errors.New("Write while a transaction is open for WriteAtomic"), Permanent: true}
	}
	return t.write(ctx, records, "", true)
}

// WriteAtomic writes records and a progress record for end in one Kafka
// transaction and commits it. With a zero end it writes records into the
// transaction and leaves it open (see outboxcdc.AtomicSink): the next
// calls add to it, and the first call with an end commits it with that
// progress record. See the type's documentation for retries, fencing and
// the transaction time budget. It returns nil once the records are
// acknowledged (and, with an end, committed), a *FencedError when another
// instance took over, a permanent *Error, or ctx's error; once records of
// earlier zero-end calls were aborted, the error wraps
// outboxcdc.ErrOpenWriteAborted.
func (t *Transactional) WriteAtomic(ctx context.Context, records []outboxcdc.Record, end outboxcdc.Position) error {
	t.writing.Lock()
	defer t.writing.Unlock()
	if t.kind != "" && !end.IsZero() {
		if err := end.CheckKind(t.kind); err != nil {
			return &Error{Index: -1, Partition: -1, Err: err, Permanent: true}
		}
	}
	return t.write(ctx, records, end, !end.IsZero())
}

// write is WriteAtomic and Write: commit says whether the transaction ends
// with this call.
func (t *Transactional) write(ctx context.Context, records []outboxcdc.Record, end outboxcdc.Position, commit bool) error {
	start := time.Now()
	defer t.releaseBufs()
	clear(t.oneByOne)
	msgs := t.messages(records, end)
	// A record the producer would refuse for its size is refused here,
	// before it can spoil an open transaction (Kafka transactions do not
	// survive a failed record).
	if err := t.tooLarge(msgs); err != nil {
		t.m.Permanent.Inc()
		t.log.Debug().Err(err).Msg("record too large for sink.max_message_bytes") // the pipeline reports it (on_error)
		return err
	}
	if err := t.linger(ctx, sink.PayloadBytes(records)); err != nil {
		return err
	}
	if t.open != nil {
		return t.continueOpen(ctx, msgs, records, end, commit)
	}
	b := retry.New(t.cfg.retryPolicy())
	var lastErr error
	var warns outboxcdc.LogThrottle
	for n := 1; ; n++ {
		err := t.attempt(ctx, msgs, records, end, commit)
		if err == nil {
			if !commit {
				return nil // open: counted when it commits
			}
			t.committed(len(records), sink.PayloadBytes(records), start, start)
			if n > 1 {
				t.log.Info().Int("records", len(records)).Int("attempts", n).Dur("took", time.Since(start)).
					Msg("kafka transaction committed after retries")
			}
			return nil
		}
		if IsFenced(err) || IsPermanent(err) || errors.Is(err, errTxnBudget) {
			// Returned, not logged: the pipeline decides and reports.
			t.log.Debug().Err(err).Int("records", len(records)).Str("position", string(end)).Msg("kafka transaction failed permanently")
			return err
		}
		if ctxErr := ctx.Err(); ctxErr != nil {
			if lastErr == nil {
				lastErr = err
			}
			return fmt.Errorf("kafka: transaction of %d records not committed after %d attempts (last failure: %v): %w",
				len(records), n, lastErr, ctxErr)
		}
		lastErr = err
		t.tm.aborts.Inc()
		t.m.Retryable.Add(float64(len(records)))
		if !blockedCode(err) { // a topic that cannot be written is no outage (Ready names it)
			t.failed(err)
		}
		wait := b.Next()
		// One warning when a Write starts failing, then one per
		// WarnInterval while it keeps failing; every attempt at debug.
		ev := warns.Event(&t.log).Int("attempt", n).Int("records", len(records)).Dur("backoff", wait).
			Dur("failing_for", time.Since(start).Round(time.Millisecond))
		if logBlocked(ev, err, t.cfg.UnwritableTopicTimeout) {
			ev.Msg("a kafka topic cannot be written yet: its records wait up to sink.unwritable_topic_timeout, then pipeline.on_error decides; nothing is committed meanwhile")
		} else {
			ev.Err(err).Msg("kafka transaction aborted, sending the whole batch again")
		}
		if err := t.sleep(ctx, wait); err != nil {
			if IsPermanent(err) {
				return err
			}
			return fmt.Errorf("kafka: transaction of %d records not committed after %d attempts (last failure: %v): %w",
				len(records), n, lastErr, err)
		}
	}
}

// committed counts a commit of n records: the sink family's bytes and write time (this call, from start), and the transaction's time
// from its begin (began).
func (t *Transactional) committed(n int, bytes float64, start, began time.Time) {
	t.m.Bytes.Add(bytes)
	t.m.WriteSeconds.Observe(time.Since(start).Seconds())
	t.tm.commits.Inc()
	t.tm.txnSeconds.Observe(time.Since(began).Seconds())
	t.reached()
}

// openTxn is a Kafka transaction kept open across WriteAtomic calls for a
// fragmented source transaction.
type openTxn struct {
	p        *producer
	started  time.Time
	deadline time.Time // started + 80% of transaction_timeout
	records  int       // records of the earlier calls
	bytes    float64   // and their key, value and header bytes
}

// continueOpen adds msgs to the open transaction and, with commit, commits
// it. Any failure aborts the whole transaction, records of the earlier
// calls included, which cannot be sent again from here: the error wraps
// outboxcdc.ErrOpenWriteAborted.
func (t *Transactional) continueOpen(ctx context.Context, msgs []*pending, records []outboxcdc.Record, end outboxcdc.Position, commit bool) error {
	start := time.Now()
	o := t.open
	if err := t.precheckTopics(ctx, o.p, msgs, o.deadline, len(records), o.records, end); err != nil {
		var e *Error
		if errors.As(err, &e) && e.Index >= 0 || !errors.Is(err, errTxnBudget) {
			// The transaction stays open: the caller may replace those
			// records, or stop (Close aborts it).
			return err
		}
		t.open = nil
		t.tm.openRecords.Set(0)
		t.tm.aborts.Inc()
		return fmt.Errorf("%w (%d records written into it by earlier batches): %w", outboxcdc.ErrOpenWriteAborted, o.records, err)
	}
	t.open = nil
	err := t.produce(ctx, o.p, msgs, records, end, o.started, o.deadline, o.records)
	if err == nil && !commit {
		o.records += len(records)
		o.bytes += sink.PayloadBytes(records)
		t.open = o
		t.tm.openRecords.Set(float64(o.records))
		return nil
	}
	if err == nil {
		err = t.commit(ctx, o.p, records, end, o.started, o.deadline, o.records)
		if err == nil {
			t.tm.openRecords.Set(0)
			t.committed(o.records+len(records), o.bytes+sink.PayloadBytes(records), start, o.started)
			return nil
		}
	}
	t.tm.openRecords.Set(0)
	t.tm.aborts.Inc()
	t.failed(err)
	err = fmt.Errorf("%w (%d records written into it by earlier batches): %w", outboxcdc.ErrOpenWriteAborted, o.records, err)
	t.log.Debug().Err(err).Msg("kafka transaction of a large source transaction aborted; nothing of it is visible, a restart reads it again") // returned: the connector logs it once
	return err
}

// abortOpen aborts a transaction left open by WriteAtomic (on Close).
func (t *Transactional) abortOpen() {
	o := t.open
	t.open = nil
	if o == nil {
		return
	}
	t.tm.openRecords.Set(0)
	done := make(chan struct{})
	go func() {
		_ = t.abort(o.p)
		close(done)
	}()
	if !waitUntil(done, time.Now().Add(closeWait)) {
		t.log.Warn().Msg("aborting the open kafka transaction did not finish in time; the next start (or the transaction timeout) aborts it")
		return
	}
	t.log.Info().Int("records", o.records).Msg("aborted the open kafka transaction of an unfinished source transaction; none of its records is visible")
}

// tooLarge returns a permanent *Error for the first record the producer
// would refuse as larger than max_message_bytes.
func (t *Transactional) tooLarge(msgs []*pending) error {
	for _, m := range msgs {
		if size := batchOverhead + wireBytes(m); size > t.cfg.MaxMessageBytes {
			return &Error{Index: m.index, Topic: m.rec.Topic, Partition: -1, Permanent: true,
				Err: sarama.ConfigurationError(fmt.Sprintf("record of %d bytes is larger than sink.max_message_bytes (%d)", size, t.cfg.MaxMessageBytes))}
		}
	}
	return nil
}

// messages are the pending records of a write: records, then (with an
// end) the progress record, index -1.
func (t *Transactional) messages(records []outboxcdc.Record, end outboxcdc.Position) []*pending {
	if end.IsZero() {
		return t.pendings(records, nil)
	}
	now := time.Now()
	progress := &outboxcdc.Record{Topic: t.tcfg.ProgressTopic, Timestamp: now,
		Key: []byte(t.connector), Value: encodeProgress(end, t.tcfg.TransactionalID, now)}
	return t.pendings(records, progress)
}

// errTxnBudget is wrapped by the error of an attempt that ran out of its
// share of the transaction timeout.
var errTxnBudget = errors.New("kafka transaction would outlive sink.transaction_timeout")

type txnFailure struct {
	index     int
	topic     string
	partition int32
	err       error
}

// attempt runs one transaction: begin, produce every message, wait for
// every answer, then commit (or, without commit, leave it open in t.open),
// or abort on any failure.
func (t *Transactional) attempt(ctx context.Context, msgs []*pending, records []outboxcdc.Record, end outboxcdc.Position, commit bool) error {
	p, err := t.producer(ctx)
	if err != nil {
		return err
	}
	// A record for a topic that does not exist would fail the transaction:
	// wait for such topics (up to sink.unwritable_topic_timeout) before it
	// begins.
	if err := t.precheckTopics(ctx, p, msgs, time.Time{}, len(records), 0, end); err != nil {
		return err
	}
	started := time.Now()
	deadline := started.Add(t.tcfg.TransactionTimeout * 8 / 10)
	clear(p.idem.txn.added) // begin: no partition is in the transaction yet
	if err := t.produce(ctx, p, msgs, records, end, started, deadline, 0); err != nil {
		return err
	}
	if !commit {
		t.open = &openTxn{p: p, started: started, deadline: deadline, records: len(records), bytes: sink.PayloadBytes(records)}
		t.tm.openRecords.Set(float64(len(records)))
		return nil
	}
	return t.commit(ctx, p, records, end, started, deadline, 0)
}

// overBudget ends a transaction that would outlive the transaction
// timeout: the producer is dropped, which leaves the transaction to be
// aborted by the next InitProducerId.
func (t *Transactional) overBudget(p *producer, records, earlier int, end outboxcdc.Position) error {
	t.discard(p)
	budget := t.tcfg.TransactionTimeout * 8 / 10
	if earlier > 0 || end.IsZero() {
		return fmt.Errorf("%w: a source transaction of more than %d records was not written and committed within %s (80%% of sink.transaction_timeout %s); the Kafka transaction was aborted. A source transaction is one Kafka transaction: raise sink.transaction_timeout to fit it (and the broker's transaction.max.timeout.ms, 15m by default)",
			errTxnBudget, earlier+records, budget, t.tcfg.TransactionTimeout)
	}
	return fmt.Errorf("%w: a batch of %d records (ending at source position %s) was not written and committed within %s (80%% of sink.transaction_timeout %s); the attempt was aborted. A source transaction is never split across Kafka transactions: raise sink.transaction_timeout (and the broker's transaction.max.timeout.ms), or lower pipeline.max_batch_records if the batch held many source transactions",
		errTxnBudget, records, end, budget, t.tcfg.TransactionTimeout)
}

// produce sends msgs into p's open transaction and waits for every answer.
// On a failure the transaction is aborted (or p discarded) and the error
// says which record failed and whether that is permanent.
func (t *Transactional) produce(ctx context.Context, p *producer, msgs []*pending, records []outboxcdc.Record, end outboxcdc.Position, started, deadline time.Time, earlier int) error {
	if len(msgs) == 0 {
		return nil
	}
	left := time.Until(deadline)
	if left <= 0 {
		return t.overBudget(p, len(records), earlier, end)
	}
	timer := time.NewTimer(left)
	defer timer.Stop()
	for _, m := range msgs {
		m.err, m.partition, m.batched = nil, -1, 0
	}
	works := t.plan(p, msgs)
	if err := addPartitions(p, works); err != nil {
		var pe *partitionError
		switch {
		case fencedCode(err):
			t.discard(p)
			return t.fenced(err, started)
		case errors.As(err, &pe):
			// The partition's records fail with its code, as a produce
			// would have failed them.
			for _, m := range msgs {
				if m.err == nil && m.rec.Topic == pe.tp.topic && m.partition == pe.tp.partition {
					m.err = pe.err
				}
			}
			works = nil
		default:
			t.discard(p)
			return t.classify(err, "adding partitions to the transaction")
		}
	}
	a := &attempt{}
	a.last.Store(time.Now().UnixNano())
	done := t.sendAll(p, works, a, func(n int64) error { return t.acquire(ctx, n) })
	if works == nil {
		for _, m := range msgs {
			if m.err == nil {
				m.err = errNotSent
			}
		}
	}
	watch := newStallWatch(t.cfg.stallAfter(), &a.last)
	defer watch.stop()
wait:
	for {
		select {
		case <-done:
			break wait
		case <-ctx.Done():
			t.discard(p)
			return ctx.Err()
		case <-t.stop:
			t.discard(p)
			return closedError()
		case <-timer.C:
			return t.overBudget(p, len(records), earlier, end)
		case <-watch.tick():
			if err := watch.check(); err != nil {
				t.failed(err)
			}
		}
	}

	// The failures in record order; a record not sent because an earlier
	// batch of its partition failed is a failure only when nothing else is.
	var first, perm, notSent *pending
	var fence error
	var blocked []*txnFailure
	for _, m := range msgs {
		switch {
		case m.err == nil:
			continue
		case errors.Is(m.err, errNotSent):
			if notSent == nil {
				notSent = m
			}
			continue
		}
		if first == nil {
			first = m
		}
		if fence == nil && fencedCode(m.err) {
			fence = m.err
		}
		if perm == nil && permanent(m.err) && !fencedCode(m.err) && !blockedCode(m.err) {
			perm = m
		}
		if blockedCode(m.err) {
			blocked = append(blocked, &txnFailure{index: m.index, topic: m.rec.Topic, partition: m.partition, err: m.err})
		}
	}
	if first == nil {
		first = notSent
	}
	if fence != nil {
		t.discard(p)
		return t.fenced(fence, started)
	}
	if first != nil {
		if aerr := t.abort(p); fencedCode(aerr) {
			return t.fenced(aerr, started)
		}
		if sp := t.split(msgs); sp != nil {
			// Sent again one record per batch, which names the record at
			// fault (see Kafka.split).
			return &Error{Index: sp.index, Topic: sp.rec.Topic, Partition: sp.partition, Err: sp.err}
		}
		if perm != nil {
			t.m.Permanent.Inc()
			return &Error{Index: perm.index, Topic: perm.rec.Topic, Partition: perm.partition, Err: perm.err, Permanent: true}
		}
		if blockedCode(first.err) {
			var same []*txnFailure
			for _, f := range blocked {
				if f.topic == first.rec.Topic {
					same = append(same, f)
				}
			}
			if err := t.checkBlocked(same); err != nil {
				return err
			}
		}
		return &Error{Index: first.index, Topic: first.rec.Topic, Partition: first.partition, Err: first.err}
	}
	if t.blocked.any() {
		for _, m := range msgs {
			t.blocked.ok(m.rec.Topic)
		}
		t.blocked.ok(clusterWide)
	}
	return nil
}

// checkBlocked notes failures of records whose topic is unknown or not
// authorized; once a topic has been blocked for UnwritableTopicTimeout it
// returns a permanent *Error naming its records.
func (t *Transactional) checkBlocked(failures []*txnFailure) error {
	sort.Slice(failures, func(i, j int) bool { return failures[i].index < failures[j].index })
	var expired *Error
	seen := map[string]bool{}
	for _, f := range failures {
		if f.index < 0 {
			continue
		}
		if expired != nil {
			if f.topic == expired.Topic {
				expired.Others = append(expired.Others, f.index)
			}
			continue
		}
		if seen[f.topic] {
			continue
		}
		seen[f.topic] = true
		if waited, over := t.blocked.fail(f.topic, f.err); over {
			expired = &Error{Index: f.index, Topic: f.topic, Partition: f.partition, Permanent: true,
				Err: &TopicBlockedError{Topic: f.topic, Waited: waited, Err: f.err}}
		}
	}
	if expired == nil {
		return nil
	}
	t.m.Permanent.Add(float64(1 + len(expired.Others)))
	return expired
}

// precheckTopics makes sure, before records go into a transaction, that
// their topics exist and may be described: a record for a missing topic
// would fail the whole transaction, and one kept open across calls could
// not be sent again. It waits for a blocked topic (bounded by
// UnwritableTopicTimeout and, when deadline is set, the open transaction's
// budget) and then returns a permanent *Error naming its records, leaving
// an open transaction open. Topics already known cost a map lookup.
func (t *Transactional) precheckTopics(ctx context.Context, p *producer, msgs []*pending, deadline time.Time, records, earlier int, end outboxcdc.Position) error {
	b := retry.New(t.cfg.retryPolicy())
	var warns outboxcdc.LogThrottle
	for {
		var failures []*txnFailure
		bad := map[string]error{}
		for _, m := range msgs {
			err, checked := bad[m.rec.Topic]
			if !checked {
				_, err = p.client.Partitions(m.rec.Topic)
				if err != nil && !blockedCode(err) {
					err = nil // anything else is the produce's to find
				}
				bad[m.rec.Topic] = err
			}
			if err != nil {
				failures = append(failures, &txnFailure{index: m.index, topic: m.rec.Topic, partition: -1, err: err})
			}
		}
		if len(failures) == 0 {
			return nil
		}
		if err := t.checkBlocked(failures); err != nil {
			return err
		}
		wait := b.Next()
		if !deadline.IsZero() && time.Until(deadline) < wait {
			return t.overBudget(p, records, earlier, end)
		}
		warns.Event(&t.log).Err(failures[0].err).Str("topic", failures[0].topic).Str("reason", blockedReason(failures[0].topic, failures[0].err)).
			Str("hint", blockedHint(failures[0].topic, failures[0].err)).Dur("backoff", wait).
			Msg("a topic of the open transaction cannot be written yet; waiting (sink.unwritable_topic_timeout)")
		if err := t.sleep(ctx, wait); err != nil {
			return err
		}
	}
}

// commit commits p's transaction within what is left of the budget. When
// the outcome is unknown it restarts the producer, which makes the
// coordinator finish the transaction one way or the other, and reads the
// progress back.
func (t *Transactional) commit(ctx context.Context, p *producer, records []outboxcdc.Record, end outboxcdc.Position, started, deadline time.Time, earlier int) error {
	left := time.Until(deadline)
	if left <= 0 {
		return t.overBudget(p, len(records), earlier, end)
	}
	timer := time.NewTimer(left)
	defer timer.Stop()
	commitDone := make(chan error, 1)
	go func() { commitDone <- endTxn(p, true) }()
	var err error
	select {
	case err = <-commitDone:
	case <-timer.C:
		// The commit may still complete; the restart below settles it.
		err = errTxnBudget
	case <-t.stop:
		t.discard(p)
		return closedError()
	}
	if err == nil {
		return nil
	}
	if fencedCode(err) {
		t.discard(p)
		return t.fenced(err, started)
	}
	t.discard(p)
	if end.IsZero() {
		return t.classify(err, "commit")
	}
	if _, perr := t.producer(ctx); perr != nil {
		return fmt.Errorf("commit outcome unknown (%v), and restarting the producer failed: %w", err, perr)
	}
	pos, lerr := t.readProgress(ctx)
	if lerr != nil {
		return fmt.Errorf("commit outcome unknown (%v), and reading progress back failed: %w", err, lerr)
	}
	if pos == end {
		t.log.Info().Err(err).Str("position", string(end)).Msg("commit answer lost, but the progress record shows the transaction committed")
		return nil
	}
	if errors.Is(err, errTxnBudget) {
		return fmt.Errorf("%w: committing %d records (ending at %s) did not finish within 80%% of sink.transaction_timeout %s; raise sink.transaction_timeout",
			errTxnBudget, earlier+len(records), end, t.tcfg.TransactionTimeout)
	}
	return t.classify(err, "commit")
}

// fenced builds the FencedError, unless the transaction ran past the
// transaction timeout: the broker then aborted it and bumped the epoch
// itself, which the producer sees as the same error codes.
func (t *Transactional) fenced(err error, started time.Time) error {
	t.tm.fenced.Inc()
	if took := time.Since(started); took >= t.tcfg.TransactionTimeout*8/10 {
		return fmt.Errorf("%w: the transaction took %s and the broker aborted it (sink.transaction_timeout %s): %v",
			errTxnBudget, took.Round(time.Millisecond), t.tcfg.TransactionTimeout, err)
	}
	return &FencedError{TransactionalID: t.tcfg.TransactionalID, Err: err}
}

// classify turns a failure outside the per-record answers into an error:
// fenced, permanent or retryable.
func (t *Transactional) classify(err error, what string) error {
	if fencedCode(err) {
		return &FencedError{TransactionalID: t.tcfg.TransactionalID, Err: err}
	}
	return &Error{Index: -1, Partition: -1, Err: fmt.Errorf("%s: %w", what, err), Permanent: permanentTxn(err)}
}

// permanentTxn classifies errors of the transaction protocol itself. Only
// authorisation and configuration failures are permanent: anything else a
// fresh producer (a new InitProducerId) can get past.
func permanentTxn(err error) bool {
	var cfgErr sarama.ConfigurationError
	return errors.As(err, &cfgErr) ||
		errors.Is(err, sarama.ErrTransactionalIDAuthorizationFailed) ||
		errors.Is(err, sarama.ErrClusterAuthorizationFailed) ||
		errors.Is(err, sarama.ErrUnsupportedVersion)
}

// abort aborts the open transaction; if that fails, the producer is
// discarded and the next InitProducerId aborts it.
//
// It returns the abort's error: a fenced producer may learn that it was
// fenced only here, when its records failed with a consequence of the
// fencing (such as INVALID_TXN_STATE) rather than with the fencing code.
func (t *Transactional) abort(p *producer) error {
	err := endTxn(p, false)
	if err != nil {
		t.log.Warn().Err(err).Msg("aborting the kafka transaction failed; restarting the producer, which aborts it")
	}
	// A fresh producer either way: after a failed batch the partition's
	// sequence numbers are in doubt, and InitProducerId (a new epoch)
	// starts them again.
	t.discard(p)
	return err
}

// Close stops the sink. A WriteAtomic in progress returns a permanent
// error; a transaction left open by WriteAtomic (a source transaction
// whose end did not come) is aborted, or, if the broker does not answer,
// left to the next instance's InitProducerId or the transaction timeout.
func (t *Transactional) Close() error {
	if !t.producers.shut() {
		return nil
	}
	close(t.stop)
	// The probe may be inside a metadata request; it ends by itself.
	waitUntil(t.probeDone, time.Now().Add(closeWait))
	done := make(chan struct{})
	go func() {
		t.writing.Lock()
		defer t.writing.Unlock()
		t.abortOpen()
		close(done)
	}()
	if !waitUntil(done, time.Now().Add(closeWait)) {
		t.log.Warn().Msg("a kafka transaction did not stop in time; abandoning it")
	}
	t.closeProducers(time.Now().Add(closeWait))
	t.log.Info().Msg("kafka transactional sink closed")
	return nil
}

// producer returns the current transactional producer, starting one
// (InitProducerId) when there is none. Starting fences every older
// producer with the transactional id.
func (t *Transactional) producer(ctx context.Context) (*producer, error) {
	p, err := t.producers.get(ctx)
	switch {
	case err == nil:
		return p, nil
	case errors.Is(err, sink.ErrClosed):
		return nil, closedError()
	case ctx.Err() != nil && errors.Is(err, ctx.Err()):
		return nil, err
	}
	return nil, t.classify(err, "starting the transactional producer")
}

// discard drops p (if current) and closes it in the background; the next
// InitProducerId aborts a transaction it left open.
func (t *Transactional) discard(p *producer) { t.producers.retire(p) }

// txnMetrics are the exactly-once sink's metrics beyond the sink family
// (outboxcdc.SinkMetrics), under the same outbox_cdc_sink_ prefix.
type txnMetrics struct {
	commits     prometheus.Counter
	aborts      prometheus.Counter
	fenced      prometheus.Counter
	inits       prometheus.Counter
	txnSeconds  prometheus.Histogram
	openRecords prometheus.Gauge
}

func newTxnMetrics(reg prometheus.Registerer) *txnMetrics {
	m := &txnMetrics{
		commits: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "outbox_cdc_sink_transactions_committed_total",
			Help: "Kafka transactions committed (exactly-once: one per batch).",
		}),
		aborts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "outbox_cdc_sink_transactions_aborted_total",
			Help: "Kafka transactions aborted (exactly-once), each batch then sent again or the connector restarted.",
		}),
		fenced: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "outbox_cdc_sink_producer_fenced_total",
			Help: "Times this instance found its transactional producer fenced by another instance.",
		}),
		inits: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "outbox_cdc_sink_producer_inits_total",
			Help: "Transactional producer starts (InitProducerId calls).",
		}),
		txnSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "outbox_cdc_sink_transaction_seconds",
			Help:    "Time from the first attempt of a Kafka transaction (exactly-once) to its commit.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
		}),
		openRecords: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "outbox_cdc_sink_transaction_open_records",
			Help: "Records in the Kafka transaction kept open for a large source transaction whose end has not arrived yet (exactly-once).",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.commits, m.aborts, m.fenced, m.inits, m.txnSeconds, m.openRecords)
	}
	return m
}
