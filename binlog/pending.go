package binlog

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/go-mysql-org/go-mysql/mysql"
	outboxcdc "github.com/outbox-cdc/outbox-cdc"
	"github.com/outbox-cdc/outbox-cdc/backfill"
)

// Pending backfill (source.start: pending), MySQL/MariaDB.
//
// # The seam
//
// The rows are read inside a REPEATABLE READ transaction opened with
// START TRANSACTION WITH CONSISTENT SNAPSHOT, and streaming starts at a
// binlog position P that is consistent with that snapshot: every
// transaction visible in the snapshot is in the binlog before P, and every
// transaction that commits after the snapshot is written after P. So each
// pending row is read exactly once (it is in the snapshot, not after P) and
// each row committed after the snapshot is streamed exactly once (it is
// after P, not in the snapshot). No deduplication is needed.
//
//   - MariaDB: the server takes the snapshot and the binlog position
//     together (binlog group commit orders the binlog and InnoDB commits,
//     and the consistent snapshot records the binlog file and offset it
//     corresponds to); SHOW STATUS LIKE 'binlog_snapshot_%' in the
//     snapshot's transaction returns them. With GTIDs the position is
//     BINLOG_GTID_POS(file, offset). No lock is taken. Tested on MariaDB
//     10.11 with a writer committing outbox rows throughout the read
//     (test/e2e/pending_test.go).
//   - MySQL: binlog_snapshot_* does not exist, so the position is read
//     under FLUSH TABLES WITH READ LOCK (no commit can happen while it is
//     held), the snapshot is opened, and the lock is released at once
//     (what mysqldump --single-transaction --source-data does). This needs
//     the RELOAD privilege and blocks writes for a few milliseconds. Not
//     tested here (no MySQL server in CI).
//
// # Restart
//
// Each batch of rows is one synthetic transaction whose end is the pending
// position (backfill package): last key published, highest pending key of
// the first snapshot (high), and P. The first such position (nothing
// published yet) is saved once the snapshot is open, before a row is read
// (backfill.Loop.Started), so even a crash before the first batch is
// checkpointed resumes this backfill. After a crash the backfill resumes in a
// fresh snapshot with the rows whose key is in (last, high] and match the
// WHERE, then streams from P. A row committed after P with a key at most
// high (a transaction that took its AUTO_INCREMENT id before the first
// snapshot but committed after it) is then published by the resumed read
// and again by the stream: the only duplicates beyond the usual
// at-least-once batch, a handful at most. Nothing is skipped: a pending row
// is still pending (the relay is stopped and mark_sent marks only
// checkpointed rows) and every row committed after the first snapshot is
// after P.
//
// The snapshot's transaction stays open until the last row is read, which
// holds InnoDB purge back for that long.

// backfillFirst runs the backfill (backfill.Loop) when the run starts
// without a checkpoint and source.start is pending, or from a checkpoint
// in the pending form. It sets *resume to the stream position. Transient
// failures are retried from the last batch sent.
func (s *Source) backfillFirst(ctx context.Context, db *sql.DB, resume *outboxcdc.Position, out chan<- outboxcdc.Tx) error {
	l := s.rc.Backfill(Kind, s.cfg.Common, s.cfg.ProgressInterval,
		func(p outboxcdc.Position) error {
			_, err := ParsePosition(p)
			return err
		},
		func(ctx context.Context, st **backfill.State) (backfill.Snapshot, error) {
			return s.openPending(ctx, db, st)
		},
		s.saveStart)
	pos, err := l.Run(ctx, *resume, out)
	switch {
	case ctx.Err() != nil:
		s.setReady(errors.New("binlog source stopped"))
		return ctx.Err()
	case err != nil:
		err = fmt.Errorf("mysql source: pending backfill: %w", err)
		s.setReady(err)
		return err
	}
	*resume = pos
	return nil
}

