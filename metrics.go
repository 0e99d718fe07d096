package outboxcdc

import "github.com/prometheus/client_golang/prometheus"

// SourceMetrics are the metrics every source exports under the same names,
// so dashboards do not care which database feeds the connector.
type SourceMetrics struct {
	// EventsRead counts outbox INSERT rows decoded from committed transactions.
	EventsRead prometheus.Counter
	// TransactionsRead counts committed source transactions seen (with or
	// without outbox rows).
	TransactionsRead prometheus.Counter
	// SkippedOperations counts changes to the outbox table that are not
	// INSERTs (label op: update, delete, truncate), which are skipped.
	SkippedOperations *prometheus.CounterVec
	// Reconnects counts reconnections after a lost source connection.
	Reconnects prometheus.Counter
	// Connected is 1 while the replication stream is up.
	Connected prometheus.Gauge
	// LagSeconds is now minus the commit time of the last transaction read.
	LagSeconds prometheus.Gauge
}

// Each source exports the figures of how far behind it reads that it has
// (MySQL/MariaDB: outbox_cdc_mysql_binlog_files_behind and
// _bytes_behind; PostgreSQL: outbox_cdc_postgres_slot_lag_bytes), on the
// registerer its constructor gets.

// NewSourceMetrics creates the source metrics and registers them on reg (a
// nil reg registers nothing, for tests).
func NewSourceMetrics(reg prometheus.Registerer) *SourceMetrics {
	m := &SourceMetrics{
		EventsRead: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "outbox_cdc_source_events_total",
			Help: "Outbox rows (INSERTs) read from committed source transactions.",
		}),
		TransactionsRead: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "outbox_cdc_source_transactions_total",
			Help: "Committed source transactions read, with or without outbox rows.",
		}),
		SkippedOperations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "outbox_cdc_source_skipped_operations_total",
			Help: "Changes to the outbox table that are not INSERTs and were skipped, by operation.",
		}, []string{"op"}),
		Reconnects: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "outbox_cdc_source_reconnects_total",
			Help: "Reconnections of the replication stream after it was lost.",
		}),
		Connected: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "outbox_cdc_source_connected",
			Help: "1 while the replication stream is connected, else 0.",
		}),
		LagSeconds: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "outbox_cdc_source_lag_seconds",
			Help: "Seconds between now and the commit time of the last source transaction read.",
		}),
	}
	// Present from the start, so dashboards and alerts see 0, not nothing.
	for _, op := range []string{"update", "delete"} {
		m.SkippedOperations.WithLabelValues(op)
	}
	if reg != nil {
		reg.MustRegister(m.EventsRead, m.TransactionsRead, m.SkippedOperations, m.Reconnects, m.Connected, m.LagSeconds)
	}
	return m
}

// SinkMetrics are the metrics every sink exports under the same names
// (Kafka at-least-once and exactly-once, RabbitMQ, NATS JetStream, Redis),
// so dashboards and alerts do not care where the records go. A sink
// creates one set with NewSinkMetrics; its Write updates them. The
// records acknowledged are counted once, by the pipeline
// (outbox_cdc_records_delivered_total; outbox_cdc_sink_records_total, the
// same count, was removed).
type SinkMetrics struct {
	// Bytes counts key, value and header bytes of acknowledged records.
	Bytes prometheus.Counter
	// Errors counts records whose delivery attempt failed, by kind;
	// Retryable and Permanent are its two series.
	Errors    *prometheus.CounterVec
	Retryable prometheus.Counter
	Permanent prometheus.Counter
	// Duplicates counts records the broker acknowledged as copies of
	// records it already stored (NATS JetStream's duplicate window); the
	// other sinks leave it at 0.
	Duplicates prometheus.Counter
	// WriteSeconds is the time of one Write (a batch) until every record
	// is acknowledged, retries included (exactly-once: until committed).
	WriteSeconds prometheus.Histogram
	// Connected is 1 while the destination answers.
	Connected prometheus.Gauge
}

// NewSinkMetrics creates the sink metrics and registers them on reg (a nil
// reg registers nothing, for tests).
func NewSinkMetrics(reg prometheus.Registerer) *SinkMetrics {
	m := &SinkMetrics{
		Bytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "outbox_cdc_sink_bytes_total",
			Help: "Key, value and header bytes of the records acknowledged by the destination.",
		}),
		Errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "outbox_cdc_sink_errors_total",
			Help: "Records whose delivery attempt failed, by kind: retryable (retried) or permanent (Write fails).",
		}, []string{"kind"}),
		Duplicates: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "outbox_cdc_sink_duplicates_total",
			Help: "Records the broker acknowledged as duplicates of records it already stored (NATS JetStream's duplicate window).",
		}),
		WriteSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "outbox_cdc_sink_write_seconds",
			Help:    "Time for one sink Write (a batch) to be fully acknowledged (exactly-once: committed), retries included.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16), // 0.5ms .. ~16s
		}),
		Connected: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "outbox_cdc_sink_connected",
			Help: "1 while the destination answers, else 0.",
		}),
	}
	m.Retryable = m.Errors.WithLabelValues("retryable")
	m.Permanent = m.Errors.WithLabelValues("permanent")
	if reg != nil {
		reg.MustRegister(m.Bytes, m.Errors, m.Duplicates, m.WriteSeconds, m.Connected)
	}
	return m
}
