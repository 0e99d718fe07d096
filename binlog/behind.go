package binlog

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// behindInterval is how often the binlog list is compared with the
// position being read.
const behindInterval = 15 * time.Second

// behindMetrics are the MySQL/MariaDB-only gauges of how far the stream
// reads behind the server's binlog end; a Postgres connector does not
// export them (its figure is outbox_cdc_postgres_slot_lag_bytes).
type behindMetrics struct {
	files prometheus.Gauge
	bytes prometheus.Gauge
}

func newBehindMetrics(reg prometheus.Registerer) (behindMetrics, error) {
	m := behindMetrics{
		files: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "outbox_cdc_mysql_binlog_files_behind",
			Help: "Binlog files the MySQL/MariaDB server wrote after the one being read.",
		}),
		bytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "outbox_cdc_mysql_binlog_bytes_behind",
			Help: "Bytes of binlog between the position being read and the server's binlog end (the rest of the current file and every later one).",
		}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.files, m.bytes} {
			if err := reg.Register(c); err != nil {
				return m, fmt.Errorf("register binlog behind metrics: %w", err)
			}
		}
	}
	return m, nil
}

// watchBehind keeps the files- and bytes-behind gauges up to date, as soon
// as the stream knows its file and then every behindInterval, until ctx is done. A failed query leaves
// them as they were: this is monitoring, not a reason to stop.
func (s *Source) watchBehind(ctx context.Context, db *sql.DB) {
	t := time.NewTimer(0)
	defer t.Stop()
	measured := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if cur := s.curFile.Load(); cur != nil {
			qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			files, err := binaryLogs(qctx, db)
			cancel()
			if err == nil {
				s.behind.files.Set(float64(filesAfter(files, *cur)))
				s.behind.bytes.Set(float64(bytesAfter(files, *cur, s.curOffset.Load())))
				measured = true
			}
		}
		// Until the stream knows its file, look again every second.
		next := behindInterval
		if !measured {
			next = time.Second
		}
		t.Reset(next)
	}
}

// filesAfter counts the files listed after cur (all of them if cur is not
// listed, e.g. purged).
func filesAfter(files []binlogFile, cur string) int {
	for i, f := range files {
		if f.name == cur {
			return len(files) - 1 - i
		}
	}
	return len(files)
}

// bytesAfter sums the bytes after offset in cur and the sizes of the files
// listed after it (all of them if cur is not listed).
func bytesAfter(files []binlogFile, cur string, offset uint64) uint64 {
	var n uint64
	for i := len(files) - 1; i >= 0; i-- {
		f := files[i]
		if f.name == cur {
			if f.size > offset {
				n += f.size - offset
			}
			return n
		}
		n += f.size
	}
	return n
}
