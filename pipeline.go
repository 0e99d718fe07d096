package outboxcdc

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// Router turns one outbox event into one record. It is pure: no I/O. A row
// that cannot be routed yields a *BadRowError. Called from the pipeline's
// batching goroutine only. The record may share ev's payload, strings and
// Extra values, but must not point into *ev itself: the source reuses the
// Event once the record is written (Tx.Pool).
type Router interface {
	Route(ev *Event) (Record, error)
}

// PipelineConfig bounds the pipeline's memory and shutdown time and says
// what happens to rows that cannot be delivered.
//
// # Memory while the sink is slow or down, and for huge transactions
//
// The pipeline stops reading ahead when the sink does not keep up: the
// writer holds the batch being written, one finished batch waits for it,
// the batcher fills one more, and then the batcher stops taking
// transactions, so at most QueueTransactions transactions and about
// QueueBytes of them wait in the queue and the source blocks (the Postgres
// source keeps answering keepalives; nothing is confirmed to the server).
//
// A source sends a transaction larger than MaxFragmentEvents rows or
// MaxFragmentBytes of payload as fragments (Tx.More). The pipeline writes
// the records of a fragment like any others (in exactly-once mode into the
// Kafka transaction it keeps open, see AtomicSink), but checkpoints only at
// the transaction's end. No part of the pipeline holds a whole transaction,
// so its share of memory is at most about
//
//	3 × (MaxBatchBytes + F) + QueueBytes + F,   F = one fragment or unfragmented transaction
//
// in record bytes (Record.Size, plus the rows' other fields), plus the
// source's own bounded read buffers, its pool of released Events slices
// (MaxPooledEvents, about 1.6 MB) and the Kafka sink's
// max_in_flight_bytes, however long an outage lasts and however large a
// transaction is. With the defaults and fragmenting sources that is about
// 3 × 8 + 2 + 4 MiB of rows, 16 MiB in the producer and the source's
// buffers (8 MiB on Postgres): the connector stays below 128 MiB resident.
// One exception: with an observer (lifecycle.mark_sent) the message ids of
// a transaction are kept until its end is checkpointed.
type PipelineConfig struct {
	// MaxBatchRecords bounds the records of one sink write. Several source
	// transactions go into one write while a backlog exists; a transaction
	// whose source sends it whole (not fragmented) is not split, so a
	// single larger transaction makes a larger write.
	MaxBatchRecords int `yaml:"max_batch_records"`
	// MaxBatchBytes bounds the bytes of one sink write (the records'
	// topics, keys, values and headers), with the same exception.
	MaxBatchBytes int `yaml:"max_batch_bytes"`
	// QueueTransactions is how many source transactions (or fragments) may
	// wait between the source and the batcher.
	QueueTransactions int `yaml:"queue_transactions"`
	// QueueBytes bounds the row bytes waiting there (payloads and the
	// rows' other fields). One transaction or fragment larger than this is
	// still taken, alone.
	QueueBytes int `yaml:"queue_bytes"`
	// CheckpointInterval is the least time between two checkpoint saves.
	// Records are never held back by it (saves run beside the writes);
	// after a crash, what was acknowledged since the last save is sent
	// again. 0 saves after every batch.
	CheckpointInterval time.Duration `yaml:"checkpoint_interval"`
	// ShutdownTimeout bounds the final flush after a stop was requested
	// (SIGTERM): what is not written by then is sent again after the
	// restart. The stop also closes the sink, which takes up to 10 s more
	// while the broker does not answer, so an orchestrator's grace period
	// (Kubernetes' `terminationGracePeriodSeconds`, 30 s by default) must
	// exceed shutdown_timeout by at least that: the 15 s default leaves 15 s.
	ShutdownTimeout time.Duration `yaml:"shutdown_timeout"`
	// LogInterval is how often the checkpoint position is logged.
	LogInterval time.Duration `yaml:"log_interval"`
	// OnError says what to do with a row the route cannot map (a NULL key
	// or message id, a payload that is not JSON with payload_format json,
	// ...) or whose record the sink refuses permanently (too large, topic
	// not authorised): "halt" (the default) stops with the row's message
	// id and position after checkpointing every transaction before it;
	// "dlq" writes a dead-letter record (the row and the error, see
	// docs/routing.md) to DLQTopic in the row's place and carries on. A
	// row is never skipped silently.
	OnError string `yaml:"on_error"`
	// DLQTopic is the dead-letter topic for on_error: dlq. Empty: the
	// connector name followed by ".dlq".
	DLQTopic string `yaml:"dlq_topic"`
	// DLQTopicCheck checks DLQTopic as a destination name of the sink (a
	// NATS subject, a Redis key); nil checks it as a Kafka topic name.
	DLQTopicCheck func(name string) error `yaml:"-"`
}

// DefaultPipelineConfig returns the defaults.
func DefaultPipelineConfig() PipelineConfig {
	return PipelineConfig{
		MaxBatchRecords:    4096,
		MaxBatchBytes:      4 << 20,
		QueueTransactions:  16,
		QueueBytes:         2 << 20,
		CheckpointInterval: 100 * time.Millisecond,
		ShutdownTimeout:    15 * time.Second,
		LogInterval:        30 * time.Second,
		OnError:            OnErrorHalt,
	}
}

// Validate checks the bounds.
func (c PipelineConfig) Validate() error {
	switch {
	case c.MaxBatchRecords < 1:
		return KeyErrorf("max_batch_records", "", "must be at least 1, got %d", c.MaxBatchRecords)
	case c.MaxBatchBytes < 1024:
		return KeyErrorf("max_batch_bytes", "", "must be at least 1024, got %d", c.MaxBatchBytes)
	case c.QueueTransactions < 1:
		return KeyErrorf("queue_transactions", "", "must be at least 1, got %d", c.QueueTransactions)
	case c.QueueBytes < 64<<10:
		return KeyErrorf("queue_bytes", "", "must be at least 65536, got %d", c.QueueBytes)
	case c.CheckpointInterval < 0 || c.CheckpointInterval > time.Minute:
		return KeyErrorf("checkpoint_interval", "", "must be between 0 and 1m, got %s", c.CheckpointInterval)
	case c.ShutdownTimeout <= 0:
		return KeyErrorf("shutdown_timeout", "", "must be positive, got %s", c.ShutdownTimeout)
	case c.LogInterval <= 0:
		return KeyErrorf("log_interval", "", "must be positive, got %s", c.LogInterval)
	case c.OnError != OnErrorHalt && c.OnError != OnErrorDLQ:
		return KeyErrorf("on_error", "", "%q is not %s or %s", c.OnError, OnErrorHalt, OnErrorDLQ)
	}
	if c.DLQTopic != "" {
		check := c.DLQTopicCheck
		if check == nil {
			check = validTopic
		}
		if err := check(c.DLQTopic); err != nil {
			return KeyErrorf("dlq_topic", "", "%v", err)
		}
	}
	return nil
}

