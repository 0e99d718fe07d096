package binlog

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"
	outboxcdc "github.com/outbox-cdc/outbox-cdc"
	"github.com/outbox-cdc/outbox-cdc/backfill"
	"github.com/rs/zerolog"
)

// positionGoneChoices is what the operator can do when the checkpoint's
// position is not on the server. The connector never picks one itself.
const positionGoneChoices = "restore the missing binlogs, or point source.dsn at the server the checkpoint was written against, and restart; " +
	"or, accepting that the rows committed in the gap are never delivered, move the checkpoint file (checkpoint.path) away " +
	"and restart, which begins where source.start says (latest: from now; earliest: the oldest binlog still on the server)"

const positionGoneHint = "the connector stopped without moving the checkpoint. Choose one: " + positionGoneChoices

// readSettings returns the binlog-related GLOBAL variables, names lower-case
// and values upper-case. The source reads GLOBAL values: they are what a new
// client session (the application writing the outbox) starts with.
func readSettings(ctx context.Context, db *sql.DB) (map[string]string, error) {
	vars := map[string]string{}
	rows, err := db.QueryContext(ctx, "SHOW GLOBAL VARIABLES WHERE Variable_name IN "+
		"('log_bin', 'binlog_format', 'binlog_row_image', 'binlog_row_metadata', 'gtid_mode')")
	if err != nil {
		return nil, classifyConnErr(fmt.Errorf("read binlog settings: %w", err))
	}
	defer rows.Close()
	for rows.Next() {
		var k, v string
		if err := rows.Scan(&k, &v); err != nil {
			return nil, classifyConnErr(fmt.Errorf("read binlog settings: %w", err))
		}
		vars[strings.ToLower(k)] = strings.ToUpper(v)
	}
	if err := rows.Err(); err != nil {
		return nil, classifyConnErr(fmt.Errorf("read binlog settings: %w", err))
	}
	return vars, nil
}

// settingsResults judges the server variables (as readSettings returns
// them). A failed result's Detail says what is set and its Fix the exact
// change; Run refuses to start on any failure.
func settingsResults(vars map[string]string) []outboxcdc.CheckResult {
	var out []outboxcdc.CheckResult
	if v := vars["log_bin"]; v == "ON" || v == "1" {
		out = append(out, outboxcdc.Pass("mysql.log_bin", "ON"))
	} else {
		out = append(out, outboxcdc.Fail("mysql.log_bin", "log_bin is "+orUnset(v),
			"start the server with log_bin=<basename> and a non-zero server_id"))
	}
	want := func(name, value string) {
		if v := vars[name]; v == value {
			out = append(out, outboxcdc.Pass("mysql."+name, v))
		} else {
			out = append(out, outboxcdc.Fail("mysql."+name, name+" is "+orUnset(v),
				"SET GLOBAL "+name+"="+value+" and put "+name+"="+value+" in the server configuration"))
		}
	}
	want("binlog_format", "ROW")
	want("binlog_row_image", "FULL")
	// Not required: without column names the source reads them from
	// information_schema and follows a change only where it can prove
	// which rows it applies to (schema.go).
	switch v := vars["binlog_row_metadata"]; v {
	case "FULL":
		out = append(out, outboxcdc.Pass("mysql.binlog_row_metadata", "FULL: column names in the binlog, every ALTER TABLE on the outbox is followed"))
	default:
		out = append(out, outboxcdc.Pass("mysql.binlog_row_metadata", orUnset(v)+
			": works; an ALTER TABLE on the outbox is followed while the connector is caught up, but rows written before one stop it "+
			"when it restarts behind them; SET GLOBAL binlog_row_metadata=FULL (MySQL 8.0.1+, MariaDB 10.5+) to follow every change"))
	}
	if v, ok := vars["gtid_mode"]; ok {
		detail := v + ": positions are binlog file:offset (a GTID checkpoint needs ON)"
		if v == "ON" {
			detail = "ON: positions are GTID sets (source.gtid: auto)"
		}
		out = append(out, outboxcdc.Pass("mysql.gtid_mode", detail))
	} else {
		out = append(out, outboxcdc.Pass("mysql.gtid_mode", "MariaDB: positions are MariaDB GTIDs (source.gtid: auto)"))
	}
	return out
}

