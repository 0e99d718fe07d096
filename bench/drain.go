package main

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/IBM/sarama"
	gomysql "github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kgo"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
	"github.com/outbox-cdc/outbox-cdc/checkpoint"
	"github.com/outbox-cdc/outbox-cdc/sink/kafka"
)

// backlog is a loaded backlog and where it sits in the source's log.
type backlog struct {
	rows     int
	rowBytes int // approximate payload size
	// MySQL: binlog coordinates around the load and the GTID position
	// before it (the connector's starting point).
	startFile, endFile string
	startPos, endPos   uint32
	startGTID          string
	// PostgreSQL: a template slot created before the load (never read,
	// copied for every reader) and its publication, and the WAL position
	// after the load.
	tplSlot, pub     string
	startLSN, endLSN string
	walSpan          float64 // bytes from startLSN to endLSN
	loadSeconds      float64
}

// loadPlan says what to insert: rows rows in transactions of txRows (0:
// all in one transaction), each payload about rowBytes long, from loaders
// connections at once.
type loadPlan struct {
	rows, txRows, stmtRows, rowBytes, loaders, aggregates int
	tag                                                   string
	// noAnnotate turns MariaDB's Annotate_rows events off for the loading
	// sessions (binlog_annotate_row_events, a session variable). With it
	// on, the server logs every INSERT's text, values included, next to
	// its rows: twice the binary log, which the bench cannot purge. No
	// reader here sees them either way: the connector and the raw reader
	// do not ask for them (go-mysql's dump request without
	// BINLOG_SEND_ANNOTATE_ROWS_EVENT), so the server skips them.
	noAnnotate bool
}

// loadBacklog recreates the table, notes the start position (PostgreSQL:
// creates the template slot), inserts the rows, and notes the end position.
func loadBacklog(ctx context.Context, be *backend, pl loadPlan) (*backlog, error) {
	bl := &backlog{rows: pl.rows, rowBytes: pl.rowBytes}
	if err := be.recreateTable(ctx); err != nil {
		return nil, err
	}
	switch be.kind {
	case "mysql":
		if err := be.db.QueryRowContext(ctx, "SELECT @@gtid_binlog_pos").Scan(&bl.startGTID); err != nil {
			return nil, err
		}
		var err error
		if bl.startFile, bl.startPos, err = masterStatus(ctx, be); err != nil {
			return nil, err
		}
	case "postgres":
		bl.pub, bl.tplSlot = be.slotName(pl.tag), be.slotName(pl.tag+"_tpl")
		if err := be.createSlot(ctx, bl.pub, bl.tplSlot); err != nil {
			return nil, err
		}
		if err := be.db.QueryRowContext(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&bl.startLSN); err != nil {
			return nil, err
		}
	}
	txRows := pl.txRows
	if txRows <= 0 {
		txRows = pl.rows
	}
	stmtRows := min(pl.stmtRows, txRows)
	pad := padFor(pl.rowBytes)
	start := time.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, pl.loaders)
	stmt := be.insertSQL(stmtRows)
	for range pl.loaders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rows := make([]row, stmtRows)
			for {
				first := next.Add(int64(txRows)) - int64(txRows)
				if first >= int64(pl.rows) || ctx.Err() != nil {
					return
				}
				n := min(txRows, pl.rows-int(first))
				tx, done, err := be.beginLoad(ctx, pl)
				for ins := 0; err == nil && ins < n; {
					k := min(stmtRows, n-ins)
					for i := range k {
						rows[i] = makeRowPad(first+int64(ins+i), pl.aggregates, 0, pad)
					}
					q := stmt
					if k != stmtRows {
						q = be.insertSQL(k)
					}
					_, err = tx.ExecContext(ctx, q, rowArgs(rows[:k])...)
					ins += k
					if txRows == pl.rows && ins%100_000 < k {
						logf("%s: %d of %d rows inserted in the open transaction", be.kind, ins, n)
					}
				}
				if err == nil {
					err = tx.Commit()
				} else if tx != nil {
					tx.Rollback()
				}
				done()
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return nil, fmt.Errorf("load backlog: %w", err)
	}
	bl.loadSeconds = time.Since(start).Seconds()
	switch be.kind {
	case "mysql":
		var err error
		if bl.endFile, bl.endPos, err = masterStatus(ctx, be); err != nil {
			return nil, err
		}
	case "postgres":
		if err := be.db.QueryRowContext(ctx, "SELECT pg_current_wal_lsn()::text, pg_wal_lsn_diff(pg_current_wal_lsn(), $1::pg_lsn)::float8", bl.startLSN).Scan(&bl.endLSN, &bl.walSpan); err != nil {
			return nil, err
		}
	}
	return bl, ctx.Err()
}