// Pipeline moves committed outbox transactions from a Source to a Sink and
// checkpoints behind them (the flush barrier): records are written, every
// one is acknowledged, then the end position of the last whole transaction
// in the write is saved, then the source is told. A checkpoint therefore
// never lands inside a transaction and never passes an unacknowledged
// record; after a crash at any point the connector resumes from the last
// checkpoint and at most the records of one batch are sent again.
type Pipeline struct {
	cfg      PipelineConfig
	src      Source
	router   Router
	sink     Sink
	cp       Checkpointer
	atomic   AtomicSink // set in exactly-once mode: records and position in one write
	observer CheckpointObserver
	spare    chan *batch // written batches kept for reuse
	dead     DeadLetter  // set with on_error: dlq
	log      zerolog.Logger
	metrics  *pipelineMetrics
	// lag is what outbox_cdc_lag_seconds reads.
	lag *lagTracker
	// saved is the last position this run checkpointed (nil: none yet),
	// for the stop's report.
	saved atomic.Pointer[Position]
	// routeWarns rate-limits the warnings about rows the route sent
	// otherwise than configured (Record.Warning).
	routeWarns LogThrottle
	// openRecords counts the records written so far of a fragmented
	// source transaction whose end has not arrived (writer goroutine).
	openRecords int
	// witness mirrors the position an AtomicSink commits (see Witness).
	witness       Checkpointer
	freshStart    bool
	witnessWarned time.Time // saver goroutine (and load, before it starts)
	// gate pauses intake between transactions (pause.go); nil: never.
	gate *Gate
	// fence, when set, is asked before every sink write (SetFence).
	fence func() error
	// aborted is closed by Abort; abortErr is why.
	aborted   chan struct{}
	abortOnce sync.Once
	abortErr  error
}

// ErrAborted is wrapped by the error of a Run stopped by Abort, and of a
// write refused because the pipeline was aborted.
var ErrAborted = errors.New("pipeline aborted")

// SetFence makes the pipeline call fence before every write to the sink
// (records, a progress-only commit in exactly-once mode, a dead letter).
// A non-nil error means the write must not be issued: the pipeline then
// aborts (see Abort) with that error, without writing anything more.
// fence is called from the writer goroutine (and, for the start position,
// from the source's); it must be cheap. Call SetFence before Run.
func (p *Pipeline) SetFence(fence func() error) { p.fence = fence }

// Abort stops Run without draining: no further write is issued to the
// sink, the write in flight has its context cancelled, what was read
// ahead is dropped (it is read again from the checkpoint by whoever
// streams next), and Run returns an error wrapping ErrAborted and cause.
// This is the stop for a lost lock or a lost assignment, when another
// instance may already be writing; the graceful stop (cancelling Run's
// context) is for everything else. Abort may be called from any
// goroutine, any number of times (the first cause counts), also before
// Run.
func (p *Pipeline) Abort(cause error) {
	p.abortOnce.Do(func() {
		if cause == nil {
			cause = errors.New("aborted")
		}
		p.abortErr = fmt.Errorf("%w: %w", ErrAborted, cause)
		close(p.aborted)
	})
}

// abortedErr returns Abort's error, or nil while not aborted.
func (p *Pipeline) abortedErr() error {
	select {
	case <-p.aborted:
		return p.abortErr
	default:
		return nil
	}
}

// writeAllowed is checked before every sink write: not aborted, and the
// fence (if any) lets it through. A refusal aborts the pipeline.
func (p *Pipeline) writeAllowed() error {
	if err := p.abortedErr(); err != nil {
		return err
	}
	if p.fence != nil {
		if err := p.fence(); err != nil {
			p.Abort(err)
			return p.abortedErr()
		}
	}
	return nil
}

// NewPipeline wires the parts. reg may be nil. With a nil cp the sink must
// be an AtomicSink, which then stores the position with every batch
// (exactly-once); otherwise the pipeline writes, then saves to cp.
func NewPipeline(cfg PipelineConfig, src Source, router Router, sink Sink, cp Checkpointer, log zerolog.Logger, reg prometheus.Registerer) (*Pipeline, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	lag := &lagTracker{}
	p := &Pipeline{
		cfg: cfg, src: src, router: router, sink: sink, cp: cp,
		log:     log.With().Str("component", "pipeline").Logger(),
		metrics: newPipelineMetrics(reg, lag),
		lag:     lag,
		spare:   make(chan *batch, 3),
		aborted: make(chan struct{}),
	}
	if cp == nil {
		atomic, ok := sink.(AtomicSink)
		if !ok {
			return nil, errors.New("pipeline: no checkpoint store and the sink cannot store positions itself")
		}
		p.atomic = atomic
		p.cp = atomicCheckpointer{atomic}
	}
	if cfg.OnError == OnErrorDLQ {
		if cfg.DLQTopic == "" {
			return nil, errors.New("pipeline.dlq_topic: required with on_error: dlq")
		}
		p.dead = DeadLetterTo(cfg.DLQTopic)
	}
	return p, nil
}

// atomicCheckpointer loads from an AtomicSink; its Save is never called
// because the position was written with the records.
type atomicCheckpointer struct{ s AtomicSink }

func (a atomicCheckpointer) Load(ctx context.Context) (Position, error) { return a.s.Load(ctx) }
func (a atomicCheckpointer) Save(context.Context, Position) error {
	return errors.New("atomic sink: Save must not be called")
}

// Witness gives an exactly-once pipeline (no Checkpointer, an AtomicSink)
// a store that mirrors the position the sink commits: it is saved after
// the commits, paced by CheckpointInterval (a failed save is logged, not
// fatal), and is never read to resume.
// It is evidence that the connector ran before. When the sink has no
// committed position at start but the witness holds one (the progress
// topic was deleted, its record expired, or the connector ran
// at-least-once with this store before), Run refuses with an error
// wrapping ErrProgressMissing instead of starting where source.start
// says and skipping what was committed meanwhile; freshStart makes it
// start anyway, as the operator asked. Call before Run.
func (p *Pipeline) Witness(w Checkpointer, freshStart bool) {
	p.witness, p.freshStart = w, freshStart
}

// ErrProgressMissing is wrapped by the error of an exactly-once start that
// finds no committed position although the witness shows that the
// connector committed one before.
var ErrProgressMissing = errors.New("no committed position, but the connector ran before")

