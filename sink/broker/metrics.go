package broker

import "github.com/prometheus/client_golang/prometheus"

// metrics are the sink metrics, under the names the Kafka sink exports, so
// dashboards and alerts work whichever broker the connector writes to.
type metrics struct {
	records    prometheus.Counter
	bytes      prometheus.Counter
	errors     *prometheus.CounterVec
	retryable  prometheus.Counter
	permanent  prometheus.Counter
	duplicates prometheus.Counter
	writeTime  prometheus.Histogram
	connected  prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		records: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "outbox_cdc_sink_records_total",
			Help: "Records acknowledged by the destination.",
		}),
		bytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "outbox_cdc_sink_bytes_total",
			Help: "Key, value and header bytes of the records acknowledged by the destination.",
		}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "outbox_cdc_sink_errors_total",
			Help: "Records whose delivery attempt failed, by kind: retryable (retried) or permanent (Write fails).",
		}, []string{"kind"}),
		duplicates: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "outbox_cdc_sink_duplicates_total",
			Help: "Records the broker acknowledged as duplicates of records it already stored (NATS JetStream's duplicate window).",
		}),
		writeTime: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "outbox_cdc_sink_write_seconds",
			Help:    "Time for one sink Write (a batch) to be fully acknowledged, retries included.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}),
		connected: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "outbox_cdc_sink_connected",
			Help: "1 while the destination answers, else 0.",
		}),
	}
	m.retryable = m.errors.WithLabelValues("retryable")
	m.permanent = m.errors.WithLabelValues("permanent")
	if reg != nil {
		reg.MustRegister(m.records, m.bytes, m.errors, m.duplicates, m.writeTime, m.connected)
	}
	return m
}
