package main

import (
	"context"
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
	"time"

	"github.com/IBM/sarama"
	gomysql "github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kgo"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
	"github.com/outbox-cdc/outbox-cdc/checkpoint"
)

// backlog is a loaded backlog and where it sits in the source's log.
type backlog struct {
	rows int
	// MySQL: binlog coordinates around the load and the GTID position
	// before it (the connector's checkpoint).
	startFile, endFile string
	startPos, endPos   uint32
	startGTID          string
	// PostgreSQL: slots created before the load, and the WAL position
	// after it.
	cdcSlot, rawSlot, pub string
	endLSN                string
	loadSeconds           float64
}

// loadBacklog recreates the table, notes the start position, inserts
// o.rows rows in o.txRows-row transactions with 4 concurrent loaders, and
// notes the end position.
func loadBacklog(ctx context.Context, o *options, be *backend, tag string) (*backlog, error) {
	bl := &backlog{rows: o.rows}
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
		bl.pub, bl.cdcSlot, bl.rawSlot = "bench_"+tag, "bench_"+tag, "bench_"+tag+"_raw"
		if err := be.createSlot(ctx, bl.pub, bl.cdcSlot); err != nil {
			return nil, err
		}
		if err := be.createSlot(ctx, bl.pub, bl.rawSlot); err != nil {
			return nil, err
		}
	}
	start := time.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	stmt := be.insertSQL(o.txRows)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rows := make([]row, o.txRows)
			for {
				first := next.Add(int64(o.txRows)) - int64(o.txRows)
				if first >= int64(o.rows) || ctx.Err() != nil {
					return
				}
				n := min(o.txRows, o.rows-int(first))
				for i := range n {
					rows[i] = makeRow(first+int64(i), o.aggregates, 0)
				}
				q := stmt
				if n != o.txRows {
					q = be.insertSQL(n)
				}
				tx, err := be.db.BeginTx(ctx, nil)
				if err == nil {
					if _, err = tx.ExecContext(ctx, q, rowArgs(rows[:n])...); err != nil {
						tx.Rollback()
					} else {
						err = tx.Commit()
					}
				}
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
		if err := be.db.QueryRowContext(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&bl.endLSN); err != nil {
			return nil, err
		}
	}
	return bl, ctx.Err()
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

