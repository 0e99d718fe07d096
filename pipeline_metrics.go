package outboxcdc

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

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