// load returns the position to resume from; in exactly-once mode it
// checks the sink's committed position against the witness.
func (p *Pipeline) load(ctx context.Context) (Position, error) {
	from, err := p.cp.Load(ctx)
	if err != nil || p.atomic == nil || p.witness == nil {
		return from, err
	}
	seen, werr := p.witness.Load(ctx)
	what := describeStore(p.witness)
	switch {
	case !from.IsZero():
		if werr != nil {
			p.log.Warn().Err(werr).Str("store", what).Msg("the witness of the committed position cannot be read; rewriting it")
		}
		if werr != nil || seen != from {
			// A connector upgraded from a version without a witness, or
			// one whose witness lags: make the evidence current now, not
			// at the next commit, which on an idle outbox may be far off.
			p.saveWitness(ctx, from)
		}
		return from, nil
	case p.freshStart:
		if werr != nil || !seen.IsZero() {
			p.log.Warn().Str("witness", string(seen)).AnErr("witness_error", werr).Str("store", what).
				Msg("no committed position although the connector ran before: starting where source.start says, as asked (--fresh-start); what was committed since the witness is not sent")
		}
		return from, nil
	case werr != nil:
		return "", Permanent(fmt.Errorf("%w: the sink holds no committed position and the witness (%s) cannot be read (%s), so starting could skip rows",
			ErrProgressMissing, what, Cause(werr)),
			"restore the progress, or start deliberately from a position you choose with `outbox-cdc position set`, or where source.start says with `outbox-cdc run --fresh-start`")
	case !seen.IsZero():
		return "", Permanent(fmt.Errorf("%w: the sink holds no committed position, but %s shows the connector had reached %s (the progress topic was deleted, its record expired, or the connector ran at-least-once before): starting where source.start says would skip every row committed since",
			ErrProgressMissing, what, seen),
			fmt.Sprintf("resume from there with `outbox-cdc position set --to %s` (rows after it may be delivered again), or start fresh deliberately with `outbox-cdc run --fresh-start`", seen))
	}
	return from, nil
}

// saveWitness writes the witness. A failure is logged, not fatal: the
// position itself is committed in the sink, and the witness already
// written (if any) stays as evidence. Several instances without the HA
// lock may share a witness file; their saves can then collide.
func (p *Pipeline) saveWitness(ctx context.Context, pos Position) {
	err := p.witness.Save(ctx, pos)
	if err == nil {
		p.witnessWarned = time.Time{}
		return
	}
	if time.Since(p.witnessWarned) < p.cfg.LogInterval {
		return
	}
	p.witnessWarned = time.Now()
	p.log.Warn().Err(err).Str("store", describeStore(p.witness)).Str("position", string(pos)).
		Msg("cannot write the witness of the committed position; until it is written, a deleted or expired progress record would not be noticed at start")
}

func describeStore(cp Checkpointer) string {
	if s, ok := cp.(fmt.Stringer); ok {
		return s.String()
	}
	return "the checkpoint store"
}

// batch is the records of one or more source transactions, and the
// position just past the last whole one. The first records may continue a
// fragmented transaction that began in an earlier batch (cont), and the
// last ones may belong to a transaction whose end has not arrived yet
// (open); a batch never holds a whole transaction followed by the start of
// a fragmented one, so in exactly-once mode a batch is either the end of
// an open write plus whole transactions (end set) or a part of one open
// transaction (end zero).
type batch struct {
	records []Record
	// events[i] is the row records[i] was made from.
	events []*Event
	// pooled are the transactions whose Events slices came from their
	// source's pool: released once the batch is written (recycle), when
	// events and the dead-letter and error paths read them no more.
	pooled []Tx
	// dead holds the records replaced by dead-letter records, by index;
	// nil while there are none.
	dead map[int]*deadEntry
	// marks[j] is where the j-th transaction of the batch ends.
	marks      []txMark
	bytes      int
	txs        int
	end        Position // end of the last whole transaction; zero if none
	commitTime time.Time
	// firstCommit is the commit time of the batch's first transaction
	// that has one (the oldest), for outbox_cdc_lag_seconds while the
	// batch is not checkpointed.
	firstCommit time.Time
	// idle: the last whole transaction is a source's "nothing pending"
	// marker (an end without a commit time, e.g. the Postgres idle
	// advance or a MySQL heartbeat): once checkpointed the lag is 0.
	idle bool
	// cont: records[0] continues a transaction begun in an earlier batch.
	cont bool
	// open: the records from openFrom on belong to a transaction whose
	// last fragment has not arrived.
	open     bool
	openFrom int
}

// empty reports whether b holds nothing to write or checkpoint.
func (b *batch) empty() bool { return len(b.records) == 0 && len(b.marks) == 0 }

// newBatch returns an empty batch, reusing the slices of a written one;
// inTx says it continues a fragmented transaction.
func (p *Pipeline) newBatch(inTx bool) *batch {
	var b *batch
	select {
	case b = <-p.spare:
	default:
		b = &batch{}
	}
	b.cont, b.open = inTx, inTx
	return b
}

// recycle empties a written batch for reuse, dropping its references to the
// rows so their memory can be collected, and gives the transactions'
// Events slices back to their sources. Records do not point into Events
// (Router), so what the sink may still hold is unaffected.
func (p *Pipeline) recycle(b *batch) {
	clear(b.records)
	clear(b.events)
	for i := range b.pooled {
		b.pooled[i].Release()
	}
	clear(b.pooled)
	*b = batch{records: b.records[:0], events: b.events[:0], marks: b.marks[:0], pooled: b.pooled[:0]}
	select {
	case p.spare <- b:
	default:
	}
}

// dropOpen removes the records of the transaction still open at the end of
// b: it cannot be checkpointed in this run.
func (b *batch) dropOpen() (dropped int) {
	if !b.open {
		return 0
	}
	dropped = len(b.records) - b.openFrom
	b.truncate(b.openFrom)
	b.open = false
	return dropped
}

// truncate cuts b back to its first n records.
func (b *batch) truncate(n int) {
	clear(b.records[n:])
	clear(b.events[n:])
	b.records, b.events = b.records[:n], b.events[:n]
	for k := range b.dead {
		if k >= n {
			delete(b.dead, k)
		}
	}
	b.bytes = 0
	for i := range b.records {
		b.bytes += b.records[i].Size()
	}
}

type txMark struct {
	records int // records in the batch up to and including this transaction
	end     Position
}

// deadEntry is a row whose record was replaced by a dead-letter record.
type deadEntry struct {
	orig      *Record // the routed record; nil for a bad row
	cause     error
	class     string
	omitValue bool // the dead-letter record leaves the payload out
}

