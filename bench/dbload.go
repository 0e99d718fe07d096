package main

import (
	"context"
	"fmt"
	"time"

	"github.com/go-mysql-org/go-mysql/replication"
)

// What a live run costs the database, attributed to the bench's own
// database so that other work on a shared server does not show up:
//
//   - PostgreSQL: the outbox table's statistics (pg_stat_user_tables) and
//     the WAL records of the bench database, summed with pg_walinspect
//     (records that touch one of its relations, and every record of the
//     transactions that did, commits included).
//   - MariaDB: the relay's own sessions (SHOW SESSION STATUS, reported by
//     the relay child) and the binlog: every event of the transactions
//     that wrote a row of the bench database, read back with go-mysql.

// dbSnapshot is where the server stood before or after a run.
type dbSnapshot struct {
	lsn                                 string // PostgreSQL: flush LSN
	seqScan, seqRead, idxScan, idxFetch int64
	ins, upd, hotUpd, deadTup           int64
	binlogFile                          string // MariaDB
	binlogPos                           uint32
}

// dbLoad is a run's database cost.
type dbLoad struct {
	// Queries are the statements the system under test sent (a relay's
	// exact count; outbox-cdc sends none, it reads the log).
	Queries int64
	// RowsRead and RowsUpdated are the server's count: PostgreSQL table
	// statistics (seq_tup_read + idx_tup_fetch, n_tup_upd), MariaDB the
	// relay sessions' Rows_read and Handler_update.
	RowsRead, RowsUpdated int64
	// Scans are PostgreSQL's seq_scan + idx_scan on the outbox table.
	Scans int64
	// LogBytes are the WAL (PostgreSQL) or binlog (MariaDB) bytes of the
	// bench database in the run, the writers' INSERTs included.
	LogBytes int64
	// LogError says why LogBytes could not be measured.
	LogError string `json:",omitempty"`
}

// enableLoadStats prepares what dbLoad reads: pg_walinspect in the bench's
// own database (dropped with it).
func (be *backend) enableLoadStats(ctx context.Context) error {
	if be.kind != "postgres" {
		return nil
	}
	if _, err := be.db.ExecContext(ctx, "CREATE EXTENSION IF NOT EXISTS pg_walinspect"); err != nil {
		return fmt.Errorf("pg_walinspect: %w (the WAL bytes per row will be missing; install postgresql-contrib)", err)
	}
	return be.db.QueryRowContext(ctx, "SELECT oid FROM pg_database WHERE datname = current_database()").Scan(&be.oid)
}

func (be *backend) snapshot(ctx context.Context) (dbSnapshot, error) {
	var s dbSnapshot
	if be.kind == "mysql" {
		var err error
		s.binlogFile, s.binlogPos, err = masterStatus(ctx, be)
		return s, err
	}
	err := be.db.QueryRowContext(ctx, `SELECT pg_current_wal_flush_lsn()::text,
  coalesce(seq_scan, 0), coalesce(seq_tup_read, 0), coalesce(idx_scan, 0), coalesce(idx_tup_fetch, 0),
  n_tup_ins, n_tup_upd, n_tup_hot_upd, n_dead_tup
FROM pg_stat_user_tables WHERE relname = 'outbox_message'`).Scan(&s.lsn, &s.seqScan, &s.seqRead, &s.idxScan, &s.idxFetch, &s.ins, &s.upd, &s.hotUpd, &s.deadTup)
	return s, err
}

// waitStats lets PostgreSQL's statistics settle: backends flush them at
// most once a second, and at exit.
func (be *backend) waitStats() {
	if be.kind == "postgres" {
		time.Sleep(1500 * time.Millisecond)
	}
}

// load computes the run's cost from the snapshots around it.
func (be *backend) load(ctx context.Context, o *options, a, b dbSnapshot, rc *relayCounts) dbLoad {
	var l dbLoad
	if rc != nil {
		l.Queries = rc.Queries
	}
	if be.kind == "postgres" {
		l.RowsRead = (b.seqRead - a.seqRead) + (b.idxFetch - a.idxFetch)
		l.RowsUpdated = b.upd - a.upd
		l.Scans = (b.seqScan - a.seqScan) + (b.idxScan - a.idxScan)
		if be.oid == 0 {
			l.LogError = "pg_walinspect unavailable"
			return l
		}
		pattern := fmt.Sprintf("%% rel %%/%d/%%", be.oid)
		err := be.db.QueryRowContext(ctx, `WITH r AS (
  SELECT xid, record_length, block_ref FROM pg_get_wal_records_info($1::pg_lsn, $2::pg_lsn)
), x AS (SELECT DISTINCT xid FROM r WHERE xid <> '0' AND block_ref LIKE $3)
SELECT coalesce(sum(record_length), 0) FROM r WHERE block_ref LIKE $3 OR xid IN (SELECT xid FROM x)`, a.lsn, b.lsn, pattern).Scan(&l.LogBytes)
		if err != nil {
			l.LogError = err.Error()
		}
		return l
	}
	if rc != nil {
		l.RowsRead, l.RowsUpdated = rc.SessionRowsRead, rc.SessionRowsUpdated
	}
	n, err := binlogBytes(ctx, o, be.name, a, b)
	if err != nil {
		l.LogError = err.Error()
	}
	l.LogBytes = n
	return l
}

// binlogBytes sums the events of every transaction between two binlog
// positions that wrote a row of schema: GTID, table maps, rows events and
// the XID.
func binlogBytes(ctx context.Context, o *options, schema string, a, b dbSnapshot) (int64, error) {
	var total, cur int64
	ours := false
	_, err := scanBinlog(ctx, o, a.binlogFile, a.binlogPos, b.binlogFile, b.binlogPos, func(ev *replication.BinlogEvent) {
		switch e := ev.Event.(type) {
		case *replication.MariadbGTIDEvent, *replication.GTIDEvent:
			cur, ours = 0, false
		case *replication.TableMapEvent:
			ours = ours || string(e.Schema) == schema
		case *replication.RowsEvent:
			ours = ours || string(e.Table.Schema) == schema
		}
		cur += int64(ev.Header.EventSize)
		if _, ok := ev.Event.(*replication.XIDEvent); ok {
			if ours {
				total += cur
			}
			cur, ours = 0, false
		}
	})
	return total, err
}
