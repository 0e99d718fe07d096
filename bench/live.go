package main

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"math"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Latency is defined from the writer's clock read just before it sends the
// single-row INSERT (autocommit: the statement is the whole transaction) to
// the moment the consumer's poll returns the record. It therefore includes
// the commit itself (reported separately as commit_ms), so it overstates
// commit→visible by that much: conservative. Writer and consumer share this
// process and its clock.

// samples holds per-row timestamps in microseconds, indexed by seq.
type samples struct {
	sent   []int64 // writer clock before the INSERT; 0 = not written
	commit []int64 // after the INSERT returned
	seen   []int64 // consumer clock when the record was polled; 0 = not seen
	n      atomic.Int64
}

func newSamples(capacity int) *samples {
	return &samples{sent: make([]int64, capacity), commit: make([]int64, capacity), seen: make([]int64, capacity)}
}

// writers commits single-row transactions at rate rows/s (0: as fast as
// possible) from o.writers connections until d has passed.
func runWriters(ctx context.Context, o *options, be *backend, s *samples, rate int, d time.Duration) error {
	stmt := "INSERT INTO outbox_message (message_id, aggregate_type, aggregate_id, event_type, payload) VALUES (" +
		be.ph(1) + "," + be.ph(2) + "," + be.ph(3) + "," + be.ph(4) + "," + be.ph(5) + ")"
	be.db.SetMaxOpenConns(o.writers + 4)
	start := time.Now()
	end := start.Add(d)
	var wg sync.WaitGroup
	errs := make(chan error, o.writers)
	for range o.writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conn, err := be.db.Conn(ctx)
			if err != nil {
				errs <- err
				return
			}
			defer conn.Close()
			ps, err := conn.PrepareContext(ctx, stmt)
			if err != nil {
				errs <- err
				return
			}
			defer ps.Close()
			for ctx.Err() == nil {
				seq := s.n.Add(1) - 1
				if int(seq) >= len(s.sent) {
					return
				}
				if rate > 0 {
					at := start.Add(time.Duration(float64(seq) / float64(rate) * float64(time.Second)))
					if at.After(end) || time.Now().After(end) {
						return // the database cannot keep this rate: achieved rate says so
					}
					if w := time.Until(at); w > 0 {
						time.Sleep(w)
					}
				} else if time.Now().After(end) {
					return
				}
				ts := time.Now().UnixMicro()
				r := makeRow(seq, o.aggregates, ts)
				if _, err := ps.ExecContext(ctx, r.messageID, r.aggType, r.aggID, r.evType, string(r.payload)); err != nil {
					errs <- fmt.Errorf("insert: %w", err)
					return
				}
				atomic.StoreInt64(&s.commit[seq], time.Now().UnixMicro())
				atomic.StoreInt64(&s.sent[seq], ts)
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// consume reads topic from the start and stamps every record with the time
// its poll returned. It stops when ctx is done.
func consume(ctx context.Context, br *broker, topic string, s *samples, seen *atomic.Int64) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(br.addr), kgo.ConsumeTopics(topic), kgo.AllowAutoTopicCreation(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(500*time.Millisecond),
		kgo.MetadataMinAge(100*time.Millisecond))
	if err != nil {
		return err
	}
	go func() {
		defer cl.Close()
		for ctx.Err() == nil {
			fs := cl.PollFetches(ctx)
			now := time.Now().UnixMicro()
			fs.EachRecord(func(r *kgo.Record) {
				seq, ok := jsonInt(r.Value, `"seq"`)
				if ok && seq >= 0 && int(seq) < len(s.seen) && atomic.LoadInt64(&s.seen[seq]) == 0 {
					atomic.StoreInt64(&s.seen[seq], now)
					seen.Add(1)
				}
			})
		}
	}()
	return nil
}

// jsonInt finds "key": <int> in a flat JSON object (MySQL keeps the text,
// PostgreSQL's jsonb adds a space after the colon).
func jsonInt(b []byte, key string) (int64, bool) {
	i := bytes.Index(b, []byte(key))
	if i < 0 {
		return 0, false
	}
	j := i + len(key)
	for j < len(b) && (b[j] == ':' || b[j] == ' ') {
		j++
	}
	k := j
	for k < len(b) && b[k] >= '0' && b[k] <= '9' {
		k++
	}
	n, err := strconv.ParseInt(string(b[j:k]), 10, 64)
	return n, err == nil
}

// runLive is scenario 3 (relay=false, with 5's live part) or scenario 4
// (relay=true) at one load.
func runLive(ctx context.Context, o *options, be *backend, br *broker, rate int, relay bool) (*liveResult, error) {
	what := "outbox-cdc"
	if relay {
		what = "polling relay"
	}
	logf("%s: live %s, %s, %s", be.kind, rateName(rate), what, o.liveFor)
	if err := be.recreateTable(ctx); err != nil {
		return nil, err
	}
	tag := fmt.Sprintf("live_%d", rate)
	if relay {
		tag = fmt.Sprintf("relay_%d", rate)
	}
	topic := "bench." + be.kind + "." + tag
	res := &liveResult{Relay: relay, Rate: rate, Seconds: o.liveFor.Seconds(), LoadAvgBefore: loadAvg()}
	defer func() { res.LoadAvgAfter = loadAvg() }()

	capacity := 3_000_000
	if rate > 0 {
		capacity = int(float64(rate)*o.liveFor.Seconds()) + 1
	}
	s := newSamples(capacity)
	cctx, stopConsumer := context.WithCancel(ctx)
	defer stopConsumer()
	var seen atomic.Int64
	if err := consume(cctx, br, topic, s, &seen); err != nil {
		return nil, err
	}

	var c *connector
	var rl *relayRun
	dbBefore := dbCounters(ctx, be)
	if relay {
		var err error
		if rl, err = startRelay(ctx, be, br, topic); err != nil {
			return nil, err
		}
		defer rl.stop()
	} else {
		if be.kind == "postgres" {
			if err := be.createSlot(ctx, tag, tag); err != nil {
				return nil, err
			}
			defer be.db.ExecContext(context.WithoutCancel(ctx), "DROP PUBLICATION IF EXISTS "+tag)
			defer be.dropSlot(ctx, tag)
		}
		var err error
		if c, err = startConnector(o, "bench-"+be.kind+"-"+tag, be.sourceYAML(tag), topic, br); err != nil {
			return nil, err
		}
		defer c.stop()
		if err := c.waitReady(ctx, 30*time.Second); err != nil {
			return nil, err
		}
	}
	var before procStats
	if c != nil {
		before, _ = readProc(c.cmd.Process.Pid)
	}
	wstart := time.Now()
	if err := runWriters(ctx, o, be, s, rate, o.liveFor); err != nil {
		return nil, err
	}
	res.WriteSeconds = time.Since(wstart).Seconds()
	written := 0
	for i := range s.sent {
		if atomic.LoadInt64(&s.sent[i]) != 0 {
			written++
		}
	}
	res.Written = written
	// Wait for the stragglers: up to 15 s for outbox-cdc; the relay gets
	// 2 s (it is visibly behind and would need minutes).
	grace := 15 * time.Second
	if relay {
		grace = 2 * time.Second
	}
	for deadline := time.Now().Add(grace); time.Now().Before(deadline) && int(seen.Load()) < written; {
		time.Sleep(20 * time.Millisecond)
	}
	res.Delivered = int(seen.Load())
	if c != nil {
		after, err := readProc(c.cmd.Process.Pid)
		if err != nil {
			return nil, err
		}
		res.CPUSeconds = after.CPUSeconds - before.CPUSeconds
		res.PeakRSSMiB = after.PeakRSSMiB
		if err := c.stop(); err != nil {
			return nil, err
		}
	}
	if rl != nil {
		rl.stop()
		res.RelayQueries, res.RelayRowsRead, res.RelayRowsUpdated, res.RelayEmptyPolls = rl.queries.Load(), rl.rowsRead.Load(), rl.rowsUpdated.Load(), rl.emptyPolls.Load()
		if rl.err != nil {
			return nil, fmt.Errorf("polling relay: %w", rl.err)
		}
	}
	res.DB = dbCounters(ctx, be).minus(dbBefore)
	stopConsumer()

	// Percentiles over rows written after the warm-up; a row never seen
	// counts as +Inf.
	cut := wstart.Add(o.warmup).UnixMicro()
	var lat, commit []float64
	for i := range s.sent {
		sent := atomic.LoadInt64(&s.sent[i])
		if sent == 0 || sent < cut {
			continue
		}
		commit = append(commit, float64(s.commit[i]-sent)/1000)
		if seenAt := atomic.LoadInt64(&s.seen[i]); seenAt != 0 {
			lat = append(lat, float64(seenAt-sent)/1000)
		} else {
			lat = append(lat, math.Inf(1))
		}
	}
	res.P50, res.P99, res.P999, res.Max = msec(pct(lat, 50)), msec(pct(lat, 99)), msec(pct(lat, 99.9)), msec(pct(lat, 100))
	res.CommitP50, res.CommitP99 = msec(pct(commit, 50)), msec(pct(commit, 99))
	res.Samples = len(lat)
	res.AchievedRate = float64(written) / res.WriteSeconds
	logf("%s: %s %s: %d written (%.0f/s), %d delivered, p50 %s p99 %s p99.9 %s ms (commit p50 %.2f ms); CPU %.2fs, peak RSS %.1f MiB",
		be.kind, what, rateName(rate), written, res.AchievedRate, res.Delivered, fmtMS(float64(res.P50)), fmtMS(float64(res.P99)), fmtMS(float64(res.P999)),
		float64(res.CommitP50), res.CPUSeconds, res.PeakRSSMiB)
	return res, nil
}

func pct(v []float64, p float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	slices.Sort(v)
	i := int(math.Ceil(p/100*float64(len(v)))) - 1
	return v[max(0, min(i, len(v)-1))]
}

// dbStats are server-side counters read around a live run. They are
// server-wide (MySQL) or database-wide (PostgreSQL), so other activity on
// the machine shows up too.
type dbStats struct {
	// MySQL: Com_select, Com_update, Innodb_rows_read, Innodb_rows_updated,
	// Binlog_bytes_written. PostgreSQL: xact_commit, tup_fetched,
	// tup_updated, and WAL bytes.
	Selects, Updates, RowsRead, RowsUpdated, LogBytes int64
}

func (a dbStats) minus(b dbStats) dbStats {
	return dbStats{a.Selects - b.Selects, a.Updates - b.Updates, a.RowsRead - b.RowsRead, a.RowsUpdated - b.RowsUpdated, a.LogBytes - b.LogBytes}
}

func dbCounters(ctx context.Context, be *backend) dbStats {
	var s dbStats
	if be.kind == "mysql" {
		rows, err := be.db.QueryContext(ctx, "SHOW GLOBAL STATUS WHERE Variable_name IN ('Com_select','Com_update','Innodb_rows_read','Innodb_rows_updated','Binlog_bytes_written')")
		if err != nil {
			return s
		}
		defer rows.Close()
		for rows.Next() {
			var k string
			var v int64
			rows.Scan(&k, &v)
			switch k {
			case "Com_select":
				s.Selects = v
			case "Com_update":
				s.Updates = v
			case "Innodb_rows_read":
				s.RowsRead = v
			case "Innodb_rows_updated":
				s.RowsUpdated = v
			case "Binlog_bytes_written":
				s.LogBytes = v
			}
		}
		return s
	}
	// Statistics are flushed to shared memory at most once a second.
	time.Sleep(1100 * time.Millisecond)
	var lsn string
	be.db.QueryRowContext(ctx, `SELECT xact_commit, tup_fetched, tup_updated, pg_current_wal_lsn()::text FROM pg_stat_database WHERE datname = current_database()`).
		Scan(&s.Selects, &s.RowsRead, &s.RowsUpdated, &lsn)
	s.LogBytes = parseLSN(lsn)
	return s
}

func parseLSN(s string) int64 {
	var hi, lo uint64
	fmt.Sscanf(s, "%X/%X", &hi, &lo)
	return int64(hi<<32 | lo)
}

func fmtMS(v float64) string {
	switch {
	case math.IsInf(v, 1):
		return "∞"
	case math.IsNaN(v):
		return "n/a"
	case v >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case v >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}

// relayRun is the seed's polling relay (DIGEST.md, the article's
// OutboxRelay): every second (fixed delay after the previous run), in one
// transaction, SELECT up to 100 pending rows FOR UPDATE SKIP LOCKED in id
// order, send each one synchronously, UPDATE it to status 1, COMMIT.
type relayRun struct {
	cancel                                     context.CancelFunc
	done                                       chan struct{}
	err                                        error
	queries, rowsRead, rowsUpdated, emptyPolls atomic.Int64
}

const relayBatch = 100

func startRelay(ctx context.Context, be *backend, br *broker, topic string) (*relayRun, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(br.addr), kgo.AllowAutoTopicCreation(), kgo.ProducerLinger(0))
	if err != nil {
		return nil, err
	}
	// Its own connection, as the article advises (a small separate pool).
	db, err := sql.Open(driverName(be.kind), be.dsn)
	if err != nil {
		cl.Close()
		return nil, err
	}
	db.SetMaxOpenConns(1)
	sel := "SELECT id, message_id, aggregate_type, aggregate_id, event_type, payload, retry_count FROM outbox_message " +
		"WHERE status = 0 AND (next_retry_at IS NULL OR next_retry_at <= NOW()) ORDER BY id ASC LIMIT " + strconv.Itoa(relayBatch) + " FOR UPDATE SKIP LOCKED"
	upd := "UPDATE outbox_message SET status = 1, updated_at = NOW() WHERE id = " + be.ph(1)
	rctx, cancel := context.WithCancel(ctx)
	r := &relayRun{cancel: cancel, done: make(chan struct{})}
	type msg struct {
		id                             int64
		messageID, aggType, aggID, evt string
		payload                        []byte
		retries                        int
	}
	poll := func() error {
		tx, err := db.BeginTx(rctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		rows, err := tx.QueryContext(rctx, sel)
		r.queries.Add(1)
		if err != nil {
			return err
		}
		var batch []msg
		for rows.Next() {
			var m msg
			if err := rows.Scan(&m.id, &m.messageID, &m.aggType, &m.aggID, &m.evt, &m.payload, &m.retries); err != nil {
				rows.Close()
				return err
			}
			batch = append(batch, m)
		}
		rows.Close()
		r.rowsRead.Add(int64(len(batch)))
		if len(batch) == 0 {
			r.emptyPolls.Add(1)
		}
		for _, m := range batch {
			rec := &kgo.Record{Topic: topic, Key: []byte(m.aggID), Value: m.payload, Headers: []kgo.RecordHeader{
				{Key: "id", Value: []byte(m.messageID)}, {Key: "event_type", Value: []byte(m.evt)}, {Key: "aggregate_type", Value: []byte(m.aggType)}}}
			sctx, scancel := context.WithTimeout(rctx, 3*time.Second) // the article's send().get(3, SECONDS)
			err := cl.ProduceSync(sctx, rec).FirstErr()
			scancel()
			if err != nil {
				return err
			}
			if _, err := tx.ExecContext(rctx, upd, m.id); err != nil {
				return err
			}
			r.queries.Add(1)
			r.rowsUpdated.Add(1)
		}
		r.queries.Add(1) // COMMIT
		return tx.Commit()
	}
	go func() {
		defer close(r.done)
		defer cl.Close()
		defer db.Close()
		for rctx.Err() == nil {
			if err := poll(); err != nil && rctx.Err() == nil {
				r.err = err
				return
			}
			select { // @Scheduled(fixedDelay = 1000)
			case <-time.After(time.Second):
			case <-rctx.Done():
			}
		}
	}()
	return r, nil
}

func (r *relayRun) stop() {
	r.cancel()
	<-r.done
}