// before returns the records and end position of the whole transactions
// that precede record i (end is zero when there are none).
func (b *batch) before(i int) (int, Position) {
	n, end := 0, Position("")
	for _, m := range b.marks {
		if m.records > i {
			break
		}
		n, end = m.records, m.end
	}
	return n, end
}

// Ready returns nil while both the source and the sink are connected.
func (p *Pipeline) Ready() error {
	if err := p.src.Ready(); err != nil {
		return fmt.Errorf("source: %w", err)
	}
	if err := p.sink.Ready(); err != nil {
		return fmt.Errorf("sink: %w", err)
	}
	return nil
}

// Run loads the checkpoint and streams until ctx is done or something fails.
// When ctx is cancelled it stops reading, writes and checkpoints every whole
// transaction already received (bounded by ShutdownTimeout) and returns nil.
// Otherwise it returns the first permanent error from the source, the
// router (a *BadRowError, after checkpointing every transaction before the
// bad row's), the sink or the checkpointer.
func (p *Pipeline) Run(ctx context.Context) error {
	from, err := p.load(ctx)
	if err != nil {
		if ctx.Err() != nil && errors.Is(err, context.Canceled) {
			// Stopped before anything was read: nothing to write.
			p.log.Info().Msg("stopped while loading the checkpoint")
			return nil
		}
		return fmt.Errorf("load checkpoint: %w", err)
	}
	if from.IsZero() {
		p.log.Info().Msg("no checkpoint: starting where source.start says")
	} else {
		p.log.Info().Str("position", string(from)).Msg("resuming from checkpoint")
	}
	if r, ok := p.src.(StartReporter); ok {
		r.ReportStart(p.saveStart)
	}

	// The source and the batcher stop on ctx (or on a failure); the writer
	// gets its own context so that it can finish the last batches after a
	// graceful stop and is cut off only by a failure or the shutdown timeout.
	readCtx, stopReading := context.WithCancel(ctx)
	defer stopReading()
	writeCtx, stopWriting := context.WithCancel(context.WithoutCancel(ctx))
	defer stopWriting()

	// The source sends to in; the intake moves what it sends to the queue
	// (txs), at most QueueTransactions of them and about QueueBytes.
	in := make(chan Tx)
	txs := make(chan queued, p.cfg.QueueTransactions)
	qsem := NewByteBudget(int64(p.cfg.QueueBytes)) // one transaction larger than the limit is admitted alone
	batches := make(chan *batch, 1)
	src := &sourceRun{done: make(chan struct{})}
	go func() {
		src.err = p.src.Run(readCtx, from, in)
		close(in) // the pipeline's own channel: Run has returned
	}()
	go p.intake(readCtx, in, txs, qsem, src)
	batchErr := make(chan error, 1)
	go func() {
		batchErr <- p.batcher(readCtx, txs, qsem, src, batches)
		close(batches)
	}()
	// Whatever happens, the source is stopped and has returned before Run does.
	defer func() {
		stopReading()
		<-src.done
	}()

	// Abort stops reading and writing at once: nothing is drained.
	go func() {
		select {
		case <-p.aborted:
			stopReading()
			stopWriting()
		case <-writeCtx.Done():
		}
	}()

	// After a graceful stop the writer has ShutdownTimeout to drain.
	var timedOut atomic.Bool
	go func() {
		select {
		case <-ctx.Done():
		case <-writeCtx.Done():
			return
		}
		t := time.NewTimer(p.cfg.ShutdownTimeout)
		defer t.Stop()
		select {
		case <-t.C:
			p.log.Error().Dur("timeout", p.cfg.ShutdownTimeout).Msg("shutdown timeout: abandoning unwritten records; they will be sent again after restart")
			timedOut.Store(true)
			stopWriting()
		case <-writeCtx.Done():
		}
	}()

	werr := p.writer(writeCtx, batches)
	if aerr := p.abortedErr(); aerr != nil {
		werr = aerr // the writer's error is only the abort's effect
	}
	if werr != nil {
		stopReading()
		// Let the batcher see the cancellation and exit; its error is moot.
		for range batches {
		}
		<-batchErr
		if errors.Is(werr, ErrAborted) {
			p.log.Warn().Str("reason", werr.Error()).Msg("aborted: nothing read ahead was written; the next owner reads it again from the checkpoint")
			return werr
		}
		if timedOut.Load() {
			// The sink was still retrying (e.g. the broker is down): what was
			// not checkpointed is sent again after a restart.
			return fmt.Errorf("shutdown: final flush did not finish within %s (pipeline.shutdown_timeout); the checkpoint stays at the last acknowledged transaction: %w", p.cfg.ShutdownTimeout, werr)
		}
		return werr
	}
	berr := <-batchErr
	var bad *BadRowError
	if errors.As(berr, &bad) {
		return fmt.Errorf("%w; stopping with every transaction before it checkpointed (pipeline.on_error is halt; set it to dlq to send such rows to a dead-letter topic instead)", berr)
	}
	if ctx.Err() != nil {
		// A stop was requested; the source's error is then only its reaction.
		if writeCtx.Err() != nil {
			return fmt.Errorf("shutdown: final flush did not finish within %s", p.cfg.ShutdownTimeout)
		}
		// Only what is known here: every save of this run succeeded (a
		// failed one ends the writer with an error). Whether that was
		// everything received, the source and the lifecycle know (a
		// transaction cut by the stop, a lost HA lock, say so themselves).
		if saved := p.saved.Load(); saved != nil {
			p.log.Info().Str("position", string(*saved)).Msg("stopped: the checkpoint holds the last transaction written")
		} else {
			p.log.Info().Msg("stopped: no transaction was checkpointed in this run")
		}
		return nil
	}
	return berr
}

// saveStart makes the start position a source resolved durable before it
// sends its first Tx (StartReporter): in the checkpoint store, or in
// exactly-once mode as a progress record without records (and in the
// witness). It runs on the reader goroutine while the saver has nothing
// to save yet, so no other save runs beside it. Its errors are permanent
// for the source: it stops, as the pipeline does after any failed save.
func (p *Pipeline) saveStart(ctx context.Context, start Position) error {
	if start.IsZero() {
		return Permanent(errors.New("the source reported an empty start position"), "")
	}
	if p.atomic != nil {
		if err := p.write(ctx, nil, start); err != nil {
			return Permanent(fmt.Errorf("commit the start position %s as progress before reading: %w", start, err), "")
		}
		if p.witness != nil {
			p.saveWitness(ctx, start)
		}
	} else if err := p.cp.Save(ctx, start); err != nil {
		return Permanent(fmt.Errorf("save the start position %s before reading: %w; nothing was read (without it a restart would resolve source.start again and skip the rows committed in between)", start, err), "")
	}
	p.metrics.checkpoints.Inc()
	p.metrics.checkpointTime.SetToCurrentTime()
	p.log.Info().Str("position", string(start)).Msg("start position saved before reading: a restart resumes here")
	return nil
}

