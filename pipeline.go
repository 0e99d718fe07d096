package outboxcdc

import (
	"context"
	"errors"
	"fmt"
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
