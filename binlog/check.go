package binlog

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
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

// checkPosition verifies that the server still holds the binlog right
// after p, before streaming from it. The server itself refuses a purged
// file or GTID (error 1236), but MariaDB silently accepts a GTID position
// with a replication domain its binlog never had (it streams that domain
// from nowhere and the others from the start), and both report in terms
// that do not say what to do. Errors wrap ErrPositionGone (permanent) or
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
		return fmt.Errorf("%w: the checkpoint is at %s:%d but the server lists no binary logs: %s", ErrPositionGone, file, offset, positionGoneHint)
	}
	held := fmt.Sprintf("%s .. %s", files[0].name, files[len(files)-1].name)
	for _, f := range files {
		if f.name != file {
			continue
		}
		if uint64(offset) > f.size {
			return fmt.Errorf("%w: the checkpoint is at %s:%d, beyond the end of that file on this server (%d bytes): "+
				"the checkpoint was written against another server: %s", ErrPositionGone, file, offset, f.size, positionGoneHint)
		}
		return nil
	}
	why := "purged (expire_logs_days / binlog_expire_logs_seconds, PURGE BINARY LOGS) while the connector was behind, or written against another server"
	if file > files[len(files)-1].name {
		why = "ahead of this server's binlog: written against another server"
	}
	return fmt.Errorf("%w: binlog file %s of the checkpoint (%s:%d) is not on the server, which holds %s; it was %s: %s",
		ErrPositionGone, file, file, offset, held, why, positionGoneHint)
}

// checkMariaDBGTID compares a MariaDB GTID position with what the server's
// binlogs hold: every domain of the checkpoint must be in gtid_binlog_state
// and not ahead of it, and not older than the oldest binlog's start state.
func checkMariaDBGTID(ctx context.Context, db *sql.DB, ckpt MariaDBGTIDs) error {
	if len(ckpt) == 0 {
		return nil
	}
	var stateText string
	if err := db.QueryRowContext(ctx, "SELECT @@GLOBAL.gtid_binlog_state").Scan(&stateText); err != nil {
		return classifyConnErr(fmt.Errorf("read gtid_binlog_state: %w", err))
	}
	state, err := parseGTIDState(stateText)
	if err != nil {
		return fmt.Errorf("gtid_binlog_state %q: %w", stateText, err)
	}
	var oldest map[uint32]uint64
	files, err := binaryLogs(ctx, db)
	if err != nil {
		return classifyConnErr(fmt.Errorf("SHOW BINARY LOGS: %w", err))
	}
	if len(files) > 0 {
		var v sql.NullString
		if err := db.QueryRowContext(ctx, "SELECT BINLOG_GTID_POS(?, 4)", files[0].name).Scan(&v); err != nil {
			return classifyConnErr(fmt.Errorf("BINLOG_GTID_POS(%s, 4): %w", files[0].name, err))
		}
		if oldest, err = parseGTIDState(v.String); err != nil {
			return fmt.Errorf("BINLOG_GTID_POS(%s, 4) = %q: %w", files[0].name, v.String, err)
		}
	}
	return judgeMariaDBGTID(ckpt, state, oldest, stateText, firstName(files))
}

func firstName(files []binlogFile) string {
	if len(files) == 0 {
		return ""
	}
	return files[0].name
}

// parseGTIDState reads a MariaDB GTID list ("0-1-10,0-2-12,1-1-3", several
// servers per domain allowed) into the highest sequence number per domain.
func parseGTIDState(s string) (map[uint32]uint64, error) {
	out := map[uint32]uint64{}
	s = strings.TrimSpace(s)
	if s == "" {
		return out, nil
	}
	for _, part := range strings.Split(s, ",") {
		g, err := ParseMariaDBGTIDs(part)
		if err != nil {
			return nil, err
		}
		for _, x := range g {
			out[x.DomainID] = max(out[x.DomainID], x.SequenceNumber)
		}
	}
	return out, nil
}

// judgeMariaDBGTID is checkMariaDBGTID's pure part. state is the highest
// sequence per domain in the server's binlogs, oldest the state at the
// start of its oldest binlog (nil if unknown).
func judgeMariaDBGTID(ckpt MariaDBGTIDs, state, oldest map[uint32]uint64, stateText, oldestFile string) error {
	for _, g := range ckpt {
		gtid := fmt.Sprintf("%d-%d-%d", g.DomainID, g.ServerID, g.SequenceNumber)
		top, ok := state[g.DomainID]
		switch {
		case !ok:
			return fmt.Errorf("%w: the checkpoint's GTID %s is in replication domain %d, which this server's binlog never contained "+
				"(gtid_binlog_state %q): the server lacks the history the checkpoint was written against (a failover to a server outside the topology?): %s",
				ErrPositionGone, gtid, g.DomainID, stateText, positionGoneHint)
		case g.SequenceNumber > top:
			return fmt.Errorf("%w: the checkpoint's GTID %s is ahead of this server's binlog, which ends at sequence %d in domain %d "+
				"(gtid_binlog_state %q): the server lacks the history the checkpoint was written against (failover to a server that was behind?): %s",
				ErrPositionGone, gtid, top, g.DomainID, stateText, positionGoneHint)
		}
		if first, ok := oldest[g.DomainID]; ok && g.SequenceNumber < first {
			return fmt.Errorf("%w: the transactions after the checkpoint's GTID %s were purged: the oldest binlog on the server (%s) starts after sequence %d of domain %d: %s",
				ErrPositionGone, gtid, oldestFile, first, g.DomainID, positionGoneHint)
		}
	}
	return nil
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

func judgeMySQLGTID(ckpt, executed, purged *mysql.MysqlGTIDSet) error {
	if !executed.Contain(ckpt) {
		missing := ckpt.Clone().(*mysql.MysqlGTIDSet)
		_ = missing.Minus(*executed)
		return fmt.Errorf("%w: the checkpoint's GTID set contains %s, which this server never executed (gtid_executed %s): "+
			"the server lacks the history the checkpoint was written against: %s", ErrPositionGone, missing, executed, positionGoneHint)
	}
	if !ckpt.Contain(purged) {
		gone := purged.Clone().(*mysql.MysqlGTIDSet)
		_ = gone.Minus(*ckpt)
		return fmt.Errorf("%w: the server purged %s, which comes after the checkpoint and was never delivered (gtid_purged %s): %s",
			ErrPositionGone, gone, purged, positionGoneHint)
	}
	return nil
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
		return []outboxcdc.CheckResult{outboxcdc.Fail("mysql.connect", fmt.Sprintf("%s: %v", s.redacted(), classifyConnErr(err)),
			"check source.dsn (host, port, user, password) and that the server is up")}
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
		if errors.Is(err, ErrPositionGone) {
			return outboxcdc.Fail(name, strings.TrimSuffix(err.Error(), ": "+positionGoneHint), "choose one: "+positionGoneChoices)
		}
		return outboxcdc.Fail(name, err.Error(), "check the connection to the server")
	}
	return outboxcdc.Pass(name, "the checkpoint "+p.String()+" is still on the server")
}
