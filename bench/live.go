package main

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgconn"
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
	// retries are INSERTs repeated after a deadlock or serialization
	// failure.
	retries atomic.Int64
}

// retryable reports whether the server asks for the statement to be
// retried: MySQL 1213 (deadlock), 1205 (lock wait timeout); PostgreSQL
// 40P01 (deadlock), 40001 (serialization failure).
func retryable(err error) bool {
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		return me.Number == 1213 || me.Number == 1205
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code == "40P01" || pe.Code == "40001"
	}
	return false
}

func newSamples(capacity int) *samples {
	return &samples{sent: make([]int64, capacity), commit: make([]int64, capacity), seen: make([]int64, capacity)}
}

// runWriters commits single-row transactions at rate rows/s (0: as fast as
// possible) from o.writers connections until d has passed.
func runWriters(ctx context.Context, o *options, be *backend, s *samples, rate int, d time.Duration) error {
	be.db.SetMaxOpenConns(o.writers + 4)
	_, err := runLoad(ctx, be, liveLoad{db: be.db, table: "outbox_message", writers: o.writers, rate: rate, txRows: 1, d: d, aggregates: o.aggregates}, s)
	return err
}

// liveLoad is what the writers commit: rate rows/s (0: as fast as they
// go) in transactions of txRows rows, each one multi-row INSERT in
// autocommit (a single-row INSERT when txRows is 1), from writers
// connections, for d.
type liveLoad struct {
	db         *sql.DB
	table      string
	writers    int
	rate       int
	txRows     int
	d          time.Duration
	aggregates int
	// stop, when closed, ends the load after the transactions under way
	// (cancelling ctx instead may leave one committed but unrecorded).
	stop <-chan struct{}
}

// loadStats is what the writers report about themselves.
type loadStats struct {
	// lags are, per transaction of a paced load, its scheduled time and
	// how late its INSERT was sent against it (µs): a generator that
	// cannot keep up shows here before its rate falls.
	lags []txLag
}

type txLag struct{ at, lag int64 }

// lagsMs are the lags (ms) of the transactions scheduled in [from, to) (µs).
func (st loadStats) lagsMs(from, to int64) []float64 {
	var out []float64
	for _, l := range st.lags {
		if l.at >= from && l.at < to {
			out = append(out, float64(l.lag)/1000)
		}
	}
	return out
}