// queued is a transaction (or fragment) in the queue, with its size.
type queued struct {
	tx   Tx
	size int64
}

// intake moves transactions from the source to the queue while the queue
// holds less than QueueBytes, so that a source sending large fragments
// blocks before the queue holds QueueTransactions of them. It closes
// src.done once the source has returned and everything it sent before
// is queued (or the pipeline stopped reading).
func (p *Pipeline) intake(ctx context.Context, in <-chan Tx, txs chan<- queued, qsem *ByteBudget, src *sourceRun) {
	defer close(src.done)
	defer func() {
		for range in { // until Run returns and in is closed
		}
	}()
	inTx := false // the last transaction taken was a fragment with more to come
	for tx := range in {
		// A pause holds a transaction's first fragment here, unqueued (a
		// stop drops it: nothing of it was written or checkpointed).
		if !inTx && !p.gate.wait(ctx) {
			return
		}
		inTx = tx.More
		q := queued{tx: tx, size: txSize(&tx)}
		if qsem.Acquire(ctx, nil, q.size) != nil {
			return
		}
		select {
		case txs <- q:
		case <-ctx.Done():
			return
		}
	}
}

// txSize estimates the bytes a transaction's rows hold.
func txSize(tx *Tx) int64 {
	n := int64(64)
	for i := range tx.Events {
		ev := &tx.Events[i]
		n += int64(len(ev.Payload)+len(ev.MessageID)+len(ev.AggregateType)+len(ev.AggregateID)+len(ev.EventType)+len(ev.Origin)) + 160
		for _, c := range ev.Extra {
			n += int64(len(c.Name)+len(c.Value)) + 48
		}
	}
	return n
}

// batcher reads transactions, routes their events and hands batches to the
// writer. While the writer is busy it keeps filling the next batch up to
// the bounds, so a backlog makes large writes and an idle stream makes one
// write per transaction. Fragments of a large transaction are handed on as
// the batch fills, without waiting for the transaction's end; a fragmented
// transaction always starts a new batch (see batch).
func (p *Pipeline) batcher(ctx context.Context, txs <-chan queued, qsem *ByteBudget, src *sourceRun, out chan<- *batch) error {
	inTx := false // the last transaction received was a fragment with More
	cur := p.newBatch(inTx)
	take := func(q queued) error {
		qsem.Release(q.size)
		tx := q.tx
		if tx.More && !inTx && len(cur.marks) > 0 {
			// A fragmented transaction begins: the whole ones before it
			// go out on their own, so that no write mixes them with an
			// unfinished transaction.
			out <- cur
			cur = p.newBatch(false)
		}
		if err := p.add(cur, tx); err != nil {
			return err
		}
		if tx.More && !inTx {
			p.log.Debug().Str("origin", firstOrigin(&tx)).Msg("a large source transaction arrives in fragments: its records are written as they come, the checkpoint waits for its end")
		}
		inTx = tx.More
		if p.full(cur) {
			out <- cur // blocks while the writer works: back-pressure to the source
			cur = p.newBatch(inTx)
		}
		return nil
	}
	var final error // set when the source stopped or a row failed
	for final == nil {
		// Wait for a transaction, or, with a non-empty batch, for the writer.
		var q queued
		if cur.empty() {
			select {
			case q = <-txs:
			case <-src.done:
				final = sourceStopped(src.err)
				continue
			case <-ctx.Done():
				final = ctx.Err()
				continue
			}
		} else {
			// What is already queued goes into the batch before the batch
			// goes to the writer: nothing waits for it, and the writes of
			// a backlog are larger.
			select {
			case q = <-txs:
				final = take(q)
				continue
			default:
			}
			select {
			case q = <-txs:
			case out <- cur:
				cur = p.newBatch(inTx)
				continue
			case <-src.done:
				final = sourceStopped(src.err)
				continue
			case <-ctx.Done():
				final = ctx.Err()
				continue
			}
		}
		final = take(q)
	}
	// Transactions already queued are whole, or fragments: take them too
	// (unless a row failed), so a stop checkpoints every whole transaction
	// received.
	var bad *BadRowError
	if !errors.As(final, &bad) {
	drain:
		for {
			select {
			case q := <-txs:
				if err := take(q); err != nil {
					final = err
					break drain
				}
			default:
				break drain
			}
		}
	}
	// A transaction whose end did not arrive cannot be checkpointed in this
	// run: its records are not written now, and the restart reads it again.
	if n := cur.dropOpen(); n > 0 || inTx {
		p.log.Warn().Int("records_not_written", n).Msg("stopping inside a large source transaction: it is not checkpointed; the next start reads it again from its beginning (in at-least-once mode its records written so far are sent again)")
	}
	if !cur.empty() {
		out <- cur
	}
	return final
}

func firstOrigin(tx *Tx) string {
	if len(tx.Events) == 0 {
		return ""
	}
	return tx.Events[0].Origin
}

func (p *Pipeline) full(b *batch) bool {
	return len(b.records) >= p.cfg.MaxBatchRecords || b.bytes >= p.cfg.MaxBatchBytes
}

// sourceRun is the outcome of Source.Run: err is set before done is closed.
type sourceRun struct {
	done chan struct{}
	err  error
}

// add routes tx's events into b. A row the router rejects becomes a
// dead-letter record with on_error: dlq; otherwise b is cut back to where
// tx's source transaction began in b (for a fragment: its first fragment
// in this batch), so the batch ends at the last good whole transaction,
// and the error is returned.
func (p *Pipeline) add(b *batch, tx Tx) error {
	if !b.open {
		b.openFrom = len(b.records)
	}
	if b.firstCommit.IsZero() {
		b.firstCommit = tx.CommitTime
	}
	if tx.Pool != nil && cap(tx.Events) > 0 {
		// Kept whatever happens to its records here: a row cut off by
		// truncate is read by nothing once the batch is written.
		b.pooled = append(b.pooled, Tx{Events: tx.Events, Pool: tx.Pool})
	}
	for i := range tx.Events {
		ev := &tx.Events[i]
		rec, err := p.router.Route(ev)
		if err != nil {
			p.metrics.badRows.Inc()
			var bad *BadRowError
			if p.dead == nil || !errors.As(err, &bad) {
				b.truncate(b.openFrom)
				b.open = false
				return err
			}
			rec = p.dead(Failure{Event: ev, Err: err, Class: FailureBadRow})
			if b.dead == nil {
				b.dead = map[int]*deadEntry{}
			}
			b.dead[len(b.records)] = &deadEntry{cause: err, class: FailureBadRow}
			p.log.Warn().Str("origin", ev.Origin).Str("message_id", ev.MessageID).Str("class", FailureBadRow).
				Str("dlq_topic", rec.Topic).AnErr("error", err).Msg("bad outbox row: sending it to the dead-letter topic")
		}
		if rec.Warning != "" {
			p.routeWarning(ev, rec.Warning)
		}
		b.bytes += rec.Size()
		b.records = append(b.records, rec)
		b.events = append(b.events, ev)
	}
	if tx.More {
		b.open = true
		return nil
	}
	b.open = false
	b.marks = append(b.marks, txMark{records: len(b.records), end: tx.End})
	b.txs++
	b.end = tx.End
	if !tx.CommitTime.IsZero() {
		b.commitTime = tx.CommitTime
	}
	// An end without a commit time says the source has nothing pending.
	b.idle = tx.CommitTime.IsZero()
	return nil
}

