package outboxcdc

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// Router turns one outbox event into one record. It is pure: no I/O. A row
// that cannot be routed yields a *BadRowError. Called from the pipeline's
// batching goroutine only.
type Router interface {
	Route(ev *Event) (Record, error)
}

// PipelineConfig bounds the pipeline's memory and shutdown time.
type PipelineConfig struct {
	// MaxBatchRecords and MaxBatchBytes bound one sink write. Several source
	// transactions go into one write while a backlog exists; a transaction is
	// never split, so a single larger transaction makes a larger write.
	MaxBatchRecords int `yaml:"max_batch_records"`
	MaxBatchBytes   int `yaml:"max_batch_bytes"`
	// QueueTransactions is how many source transactions may wait between the
	// source and the batcher.
	QueueTransactions int `yaml:"queue_transactions"`
	// ShutdownTimeout bounds the final flush after a stop was requested.
	ShutdownTimeout time.Duration `yaml:"shutdown_timeout"`
	// LogInterval is how often the checkpoint position is logged.
	LogInterval time.Duration `yaml:"log_interval"`
}

// DefaultPipelineConfig returns the defaults.
func DefaultPipelineConfig() PipelineConfig {
	return PipelineConfig{
		MaxBatchRecords:   20000,
		MaxBatchBytes:     8 << 20,
		QueueTransactions: 64,
		ShutdownTimeout:   30 * time.Second,
		LogInterval:       30 * time.Second,
	}
}