// beginLoad begins a loading transaction. With pl.noAnnotate on MariaDB it
// runs on a connection of its own with binlog_annotate_row_events off;
// done puts the setting back and returns the connection to the pool.
func (be *backend) beginLoad(ctx context.Context, pl loadPlan) (*sql.Tx, func(), error) {
	if !pl.noAnnotate || be.kind != "mysql" {
		tx, err := be.db.BeginTx(ctx, nil)
		return tx, func() {}, err
	}
	conn, err := be.db.Conn(ctx)
	if err != nil {
		return nil, func() {}, err
	}
	done := func() {
		conn.ExecContext(context.WithoutCancel(ctx), "SET SESSION binlog_annotate_row_events = DEFAULT")
		conn.Close()
	}
	if _, err := conn.ExecContext(ctx, "SET SESSION binlog_annotate_row_events = 0"); err != nil {
		done()
		return nil, func() {}, fmt.Errorf("binlog_annotate_row_events: %w", err)
	}
	tx, err := conn.BeginTx(ctx, nil)
	return tx, done, err
}

// walBytes is how far the server's WAL advanced while the backlog was
// written (PostgreSQL; every database's traffic in that time included).
func (bl *backlog) walBytes(ctx context.Context, be *backend) (int64, error) {
	var n int64
	err := be.db.QueryRowContext(ctx, "SELECT pg_wal_lsn_diff($1::pg_lsn, $2::pg_lsn)::bigint", bl.endLSN, bl.startLSN).Scan(&n)
	return n, err
}

// txSpans returns an event handler for scanBinlog and the sum it keeps:
// the binary log bytes (file offsets, so events no reader asked for, such
// as Annotate_rows, count too) of every transaction that wrote a row of
// schema.
func txSpans(schema string) (func(*replication.BinlogEvent), *int64) {
	var total int64
	var start uint32
	ours := false
	return func(ev *replication.BinlogEvent) {
		switch e := ev.Event.(type) {
		case *replication.MariadbGTIDEvent, *replication.GTIDEvent:
			start, ours = ev.Header.LogPos-ev.Header.EventSize, false
		case *replication.TableMapEvent:
			ours = ours || string(e.Schema) == schema
		case *replication.RowsEvent:
			ours = ours || string(e.Table.Schema) == schema
		case *replication.XIDEvent:
			if ours && ev.Header.LogPos > start {
				total += int64(ev.Header.LogPos - start)
			}
			ours = false
		}
	}, &total
}

// release drops the template slot and the publication.
func (bl *backlog) release(ctx context.Context, be *backend) {
	if be.kind != "postgres" {
		return
	}
	be.dropSlot(ctx, bl.tplSlot)
	be.db.ExecContext(context.WithoutCancel(ctx), "DROP PUBLICATION IF EXISTS "+bl.pub)
}

func masterStatus(ctx context.Context, be *backend) (string, uint32, error) {
	rows, err := be.db.QueryContext(ctx, "SHOW MASTER STATUS")
	if err != nil {
		return "", 0, err
	}
	defer rows.Close()
	cols, _ := rows.Columns()
	if !rows.Next() {
		return "", 0, fmt.Errorf("SHOW MASTER STATUS: no row (binlog off?)")
	}
	vals := make([]any, len(cols))
	var file string
	var pos uint32
	vals[0], vals[1] = &file, &pos
	for i := 2; i < len(vals); i++ {
		vals[i] = new(any)
	}
	return file, pos, rows.Scan(vals...)
}

// drainMode is one way of draining a backlog.
type drainMode struct {
	label   string // at-least-once, exactly-once, at-least-once, 3 brokers
	exactly bool
	brokers int
}