// routeWarning logs a row the route sent otherwise than configured
// (Record.Warning, e.g. a JSON payload sent as text): the first at once,
// then at most one line per WarnInterval, which counts the rows since the
// previous one. The payload is not logged.
func (p *Pipeline) routeWarning(ev *Event, warning string) {
	ok, suppressed := p.routeWarns.Allow()
	if !ok {
		return
	}
	p.log.Warn().Str("origin", ev.Origin).Str("message_id", ev.MessageID).Int("rows", suppressed+1).Msg(warning)
}

func sourceStopped(err error) error {
	if err == nil {
		return errors.New("source stopped without an error")
	}
	if errors.Is(err, context.Canceled) {
		return err
	}
	return fmt.Errorf("source: %w", err)
}

// writer writes each batch and hands its end position to the saver, which
// saves it and then acks the source. Saving runs beside the next write, so
// a checkpoint fsync never delays records; under load the saver coalesces
// several batches into one save. The checkpoint still never passes an
// unacknowledged record: a position reaches the saver only after every
// record before it was acknowledged.
func (p *Pipeline) writer(ctx context.Context, batches <-chan *batch) error {
	sv := p.startSaver(ctx)
	for {
		var b *batch
		select {
		case next, ok := <-batches:
			if !ok {
				return sv.close()
			}
			b = next
			if err := p.abortedErr(); err != nil {
				return errors.Join(err, sv.close())
			}
		case <-sv.fail:
			// A save failed: stop now, even if no further batch comes.
			return sv.close()
		}
		start := time.Now()
		p.lag.writing(b.firstCommit)
		if err := p.deliver(ctx, b, sv); err != nil {
			// Save what was acknowledged before the failure.
			if serr := sv.close(); serr != nil {
				return errors.Join(err, serr)
			}
			return err
		}
		if len(b.records) > 0 {
			p.metrics.writeSeconds.Observe(time.Since(start).Seconds())
			p.metrics.records.Add(float64(len(b.records)))
			p.metrics.batchRecords.Observe(float64(len(b.records)))
		}
		for _, d := range b.dead {
			p.metrics.deadLetters.WithLabelValues(d.class).Inc()
		}
		p.trackOpen(b)
		// A batch that only continues an open transaction has no end: its
		// message ids wait in the saver for the transaction's end.
		sv.put(b.end, b.commitTime, b.idle, p.messageIDs(b.events))
		p.recycle(b)
	}
}

// trackOpen keeps the gauge of records written for a source transaction
// whose end has not arrived. Called from the writer goroutine.
func (p *Pipeline) trackOpen(b *batch) {
	switch {
	case len(b.marks) > 0 && b.open:
		p.openRecords = len(b.records) - b.openFrom
	case len(b.marks) > 0:
		p.openRecords = 0
	case b.open:
		p.openRecords += len(b.records)
	}
	p.metrics.openRecords.Set(float64(p.openRecords))
}

// messageIDs lists the batch's message ids for the checkpoint observer.
func (p *Pipeline) messageIDs(events []*Event) []string {
	if p.observer == nil || len(events) == 0 {
		return nil
	}
	ids := make([]string, len(events))
	for i, ev := range events {
		ids[i] = ev.MessageID
	}
	return ids
}

// CheckpointObserver hears about every durable checkpoint.
type CheckpointObserver interface {
	// Checkpointed is called from the pipeline's saver goroutine after end
	// was saved and the source acked, with the message ids of the records
	// delivered since the previous call, in order. It must not block for
	// long: the next save waits for it.
	Checkpointed(ctx context.Context, end Position, messageIDs []string)
}

// Observe registers an observer (for outbox lifecycle: mark rows sent,
// clean up). Call before Run.
func (p *Pipeline) Observe(o CheckpointObserver) { p.observer = o }

// saver saves the newest acknowledged position in its own goroutine.
type saver struct {
	p       *Pipeline
	ctx     context.Context
	mu      sync.Mutex
	pending Position
	commit  time.Time
	idle    bool // pending ends with a "nothing pending" marker
	ids     []string
	err     error
	wake    chan struct{}
	fail    chan struct{} // closed when a save fails
	closing chan struct{}
	done    chan struct{}
	closed  bool
	lastLog time.Time
}

func (p *Pipeline) startSaver(ctx context.Context) *saver {
	sv := &saver{p: p, ctx: ctx, wake: make(chan struct{}, 1), fail: make(chan struct{}), closing: make(chan struct{}), done: make(chan struct{}), lastLog: time.Now()}
	go sv.run()
	return sv
}

// put records that everything up to end is acknowledged. A zero end (a
// batch inside an open transaction) only adds ids for the next save. idle:
// end is a source's "nothing pending" marker.
func (sv *saver) put(end Position, commit time.Time, idle bool, ids []string) {
	sv.mu.Lock()
	sv.p.lag.delivered()
	sv.ids = append(sv.ids, ids...)
	if end.IsZero() {
		sv.mu.Unlock()
		return
	}
	sv.pending = end
	if !commit.IsZero() {
		sv.commit = commit
	}
	sv.idle = idle
	sv.mu.Unlock()
	select {
	case sv.wake <- struct{}{}:
	default:
	}
}

func (sv *saver) failed() error {
	sv.mu.Lock()
	defer sv.mu.Unlock()
	return sv.err
}

// close saves what is pending, stops the goroutine and returns the first
// save error.
func (sv *saver) close() error {
	sv.mu.Lock()
	if !sv.closed {
		sv.closed = true
		close(sv.closing)
		close(sv.wake)
	}
	sv.mu.Unlock()
	<-sv.done
	return sv.failed()
}