// runDrain is scenarios 1, 2 and 5 (drain part).
func runDrain(ctx context.Context, o *options, be *backend, br *broker) (*drainResult, error) {
	logf("%s: loading %d rows in %d-row transactions", be.kind, o.rows, o.txRows)
	bl, err := loadBacklog(ctx, o, be, "drain")
	if err != nil {
		return nil, err
	}
	if be.kind == "postgres" {
		defer be.dropSlot(ctx, bl.cdcSlot)
		defer be.dropSlot(ctx, bl.rawSlot)
		defer be.db.ExecContext(context.WithoutCancel(ctx), "DROP PUBLICATION IF EXISTS "+bl.pub)
	}
	d := &drainResult{Rows: o.rows, LoadSeconds: bl.loadSeconds, LoadAvgBefore: loadAvg()}
	logf("%s: loaded in %.1fs; raw source read", be.kind, bl.loadSeconds)

	if d.RawReadSeconds, d.RawReadRows, err = rawRead(ctx, o, be, bl); err != nil {
		return nil, fmt.Errorf("raw read: %w", err)
	}
	logf("%s: raw read %.2fs (%d rows); raw produce", be.kind, d.RawReadSeconds, d.RawReadRows)
	if d.RawReadRows != o.rows {
		return nil, fmt.Errorf("raw read saw %d rows of %d", d.RawReadRows, o.rows)
	}
	if d.RawProduceFranzSeconds, err = rawProduceFranz(ctx, o, br, "bench.raw.franz."+be.kind); err != nil {
		return nil, fmt.Errorf("raw produce (franz-go): %w", err)
	}
	if d.RawProduceSaramaSeconds, err = rawProduceSarama(ctx, o, br, "bench.raw.sarama."+be.kind); err != nil {
		return nil, fmt.Errorf("raw produce (sarama): %w", err)
	}
	logf("%s: raw produce franz-go %.2fs, sarama %.2fs; draining with outbox-cdc", be.kind, d.RawProduceFranzSeconds, d.RawProduceSaramaSeconds)

	name := "bench-drain-" + be.kind
	if be.kind == "mysql" {
		// Resume just before the backlog: a checkpoint at the GTID position
		// read before the first insert.
		if err := os.MkdirAll(filepath.Join(o.work, name), 0o755); err != nil {
			return nil, err
		}
		cp, err := checkpoint.NewFile(checkpoint.FileConfig{Path: filepath.Join(o.work, name, "checkpoint")}, zerolog.Nop())
		if err != nil {
			return nil, err
		}
		if err := cp.Save(ctx, outboxcdc.MakePosition("mysql", "mariadb-gtid:"+bl.startGTID)); err != nil {
			return nil, err
		}
	}
	c, err := startConnector(o, name, be.sourceYAML(bl.cdcSlot), "bench.drain."+be.kind, br)
	if err != nil {
		return nil, err
	}
	defer c.stop()
	var peak procStats
	for {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		select {
		case <-c.done:
			return nil, fmt.Errorf("connector exited: %v\n%s", c.err, c.tail())
		default:
		}
		n, err := c.metric("outbox_cdc_records_delivered_total")
		if err == nil && int(n) >= o.rows {
			d.DrainSeconds = time.Since(c.started).Seconds()
			break
		}
		if time.Since(c.started) > 10*time.Minute {
			return nil, fmt.Errorf("drain not done after 10 minutes (%v delivered)\n%s", n, c.tail())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if peak, err = readProc(c.cmd.Process.Pid); err != nil {
		return nil, err
	}
	d.CPUSeconds, d.PeakRSSMiB = peak.CPUSeconds, peak.PeakRSSMiB
	// The checkpoint is saved right after the records are counted; check
	// that it covers the backlog.
	time.Sleep(200 * time.Millisecond)
	if saved, err := checkpoint.ReadFile(c.cpPath); err == nil {
		d.Checkpoint = string(saved.Position)
	}
	if err := c.stop(); err != nil {
		return nil, err
	}
	logf("%s: drained %d rows in %.2fs (%.0f rows/s), CPU %.2fs, peak RSS %.1f MiB", be.kind, o.rows, d.DrainSeconds,
		float64(o.rows)/d.DrainSeconds, d.CPUSeconds, d.PeakRSSMiB)
	return d, nil
}

// rawRead reads the backlog's part of the log with a plain client and
// discards it: go-mysql's BinlogSyncer (events read and decoded, rows
// parsed), or pg_recvlogical with pgoutput to /dev/null.
func rawRead(ctx context.Context, o *options, be *backend, bl *backlog) (float64, int, error) {
	if be.kind == "postgres" {
		args := []string{"-d", be.dsn, "--slot", bl.rawSlot, "--start", "--no-loop",
			"-o", "proto_version=1", "-o", "publication_names=" + bl.pub,
			"-E", bl.endLSN, "-s", "1", "-f", "/dev/null"}
		start := time.Now()
		out, err := exec.CommandContext(ctx, "pg_recvlogical", args...).CombinedOutput()
		if err != nil {
			return 0, 0, fmt.Errorf("pg_recvlogical: %v: %s", err, out)
		}
		return time.Since(start).Seconds(), bl.rows, nil // the slot is confirmed up to endLSN now
	}
	cfg, _ := parseMySQLAddr(o.mysqlAddr)
	host, port := splitHostPort(cfg)
	syncer := replication.NewBinlogSyncer(replication.BinlogSyncerConfig{
		ServerID: 0x7f000000 | uint32(time.Now().UnixNano()&0xffff),
		Flavor:   "mariadb",
		Host:     host, Port: port, User: "root",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	defer syncer.Close()
	start := time.Now()
	st, err := syncer.StartSync(gomysql.Position{Name: bl.startFile, Pos: bl.startPos})
	if err != nil {
		return 0, 0, err
	}
	rows, file := 0, bl.startFile
	for {
		ev, err := st.GetEvent(ctx)
		if err != nil {
			return 0, 0, err
		}
		if e, ok := ev.Event.(*replication.RotateEvent); ok {
			// Its LogPos is in the old file: only the name counts.
			if file = string(e.NextLogName); file > bl.endFile {
				break
			}
			continue
		}
		if e, ok := ev.Event.(*replication.RowsEvent); ok && string(e.Table.Schema) == benchName {
			rows += len(e.Rows)
		}
		if file == bl.endFile && ev.Header.LogPos >= bl.endPos {
			break
		}
	}
	return time.Since(start).Seconds(), rows, nil
}

func parseMySQLAddr(dsn string) (string, error) {
	_, rest, ok := strings.Cut(dsn, "tcp(")
	if !ok {
		return "127.0.0.1:3306", nil
	}
	addr, _, _ := strings.Cut(rest, ")")
	return addr, nil
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
	cl, err := kgo.NewClient(kgo.SeedBrokers(br.addr), kgo.AllowAutoTopicCreation(), kgo.MaxBufferedRecords(100_000))
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
	p, err := sarama.NewAsyncProducer([]string{br.addr}, sc)
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
