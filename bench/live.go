package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
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
				for attempt := 1; ; attempt++ {
					_, err := ps.ExecContext(ctx, r.messageID, r.aggType, r.aggID, r.evType, string(r.payload))
					if err == nil {
						break
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
	cl, err := kgo.NewClient(kgo.SeedBrokers(br.addrs...), kgo.ConsumeTopics(topic), kgo.AllowAutoTopicCreation(),
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
	if err := consume(cctx, br, topic, s, &seen); err != nil {
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
		var slot string
		if be.kind == "postgres" {
			slot = be.slotName(tag)
			if err := be.createSlot(ctx, slot, slot); err != nil {
				return nil, err
			}
			defer be.db.ExecContext(context.WithoutCancel(ctx), "DROP PUBLICATION IF EXISTS "+slot)
			defer be.dropSlot(ctx, slot)
		}
		name := fmt.Sprintf("bench-%s-%s-%s", be.kind, strings.ReplaceAll(tag, "_", "-"), o.runID)
		if c, err = startConnector(o, connSpec{name: name, sourceYAML: be.sourceYAML(slot, slot), topic: topic, br: br}); err != nil {
			return nil, err
		}
		defer c.kill()
		if err := c.waitReady(ctx, 30*time.Second); err != nil {
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
	written := 0
	for i := range s.sent {
		if atomic.LoadInt64(&s.sent[i]) != 0 {
			written++
		}
	}
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
