package main

import (
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"time"
)

type results struct {
	Started, Finished time.Time
	Command           string
	Rows              int
	Machine           machine
	DBs               []dbResult
}

type machine struct{ Nproc, Free, LSCPU, Kernel, Go string }

type dbResult struct {
	Kind, Version string
	Drain         *drainResult
	Live          []liveResult
}

type drainResult struct {
	Rows                    int
	LoadSeconds             float64
	RawReadSeconds          float64
	RawReadRows             int
	RawProduceFranzSeconds  float64
	RawProduceSaramaSeconds float64
	DrainSeconds            float64 // connector process start → delivered counter = Rows
	CPUSeconds, PeakRSSMiB  float64
	Checkpoint              string
	LoadAvgBefore           string
}

func (d *drainResult) rate() float64 { return float64(d.Rows) / d.DrainSeconds }

type liveResult struct {
	Relay                               bool
	Rate                                int // 0 = max
	Seconds, WriteSeconds, AchievedRate float64
	Written, Delivered, Samples         int
	P50, P99, P999, Max                 msec
	CommitP50, CommitP99                msec
	CPUSeconds, PeakRSSMiB              float64
	RelayQueries, RelayRowsRead         int64
	RelayRowsUpdated, RelayEmptyPolls   int64
	DB                                  dbStats
	// LoadAvgBefore/After are /proc/loadavg's 1-minute figure: other work
	// on the machine shows up here.
	LoadAvgBefore, LoadAvgAfter string
}

// msec is milliseconds; +Inf (not delivered) is written as "inf" in JSON.
type msec float64

func (m msec) MarshalJSON() ([]byte, error) {
	switch v := float64(m); {
	case math.IsInf(v, 1):
		return []byte(`"inf"`), nil
	case math.IsNaN(v):
		return []byte("null"), nil
	default:
		return []byte(fmt.Sprintf("%.3f", v)), nil
	}
}

func (m *msec) UnmarshalJSON(b []byte) error {
	switch string(b) {
	case `"inf"`:
		*m = msec(math.Inf(1))
	case "null":
		*m = msec(math.NaN())
	default:
		v, err := strconv.ParseFloat(string(b), 64)
		*m = msec(v)
		return err
	}
	return nil
}

func (m msec) String() string { return fmtMS(float64(m)) }

func dbLabel(kind string) string {
	if kind == "mysql" {
		return "MariaDB"
	}
	return "PostgreSQL"
}

// target is one line of the targets with its verdict.
type target struct {
	what, measured string
	ok             bool
}

func targets(res *results) []target {
	var t []target
	for _, db := range res.DBs {
		name := dbLabel(db.Kind)
		if d := db.Drain; d != nil {
			want := 200_000.0
			if db.Kind == "postgres" {
				want = 150_000
			}
			t = append(t, target{fmt.Sprintf("%s drain ≥ %.0f rows/s", name, want), fmt.Sprintf("%.0f rows/s", d.rate()), d.rate() >= want})
			raw := float64(d.Rows) / d.RawReadSeconds
			t = append(t, target{name + " drain ≥ 0.4× raw source read", fmt.Sprintf("%.2f× (raw %.0f rows/s)", d.rate()/raw, raw), d.rate() >= 0.4*raw})
			t = append(t, target{name + " drain peak RSS ≤ 128 MiB", fmt.Sprintf("%.1f MiB", d.PeakRSSMiB), d.PeakRSSMiB <= 128})
		}
		var peakLive float64
		for _, l := range db.Live {
			if l.Relay {
				continue
			}
			peakLive = math.Max(peakLive, l.PeakRSSMiB)
			switch l.Rate {
			case 1000:
				t = append(t, target{name + " live p99 ≤ 25 ms at 1,000 rows/s", l.P99.String() + " ms", float64(l.P99) <= 25})
			case 10000:
				ok := float64(l.P99) <= 50 && l.AchievedRate >= 9500
				t = append(t, target{name + " live p99 ≤ 50 ms at 10,000 rows/s", fmt.Sprintf("%s ms at %.0f rows/s achieved", l.P99, l.AchievedRate), ok})
			case 0:
				ok := l.Delivered >= l.Written && float64(l.P999) < 1000
				t = append(t, target{name + " keeps up with the max commit rate (all delivered, p99.9 < 1 s)",
					fmt.Sprintf("%d/%d delivered at %.0f rows/s, p99.9 %s ms", l.Delivered, l.Written, l.AchievedRate, l.P999), ok})
			}
			for _, r := range db.Live {
				if r.Relay && r.Rate == l.Rate {
					ratio := float64(r.P99) / float64(l.P99)
					t = append(t, target{fmt.Sprintf("%s p99 ≥ 20× lower than the polling relay at %s", name, rateName(l.Rate)),
						fmt.Sprintf("%s ms vs %s ms (%s)", l.P99, r.P99, ratioText(ratio)), ratio >= 20})
				}
			}
		}
		if peakLive > 0 {
			t = append(t, target{name + " live peak RSS ≤ 64 MiB", fmt.Sprintf("%.1f MiB (largest of the live runs)", peakLive), peakLive <= 64})
		}
	}
	return t
}