var (
	modeALO      = drainMode{"at-least-once", false, 1}
	modeEOS      = drainMode{"exactly-once", true, 1}
	modeCluster  = drainMode{"at-least-once, 3 brokers", false, 3}
	modeEOSClstr = drainMode{"exactly-once, 3 brokers", true, 3}
)

// runDrain is scenarios 1 and 2: one backlog, its physical limits, and the
// connector draining it in every chosen mode, each with a fresh broker.
func runDrain(ctx context.Context, o *options, be *backend) (*drainResult, error) {
	logf("%s: loading %d rows in %d-row transactions", be.kind, o.rows, o.txRows)
	bl, err := loadBacklog(ctx, be, loadPlan{rows: o.rows, txRows: o.txRows, stmtRows: o.txRows, rowBytes: 200, loaders: 4, aggregates: o.aggregates, tag: "drain"})
	if err != nil {
		return nil, err
	}
	defer bl.release(ctx, be)
	d := &drainResult{Rows: o.rows, LoadSeconds: bl.loadSeconds, LoadAvgBefore: loadAvg()}
	logf("%s: loaded in %.1fs; raw source read", be.kind, bl.loadSeconds)
	// As before a live run: the dirty pages of the load (and of the
	// scenarios before it: a huge transaction writes gigabytes) are
	// written back now, not during the measurements.
	syscall.Sync()

	raw, err := rawReadOnce(ctx, o, be, bl)
	if err != nil {
		return nil, err
	}
	d.RawReadSeconds, d.RawReadRows = raw.Seconds, raw.Rows
	d.Repeats = []drainPair{{Raw: raw}}
	logf("%s: raw produce", be.kind)
	franzTopic, saramaTopic := "bench.raw.franz."+be.kind, "bench.raw.sarama."+be.kind
	br, err := startBroker(ctx, o, 1, franzTopic, saramaTopic)
	if err != nil {
		return nil, err
	}
	d.RawProduceFranzSeconds, err = rawProduceFranz(ctx, o, br, franzTopic)
	if err == nil {
		d.RawProduceSaramaSeconds, err = rawProduceSarama(ctx, o, br, saramaTopic)
	}
	br.stop()
	if err != nil {
		return nil, fmt.Errorf("raw produce: %w", err)
	}
	logf("%s: raw produce franz-go %.2fs, sarama %.2fs", be.kind, d.RawProduceFranzSeconds, d.RawProduceSaramaSeconds)

	modes := []drainMode{modeALO}
	if o.scenarios["eos"] {
		modes = append(modes, modeEOS)
	}
	if o.scenarios["cluster"] {
		modes = append(modes, modeCluster)
		if o.scenarios["eos"] {
			modes = append(modes, modeEOSClstr)
		}
	}
	for _, m := range modes {
		if ctx.Err() != nil {
			return d, ctx.Err()
		}
		r := drainOnce(ctx, o, be, bl, m, "drain", 10*time.Minute)
		d.Runs = append(d.Runs, r)
		if m != modeALO {
			continue
		}
		if r.Error == "" {
			// The fields older reports read.
			d.DrainSeconds, d.CPUSeconds, d.PeakRSSMiB, d.Checkpoint = r.Seconds, r.CPUSeconds, r.PeakRSSMiB, r.Checkpoint
		}
		d.Repeats[0].Drain = r
		// -repeat: more raw reads and drains of the same backlog, in turn.
		for i := 1; i < o.repeat && ctx.Err() == nil; i++ {
			logf("%s: repeat %d of %d: raw read, at-least-once drain", be.kind, i+1, o.repeat)
			raw, err := rawReadOnce(ctx, o, be, bl)
			if err != nil {
				return d, err
			}
			d.Repeats = append(d.Repeats, drainPair{Raw: raw, Drain: drainOnce(ctx, o, be, bl, m, "drain", 10*time.Minute)})
		}
	}
	return d, nil
}