// binlogFile is one row of SHOW BINARY LOGS.
type binlogFile struct {
	name string
	size uint64
}

func binaryLogs(ctx context.Context, db *sql.DB) ([]binlogFile, error) {
	rows, err := db.QueryContext(ctx, "SHOW BINARY LOGS")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return nil, err
	}
	var out []binlogFile
	for rows.Next() {
		var f binlogFile
		dest := make([]any, len(cols))
		dest[0], dest[1] = &f.name, &f.size
		for i := 2; i < len(dest); i++ {
			dest[i] = new(sql.RawBytes)
		}
		if err := rows.Scan(dest...); err != nil {
			return nil, err
		}
		out = append(out, f)
	}
	return out, rows.Err()
}

// goneError is a checkpoint position this server cannot stream from; it
// wraps ErrPositionGone. detail says what is wrong; recovery, when one
// could be computed, is the position on this server that loses nothing
// and sends nothing twice (after a failover to a replica that was
// behind), as the command to run and what it means; choices are the
// other ways out. run and check say the same (advice).
type goneError struct {
	detail   string
	recovery string
	choices  string
}

func (e *goneError) Error() string {
	return ErrPositionGone.Error() + ": " + e.detail + ": the connector stopped without moving the checkpoint. " + e.advice()
}

func (e *goneError) Unwrap() error { return ErrPositionGone }

// advice is what to do, the lossless way first.
func (e *goneError) advice() string {
	if e.recovery == "" {
		return "Choose one: " + e.choices
	}
	return "The lossless way back: " + e.recovery + ". Otherwise choose one: " + e.choices
}

func gone(choices, format string, args ...any) *goneError {
	return &goneError{detail: fmt.Sprintf(format, args...), choices: choices}
}

// failoverChoices are the ways out, beside the computed recovery, when
// the server lacks the checkpoint's last transactions.
const failoverChoices = "if this server is not a promoted replica of the one the checkpoint was written against, point source.dsn at that server and restart; " +
	"or, accepting loss or duplicates, move the checkpoint file (checkpoint.path) away and restart, which begins where source.start says: " +
	"latest skips every row this server wrote since the failover, earliest sends every row still in its binlogs again"

// recoveryCommand is the position command that moves the checkpoint to p.
func recoveryCommand(p Pos) string {
	return "`outbox-cdc position set --config FILE --to " + string(p.Encode()) + " --force`, then restart"
}

// checkPosition verifies that the server still holds the binlog right
// after p, before streaming from it, judging the position as the server
// does when a replica asks to start there (run and check both use it).
// The server itself refuses a purged file or GTID (error 1236), but in
// terms that do not say what to do, and MariaDB accepts a GTID position
// with a replication domain its binlog never had (it streams that domain
// from nowhere). Errors wrap ErrPositionGone (permanent; a *goneError) or
// are connection errors (transient).
func checkPosition(ctx context.Context, db *sql.DB, info *serverInfo, p *Pos) error {
	switch {
	case p.IsMariaDB:
		return checkMariaDBGTID(ctx, db, p.MariaDB)
	case p.MySQLGTID != nil:
		return checkMySQLGTID(ctx, db, p.MySQLGTID)
	}
	files, err := binaryLogs(ctx, db)
	if err != nil {
		return classifyConnErr(fmt.Errorf("SHOW BINARY LOGS: %w", err))
	}
	return checkFilePosition(files, p.File, p.Offset)
}