// runLoad runs ld; rows are numbered from 0 in s, transaction k holding
// rows k×txRows to (k+1)×txRows−1, scheduled at k×txRows/rate seconds
// after the start. A row's clock is read just before its INSERT is sent
// (the rows of one transaction share it). It stops at the end of ld.d,
// when s is full, or, without an error, when ctx ends.
func runLoad(ctx context.Context, be *backend, ld liveLoad, s *samples) (loadStats, error) {
	txRows := max(1, ld.txRows)
	stmt := be.insertSQLInto(ld.table, txRows)
	start := time.Now()
	end := start.Add(ld.d)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var st loadStats
	errs := make(chan error, ld.writers)
	for range ld.writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var lags []txLag
			defer func() {
				mu.Lock()
				st.lags = append(st.lags, lags...)
				mu.Unlock()
			}()
			conn, err := ld.db.Conn(ctx)
			if err != nil {
				if ctx.Err() == nil {
					errs <- err
				}
				return
			}
			defer conn.Close()
			ps, err := conn.PrepareContext(ctx, stmt)
			if err != nil {
				if ctx.Err() == nil {
					errs <- err
				}
				return
			}
			defer ps.Close()
			rows := make([]row, txRows)
			for ctx.Err() == nil {
				select {
				case <-ld.stop:
					return
				default:
				}
				k := s.n.Add(1) - 1
				first := k * int64(txRows)
				if int(first)+txRows > len(s.sent) {
					return
				}
				if ld.rate > 0 {
					at := start.Add(time.Duration(float64(first) / float64(ld.rate) * float64(time.Second)))
					if at.After(end) || time.Now().After(end) {
						return // the database cannot keep this rate: achieved rate says so
					}
					if w := time.Until(at); w > 0 {
						select {
						case <-time.After(w):
						case <-ld.stop:
							return
						}
					}
					lags = append(lags, txLag{at.UnixMicro(), max(0, time.Since(at).Microseconds())})
				} else if time.Now().After(end) {
					return
				}
				ts := time.Now().UnixMicro()
				for i := range rows {
					rows[i] = makeRow(first+int64(i), ld.aggregates, ts)
				}
				args := rowArgs(rows)
				for attempt := 1; ; attempt++ {
					_, err := ps.ExecContext(ctx, args...)
					if err == nil {
						break
					}
					if ctx.Err() != nil {
						return
					}
					// An application retries an INSERT the server chose as
					// a deadlock victim (a relay's locking reads can cause
					// them); the row's clock keeps its first attempt.
					if !retryable(err) || attempt == 10 {
						errs <- fmt.Errorf("insert: %w", err)
						return
					}
					s.retries.Add(1)
				}
				now := time.Now().UnixMicro()
				for i := range rows {
					seq := first + int64(i)
					atomic.StoreInt64(&s.commit[seq], now)
					atomic.StoreInt64(&s.sent[seq], ts)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return st, <-errs
}

// consume reads topic from the start (read_committed when committed is
// set) and stamps every record with the time its poll returned; onRecord,
// when set, sees every record with that time (µs). It stops when ctx is
// done.
func consume(ctx context.Context, br *broker, topic string, s *samples, seen *atomic.Int64, committed bool, onRecord func(r *kgo.Record, now int64)) error {
	opts := []kgo.Opt{kgo.SeedBrokers(br.addrs...), kgo.ConsumeTopics(topic), kgo.AllowAutoTopicCreation(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(500 * time.Millisecond),
		kgo.MetadataMinAge(100 * time.Millisecond)}
	if committed {
		opts = append(opts, kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return err
	}
	go func() {
		defer cl.Close()
		for ctx.Err() == nil {
			fs := cl.PollFetches(ctx)
			now := time.Now().UnixMicro()
			fs.EachRecord(func(r *kgo.Record) {
				if onRecord != nil {
					onRecord(r, now)
				}
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

// written counts the rows the writers committed.
func (s *samples) written() int {
	n := 0
	for i := range s.sent {
		if atomic.LoadInt64(&s.sent[i]) != 0 {
			n++
		}
	}
	return n
}

// missing lists the rows committed and never seen (up to limit) and
// counts them.
func (s *samples) missing(limit int) ([]int, int) {
	var out []int
	n := 0
	for i := range s.sent {
		if atomic.LoadInt64(&s.sent[i]) != 0 && atomic.LoadInt64(&s.seen[i]) == 0 {
			if n++; len(out) < limit {
				out = append(out, i)
			}
		}
	}
	return out, n
}

// latencies returns, for every row whose clock was read in [from, to) (µs),
// its clock, its latency to the consumer (ms; +Inf if never seen) and its
// INSERT+commit time (ms).
func (s *samples) latencies(from, to int64) (sent []int64, lat, commit []float64) {
	for i := range s.sent {
		at := atomic.LoadInt64(&s.sent[i])
		if at == 0 || at < from || at >= to {
			continue
		}
		sent = append(sent, at)
		commit = append(commit, float64(atomic.LoadInt64(&s.commit[i])-at)/1000)
		if seenAt := atomic.LoadInt64(&s.seen[i]); seenAt != 0 {
			lat = append(lat, float64(seenAt-at)/1000)
		} else {
			lat = append(lat, math.Inf(1))
		}
	}
	return sent, lat, commit
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

// runLive is scenario 3 (system outbox-cdc) or 4 (a polling relay) at one
// load.
func runLive(ctx context.Context, o *options, be *backend, rate int, system string) (*liveResult, error) {
	logf("%s: live %s, %s, %s", be.kind, rateName(rate), system, o.liveFor)
	if err := be.recreateTable(ctx); err != nil {
		return nil, err
	}
	// The scenarios before this one (a drain's million rows, a dropped
	// table) leave hundreds of MB of dirty pages; written back during the
	// run, they stall the database's and the connector's writes for tens
	// of milliseconds and show up in every system's tail latency. Flush
	// them first, so each live run measures its own load.
	syscall.Sync()
	relay := relayOf(system)
	if relay == relayTuned {
		if _, err := be.db.ExecContext(ctx, tunedIndex(be.kind)); err != nil {
			return nil, fmt.Errorf("tuned relay index: %w", err)
		}
	}
	tag := fmt.Sprintf("live_%d", rate)
	if relay != "" {
		tag = fmt.Sprintf("%s_%d", relay, rate)
	}
	topic := "bench." + be.kind + "." + tag
	br, err := startBroker(ctx, o, 1, topic)
	if err != nil {
		return nil, err
	}
	defer br.stop()
	res := &liveResult{System: system, Relay: relay == relaySeed, Rate: rate, Seconds: o.liveFor.Seconds(), LoadAvgBefore: loadAvg()}
	defer func() { res.LoadAvgAfter = loadAvg() }()

	capacity := 3_000_000
	if rate > 0 {
		capacity = int(float64(rate)*o.liveFor.Seconds()) + 1
	}
	s := newSamples(capacity)
	cctx, stopConsumer := context.WithCancel(ctx)
	defer stopConsumer()
	var seen atomic.Int64
	if err := consume(cctx, br, topic, s, &seen, false, nil); err != nil {
		return nil, err
	}

	var c *connector
	var rl *relayProc
	var pid int
	if relay != "" {
		if rl, err = startRelayProc(ctx, be.kind, relay, be.dsn, br, topic); err != nil {
			return nil, err
		}
		defer func() {
			if rl.cmd.ProcessState == nil {
				rl.cmd.Process.Kill()
				rl.cmd.Wait()
			}
		}()
		pid = rl.cmd.Process.Pid
	} else {
		var stopCDC func()
		c, stopCDC, err = startLiveConnector(ctx, o, be, tag, topic, br, false)
		defer stopCDC()
		if err != nil {
			return nil, err
		}
		pid = c.cmd.Process.Pid
	}
	before, _ := readProc(pid)
	snapBefore, err := be.snapshot(ctx)
	if err != nil {
		return nil, fmt.Errorf("database counters: %w", err)
	}
	wstart := time.Now()
	if err := runWriters(ctx, o, be, s, rate, o.liveFor); err != nil {
		return nil, err
	}
	res.WriteSeconds = time.Since(wstart).Seconds()
	written := s.written()
	res.Written = written
	res.WriterRetries = s.retries.Load()
	// Wait for the stragglers: up to 15 s for outbox-cdc and the tuned
	// relay; the seed relay gets 2 s (above 100 rows/s it is visibly
	// behind and would need minutes).
	grace := 15 * time.Second
	if relay == relaySeed {
		grace = 2 * time.Second
	}
	for deadline := time.Now().Add(grace); time.Now().Before(deadline) && int(seen.Load()) < written; {
		time.Sleep(20 * time.Millisecond)
	}
	res.Delivered = int(seen.Load())
	after, err := readProc(pid)
	if err != nil {
		return nil, err
	}
	res.CPUSeconds = after.CPUSeconds - before.CPUSeconds
	res.PeakRSSMiB = after.PeakRSSMiB
	var rc *relayCounts
	if c != nil {
		if err := c.stop(); err != nil {
			return nil, err
		}
	} else {
		if err := rl.stop(); err != nil {
			return nil, fmt.Errorf("%s: %w", system, err)
		}
		rc = &rl.counts
		res.RelayQueries, res.RelayRowsRead, res.RelayRowsUpdated, res.RelayEmptyPolls = rc.Queries, rc.RowsRead, rc.RowsUpdated, rc.EmptyPolls
	}
	stopConsumer()
	be.waitStats()
	snapAfter, err := be.snapshot(ctx)
	if err != nil {
		return nil, fmt.Errorf("database counters: %w", err)
	}
	load := be.load(ctx, o, snapBefore, snapAfter, rc)
	res.Load = &load

	// Percentiles over rows written after the warm-up; a row never seen
	// counts as +Inf.
	_, lat, commit := s.latencies(wstart.Add(o.warmup).UnixMicro(), math.MaxInt64)
	res.P50, res.P99, res.P999, res.Max = msec(pct(lat, 50)), msec(pct(lat, 99)), msec(pct(lat, 99.9)), msec(pct(lat, 100))
	res.CommitP50, res.CommitP99 = msec(pct(commit, 50)), msec(pct(commit, 99))
	res.Samples = len(lat)
	res.AchievedRate = float64(written) / res.WriteSeconds
	logf("%s: %s %s: %d written (%.0f/s), %d delivered, p50 %s p99 %s p99.9 %s ms (commit p50 %.2f ms); CPU %.2fs, peak RSS %.1f MiB; %d queries, %d rows read, %d updated, %.0f log bytes per row",
		be.kind, system, rateName(rate), written, res.AchievedRate, res.Delivered, fmtMS(float64(res.P50)), fmtMS(float64(res.P99)), fmtMS(float64(res.P999)),
		float64(res.CommitP50), res.CPUSeconds, res.PeakRSSMiB, res.Load.Queries, res.Load.RowsRead, res.Load.RowsUpdated, float64(res.Load.LogBytes)/float64(max(1, written)))
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

// startLiveConnector starts the connector of a live or sustained run on
// the bench table (PostgreSQL: with a slot and publication of its own,
// dropped by stop) and waits until it is ready. stop kills it if it still
// runs and drops what was made for it.
func startLiveConnector(ctx context.Context, o *options, be *backend, tag, topic string, br *broker, exactly bool) (*connector, func(), error) {
	var undo []func()
	stop := func() {
		for i := len(undo) - 1; i >= 0; i-- {
			undo[i]()
		}
	}
	var slot string
	if be.kind == "postgres" {
		slot = be.slotName(tag)
		if err := be.createSlot(ctx, slot, slot); err != nil {
			return nil, stop, err
		}
		undo = append(undo, func() { be.db.ExecContext(context.WithoutCancel(ctx), "DROP PUBLICATION IF EXISTS "+slot) })
		undo = append(undo, func() { be.dropSlot(ctx, slot) })
	}
	name := fmt.Sprintf("bench-%s-%s-%s", be.kind, strings.ReplaceAll(tag, "_", "-"), o.runID)
	spec := connSpec{name: name, sourceYAML: be.sourceYAML(slot, slot), topic: topic, br: br, exactly: exactly}
	// A fresh start: no checkpoint or exactly-once witness of an earlier
	// run of the same name.
	if err := os.RemoveAll(spec.dir(o)); err != nil {
		return nil, stop, err
	}
	c, err := startConnector(o, spec)
	if err != nil {
		return nil, stop, err
	}
	undo = append(undo, c.kill)
	if err := c.waitReady(ctx, 60*time.Second); err != nil {
		return nil, stop, err
	}
	return c, stop, nil
}
