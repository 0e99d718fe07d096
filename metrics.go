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
	// BinlogFilesBehind is how many binlog files the server has written
	// after the one being read (MySQL/MariaDB; stays 0 for PostgreSQL,
	// whose slot lag is outbox_cdc_postgres_slot_lag_bytes).
	BinlogFilesBehind prometheus.Gauge
}

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
		BinlogFilesBehind: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "outbox_cdc_mysql_binlog_files_behind",
			Help: "Binlog files the MySQL/MariaDB server wrote after the one being read (0 for PostgreSQL).",
		}),
	}
	// Present from the start, so dashboards and alerts see 0, not nothing.
	for _, op := range []string{"update", "delete"} {
		m.SkippedOperations.WithLabelValues(op)
	}
	if reg != nil {
		reg.MustRegister(m.EventsRead, m.TransactionsRead, m.SkippedOperations, m.Reconnects, m.Connected, m.LagSeconds, m.BinlogFilesBehind)
	}
	return m
}