// checkFilePosition is checkPosition's pure part for file:offset positions.
func checkFilePosition(files []binlogFile, file string, offset uint32) error {
	if len(files) == 0 {
		return gone(positionGoneChoices, "the checkpoint is at %s:%d but the server lists no binary logs", file, offset)
	}
	held := fmt.Sprintf("%s .. %s", files[0].name, files[len(files)-1].name)
	for _, f := range files {
		if f.name != file {
			continue
		}
		if uint64(offset) > f.size {
			return gone(positionGoneChoices, "the checkpoint is at %s:%d, beyond the end of that file on this server (%d bytes): "+
				"the checkpoint was written against another server", file, offset, f.size)
		}
		return nil
	}
	why := "purged (expire_logs_days / binlog_expire_logs_seconds, PURGE BINARY LOGS) while the connector was behind, or written against another server"
	if file > files[len(files)-1].name {
		why = "ahead of this server's binlog: written against another server"
	}
	return gone(positionGoneChoices, "binlog file %s of the checkpoint (%s:%d) is not on the server, which holds %s; it was %s",
		file, file, offset, held, why)
}

// mariaDBHistory is what a MariaDB server holds to judge a replica's GTID
// start position with, read as the server reads it when a replica
// connects (check_slave_start_position and gtid_find_binlog_file in its
// sql_repl.cc).
type mariaDBHistory struct {
	// state is gtid_binlog_state: the last GTID of every (domain,
	// server_id) pair in the binlogs. stateText is the variable as read.
	state     []mysql.MariadbGTID
	stateText string
	// slavePos is gtid_slave_pos: the last GTID per domain the server
	// applied as a replica, which with log_slave_updates off is not in its
	// binlog; the server accepts a replica asking for exactly that one.
	slavePos MariaDBGTIDs
	// oldest is the Gtid_list event at the start of the oldest binlog on
	// the server (the state of everything before it, purged), in the
	// server's order: by domain, the last one logged last within each.
	// nil when unknown. oldestFile names that binlog.
	oldest     []mysql.MariadbGTID
	oldestFile string
}

// last returns the sequence number of the last transaction of server in
// domain in the binlogs.
func (h *mariaDBHistory) last(domain, server uint32) (uint64, bool) {
	for _, g := range h.state {
		if g.DomainID == domain && g.ServerID == server {
			return g.SequenceNumber, true
		}
	}
	return 0, false
}

func (h *mariaDBHistory) hasDomain(domain uint32) bool {
	for _, g := range h.state {
		if g.DomainID == domain {
			return true
		}
	}
	return false
}

// checkMariaDBGTID reads the server's GTID history and judges ckpt
// against it (judgeMariaDBGTID).
func checkMariaDBGTID(ctx context.Context, db *sql.DB, ckpt MariaDBGTIDs) error {
	var h mariaDBHistory
	var slave string
	if err := db.QueryRowContext(ctx, "SELECT @@GLOBAL.gtid_binlog_state, @@GLOBAL.gtid_slave_pos").Scan(&h.stateText, &slave); err != nil {
		return classifyConnErr(fmt.Errorf("read gtid_binlog_state: %w", err))
	}
	var err error
	if h.state, err = parseGTIDList(h.stateText); err != nil {
		return fmt.Errorf("gtid_binlog_state %q: %w", h.stateText, err)
	}
	if h.slavePos, err = ParseMariaDBGTIDs(slave); err != nil {
		return fmt.Errorf("gtid_slave_pos %q: %w", slave, err)
	}
	files, err := binaryLogs(ctx, db)
	if err != nil {
		return classifyConnErr(fmt.Errorf("SHOW BINARY LOGS: %w", err))
	}
	if len(files) > 0 {
		h.oldestFile = files[0].name
		if h.oldest, err = gtidListOf(ctx, db, h.oldestFile); err != nil {
			return err
		}
	}
	return judgeMariaDBGTID(ckpt, &h)
}