// rawReadOnce is one raw source read of the backlog, timed whole and from
// its first row to its last.
func rawReadOnce(ctx context.Context, o *options, be *backend, bl *backlog) (rawReadRun, error) {
	rr := rawReadRun{LoadAvgBefore: loadAvg()}
	syscall.Sync()
	prog := newProgress(time.Now())
	var err error
	if rr.Seconds, rr.Rows, err = rawRead(ctx, o, be, bl, nil, prog); err != nil {
		return rr, fmt.Errorf("raw read: %w", err)
	}
	if rr.Rows != bl.rows {
		return rr, fmt.Errorf("raw read saw %d rows of %d", rr.Rows, bl.rows)
	}
	total := float64(bl.rows)
	if be.kind == "postgres" {
		total = bl.walSpan
	}
	pr := prog.rates(total, bl.rows)
	rr.FirstSeconds, rr.FirstToLast, rr.Middle = pr.FirstSeconds, pr.FirstToLast, pr.Middle
	logf("%s: raw read %.2fs (%d rows, %.0f rows/s; from the first row to the last %.0f rows/s, 10-90 %% %.0f rows/s, first row after %.3fs)",
		be.kind, rr.Seconds, rr.Rows, float64(rr.Rows)/rr.Seconds, rr.FirstToLast, rr.Middle, rr.FirstSeconds)
	return rr, nil
}

// drainOnce drains bl once in mode m with a fresh broker and reports what it
// saw; a failure is recorded in the result rather than returned, so the
// other modes still run.
func drainOnce(ctx context.Context, o *options, be *backend, bl *backlog, m drainMode, what string, limit time.Duration) drainRun {
	syscall.Sync() // the previous drain's topic files and checkpoints
	r := drainRun{Mode: m.label, Brokers: m.brokers, ExactlyOnce: m.exactly, Rows: bl.rows, LoadAvgBefore: loadAvg()}
	if err := drainInto(ctx, o, be, bl, m, what, limit, &r); err != nil {
		r.Error = err.Error()
		logf("%s: %s (%s) failed: %v", be.kind, what, m.label, err)
		return r
	}
	logf("%s: %s (%s): %d rows in %.2fs (%.0f rows/s; from the first record to the last %.0f rows/s, 10-90 %% %.0f rows/s, first record after %.3fs), CPU %.2fs, peak RSS %.1f MiB, %.0f B and %.1f allocations per row, GC %.0f%% of CPU; consumer saw %d records, %d distinct; load average %s before",
		be.kind, what, m.label, bl.rows, r.Seconds, r.rate(), r.FirstToLast, r.Middle, r.FirstSeconds, r.CPUSeconds, r.PeakRSSMiB, r.AllocBytesPerRow, r.MallocsPerRow, 100*r.GCShare, r.Consumed, r.Distinct, r.LoadAvgBefore)
	return r
}