func (sv *saver) run() {
	defer close(sv.done)
	interval := sv.p.cfg.CheckpointInterval
	if sv.p.atomic != nil && sv.p.witness == nil {
		interval = 0 // the position was stored with the records; only acks remain
	}
	for range sv.wake {
		if !sv.saveOnce() {
			for range sv.wake { // drain until close
			}
			return
		}
		// Pace the saves: what is acknowledged in the meantime is saved in
		// one go, instead of one fsync per small batch. A stop saves at once.
		if interval > 0 {
			t := time.NewTimer(interval)
			select {
			case <-t.C:
			case <-sv.closing:
				t.Stop()
			}
		}
	}
	sv.saveOnce() // whatever close left pending
}

// saveOnce saves the pending position, if any; false after a failure.
func (sv *saver) saveOnce() bool {
	sv.mu.Lock()
	end, commit, idle, ids := sv.pending, sv.commit, sv.idle, sv.ids
	if end.IsZero() {
		sv.mu.Unlock()
		return true
	}
	sv.pending, sv.ids = "", nil
	sv.p.lag.saving()
	sv.mu.Unlock()
	p := sv.p
	if err := p.checkpoint(sv.ctx, end); err != nil {
		sv.mu.Lock()
		sv.err = err
		sv.mu.Unlock()
		close(sv.fail)
		return false
	}
	p.lag.saved(commit, idle)
	p.src.Ack(end)
	if p.observer != nil {
		p.observer.Checkpointed(sv.ctx, end, ids)
	}
	if time.Since(sv.lastLog) >= p.cfg.LogInterval {
		sv.lastLog = time.Now()
		p.log.Info().Str("position", string(end)).Msg("checkpoint")
	}
	return true
}

// write hands records to the sink; in exactly-once mode together with end.
// Nothing is issued once the pipeline is aborted or the fence refuses.
func (p *Pipeline) write(ctx context.Context, records []Record, end Position) error {
	if len(records) > 0 || (p.atomic != nil && !end.IsZero()) {
		if err := p.writeAllowed(); err != nil {
			return Permanent(err, "")
		}
	}
	switch {
	case p.atomic != nil:
		if end.IsZero() && len(records) == 0 {
			return nil
		}
		if err := p.atomic.WriteAtomic(ctx, records, end); err != nil {
			if end.IsZero() {
				return fmt.Errorf("atomic write of %d records inside a source transaction that is still open: %w", len(records), err)
			}
			return fmt.Errorf("atomic write of %d records with position %s: %w", len(records), end, err)
		}
	case len(records) > 0:
		if err := p.sink.Write(ctx, records); err != nil {
			return fmt.Errorf("sink write of %d records (after checkpoint, up to %s): %w", len(records), end, err)
		}
	}
	return nil
}

// checkpoint saves end (unless the atomic sink stored it with the records).
func (p *Pipeline) checkpoint(ctx context.Context, end Position) error {
	switch {
	case p.atomic == nil:
		if err := p.cp.Save(ctx, end); err != nil {
			return fmt.Errorf("save checkpoint %s: %w; stopping before acknowledging anything further (the records written since the last checkpoint will be sent again after a restart)", end, err)
		}
	case p.witness != nil:
		p.saveWitness(ctx, end)
	}
	p.saved.Store(&end)
	p.metrics.checkpoints.Inc()
	p.metrics.checkpointTime.SetToCurrentTime()
	return nil
}

// deliver writes b until every record is acknowledged. When the sink
// rejects one record permanently (a RecordError), with on_error: dlq that
// record is replaced by a dead-letter record and the whole batch is written
// again: records before it that were already acknowledged are then sent a
// second time (at-least-once; per key the last copies keep commit order).
// If the dead-letter record is rejected too, it is tried once more without
// the payload, then the pipeline halts. With on_error: halt, the whole
// transactions before the rejected row are written and checkpointed, and
// the error names the row.
func (p *Pipeline) deliver(ctx context.Context, b *batch, sv *saver) error {
	for {
		err := p.write(ctx, b.records, b.end)
		if err == nil {
			return nil
		}
		var re RecordError
		if !errors.As(err, &re) {
			return err
		}
		if errors.Is(err, ErrOpenWriteAborted) {
			// The records of the transaction's earlier batches went with
			// the aborted write: neither a dead letter nor the
			// transactions before the row can be committed without them.
			if i, _ := re.FailedRecord(); i >= 0 && i < len(b.records) {
				ev := b.events[i]
				return fmt.Errorf("outbox row at %s (message id %s), inside a source transaction larger than one batch, was rejected by the sink: %w; stopping without committing any part of that transaction (exactly-once cannot replace a row once the open Kafka transaction holding the rows before it was aborted): fix the cause and restart, which reads the transaction again",
					ev.Origin, idOrNone(ev.MessageID), err)
			}
			return err
		}
		i, permanent := re.FailedRecord()
		if !permanent || i < 0 || i >= len(b.records) || ctx.Err() != nil {
			return err
		}
		failed := []int{i}
		var multi RecordsError
		if errors.As(err, &multi) {
			failed = failed[:0]
			for _, j := range multi.FailedRecords() {
				if j >= 0 && j < len(b.records) {
					failed = append(failed, j)
				}
			}
			slices.Sort(failed)
			failed = slices.Compact(failed)
			if len(failed) == 0 {
				return err
			}
		}
		if p.dead == nil {
			return p.halt(ctx, b, failed[0], err, sv)
		}
		for _, j := range failed {
			if derr := p.divert(b, j, err); derr != nil {
				return derr
			}
		}
	}
}

// divert replaces record i of b, which the sink rejected with err, by its
// dead-letter record: the first time with the payload, then without it;
// it fails when even that was rejected.
func (p *Pipeline) divert(b *batch, i int, err error) error {
	ev := b.events[i]
	d := b.dead[i]
	switch {
	case d == nil:
		orig := b.records[i]
		d = &deadEntry{orig: &orig, cause: err, class: FailureRejected}
		if b.dead == nil {
			b.dead = map[int]*deadEntry{}
		}
		b.dead[i] = d
	case !d.omitValue:
		d.omitValue = true
		p.log.Warn().Str("origin", ev.Origin).Str("message_id", ev.MessageID).AnErr("error", err).
			Msg("dead-letter record rejected; sending it again without the payload")
	default:
		return fmt.Errorf("outbox row at %s (message id %s): its dead-letter record was rejected too, even without the payload: %w (the row failed with: %v)",
			ev.Origin, idOrNone(ev.MessageID), err, d.cause)
	}
	b.records[i] = p.dead(Failure{Event: ev, Record: d.orig, Err: d.cause, Class: d.class, OmitValue: d.omitValue})
	if d.class == FailureRejected && !d.omitValue {
		p.log.Warn().Str("origin", ev.Origin).Str("message_id", ev.MessageID).Str("class", d.class).
			Str("dlq_topic", b.records[i].Topic).AnErr("error", err).
			Msg("record rejected by the sink: sending the row to the dead-letter topic and writing the batch again")
	}
	return nil
}