// gtidListOf returns the Gtid_list event at the start of binlog file
// (nil if it has none).
func gtidListOf(ctx context.Context, db *sql.DB, file string) ([]mysql.MariadbGTID, error) {
	rows, err := db.QueryContext(ctx, "SHOW BINLOG EVENTS IN '"+strings.ReplaceAll(file, "'", "''")+"' LIMIT 4")
	if err != nil {
		return nil, classifyConnErr(fmt.Errorf("SHOW BINLOG EVENTS IN %s: %w", file, err))
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil || len(cols) < 6 {
		return nil, classifyConnErr(fmt.Errorf("SHOW BINLOG EVENTS IN %s: %d columns, %v", file, len(cols), err))
	}
	for rows.Next() {
		var typ, info string
		dest := make([]any, len(cols))
		for i := range dest {
			dest[i] = new(sql.RawBytes)
		}
		dest[2], dest[5] = &typ, &info
		if err := rows.Scan(dest...); err != nil {
			return nil, classifyConnErr(fmt.Errorf("SHOW BINLOG EVENTS IN %s: %w", file, err))
		}
		if typ == "Gtid_list" {
			l, err := parseGTIDList(strings.Trim(strings.TrimSpace(info), "[]"))
			if err != nil {
				return nil, fmt.Errorf("Gtid_list of %s (%q): %w", file, info, err)
			}
			return l, rows.Err()
		}
	}
	return nil, classifyConnErr(rows.Err())
}

// parseGTIDList reads a MariaDB GTID list in which a domain may appear
// with several servers ("0-1-10,0-2-12,1-1-3": gtid_binlog_state, a
// Gtid_list event), in its order.
func parseGTIDList(s string) ([]mysql.MariadbGTID, error) {
	var out []mysql.MariadbGTID
	for _, part := range strings.Split(s, ",") {
		if part = strings.TrimSpace(part); part == "" {
			continue
		}
		g, err := ParseMariaDBGTIDs(part)
		if err != nil {
			return nil, err
		}
		out = append(out, g...)
	}
	return out, nil
}

// judgeMariaDBGTID is checkMariaDBGTID's pure part: it judges each GTID
// D-S-N of the checkpoint as the server does, by its (domain, server_id)
// pair, never by the highest sequence of the domain (another server's
// transactions with higher numbers do not contain ours):
//
//   - the binlog holds server S's transactions in domain D up to N or
//     beyond, or N is exactly the server's own gtid_slave_pos in D: on the
//     server's history;
//   - domain D is not in the binlog at all: refused, although the server
//     would accept it and fail only at D's next transaction: this server
//     lacks the domain's history;
//   - otherwise (server S's transactions in D end before N, or there are
//     none): refused as the server refuses it ("not in the master's
//     binlog"). The server lacks the checkpoint's last transactions: a
//     failover to a replica that was behind, or another server. The
//     recovery is the last GTID of server S in D this server has (in its
//     binlog or as its gtid_slave_pos): the transactions after it in the
//     checkpoint never reached this server, and everything it has after
//     it is delivered, none twice.
//
// A position on the server's history must then still be in its binlogs
// (purged).
func judgeMariaDBGTID(ckpt MariaDBGTIDs, h *mariaDBHistory) error {
	var behind []mysql.MariadbGTID
	for _, g := range ckpt {
		seq, ok := h.last(g.DomainID, g.ServerID)
		switch {
		case ok && seq >= g.SequenceNumber:
		case slices.Contains(h.slavePos, g):
		case !h.hasDomain(g.DomainID):
			return gone(positionGoneChoices, "the checkpoint's GTID %s is in replication domain %d, which this server's binlog never contained "+
				"(gtid_binlog_state %q): the server lacks the history the checkpoint was written against (a failover to a server outside the topology?)",
				gtidText(g), g.DomainID, h.stateText)
		default:
			behind = append(behind, g)
		}
	}
	if len(behind) > 0 {
		return h.behind(ckpt, behind)
	}
	return h.purged(ckpt)
}

// behind is the refusal of a checkpoint whose GTIDs behind are not on the
// server's history (see judgeMariaDBGTID), with the recovery when this
// server has a transaction of each one's server in its domain.
func (h *mariaDBHistory) behind(ckpt MariaDBGTIDs, behind []mysql.MariadbGTID) error {
	rec := slices.Clone(ckpt)
	var what []string
	recoverable := true
	for _, g := range behind {
		last := mysql.MariadbGTID{DomainID: g.DomainID, ServerID: g.ServerID}
		seq, ok := h.last(g.DomainID, g.ServerID)
		switch i := h.slavePos.index(g.DomainID); {
		case ok:
			last.SequenceNumber = seq
			what = append(what, fmt.Sprintf("server %d's transactions in replication domain %d only up to %s", g.ServerID, g.DomainID, gtidText(last)))
		case i >= 0 && h.slavePos[i].ServerID == g.ServerID && h.slavePos[i].SequenceNumber < g.SequenceNumber:
			// Applied as a replica without log_slave_updates: the server
			// accepts a replica asking for exactly its gtid_slave_pos.
			last = h.slavePos[i]
			what = append(what, fmt.Sprintf("no transaction of server %d in replication domain %d, which it applied only up to %s as a replica (gtid_slave_pos)", g.ServerID, g.DomainID, gtidText(last)))
		default:
			what = append(what, fmt.Sprintf("no transaction of server %d in replication domain %d", g.ServerID, g.DomainID))
			recoverable = false
			continue
		}
		rec.Set(last)
	}
	gtids := make([]string, len(behind))
	for i, g := range behind {
		gtids[i] = gtidText(g)
	}
	e := gone(failoverChoices, "the checkpoint's GTID %s is not in this server's binlog, which holds %s (gtid_binlog_state %q): "+
		"the server lacks the checkpoint's last transactions (a failover to a replica that was behind, or another server)",
		strings.Join(gtids, ", "), strings.Join(what, "; "), h.stateText)
	if !recoverable {
		e.detail += "; no position on this server can be computed from the GTIDs that loses nothing (it is another server, or none of that server's transactions reached it)"
		return e
	}
	p := Pos{MariaDB: rec, IsMariaDB: true}
	if err := h.purged(rec); err != nil {
		e.detail += "; the position that would lose nothing (" + rec.String() + ") is no longer in this server's binlogs either (" + err.(*goneError).detail + ")"
		return e
	}
	e.recovery = "if this server is a promoted replica of the one the checkpoint was written against, " + recoveryCommand(p) +
		": the checkpoint's transactions after " + rec.String() + " never reached this server, and every transaction it has after it (its own since the failover) is delivered, none twice"
	return e
}

// purged refuses pos when transactions after it are gone from the server's
// binlogs: the server finds no binlog to start from when even the oldest
// one's Gtid_list says a GTID of pos, or a domain pos has no position in,
// was logged before it (contains_all_slave_gtid in the server's
// sql_repl.cc).
func (h *mariaDBHistory) purged(pos MariaDBGTIDs) error {
	for i, l := range h.oldest {
		j := pos.index(l.DomainID)
		if j < 0 {
			return gone(positionGoneChoices, "the oldest binlog on the server (%s) starts after transactions of replication domain %d (its Gtid_list holds %s), "+
				"a domain the checkpoint has no position in: they were purged before they were delivered", h.oldestFile, l.DomainID, gtidText(l))
		}
		c := pos[j]
		if c.ServerID != l.ServerID || c.SequenceNumber > l.SequenceNumber {
			continue
		}
		if c.SequenceNumber < l.SequenceNumber || i+1 < len(h.oldest) && h.oldest[i+1].DomainID == l.DomainID {
			return gone(positionGoneChoices, "the transactions after the checkpoint's GTID %s were purged: the oldest binlog on the server (%s) starts after %s",
				gtidText(c), h.oldestFile, gtidList(h.oldest))
		}
	}
	return nil
}

func gtidText(g mysql.MariadbGTID) string {
	return fmt.Sprintf("%d-%d-%d", g.DomainID, g.ServerID, g.SequenceNumber)
}

func gtidList(l []mysql.MariadbGTID) string {
	s := make([]string, len(l))
	for i, g := range l {
		s[i] = gtidText(g)
	}
	return strings.Join(s, ",")
}

// checkMySQLGTID: the server must have executed everything in the
// checkpoint (else it lacks our history) and still hold everything after
// it (gtid_purged must be inside the checkpoint).
func checkMySQLGTID(ctx context.Context, db *sql.DB, ckpt *mysql.MysqlGTIDSet) error {
	read := func(name string) (*mysql.MysqlGTIDSet, error) {
		var v string
		if err := db.QueryRowContext(ctx, "SELECT @@GLOBAL."+name).Scan(&v); err != nil {
			return nil, classifyConnErr(fmt.Errorf("read %s: %w", name, err))
		}
		set, err := mysql.ParseMysqlGTIDSet(strings.Join(strings.Fields(v), ""))
		if err != nil {
			return nil, fmt.Errorf("%s %q: %w", name, v, err)
		}
		return set.(*mysql.MysqlGTIDSet), nil
	}
	executed, err := read("gtid_executed")
	if err != nil {
		return err
	}
	purged, err := read("gtid_purged")
	if err != nil {
		return err
	}
	return judgeMySQLGTID(ckpt, executed, purged)
}

// judgeMySQLGTID is checkMySQLGTID's pure part, by GTID set as the server
// judges a replica's set (by server UUID and transaction number): the
// server refuses a replica that has transactions it never executed, and
// one that lacks transactions it purged. In the first case, after a
// failover to a replica that was behind, the recovery is the part of the
// checkpoint the server executed: the server then sends exactly what it
// executed beyond it.
func judgeMySQLGTID(ckpt, executed, purged *mysql.MysqlGTIDSet) error {
	if !executed.Contain(ckpt) {
		missing := gtidMinus(ckpt, executed)
		rec := gtidMinus(ckpt, missing)
		e := gone(failoverChoices, "the checkpoint's GTID set contains %s, which this server never executed (gtid_executed %s): "+
			"the server lacks the checkpoint's last transactions (a failover to a replica that was behind, or another server)", missing, executed)
		switch {
		case rec.String() == "":
			e.detail += "; it executed none of the checkpoint's transactions: it is another server, and no position on it loses nothing"
		case !rec.Contain(purged):
			e.detail += "; the position that would lose nothing (" + rec.String() + ") is no longer in this server's binlogs either (gtid_purged " + purged.String() + ")"
		default:
			p := Pos{MySQLGTID: rec}
			e.recovery = "if this server is a promoted replica of the one the checkpoint was written against, " + recoveryCommand(p) +
				": " + missing.String() + " never reached this server, and every transaction it executed beyond the rest of the checkpoint is delivered, none twice"
		}
		return e
	}
	if !ckpt.Contain(purged) {
		gone := gtidMinus(purged, ckpt)
		return &goneError{detail: fmt.Sprintf("the server purged %s, which comes after the checkpoint and was never delivered (gtid_purged %s)", gone, purged),
			choices: positionGoneChoices}
	}
	return nil
}

// gtidMinus returns the transactions of a that are not in b, as a new
// set without empty entries (go-mysql's MySQL GTID set has no difference
// since v1.15).
func gtidMinus(a, b *mysql.MysqlGTIDSet) *mysql.MysqlGTIDSet {
	out := mysql.NewMysqlGTIDSet()
	for sid, tags := range *a {
		for tag, have := range tags {
			rest := intervalsMinus(have, (*b)[sid][tag])
			if len(rest) == 0 {
				continue
			}
			if out[sid] == nil {
				out[sid] = map[mysql.Tag]mysql.IntervalSlice{}
			}
			out[sid][tag] = rest
		}
	}
	return &out
}

// intervalsMinus returns the numbers of a that are not in b. Intervals are
// [Start, Stop); both inputs are normalized first (sorted, disjoint).
func intervalsMinus(a, b mysql.IntervalSlice) mysql.IntervalSlice {
	a, b = slices.Clone(a).Normalize(), slices.Clone(b).Normalize()
	var out mysql.IntervalSlice
	j := 0
	for _, iv := range a {
		start := iv.Start
		for j < len(b) && b[j].Stop <= start {
			j++
		}
		for k := j; k < len(b) && b[k].Start < iv.Stop; k++ {
			if b[k].Start > start {
				out = append(out, mysql.Interval{Start: start, Stop: b[k].Start})
			}
			start = max(start, b[k].Stop)
		}
		if start < iv.Stop {
			out = append(out, mysql.Interval{Start: start, Stop: iv.Stop})
		}
	}
	return out
}

// Check is the preflight for `outbox-cdc check`: it connects with cfg's DSN
// and reports the binlog settings, the privileges the source uses, the
// outbox table and its role columns, and whether from (the checkpoint, may
// be zero) can still be resumed on this server. It never registers as a
// replica, so it does not disturb a running connector. name is the
// connector's name (the Postgres source's Check takes the same arguments).
func Check(ctx context.Context, cfg Config, name string, cols outboxcdc.Columns, from outboxcdc.Position) []outboxcdc.CheckResult {
	s, err := New(cfg, name, cols, zerolog.Nop(), nil, nil)
	if err != nil {
		return []outboxcdc.CheckResult{outboxcdc.Fail("mysql.config", err.Error(), "fix the source section of the configuration")}
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	db := s.openDB() // with source.tls applied
	defer db.Close()
	var version string
	if err := db.QueryRowContext(ctx, "SELECT VERSION()").Scan(&version); err != nil {
		return []outboxcdc.CheckResult{connectResult(s.redacted(), classifyConnErr(err))}
	}
	out := []outboxcdc.CheckResult{outboxcdc.Pass("mysql.connect", s.redacted()+", "+version)}
	info := serverInfo{version: version, flavor: mysql.MySQLFlavor}
	if strings.Contains(strings.ToLower(version), "mariadb") {
		info.flavor = mysql.MariaDBFlavor
	}

	vars, err := readSettings(ctx, db)
	if err != nil {
		out = append(out, outboxcdc.Fail("mysql.settings", err.Error(), "grant the user access to SHOW GLOBAL VARIABLES"))
	} else {
		out = append(out, settingsResults(vars)...)
		info.gtidMode = vars["gtid_mode"]
		info.rowMetadataFull = vars["binlog_row_metadata"] == "FULL"
	}

	out = append(out, grantResult(ctx, db))
	if _, err := binaryLogs(ctx, db); err != nil {
		out = append(out, outboxcdc.Fail("mysql.privilege.replication_client", "SHOW BINARY LOGS failed: "+err.Error(),
			"GRANT REPLICATION CLIENT ON *.* TO <user> (MariaDB 10.5+: BINLOG MONITOR)"))
	} else {
		out = append(out, outboxcdc.Pass("mysql.privilege.replication_client", "SHOW BINARY LOGS works"))
	}

	if s.multi() {
		if found, _, err := s.tablesColumns(ctx, db); err != nil {
			out = append(out, outboxcdc.Fail("mysql.table", strings.TrimPrefix(err.Error(), ErrTable.Error()+": "),
				"create the outbox tables with the route's columns (route.tables for tables laid out differently), or fix source.tables"))
		} else {
			out = append(out, outboxcdc.Pass("mysql.table", fmt.Sprintf("%d table(s) match %s and have their role columns", len(found), s.patternsText())))
		}
	} else if _, _, err := s.tableColumns(ctx, db); err != nil {
		out = append(out, outboxcdc.Fail("mysql.table", strings.TrimPrefix(err.Error(), ErrTable.Error()+": "),
			"create the outbox table with the route preset's columns, or fix source.table / route"))
	} else {
		out = append(out, outboxcdc.Pass("mysql.table", s.qualifiedTable+" has the role columns "+
			strings.Join([]string{cols.MessageID, cols.AggregateType, cols.AggregateID, cols.EventType, cols.Payload}, ", ")))
		if _, err := db.ExecContext(ctx, "SELECT 1 FROM `"+strings.ReplaceAll(s.db, "`", "``")+"`.`"+
			strings.ReplaceAll(s.table, "`", "``")+"` LIMIT 0"); err != nil {
			out = append(out, outboxcdc.Fail("mysql.privilege.select", err.Error(), "GRANT SELECT ON "+s.qualifiedTable+" TO <user>"))
		} else {
			out = append(out, outboxcdc.Pass("mysql.privilege.select", "SELECT on "+s.qualifiedTable))
		}
	}

	out = append(out, positionResult(ctx, db, &info, cfg, from))
	return out
}

// connectResult is the failure of the first query: the fix is the
// remedy of the error's cause (a wrong password, a database the user may
// not use, a certificate source.tls does not accept), else the checks of
// a connection that did not get through.
func connectResult(dsn string, err error) outboxcdc.CheckResult {
	fix := outboxcdc.Hint(err)
	if fix == "" {
		fix = "check the host and port in source.dsn and that the server is up and reachable from here"
	}
	return outboxcdc.Fail("mysql.connect", dsn+": "+outboxcdc.Cause(err), fix)
}

// grantResult looks for REPLICATION SLAVE among the global grants of the
// current user (directly or through ALL PRIVILEGES). Privileges granted
// only through a role that is not the default role are not seen.
func grantResult(ctx context.Context, db *sql.DB) outboxcdc.CheckResult {
	const name, fix = "mysql.privilege.replication_slave", "GRANT REPLICATION SLAVE ON *.* TO <user>"
	rows, err := db.QueryContext(ctx, "SHOW GRANTS FOR CURRENT_USER()")
	if err != nil {
		return outboxcdc.Fail(name, "SHOW GRANTS failed: "+err.Error(), fix)
	}
	defer rows.Close()
	var grants []string
	for rows.Next() {
		var g string
		if err := rows.Scan(&g); err != nil {
			return outboxcdc.Fail(name, "SHOW GRANTS failed: "+err.Error(), fix)
		}
		grants = append(grants, g)
	}
	if err := rows.Err(); err != nil {
		return outboxcdc.Fail(name, "SHOW GRANTS failed: "+err.Error(), fix)
	}
	if hasGlobalPrivilege(grants, "REPLICATION SLAVE") {
		return outboxcdc.Pass(name, "granted")
	}
	return outboxcdc.Fail(name, "SHOW GRANTS lists no REPLICATION SLAVE (or ALL PRIVILEGES) ON *.*", fix)
}

// hasGlobalPrivilege reports whether one of the SHOW GRANTS lines grants
// priv (or ALL PRIVILEGES) ON *.*.
func hasGlobalPrivilege(grants []string, priv string) bool {
	for _, g := range grants {
		u := strings.ToUpper(g)
		if !strings.HasPrefix(u, "GRANT ") {
			continue
		}
		privs, on, ok := strings.Cut(u[len("GRANT "):], " ON ")
		if !ok || !strings.HasPrefix(strings.TrimSpace(on), "*.*") {
			continue
		}
		for _, p := range strings.Split(privs, ",") {
			p = strings.TrimSpace(p)
			if p == priv || p == "ALL PRIVILEGES" || p == "ALL" {
				return true
			}
		}
	}
	return false
}

// positionResult says whether the checkpoint can be resumed here.
func positionResult(ctx context.Context, db *sql.DB, info *serverInfo, cfg Config, from outboxcdc.Position) outboxcdc.CheckResult {
	const name = "mysql.position"
	if from.IsZero() {
		return outboxcdc.Pass(name, "no checkpoint: a first run starts at the server's "+cfg.Start+" position (source.start)")
	}
	if st, err := backfill.Parse(from, Kind); err == nil {
		from = st.StreamPosition(Kind) // mid-backfill: it streams from here next (pending.go)
	}
	p, err := ParsePosition(from)
	if err != nil {
		return outboxcdc.Fail(name, err.Error(), "point checkpoint.path at this connector's own checkpoint")
	}
	p = p.ReadFrom() // a restart point (an undecided XA transaction, txn.go) is where reading begins
	if err := info.accepts(&p); err != nil {
		return outboxcdc.Fail(name, err.Error(), "choose one: "+positionGoneChoices)
	}
	if err := checkPosition(ctx, db, info, &p); err != nil {
		var ge *goneError
		if errors.As(err, &ge) {
			return outboxcdc.Fail(name, ErrPositionGone.Error()+": "+ge.detail, ge.advice())
		}
		return outboxcdc.Fail(name, err.Error(), "check the connection to the server")
	}
	return outboxcdc.Pass(name, "the checkpoint "+p.String()+" is still on the server")
}