// Validate checks the bounds.
func (c PipelineConfig) Validate() error {
	switch {
	case c.MaxBatchRecords < 1:
		return fmt.Errorf("pipeline.max_batch_records must be at least 1, got %d", c.MaxBatchRecords)
	case c.MaxBatchBytes < 1024:
		return fmt.Errorf("pipeline.max_batch_bytes must be at least 1024, got %d", c.MaxBatchBytes)
	case c.QueueTransactions < 1:
		return fmt.Errorf("pipeline.queue_transactions must be at least 1, got %d", c.QueueTransactions)
	case c.ShutdownTimeout <= 0:
		return fmt.Errorf("pipeline.shutdown_timeout must be positive, got %s", c.ShutdownTimeout)
	case c.LogInterval <= 0:
		return fmt.Errorf("pipeline.log_interval must be positive, got %s", c.LogInterval)
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
	cfg     PipelineConfig
	src     Source
	router  Router
	sink    Sink
	cp      Checkpointer
	atomic  AtomicSink // set in exactly-once mode: records and position in one write
	log     zerolog.Logger
	metrics *pipelineMetrics
}

// NewPipeline wires the parts. reg may be nil. With a nil cp the sink must
// be an AtomicSink, which then stores the position with every batch
// (exactly-once); otherwise the pipeline writes, then saves to cp.
func NewPipeline(cfg PipelineConfig, src Source, router Router, sink Sink, cp Checkpointer, log zerolog.Logger, reg prometheus.Registerer) (*Pipeline, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	p := &Pipeline{
		cfg: cfg, src: src, router: router, sink: sink, cp: cp,
		log:     log.With().Str("component", "pipeline").Logger(),
		metrics: newPipelineMetrics(reg),
	}
	if cp == nil {
		atomic, ok := sink.(AtomicSink)
		if !ok {
			return nil, errors.New("pipeline: no checkpoint store and the sink cannot store positions itself")
		}
		p.atomic = atomic
		p.cp = atomicCheckpointer{atomic}
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

// batch is the records of one or more whole source transactions and the
// position just past the last of them.
type batch struct {
	records    []Record
	bytes      int
	txs        int
	end        Position
	commitTime time.Time
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
	from, err := p.cp.Load(ctx)
	if err != nil {
		return fmt.Errorf("load checkpoint: %w", err)
	}
	if from.IsZero() {
		p.log.Info().Msg("no checkpoint: starting where source.start says")
	} else {
		p.log.Info().Str("position", string(from)).Msg("resuming from checkpoint")
	}

	// The source and the batcher stop on ctx (or on a failure); the writer
	// gets its own context so that it can finish the last batches after a
	// graceful stop and is cut off only by a failure or the shutdown timeout.
	readCtx, stopReading := context.WithCancel(ctx)
	defer stopReading()
	writeCtx, stopWriting := context.WithCancel(context.WithoutCancel(ctx))
	defer stopWriting()

	txs := make(chan Tx, p.cfg.QueueTransactions)
	batches := make(chan *batch, 1)
	src := &sourceRun{done: make(chan struct{})}
	go func() {
		src.err = p.src.Run(readCtx, from, txs)
		close(src.done)
	}()
	batchErr := make(chan error, 1)
	go func() {
		batchErr <- p.batcher(readCtx, txs, src, batches)
		close(batches)
	}()
	// Whatever happens, the source is stopped and has returned before Run does.
	defer func() {
		stopReading()
		<-src.done
	}()

	// After a graceful stop the writer has ShutdownTimeout to drain.
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
			stopWriting()
		case <-writeCtx.Done():
		}
	}()

	werr := p.writer(writeCtx, batches)
	if werr != nil {
		stopReading()
		// Let the batcher see the cancellation and exit; its error is moot.
		for range batches {
		}
		<-batchErr
		return werr
	}
	berr := <-batchErr
	var bad *BadRowError
	if ctx.Err() != nil && !errors.As(berr, &bad) {
		// A stop was requested; the source's error is then only its reaction.
		if writeCtx.Err() != nil {
			return fmt.Errorf("shutdown: final flush did not finish within %s", p.cfg.ShutdownTimeout)
		}
		p.log.Info().Msg("stopped: every received transaction written and checkpointed")
		return nil
	}
	return berr
}

// batcher reads transactions, routes their events and hands whole-
// transaction batches to the writer. While the writer is busy it keeps
// filling the next batch up to the bounds, so a backlog makes large writes
// and an idle stream makes one write per transaction.
func (p *Pipeline) batcher(ctx context.Context, txs <-chan Tx, src *sourceRun, out chan<- *batch) error {
	cur := &batch{}
	var final error // set when the source stopped or a row failed
	for final == nil {
		// Wait for a transaction, or, with a non-empty batch, for the writer.
		var tx Tx
		if cur.end.IsZero() {
			select {
			case tx = <-txs:
			case <-src.done:
				final = sourceStopped(src.err)
				continue
			case <-ctx.Done():
				final = ctx.Err()
				continue
			}
		} else {
			select {
			case tx = <-txs:
			case out <- cur:
				cur = &batch{}
				continue
			case <-src.done:
				final = sourceStopped(src.err)
				continue
			case <-ctx.Done():
				final = ctx.Err()
				continue
			}
		}
		if final = p.add(cur, tx); final == nil && p.full(cur) {
			out <- cur // blocks while the writer works: back-pressure to the source
			cur = &batch{}
		}
	}
	// Transactions already queued are whole: take them too (unless a row
	// failed), so a stop checkpoints every transaction received.
	var bad *BadRowError
	if !errors.As(final, &bad) {
	drain:
		for {
			select {
			case tx := <-txs:
				if err := p.add(cur, tx); err != nil {
					final = err
					break drain
				}
				if p.full(cur) {
					out <- cur
					cur = &batch{}
				}
			default:
				break drain
			}
		}
	}
	if !cur.end.IsZero() {
		out <- cur
	}
	return final
}

func (p *Pipeline) full(b *batch) bool {
	return len(b.records) >= p.cfg.MaxBatchRecords || b.bytes >= p.cfg.MaxBatchBytes
}

// sourceRun is the outcome of Source.Run: err is set before done is closed.
type sourceRun struct {
	done chan struct{}
	err  error
}

// add routes tx's events into b. On a routing error b is left as it was
// before tx, so the batch ends at the last good transaction.
func (p *Pipeline) add(b *batch, tx Tx) error {
	start, startBytes := len(b.records), b.bytes
	for i := range tx.Events {
		rec, err := p.router.Route(&tx.Events[i])
		if err != nil {
			b.records, b.bytes = b.records[:start], startBytes
			p.metrics.badRows.Inc()
			return err
		}
		b.bytes += rec.Size()
		b.records = append(b.records, rec)
	}
	b.txs++
	b.end = tx.End
	if !tx.CommitTime.IsZero() {
		b.commitTime = tx.CommitTime
	}
	return nil
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

// writer writes each batch, then saves its end position, then acks the source.
func (p *Pipeline) writer(ctx context.Context, batches <-chan *batch) error {
	lastLog := time.Now()
	for b := range batches {
		start := time.Now()
		switch {
		case p.atomic != nil:
			if err := p.atomic.WriteAtomic(ctx, b.records, b.end); err != nil {
				return fmt.Errorf("atomic write of %d records with position %s: %w", len(b.records), b.end, err)
			}
		case len(b.records) > 0:
			if err := p.sink.Write(ctx, b.records); err != nil {
				return fmt.Errorf("sink write of %d records (after checkpoint, up to %s): %w", len(b.records), b.end, err)
			}
		}
		if len(b.records) > 0 {
			p.metrics.writeSeconds.Observe(time.Since(start).Seconds())
			p.metrics.records.Add(float64(len(b.records)))
			p.metrics.batchRecords.Observe(float64(len(b.records)))
		}
		if p.atomic == nil {
			if err := p.cp.Save(ctx, b.end); err != nil {
				return fmt.Errorf("save checkpoint %s: %w", b.end, err)
			}
		}
		p.metrics.checkpoints.Inc()
		p.metrics.checkpointTime.SetToCurrentTime()
		if !b.commitTime.IsZero() {
			p.metrics.lag.Set(time.Since(b.commitTime).Seconds())
		}
		p.src.Ack(b.end)
		if time.Since(lastLog) >= p.cfg.LogInterval {
			lastLog = time.Now()
			p.log.Info().Str("position", string(b.end)).Msg("checkpoint")
		}
	}
	return nil
}

type pipelineMetrics struct {
	records        prometheus.Counter
	badRows        prometheus.Counter
	checkpoints    prometheus.Counter
	checkpointTime prometheus.Gauge
	lag            prometheus.Gauge
	batchRecords   prometheus.Histogram
	writeSeconds   prometheus.Histogram
}

func newPipelineMetrics(reg prometheus.Registerer) *pipelineMetrics {
	m := &pipelineMetrics{
		records: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "outbox_cdc_records_delivered_total",
			Help: "Records acknowledged by the sink.",
		}),
		badRows: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "outbox_cdc_bad_rows_total",
			Help: "Outbox rows that could not be routed (the connector stops on them).",
		}),
		checkpoints: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "outbox_cdc_checkpoint_saves_total",
			Help: "Checkpoints saved.",
		}),
		checkpointTime: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "outbox_cdc_checkpoint_last_saved_timestamp_seconds",
			Help: "Unix time of the last checkpoint save.",
		}),
		lag: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "outbox_cdc_lag_seconds",
			Help: "Seconds between the source commit of the last checkpointed transaction and its checkpoint.",
		}),
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
	if reg != nil {
		reg.MustRegister(m.records, m.badRows, m.checkpoints, m.checkpointTime, m.lag, m.batchRecords, m.writeSeconds)
	}
	return m
}