// pendingSnapshot is one attempt's REPEATABLE READ snapshot of the outbox
// table (backfill.Snapshot).
type pendingSnapshot struct {
	s    *Source
	conn *sql.Conn
	q    string
	cols pendingCols
}

func (p *pendingSnapshot) Read(ctx context.Context, st backfill.State, limit int) ([]backfill.Row, error) {
	return p.s.readPending(ctx, p.conn, p.q, p.cols, st, limit)
}

func (p *pendingSnapshot) Finish(_ context.Context, st backfill.State, total int) error {
	p.s.log.Info().Int("rows", total).Str("stream_position", st.Stream).Msg("pending backfill done; streaming")
	return nil
}

// Count counts the pending rows after st.Last, in the snapshot.
func (p *pendingSnapshot) Count(ctx context.Context, st backfill.State) (int64, error) {
	cfg := p.s.cfg.Pending
	q := "SELECT COUNT(*) FROM " + p.s.quotedTable() + " WHERE (" + cfg.Where + ") AND " +
		quoteIdent(cfg.Key) + " > ? AND " + quoteIdent(cfg.Key) + " <= ?"
	var n int64
	if err := p.conn.QueryRowContext(ctx, q, st.Last, st.High).Scan(&n); err != nil {
		return 0, p.s.pendingQueryErr(err)
	}
	return n, nil
}

func (p *pendingSnapshot) Close() {
	p.conn.ExecContext(context.Background(), "ROLLBACK")
	p.conn.Close()
}

// openPending opens the snapshot the pending rows are read in. *st is nil
// for a first backfill; it is set once the stream position is known.
func (s *Source) openPending(ctx context.Context, db *sql.DB, st **backfill.State) (_ backfill.Snapshot, err error) {
	info, err := s.inspect(ctx, db)
	if err != nil {
		return nil, err
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		return nil, classifyConnErr(err)
	}
	snap := &pendingSnapshot{s: s, conn: conn}
	defer func() {
		if err != nil {
			snap.Close()
		}
	}()
	for _, q := range []string{
		"SET SESSION time_zone = '+00:00'", // TIMESTAMP columns render as the binlog does (UTC)
		"SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ",
	} {
		if _, err := conn.ExecContext(ctx, q); err != nil {
			return nil, classifyConnErr(fmt.Errorf("%s: %w", q, err))
		}
	}
	cfg := s.cfg.Pending
	if *st == nil {
		pos, err := s.snapshotPosition(ctx, db, conn, info)
		if err != nil {
			return nil, err
		}
		var high sql.NullInt64
		q := "SELECT MAX(" + quoteIdent(cfg.Key) + ") FROM " + s.quotedTable() + " WHERE (" + cfg.Where + ")"
		if err := conn.QueryRowContext(ctx, q).Scan(&high); err != nil {
			return nil, s.pendingQueryErr(err)
		}
		if !high.Valid {
			high.Int64 = -1 << 63
		}
		*st = &backfill.State{Last: -1 << 63, High: high.Int64, Stream: pos.Encode().Body()}
		s.log.Info().Str("position", pos.String()).Int64("high_key", high.Int64).Str("where", cfg.Where).
			Msg("pending backfill: snapshot taken; publishing the pending rows, then streaming from its position")
	} else {
		if _, err := conn.ExecContext(ctx, "START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY"); err != nil {
			return nil, classifyConnErr(fmt.Errorf("start snapshot: %w", err))
		}
		s.log.Info().Int64("after_key", (*st).Last).Int64("high_key", (*st).High).Str("stream_position", (*st).Stream).
			Msg("pending backfill: resuming after the last checkpointed row")
	}
	snap.cols = s.pendingColumns(info.columns)
	snap.q = "SELECT " + strings.Join(snap.cols.selects, ", ") + " FROM " + s.quotedTable() + " WHERE (" + cfg.Where + ") AND " +
		quoteIdent(cfg.Key) + " > ? AND " + quoteIdent(cfg.Key) + " <= ? ORDER BY " + quoteIdent(cfg.Key) + " LIMIT ?"
	// Connected and reading: no longer "connecting", not yet streaming.
	s.setReady(errors.New("binlog source: publishing pending rows (source.start: pending)"))
	return snap, nil
}

