package main

import (
	"context"
	"fmt"
	"time"

	"github.com/go-mysql-org/go-mysql/replication"
)

// runBigTx is scenario 6: one source transaction of o.bigRows rows with
// ~o.bigRowBytes payloads (1,000,000 × 1 KiB = 1 GB of outbox data by
// default), drained at-least-once and exactly-once, each with a fresh
// broker, reporting peak RSS and drain rate. A run that fails (a connector
// that runs out of memory, stalls or stops) is reported with its error.
//
// It is heavy: ~1 GB of table, the same again in the binlog or WAL, and
// the broker holds every record in memory. The table is dropped with the
// database afterwards; MariaDB's binary log keeps the transaction until
// the server purges it (bench/README.md says how to reclaim it).
func runBigTx(ctx context.Context, o *options, be *backend) (*bigTxResult, error) {
	logf("%s: loading one transaction of %d rows with ~%d-byte payloads", be.kind, o.bigRows, o.bigRowBytes)
	bl, err := loadBacklog(ctx, be, loadPlan{rows: o.bigRows, txRows: 0, stmtRows: 1000, rowBytes: o.bigRowBytes, loaders: 1, aggregates: o.aggregates, tag: "bigtx", noAnnotate: !o.bigAnnotate})
	if err != nil {
		return nil, err
	}
	defer bl.release(ctx, be)
	res := &bigTxResult{Rows: o.bigRows, RowBytes: o.bigRowBytes, LoadSeconds: bl.loadSeconds}
	var size int64
	if be.kind == "mysql" {
		be.db.QueryRowContext(ctx, "SELECT coalesce(sum(length(payload)), 0) FROM outbox_message").Scan(&size)
	} else {
		be.db.QueryRowContext(ctx, "SELECT coalesce(sum(octet_length(payload::text)), 0) FROM outbox_message").Scan(&size)
	}
	res.PayloadBytes = size
	logf("%s: loaded %d rows, %.0f MB of payload, in %.1fs", be.kind, o.bigRows, float64(size)/1e6, bl.loadSeconds)
	if be.kind == "postgres" {
		if res.LogBytes, err = bl.walBytes(ctx, be); err != nil {
			res.LogError = err.Error()
		} else {
			logf("%s: the server's WAL advanced by %.2f GB while it was written; the server recycles it once the bench's slots are dropped", be.kind, float64(res.LogBytes)/1e9)
		}
	}
	// What a plain client takes to read the same transaction: PostgreSQL
	// decodes all of it on the server (spilling to disk) before the first
	// row leaves, so this is the ceiling of the drain rate. On MariaDB the
	// same pass measures the transaction's size in the binary log.
	if ctx.Err() == nil {
		var f func(*replication.BinlogEvent)
		var span *int64
		if be.kind == "mysql" {
			f, span = txSpans(be.name)
		}
		secs, rows, err := rawRead(ctx, o, be, bl, f, nil)
		switch {
		case err != nil:
			res.RawReadError = err.Error()
			logf("%s: raw read failed: %v", be.kind, err)
		case rows != o.bigRows:
			res.RawReadError = fmt.Sprintf("raw read saw %d rows of %d", rows, o.bigRows)
			logf("%s: %s", be.kind, res.RawReadError)
		default:
			res.RawReadSeconds = secs
			logf("%s: raw read %.2fs (%.0f rows/s)", be.kind, secs, float64(rows)/secs)
		}
		if span != nil {
			if err != nil {
				res.LogError = "raw read failed"
			} else {
				res.LogBytes = *span
				logf("%s: the transaction takes %.2f GB of the binary log (%s:%d to %s:%d); it stays until the server purges it (bench/README.md)",
					be.kind, float64(res.LogBytes)/1e9, bl.startFile, bl.startPos, bl.endFile, bl.endPos)
			}
		}
	}
	for _, m := range []drainMode{modeALO, modeEOS} {
		if ctx.Err() != nil {
			return res, ctx.Err()
		}
		res.Runs = append(res.Runs, drainOnce(ctx, o, be, bl, m, "bigtx", 30*time.Minute))
	}
	// Give the space back now rather than at the end of the bench.
	if _, err := be.db.ExecContext(ctx, "TRUNCATE outbox_message"); err != nil {
		return res, fmt.Errorf("truncate: %w", err)
	}
	return res, nil
}