func drainInto(ctx context.Context, o *options, be *backend, bl *backlog, m drainMode, what string, limit time.Duration, r *drainRun) error {
	suffix := strings.NewReplacer(" ", "", ",", "-").Replace(m.label)
	name := fmt.Sprintf("bench-%s-%s-%s-%s", what, be.kind, suffix, o.runID)
	topic := fmt.Sprintf("bench.%s.%s.%s", what, be.kind, suffix)
	// A repeated drain starts afresh: no checkpoint or exactly-once
	// witness of the previous one.
	if err := os.RemoveAll(filepath.Join(o.work, name)); err != nil {
		return err
	}
	br, err := startBroker(ctx, o, m.brokers, topic)
	if err != nil {
		return err
	}
	defer br.stop()
	spec := connSpec{name: name, topic: topic, br: br, exactly: m.exactly, gctrace: true}
	if m.exactly && what == "bigtx" {
		// The huge transaction is one Kafka transaction; the README's
		// remedy for a batch that takes long is a longer transaction
		// timeout (kfake allows up to 15 minutes).
		spec.env = append(spec.env, "OUTBOX_CDC_SINK_TRANSACTION_TIMEOUT=10m")
	}
	switch be.kind {
	case "mysql":
		// Start just before the backlog: the GTID position read before the
		// first insert, as a file checkpoint or a committed progress record.
		start := outboxcdc.MakePosition("mysql", "mariadb-gtid:"+bl.startGTID)
		if m.exactly {
			if err := seedProgress(ctx, br, name, start); err != nil {
				return fmt.Errorf("seed the progress topic: %w", err)
			}
		} else {
			if err := os.MkdirAll(filepath.Join(o.work, name), 0o755); err != nil {
				return err
			}
			cp, err := checkpoint.NewFile(checkpoint.FileConfig{Path: filepath.Join(o.work, name, "checkpoint")}, zerolog.Nop())
			if err != nil {
				return err
			}
			if err := cp.Save(ctx, start); err != nil {
				return err
			}
		}
		spec.sourceYAML = be.sourceYAML("", "")
	case "postgres":
		slot := be.slotName(what + "_" + suffix)
		if err := be.copySlot(ctx, bl.tplSlot, slot); err != nil {
			return err
		}
		defer be.dropSlot(ctx, slot)
		spec.sourceYAML = be.sourceYAML(slot, bl.pub)
	}
	c, err := startConnector(o, spec)
	if err != nil {
		return err
	}
	defer c.kill()
	// Progress is rows read from the source or records delivered: a huge
	// transaction is read for a long time before its first record.
	last, lastAt := -1.0, time.Now()
	prog := newProgress(c.started)
	scrapes := 0
	for i := 0; ; i++ {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if i%50 == 0 {
			// What a run that fails had reached (VmHWM only grows).
			if ps, err := readProc(c.cmd.Process.Pid); err == nil {
				r.CPUSeconds, r.PeakRSSMiB = ps.CPUSeconds, ps.PeakRSSMiB
			}
		}
		select {
		case <-c.done:
			return fmt.Errorf("connector exited: %v\n%s", c.err, c.tail())
		default:
		}
		mm, _ := c.metrics("outbox_cdc_records_delivered_total", "outbox_cdc_source_events_total")
		scrapes++
		n := mm["outbox_cdc_records_delivered_total"]
		prog.add(time.Now(), min(n, float64(bl.rows)))
		if int(n) >= bl.rows {
			r.Seconds = time.Since(c.started).Seconds()
			pr := prog.rates(float64(bl.rows), bl.rows)
			r.FirstSeconds, r.FirstToLast, r.Middle = pr.FirstSeconds, pr.FirstToLast, pr.Middle
			break
		}
		if p := n + mm["outbox_cdc_source_events_total"]; p != last {
			last, lastAt = p, time.Now()
		}
		if el := time.Since(c.started); el > limit || time.Since(lastAt) > 3*time.Minute {
			return fmt.Errorf("drain not done after %s (%v delivered, no progress for %s)\n%s", el.Round(time.Second), n, time.Since(lastAt).Round(time.Second), c.tail())
		}
		time.Sleep(10 * time.Millisecond)
	}
	ps, err := readProc(c.cmd.Process.Pid)
	if err != nil {
		return err
	}
	r.CPUSeconds, r.PeakRSSMiB = ps.CPUSeconds, ps.PeakRSSMiB
	if mm, err := c.metrics("go_memstats_alloc_bytes_total", "go_memstats_mallocs_total"); err == nil {
		r.AllocBytes, r.Mallocs = mm["go_memstats_alloc_bytes_total"], mm["go_memstats_mallocs_total"]
		r.AllocBytesPerRow, r.MallocsPerRow = r.AllocBytes/float64(bl.rows), r.Mallocs/float64(bl.rows)
	}
	logScrapeCost(c, scrapes, r.CPUSeconds)
	// The checkpoint is saved right after the records are counted.
	time.Sleep(300 * time.Millisecond)
	if !m.exactly {
		if saved, err := checkpoint.ReadFile(c.cpPath); err == nil {
			r.Checkpoint = string(saved.Position)
		}
	}
	if err := c.stop(); err != nil {
		return err
	}
	if f, err := os.Open(c.logPath); err == nil {
		gc := parseGCTrace(f)
		f.Close()
		r.GCCycles, r.GCCPUSeconds, r.GCPercent = gc.Cycles, gc.CPUSeconds, gc.Percent
		if r.CPUSeconds > 0 {
			r.GCShare = gc.CPUSeconds / r.CPUSeconds
		}
	}
	if o.verify {
		r.Consumed, r.Distinct, err = countTopic(ctx, br, topic, m.exactly, bl.rows)
		if err != nil {
			return fmt.Errorf("verify: %w", err)
		}
		if r.Distinct != bl.rows || (m.exactly && r.Consumed != bl.rows) {
			return fmt.Errorf("verify: a read_committed=%v consumer saw %d records, %d distinct rows, of %d", m.exactly, r.Consumed, r.Distinct, bl.rows)
		}
	}
	return nil
}