// snapshotPosition opens the consistent snapshot on conn and returns the
// binlog position that matches it (see the seam above).
func (s *Source) snapshotPosition(ctx context.Context, db *sql.DB, conn *sql.Conn, info serverInfo) (Pos, error) {
	gtid := info.useGTID(s.cfg)
	if info.flavor == mysql.MariaDBFlavor {
		if _, err := conn.ExecContext(ctx, "START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY"); err != nil {
			return Pos{}, classifyConnErr(fmt.Errorf("start consistent snapshot: %w", err))
		}
		var name, file string
		var off uint32
		if err := conn.QueryRowContext(ctx, "SHOW STATUS LIKE 'binlog_snapshot_file'").Scan(&name, &file); err != nil {
			return Pos{}, classifyConnErr(fmt.Errorf("binlog_snapshot_file: %w", err))
		}
		if err := conn.QueryRowContext(ctx, "SHOW STATUS LIKE 'binlog_snapshot_position'").Scan(&name, &off); err != nil {
			return Pos{}, classifyConnErr(fmt.Errorf("binlog_snapshot_position: %w", err))
		}
		if file == "" {
			return Pos{}, fmt.Errorf("%w: binlog_snapshot_file is empty: is log_bin on?", ErrServerSettings)
		}
		if !gtid {
			return Pos{File: file, Offset: off}, nil
		}
		var v sql.NullString
		if err := conn.QueryRowContext(ctx, "SELECT BINLOG_GTID_POS(?, ?)", file, off).Scan(&v); err != nil {
			return Pos{}, classifyConnErr(fmt.Errorf("BINLOG_GTID_POS(%s, %d): %w", file, off, err))
		}
		if !v.Valid {
			return Pos{}, fmt.Errorf("BINLOG_GTID_POS(%s, %d) is NULL", file, off)
		}
		g, err := ParseMariaDBGTIDs(v.String)
		if err != nil {
			return Pos{}, err
		}
		return Pos{MariaDB: g, IsMariaDB: true}, nil
	}
	// MySQL: no commit can happen under the global read lock, so the
	// position read under it matches the snapshot opened under it.
	if _, err := conn.ExecContext(ctx, "FLUSH TABLES WITH READ LOCK"); err != nil {
		return Pos{}, classifyConnErr(fmt.Errorf("FLUSH TABLES WITH READ LOCK (source.start: pending on MySQL needs the RELOAD privilege): %w", err))
	}
	unlock := func() { conn.ExecContext(context.Background(), "UNLOCK TABLES") }
	if _, err := conn.ExecContext(ctx, "START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY"); err != nil {
		unlock()
		return Pos{}, classifyConnErr(fmt.Errorf("start consistent snapshot: %w", err))
	}
	var pos Pos
	var err error
	if gtid {
		pos, err = mysqlGTIDVar(ctx, db, "gtid_executed")
	} else {
		var file string
		var off uint32
		file, off, err = binlogStatus(ctx, db)
		pos = Pos{File: file, Offset: off}
	}
	unlock()
	return pos, err
}

type pendingCols struct {
	selects []string
	extra   []string // names of the extra columns selected, in order
}

// pendingColumns selects the key, the five role columns and the route's
// extra columns that the table has.
func (s *Source) pendingColumns(table []schemaColumn) pendingCols {
	c := pendingCols{}
	for _, n := range []string{s.cfg.Pending.Key, s.cols.MessageID, s.cols.AggregateType, s.cols.AggregateID, s.cols.EventType, s.cols.Payload} {
		c.selects = append(c.selects, quoteIdent(n))
	}
	for _, name := range s.cols.Extra {
		for _, tc := range table {
			if strings.EqualFold(tc.Name, name) {
				c.selects = append(c.selects, quoteIdent(tc.Name))
				c.extra = append(c.extra, name)
				break
			}
		}
	}
	return c
}