// halt writes and checkpoints the whole transactions before record i,
// which the sink rejected, and returns the error that stops the pipeline.
func (p *Pipeline) halt(ctx context.Context, b *batch, i int, cause error, sv *saver) error {
	ev := b.events[i]
	n, end := b.before(i)
	at := "the checkpoint did not move"
	if !end.IsZero() {
		if err := p.write(ctx, b.records[:n], end); err != nil {
			// A sink reports the first rejection it hears of, which need not
			// be the first rejected record (Kafka answers per partition):
			// when an earlier row is rejected too, the halt names that one.
			var re RecordError
			if j, permanent := -1, false; errors.As(err, &re) && !errors.Is(err, ErrOpenWriteAborted) {
				if j, permanent = re.FailedRecord(); permanent && j >= 0 && j < n {
					return p.halt(ctx, b, j, err, sv)
				}
			}
			p.log.Warn().Err(err).Msg("could not write the transactions before the rejected row")
		} else {
			// The writer's error path closes the saver, which saves this.
			sv.put(end, time.Time{}, false, p.messageIDs(b.events[:n]))
			// The rejected row stays undelivered: the lag keeps counting.
			p.lag.writing(ev.CommitTime)
			at = "checkpoint at " + string(end) + ", just before its transaction"
		}
	}
	return fmt.Errorf("outbox row at %s (message id %s) was rejected by the sink: %w; stopping (%s; pipeline.on_error is halt, set it to dlq to send such rows to a dead-letter topic instead)",
		ev.Origin, idOrNone(ev.MessageID), cause, at)
}

func idOrNone(id string) string {
	if id == "" {
		return "(none)"
	}
	return id
}

type pipelineMetrics struct {
	records        prometheus.Counter
	badRows        prometheus.Counter
	checkpoints    prometheus.Counter
	checkpointTime prometheus.Gauge
	lag            prometheus.GaugeFunc
	batchRecords   prometheus.Histogram
	writeSeconds   prometheus.Histogram
	deadLetters    *prometheus.CounterVec
	openRecords    prometheus.Gauge
}

func newPipelineMetrics(reg prometheus.Registerer, lag *lagTracker) *pipelineMetrics {
	m := &pipelineMetrics{
		records: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "outbox_cdc_records_delivered_total",
			Help: "Records acknowledged by the sink.",
		}),
		badRows: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "outbox_cdc_bad_rows_total",
			Help: "Outbox rows that could not be routed (the connector stops on them, or sends them to the dead-letter topic with on_error: dlq).",
		}),
		checkpoints: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "outbox_cdc_checkpoint_saves_total",
			Help: "Checkpoints saved.",
		}),
		checkpointTime: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "outbox_cdc_checkpoint_last_saved_timestamp_seconds",
			Help: "Unix time of the last checkpoint save.",
		}),
		lag: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "outbox_cdc_lag_seconds",
			Help: "Seconds since the source commit of the oldest transaction read and not yet checkpointed; with none, the commit-to-checkpoint delay of the last one checkpointed, or 0 once the source reported nothing pending.",
		}, lag.value),
		batchRecords: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "outbox_cdc_batch_records",
			Help:    "Records per sink write.",
			Buckets: prometheus.ExponentialBuckets(1, 4, 9),
		}),
		writeSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "outbox_cdc_batch_write_seconds",
			Help:    "Time from handing a batch to the sink to every record acknowledged.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}),
	}
	m.openRecords = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "outbox_cdc_open_transaction_records",
		Help: "Records written so far of a large source transaction whose end has not arrived yet (fragments); the checkpoint waits for its end.",
	})
	m.deadLetters = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "outbox_cdc_dlq_records_total",
		Help: "Dead-letter records acknowledged by the sink (on_error: dlq), by class: bad_row (the route rejected the row) or rejected (the sink refused its record).",
	}, []string{"class"})
	m.deadLetters.WithLabelValues(FailureBadRow)
	m.deadLetters.WithLabelValues(FailureRejected)
	if reg != nil {
		reg.MustRegister(m.records, m.badRows, m.checkpoints, m.checkpointTime, m.lag, m.batchRecords, m.writeSeconds, m.deadLetters, m.openRecords)
	}
	return m
}

// lagTracker computes outbox_cdc_lag_seconds. While a transaction read
// from the source is not checkpointed (the sink is slow or down, the
// connector halted with it undelivered), the lag is the age of the oldest
// such transaction and keeps growing; otherwise it is the delay of the
// last checkpointed one, and 0 once a source's "nothing pending" marker
// (an end without a commit time) was checkpointed, so an idle connector
// reads 0 rather than the time since its last row. The writer calls
// writing and delivered, the saver saving and saved; a scrape calls value.
type lagTracker struct {
	mu sync.Mutex
	// Commit times of the oldest transaction in each stage; zero: none.
	inflight time.Time // the batch being written
	unsaved  time.Time // acknowledged, waiting for the next save
	inSave   time.Time // in the save under way
	last     float64
}

// writing: the writer hands a batch whose oldest commit time is first to
// the sink.
func (l *lagTracker) writing(first time.Time) {
	l.mu.Lock()
	l.inflight = first
	l.mu.Unlock()
}

// delivered: the batch being written is acknowledged and given to the saver.
func (l *lagTracker) delivered() {
	l.mu.Lock()
	if l.unsaved.IsZero() {
		l.unsaved = l.inflight
	}
	l.inflight = time.Time{}
	l.mu.Unlock()
}

// saving: the saver takes everything acknowledged so far into one save.
func (l *lagTracker) saving() {
	l.mu.Lock()
	if l.inSave.IsZero() {
		l.inSave = l.unsaved
	}
	l.unsaved = time.Time{}
	l.mu.Unlock()
}

// saved: the save finished; commit is the last checkpointed transaction's
// commit time, idle says the checkpoint ends with a "nothing pending" marker.
func (l *lagTracker) saved(commit time.Time, idle bool) {
	l.mu.Lock()
	l.inSave = time.Time{}
	switch {
	case idle:
		l.last = 0
	case !commit.IsZero():
		l.last = max(time.Since(commit).Seconds(), 0)
	}
	l.mu.Unlock()
}

func (l *lagTracker) value() float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, t := range []time.Time{l.inSave, l.unsaved, l.inflight} {
		if !t.IsZero() {
			return max(time.Since(t).Seconds(), l.last, 0)
		}
	}
	return l.last
}