// seedProgress commits a progress record holding pos, as the connector's
// exactly-once sink would, so an exactly-once connector named name starts
// there. The connector's own start then fences this producer.
func seedProgress(ctx context.Context, br *broker, name string, pos outboxcdc.Position) error {
	kc := kafka.DefaultKafkaConfig()
	kc.Brokers = br.addrs
	t, err := kafka.NewTransactional(kc, kafka.DefaultTxnConfig(), name, pos.Kind(), zerolog.Nop(), prometheus.NewRegistry())
	if err != nil {
		return err
	}
	defer t.Close()
	lctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if _, err := t.Load(lctx); err != nil {
		return err
	}
	return t.WriteAtomic(lctx, nil, pos)
}

// countTopic reads topic from the start (read_committed when committed is
// set) until every row 0..rows-1 was seen, then briefly for duplicates, and
// returns the records read and the distinct rows among them.
func countTopic(ctx context.Context, br *broker, topic string, committed bool, rows int) (consumed, distinct int, err error) {
	opts := []kgo.Opt{kgo.SeedBrokers(br.addrs...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(200 * time.Millisecond)}
	if committed {
		opts = append(opts, kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return 0, 0, err
	}
	defer cl.Close()
	seen := make([]bool, rows)
	deadline := time.Now().Add(5 * time.Minute)
	var extra time.Time // after the last row: keep reading this long
	for {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		fs := cl.PollFetches(pctx)
		cancel()
		if ctx.Err() != nil {
			return consumed, distinct, ctx.Err()
		}
		fs.EachError(func(t string, p int32, e error) {
			if e != context.DeadlineExceeded && err == nil {
				err = fmt.Errorf("fetch %s/%d: %w", t, p, e)
			}
		})
		if err != nil {
			return consumed, distinct, err
		}
		fs.EachRecord(func(r *kgo.Record) {
			consumed++
			if seq, ok := jsonInt(r.Value, `"seq"`); ok && seq >= 0 && seq < int64(rows) && !seen[seq] {
				seen[seq] = true
				distinct++
			}
		})
		now := time.Now()
		if distinct == rows && extra.IsZero() {
			extra = now.Add(500 * time.Millisecond)
		}
		if (!extra.IsZero() && now.After(extra)) || now.After(deadline) {
			return consumed, distinct, nil
		}
	}
}

// rawRead reads the backlog's part of the log with a plain client and
// discards it: go-mysql's BinlogSyncer (events read and decoded, rows
// parsed), or pg_recvlogical with pgoutput to /dev/null on a copy of the
// template slot.
// MariaDB: f, when not nil, sees every event.
// prog, when not nil, gets the reader's progress, timed from its start:
// MariaDB, the backlog's rows read; PostgreSQL, the WAL bytes past the
// backlog's start that the walsender had sent (pg_stat_replication
// sent_lsn, polled every 10 ms), out of bl.walSpan.
func rawRead(ctx context.Context, o *options, be *backend, bl *backlog, f func(*replication.BinlogEvent), prog *progress) (float64, int, error) {
	if be.kind == "postgres" {
		slot := be.slotName("raw")
		if err := be.copySlot(ctx, bl.tplSlot, slot); err != nil {
			return 0, 0, err
		}
		defer be.dropSlot(ctx, slot)
		args := []string{"-d", be.dsn, "--slot", slot, "--start", "--no-loop",
			"-o", "proto_version=1", "-o", "publication_names=" + bl.pub,
			"-E", bl.endLSN, "-s", "1", "-f", "/dev/null"}
		start := time.Now()
		if prog != nil {
			prog.start = start
		}
		cmd := exec.CommandContext(ctx, "pg_recvlogical", args...)
		var out strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			return 0, 0, fmt.Errorf("pg_recvlogical: %w", err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		var err error
	poll:
		for {
			select {
			case err = <-done:
				break poll
			case <-time.After(10 * time.Millisecond):
			}
			if prog != nil {
				var sent float64
				if be.db.QueryRowContext(ctx, `SELECT pg_wal_lsn_diff(r.sent_lsn, $2::pg_lsn)::float8 FROM pg_replication_slots s
  JOIN pg_stat_replication r ON r.pid = s.active_pid WHERE s.slot_name = $1`, slot, bl.startLSN).Scan(&sent) == nil && sent > 0 {
					prog.add(time.Now(), min(sent, bl.walSpan))
				}
			}
		}
		if err != nil {
			return 0, 0, fmt.Errorf("pg_recvlogical: %v: %s", err, out.String())
		}
		secs := time.Since(start).Seconds()
		if prog != nil {
			prog.add(time.Now(), bl.walSpan) // it stops at the end LSN
		}
		return secs, bl.rows, nil // the slot is confirmed up to endLSN now
	}
	var n float64
	g := func(ev *replication.BinlogEvent) {
		if f != nil {
			f(ev)
		}
		if e, ok := ev.Event.(*replication.RowsEvent); ok && prog != nil && string(e.Table.Schema) == be.name {
			n += float64(len(e.Rows))
			prog.add(time.Now(), n)
		}
	}
	start := time.Now()
	if prog != nil {
		prog.start = start
	}
	rows, err := scanBinlog(ctx, o, bl.startFile, bl.startPos, bl.endFile, bl.endPos, g)
	if err != nil {
		return 0, 0, err
	}
	return time.Since(start).Seconds(), rows[be.name], nil
}

// scanBinlog reads the binlog from one position to another with go-mysql's
// BinlogSyncer (every event read and decoded), hands each event to f, and
// returns the rows of rows events per schema.
func scanBinlog(ctx context.Context, o *options, startFile string, startPos uint32, endFile string, endPos uint32, f func(*replication.BinlogEvent)) (map[string]int, error) {
	host, port := splitHostPort(parseMySQLAddr(o.mysqlAddr))
	syncer := replication.NewBinlogSyncer(replication.BinlogSyncerConfig{
		ServerID: 0x7f000000 | uint32(time.Now().UnixNano()&0xffff),
		Flavor:   "mariadb",
		Host:     host, Port: port, User: mysqlUser(o.mysqlAddr), Password: mysqlPassword(o.mysqlAddr),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	defer syncer.Close()
	st, err := syncer.StartSync(gomysql.Position{Name: startFile, Pos: startPos})
	if err != nil {
		return nil, err
	}
	rows, file := map[string]int{}, startFile
	for {
		gctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		ev, err := st.GetEvent(gctx)
		cancel()
		if err != nil {
			return nil, err
		}
		if e, ok := ev.Event.(*replication.RotateEvent); ok {
			// Its LogPos is in the old file: only the name counts.
			if file = string(e.NextLogName); file > endFile {
				break
			}
			continue
		}
		f(ev)
		if e, ok := ev.Event.(*replication.RowsEvent); ok {
			rows[string(e.Table.Schema)] += len(e.Rows)
		}
		if file == endFile && ev.Header.LogPos >= endPos {
			break
		}
	}
	return rows, nil
}

func parseMySQLAddr(dsn string) string {
	_, rest, ok := strings.Cut(dsn, "tcp(")
	if !ok {
		return "127.0.0.1:3306"
	}
	addr, _, _ := strings.Cut(rest, ")")
	return addr
}

// mysqlUser and mysqlPassword read the user:password@ part of a DSN.
func mysqlUser(dsn string) string {
	cred, _, ok := strings.Cut(dsn, "@")
	if !ok {
		return "root"
	}
	u, _, _ := strings.Cut(cred, ":")
	return u
}

func mysqlPassword(dsn string) string {
	cred, _, ok := strings.Cut(dsn, "@")
	if !ok {
		return ""
	}
	_, p, _ := strings.Cut(cred, ":")
	return p
}

func splitHostPort(addr string) (string, uint16) {
	h, p, _ := strings.Cut(addr, ":")
	n, _ := strconv.Atoi(p)
	if n == 0 {
		n = 3306
	}
	return h, uint16(n)
}

// rawRecords builds the records the connector sends for the backlog: the
// same keys, payloads and seed-preset headers.
func rawRecords(o *options, f func(topicKey, value []byte, headers [][2][]byte)) {
	for i := range int64(o.rows) {
		r := makeRow(i, o.aggregates, 0)
		f([]byte(r.aggID), r.payload, [][2][]byte{
			{[]byte("id"), []byte(r.messageID)},
			{[]byte("event_type"), []byte(r.evType)},
			{[]byte("aggregate_type"), []byte(r.aggType)},
		})
	}
}

// rawProduceFranz produces the backlog's records with franz-go (idempotent,
// acks=all, default batching) and waits for every ack.
func rawProduceFranz(ctx context.Context, o *options, br *broker, topic string) (float64, error) {
	var recs []*kgo.Record
	rawRecords(o, func(key, value []byte, hs [][2][]byte) {
		r := &kgo.Record{Topic: topic, Key: key, Value: value}
		for _, h := range hs {
			r.Headers = append(r.Headers, kgo.RecordHeader{Key: string(h[0]), Value: h[1]})
		}
		recs = append(recs, r)
	})
	cl, err := kgo.NewClient(kgo.SeedBrokers(br.addrs...), kgo.AllowAutoTopicCreation(), kgo.MaxBufferedRecords(100_000))
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	var failed atomic.Pointer[error]
	start := time.Now()
	for _, r := range recs {
		cl.Produce(ctx, r, func(_ *kgo.Record, err error) {
			if err != nil {
				failed.CompareAndSwap(nil, &err)
			}
		})
	}
	if err := cl.Flush(ctx); err != nil {
		return 0, err
	}
	if e := failed.Load(); e != nil {
		return 0, *e
	}
	return time.Since(start).Seconds(), nil
}

// rawProduceSarama produces the same records with sarama's AsyncProducer
// configured like the sink (idempotent, acks=all, one request in flight,
// no linger).
func rawProduceSarama(ctx context.Context, o *options, br *broker, topic string) (float64, error) {
	var msgs []*sarama.ProducerMessage
	rawRecords(o, func(key, value []byte, hs [][2][]byte) {
		m := &sarama.ProducerMessage{Topic: topic, Key: sarama.ByteEncoder(key), Value: sarama.ByteEncoder(value)}
		for _, h := range hs {
			m.Headers = append(m.Headers, sarama.RecordHeader{Key: h[0], Value: h[1]})
		}
		msgs = append(msgs, m)
	})
	sc := sarama.NewConfig()
	sc.Version = sarama.V2_8_0_0
	sc.Net.MaxOpenRequests = 1
	sc.Producer.Idempotent = true
	sc.Producer.RequiredAcks = sarama.WaitForAll
	sc.Producer.Return.Successes = true
	sc.Producer.Return.Errors = true
	sc.Producer.Partitioner = sarama.NewHashPartitioner
	sc.ChannelBufferSize = 1024
	sc.Metadata.Full = false
	p, err := sarama.NewAsyncProducer(br.addrs, sc)
	if err != nil {
		return 0, err
	}
	defer p.Close()
	var got atomic.Int64
	var firstErr atomic.Pointer[error]
	done := make(chan struct{})
	go func() {
		for range p.Successes() {
			if got.Add(1) == int64(len(msgs)) {
				close(done)
			}
		}
	}()
	go func() {
		for e := range p.Errors() {
			err := error(e)
			firstErr.CompareAndSwap(nil, &err)
			if got.Add(1) == int64(len(msgs)) {
				close(done)
			}
		}
	}()
	start := time.Now()
	for _, m := range msgs {
		select {
		case p.Input() <- m:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	select {
	case <-done:
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	if e := firstErr.Load(); e != nil {
		return 0, *e
	}
	return time.Since(start).Seconds(), nil
}

// logScrapeCost logs what the drain's own /metrics polling (every 10 ms)
// cost the connector: each scrape gathers every metric (the process
// collector reads /proc) and serves it over HTTP, so a slow drain, with
// more scrapes, shows more CPU per row. It scrapes the idle connector 100
// more times and takes their CPU as the cost of one.
func logScrapeCost(c *connector, scrapes int, cpu float64) {
	before, err := readProc(c.cmd.Process.Pid)
	if err != nil {
		return
	}
	const n = 100
	for range n {
		if _, err := c.metrics(); err != nil {
			return
		}
	}
	after, err := readProc(c.cmd.Process.Pid)
	if err != nil {
		return
	}
	each := (after.CPUSeconds - before.CPUSeconds) / n
	logf("  the bench's /metrics polling: %d scrapes in the drain, %.2f ms of connector CPU each (100 more after it): about %.2f of its %.2f CPU s",
		scrapes, 1000*each, each*float64(scrapes), cpu)
}