func ratioText(r float64) string {
	if math.IsInf(r, 1) {
		return "relay unbounded"
	}
	return fmt.Sprintf("%.0f×", r)
}

func printSummary(w io.Writer, res *results) {
	fmt.Fprintln(w)
	writeTables(w, res)
	fmt.Fprintln(w, "\nTargets:")
	for _, t := range targets(res) {
		v := "MISS"
		if t.ok {
			v = "ok  "
		}
		fmt.Fprintf(w, "  %s %s: %s\n", v, t.what, t.measured)
	}
}

func writeTables(w io.Writer, res *results) {
	fmt.Fprintf(w, "### Scenarios 1, 2, 5: backlog drain (%d rows, 1,000-row transactions, ~200-byte JSON payloads, 10,000 aggregates)\n\n", res.Rows)
	fmt.Fprintln(w, "| database | raw source read | raw produce, franz-go | raw produce, sarama (sink settings) | **outbox-cdc drain** | drain / raw read | drain / raw produce (sarama) | CPU s per 1M rows | peak RSS | load avg |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|")
	for _, db := range res.DBs {
		d := db.Drain
		if d == nil {
			continue
		}
		r := func(s float64) float64 { return float64(d.Rows) / s }
		fmt.Fprintf(w, "| %s | %.0f rows/s (%.2f s) | %.0f rec/s (%.2f s) | %.0f rec/s (%.2f s) | **%.0f rows/s** (%.2f s) | %.2f× | %.2f× | %.2f | %.1f MiB | %s |\n",
			dbLabel(db.Kind), r(d.RawReadSeconds), d.RawReadSeconds, r(d.RawProduceFranzSeconds), d.RawProduceFranzSeconds,
			r(d.RawProduceSaramaSeconds), d.RawProduceSaramaSeconds, d.rate(), d.DrainSeconds,
			d.rate()/r(d.RawReadSeconds), d.rate()/r(d.RawProduceSaramaSeconds), d.CPUSeconds/float64(d.Rows)*1e6, d.PeakRSSMiB, d.LoadAvgBefore)
	}
	fmt.Fprintln(w, "\n### Scenarios 3, 4, 5: live latency, commit → visible to a consumer (ms)")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| database | relay | load | achieved rows/s | written | delivered | p50 | p99 | p99.9 | max | INSERT+commit p50 / p99 | CPU s per 1M rows | peak RSS | load avg before → after |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, db := range res.DBs {
		for _, l := range db.Live {
			who, cpu, rss := "outbox-cdc", fmt.Sprintf("%.2f", l.CPUSeconds/float64(max(1, l.Written))*1e6), fmt.Sprintf("%.1f MiB", l.PeakRSSMiB)
			if l.Relay {
				who, cpu, rss = "polling relay", "–", "–"
			}
			fmt.Fprintf(w, "| %s | %s | %s | %.0f | %d | %d | %s | %s | %s | %s | %s / %s | %s | %s | %s → %s |\n",
				dbLabel(db.Kind), who, rateName(l.Rate), l.AchievedRate, l.Written, l.Delivered, l.P50, l.P99, l.P999, l.Max, l.CommitP50, l.CommitP99, cpu, rss,
				l.LoadAvgBefore, l.LoadAvgAfter)
		}
	}
	fmt.Fprintln(w, "\n### Scenario 4: what the polling relay costs the database, next to outbox-cdc at the same load")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Relay-side counts are exact. Server-side deltas are server-wide (MariaDB `SHOW GLOBAL STATUS`: Com_select, Com_update, Binlog_bytes_written; row counters are not shown for MariaDB) or database-wide (PostgreSQL `pg_stat_database`: xact_commit, tup_fetched, tup_updated; WAL bytes from `pg_current_wal_lsn()`), so they include the writers' own work and anything else running on the machine; compare the two rows of a load with each other.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| database | load | relay | relay queries (polls empty) | relay rows read / updated | server SELECTs (MariaDB) / commits (PG) | server UPDATEs (MariaDB) | server rows read | server rows updated | binlog/WAL bytes per written row |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|")
	for _, db := range res.DBs {
		for _, l := range db.Live {
			who, rq, rr := "outbox-cdc", "0", "0 / 0"
			if l.Relay {
				who = "polling relay"
				rq = fmt.Sprintf("%d (%d)", l.RelayQueries, l.RelayEmptyPolls)
				rr = fmt.Sprintf("%d / %d", l.RelayRowsRead, l.RelayRowsUpdated)
			}
			upd, read, updated := fmt.Sprint(l.DB.Updates), "–", "–"
			if db.Kind == "postgres" {
				upd, read, updated = "–", fmt.Sprint(l.DB.RowsRead), fmt.Sprint(l.DB.RowsUpdated)
			}
			fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %d | %s | %s | %s | %.0f |\n", dbLabel(db.Kind), rateName(l.Rate), who, rq, rr,
				l.DB.Selects, upd, read, updated, float64(l.DB.LogBytes)/float64(max(1, l.Written)))
		}
	}
}