// readPending reads the next batch after st.Last.
func (s *Source) readPending(ctx context.Context, conn *sql.Conn, q string, cols pendingCols, st backfill.State, limit int) ([]backfill.Row, error) {
	rows, err := conn.QueryContext(ctx, q, st.Last, st.High, limit)
	if err != nil {
		return nil, s.pendingQueryErr(err)
	}
	defer rows.Close()
	types, err := rows.ColumnTypes()
	if err != nil {
		return nil, classifyConnErr(err)
	}
	n := len(cols.selects)
	raw := make([]sql.RawBytes, n)
	dest := make([]any, n)
	for i := range raw {
		dest[i] = &raw[i]
	}
	var out []backfill.Row
	for rows.Next() {
		if err := rows.Scan(dest...); err != nil {
			return nil, classifyConnErr(err)
		}
		var key int64
		if _, err := fmt.Sscan(string(raw[0]), &key); err != nil {
			return nil, fmt.Errorf("%w: source.pending.key %s must be an integer column (got %q)", ErrTable, s.cfg.Pending.Key, raw[0])
		}
		ev := outboxcdc.Event{
			MessageID:     string(raw[1]),
			AggregateType: string(raw[2]),
			AggregateID:   string(raw[3]),
			EventType:     string(raw[4]),
			Payload:       cloneBytes(raw[5]),
		}
		for i, name := range cols.extra {
			v := raw[6+i]
			if v == nil {
				ev.Extra = append(ev.Extra, outboxcdc.Column{Name: name, Null: true})
				continue
			}
			ev.Extra = append(ev.Extra, outboxcdc.Column{Name: name, Value: renderText(v, types[6+i].DatabaseTypeName())})
		}
		ev.Origin = fmt.Sprintf("pending backfill %s.%s %s=%d", s.db, s.table, s.cfg.Pending.Key, key)
		out = append(out, backfill.Row{Key: key, Event: ev})
	}
	if err := rows.Err(); err != nil {
		return nil, classifyConnErr(err)
	}
	return out, nil
}

// cloneBytes copies a scanned value: nil stays nil (SQL NULL), an empty
// value becomes an empty non-nil slice.
func cloneBytes(b sql.RawBytes) []byte {
	if b == nil {
		return nil
	}
	return append([]byte{}, b...)
}

// renderText renders a column read as text the way the binlog decoder
// renders it (see render): DATETIME as 2006-01-02T15:04:05[.ffffff],
// TIMESTAMP as RFC 3339 UTC (the session's time_zone is UTC), BIT as its
// unsigned decimal value; everything else (DECIMAL, ENUM and SET labels,
// BINARY with its padding, JSON) as the server's text.
func renderText(v []byte, dbType string) []byte {
	switch dbType {
	case "DATETIME":
		return normDatetime(string(v), false)
	case "TIMESTAMP":
		return normDatetime(string(v), true)
	case "BIT":
		if len(v) <= 8 {
			var x uint64
			for _, c := range v {
				x = x<<8 | uint64(c)
			}
			return strconv.AppendUint(nil, x, 10)
		}
	}
	return append([]byte{}, v...)
}

func (s *Source) pendingQueryErr(err error) error {
	if code, _ := serverCode(err); code == 1064 || code == 1054 {
		return fmt.Errorf("%w: source.pending.where %q or source.pending.key %q does not work on %s: %v",
			ErrTable, s.cfg.Pending.Where, s.cfg.Pending.Key, s.qualifiedTable, err)
	}
	return classifyConnErr(fmt.Errorf("read pending rows of %s: %w", s.qualifiedTable, err))
}

func (s *Source) quotedTable() string { return quoteIdent(s.db) + "." + quoteIdent(s.table) }

func quoteIdent(s string) string { return "`" + strings.ReplaceAll(s, "`", "``") + "`" }