func writeResults(path string, res *results) error {
	var b strings.Builder
	fmt.Fprintf(&b, "# Benchmark results\n\n")
	fmt.Fprintf(&b, "Generated by `make bench` (bench/README.md explains every scenario and how each figure is measured). Profile and hot spots: [PROFILE.md](PROFILE.md).\n\n")
	fmt.Fprintf(&b, "- Date: %s (run took %s)\n", res.Started.UTC().Format("2006-01-02 15:04 MST"), res.Finished.Sub(res.Started).Round(time.Second))
	fmt.Fprintf(&b, "- Command: `%s` (via `make bench`)\n", res.Command)
	for _, db := range res.DBs {
		fmt.Fprintf(&b, "- %s: %s\n", dbLabel(db.Kind), db.Version)
	}
	fmt.Fprintf(&b, "- %s, %s; the databases, the broker (kfake-broker, its own process), the connector and the load generator all share these CPUs.\n\n", res.Machine.Kernel, res.Machine.Go)
	fmt.Fprintf(&b, "```\n$ nproc\n%s\n$ free -m\n%s\n$ lscpu (excerpt)\n%s\n```\n\n", res.Machine.Nproc, res.Machine.Free, res.Machine.LSCPU)
	writeTables(&b, res)
	fmt.Fprintf(&b, "\n![latency percentiles vs load](latency.png)\n\n")
	fmt.Fprintf(&b, "## Targets (issue 6)\n\n| target | measured | verdict |\n|---|---|---|\n")
	for _, t := range targets(res) {
		v := "**miss**"
		if t.ok {
			v = "holds"
		}
		fmt.Fprintf(&b, "| %s | %s | %s |\n", t.what, t.measured, v)
	}
	fmt.Fprintf(&b, "\n%s", notes)
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

const notes = `## How to read these numbers

- **Drain** is timed from the connector process start (exec) to the first sample (every 10 ms) of
  /metrics where outbox_cdc_records_delivered_total reaches N. The pipeline counts a batch after
  the broker acknowledged all of it and saves the checkpoint right after that (one fsync); the
  harness then reads the checkpoint file back. Connection set-up, the first metadata round trip
  and any time spent skipping other databases' binlog events are included.
- **Raw source read**: MariaDB, go-mysql's BinlogSyncer from the same binlog position up to the
  end of the backlog, every event read and decoded (rows parsed) and discarded, in the bench
  process; PostgreSQL, ` + "`pg_recvlogical --start -o proto_version=1 -o publication_names=… -E <end LSN> -f /dev/null`" + `
  on its own slot created before the load, wall time of the process (logical decoding happens
  in the walsender; that is the server's limit, not the client's).
- **Raw produce**: the same records (same keys, ~200-byte values, the seed preset's three
  headers) into the same broker from the bench process, idempotent, acks=all; once with franz-go
  defaults, once with sarama configured like sink/ (one request in flight, no linger).
- **Live latency** is from the writer's clock read just *before* it sends the single-row,
  autocommit INSERT (the whole transaction) to the return of the consumer poll that delivered
  the record (franz-go consumer in the same process, same clock). It includes the commit round
  trip (shown as INSERT+commit), so it overstates commit→visible by that much. The first 2 s of
  each run are discarded. A row not delivered by the end of the run (plus 15 s for outbox-cdc,
  2 s for the relay) counts as infinite latency, shown as ∞.
- **Polling relay**: the article's OutboxRelay implemented faithfully in bench/live.go: every
  1 s after the previous run ends (fixedDelay), in one transaction, ` + "`SELECT … WHERE status = 0 AND (next_retry_at IS NULL OR next_retry_at <= NOW()) ORDER BY id ASC LIMIT 100 FOR UPDATE SKIP LOCKED`" + `,
  then for each row a synchronous send (3 s timeout) and ` + "`UPDATE … SET status = 1`" + `, then COMMIT.
  Its capacity is therefore at most 100 rows/s; above that its backlog and latency grow without
  bound for as long as the load lasts.
- **Noise**: the load-average columns show what else ran. On a shared 2-vCPU machine the
  drain rate moved by ±40 % between back-to-back runs (PROFILE.md), and the databases' own
  commit p99 (INSERT+commit column) shows when the machine stalled; compare p99s with it.
- **CPU and memory** are the connector process's own (/proc/<pid>/stat utime+stime,
  /proc/<pid>/status VmHWM), read at the end of each run; the broker is another process.
`
