package binlog

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/go-mysql-org/go-mysql/mysql"
)

// serverInfo is what the source learns about the server before streaming.
type serverInfo struct {
	flavor          string // mysql.MySQLFlavor or mysql.MariaDBFlavor
	version         string
	gtidMode        string        // MySQL's gtid_mode; "" on MariaDB
	rowMetadataFull bool          // table map events carry column names
	table           resolvedTable // the outbox table as the server names it (match.go)
	columns         []schemaColumn
	// match tells the outbox tables' rows apart: the one table, or
	// source.tables (tables.go).
	match *tableMatcher
}

// inspect reads the server's version and binlog settings and the outbox
// table's columns, and refuses settings that cannot work, naming the exact
// setting to change.
func (s *Source) inspect(ctx context.Context, db *sql.DB) (serverInfo, error) {
	ctx, cancel := context.WithTimeout(ctx, s.callTimeout())
	defer cancel()
	var info serverInfo
	if err := db.QueryRowContext(ctx, "SELECT VERSION()").Scan(&info.version); err != nil {
		return info, classifyConnErr(fmt.Errorf("connect to %s: %w", s.redacted(), err))
	}
	info.flavor = mysql.MySQLFlavor
	if strings.Contains(strings.ToLower(info.version), "mariadb") {
		info.flavor = mysql.MariaDBFlavor
	}
	vars, err := readSettings(ctx, db)
	if err != nil {
		return info, err
	}
	var bad []string
	for _, r := range settingsResults(vars) {
		if !r.OK {
			bad = append(bad, r.Detail+": "+r.Fix)
		}
	}
	if len(bad) > 0 {
		return info, fmt.Errorf("%w on %s: %s", ErrServerSettings, s.redacted(), strings.Join(bad, "; "))
	}
	info.rowMetadataFull = vars["binlog_row_metadata"] == "FULL"
	info.gtidMode = vars["gtid_mode"]
	if !info.rowMetadataFull {
		s.log.Warn().Str("binlog_row_metadata", orUnset(vars["binlog_row_metadata"])).
			Msg("the binlog carries no column names: they are read from information_schema, an ALTER TABLE is followed while the connector is caught up, " +
				"and a backlog holding rows written before an ALTER TABLE stops it; set binlog_row_metadata=FULL to follow every change")
	}
	if s.multi() {
		_, info.match, err = s.tablesColumns(ctx, db)
		return info, err
	}
	info.table, info.columns, err = s.tableColumns(ctx, db)
	info.match = info.table.matcher()
	return info, err
}

func orUnset(v string) string {
	if v == "" {
		return "not set"
	}
	return v
}

func (s *Source) redacted() string { return "mysql at " + s.dsn.Addr }

// useGTID says whether a first run takes GTID positions.
func (info *serverInfo) useGTID(cfg Config) bool {
	if cfg.GTID == GTIDOff {
		return false
	}
	// MariaDB always writes GTIDs (10.0+), and a GTID position survives a
	// failover to another server of the replication topology and binlog
	// file renames, so it is the default there. MySQL has usable GTIDs only
	// with gtid_mode=ON (with ON_PERMISSIVE some transactions are anonymous
	// and a GTID set cannot express a position after them).
	return info.flavor == mysql.MariaDBFlavor || info.gtidMode == "ON"
}

// accepts refuses a position this server cannot resume from.
func (info *serverInfo) accepts(p *Pos) error {
	switch {
	case p.IsMariaDB && info.flavor != mysql.MariaDBFlavor:
		return fmt.Errorf("%w: the checkpoint holds a MariaDB GTID position (%s) but the server is MySQL %s",
			ErrPositionGone, p, info.version)
	case p.MySQLGTID != nil && info.flavor == mysql.MariaDBFlavor:
		return fmt.Errorf("%w: the checkpoint holds a MySQL GTID set (%s) but the server is %s",
			ErrPositionGone, p, info.version)
	case p.MySQLGTID != nil && info.gtidMode != "ON":
		return fmt.Errorf("%w: the checkpoint holds a GTID set but gtid_mode is %s: set gtid_mode=ON (and enforce_gtid_consistency=ON)",
			ErrServerSettings, orUnset(info.gtidMode))
	}
	return nil
}

// startPosition finds where a first run without a checkpoint starts.
func (s *Source) startPosition(ctx context.Context, db *sql.DB, info serverInfo) (Pos, error) {
	ctx, cancel := context.WithTimeout(ctx, s.callTimeout())
	defer cancel()
	gtid := info.useGTID(s.cfg)
	wrap := func(what string, err error) (Pos, error) {
		return Pos{}, classifyConnErr(fmt.Errorf("find the %s binlog position (%s): %w", s.cfg.Start, what, err))
	}
	if s.cfg.Start == StartLatest {
		switch {
		case gtid && info.flavor == mysql.MariaDBFlavor:
			var v string
			if err := db.QueryRowContext(ctx, "SELECT @@GLOBAL.gtid_binlog_pos").Scan(&v); err != nil {
				return wrap("gtid_binlog_pos", err)
			}
			g, err := ParseMariaDBGTIDs(v)
			if err != nil {
				return Pos{}, fmt.Errorf("gtid_binlog_pos: %w", err)
			}
			return Pos{MariaDB: g, IsMariaDB: true}, nil
		case gtid:
			return mysqlGTIDVar(ctx, db, "gtid_executed")
		}
		file, off, err := binlogStatus(ctx, db)
		if err != nil {
			return wrap("SHOW MASTER STATUS", err)
		}
		return Pos{File: file, Offset: off}, nil
	}
	// earliest
	if gtid && info.flavor == mysql.MySQLFlavor {
		// Everything purged is "before the earliest"; the server sends all
		// the rest.
		return mysqlGTIDVar(ctx, db, "gtid_purged")
	}
	var first string
	rows, err := db.QueryContext(ctx, "SHOW BINARY LOGS")
	if err != nil {
		return wrap("SHOW BINARY LOGS", err)
	}
	if rows.Next() {
		cols, _ := rows.Columns()
		dest := make([]any, len(cols))
		dest[0] = &first
		for i := 1; i < len(dest); i++ {
			dest[i] = new(sql.RawBytes)
		}
		err = rows.Scan(dest...)
	}
	rows.Close()
	if err == nil {
		err = rows.Err()
	}
	if err != nil {
		return wrap("SHOW BINARY LOGS", err)
	}
	if first == "" {
		return Pos{}, fmt.Errorf("%w: the server lists no binary logs (SHOW BINARY LOGS is empty): is log_bin on?", ErrServerSettings)
	}
	if !gtid {
		return Pos{File: first, Offset: 4}, nil
	}
	// MariaDB: the GTID state at the start of the oldest binlog.
	var v sql.NullString
	if err := db.QueryRowContext(ctx, "SELECT BINLOG_GTID_POS(?, 4)", first).Scan(&v); err != nil {
		return wrap("BINLOG_GTID_POS", err)
	}
	g, err := ParseMariaDBGTIDs(v.String)
	if err != nil {
		return Pos{}, fmt.Errorf("BINLOG_GTID_POS(%s, 4): %w", first, err)
	}
	return Pos{MariaDB: g, IsMariaDB: true}, nil
}

func mysqlGTIDVar(ctx context.Context, db *sql.DB, name string) (Pos, error) {
	var v string
	if err := db.QueryRowContext(ctx, "SELECT @@GLOBAL."+name).Scan(&v); err != nil {
		return Pos{}, classifyConnErr(fmt.Errorf("read %s: %w", name, err))
	}
	set, err := mysql.ParseMysqlGTIDSet(strings.Join(strings.Fields(v), ""))
	if err != nil {
		return Pos{}, fmt.Errorf("%s %q: %w", name, v, err)
	}
	return Pos{MySQLGTID: set.(*mysql.MysqlGTIDSet)}, nil
}

// binlogStatus returns the current binlog file and offset. MySQL 8.4
// renamed SHOW MASTER STATUS to SHOW BINARY LOG STATUS; MariaDB keeps the
// old name.
func binlogStatus(ctx context.Context, db *sql.DB) (string, uint32, error) {
	var lastErr error
	for _, q := range []string{"SHOW BINARY LOG STATUS", "SHOW MASTER STATUS"} {
		file, off, err := scanStatus(ctx, db, q)
		if err == nil {
			return file, off, nil
		}
		lastErr = err
		if code, _ := serverCode(err); code != 1064 { // not a syntax error: a real failure
			return "", 0, err
		}
	}
	return "", 0, lastErr
}

func scanStatus(ctx context.Context, db *sql.DB, q string) (string, uint32, error) {
	rows, err := db.QueryContext(ctx, q)
	if err != nil {
		return "", 0, err
	}
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return "", 0, err
		}
		return "", 0, fmt.Errorf("%w: %s returned nothing: is log_bin on?", ErrServerSettings, q)
	}
	cols, err := rows.Columns()
	if err != nil {
		return "", 0, err
	}
	var file string
	var off uint32
	dest := make([]any, len(cols))
	dest[0], dest[1] = &file, &off
	for i := 2; i < len(dest); i++ {
		dest[i] = new(sql.RawBytes)
	}
	if err := rows.Scan(dest...); err != nil {
		return "", 0, err
	}
	if file == "" {
		return "", 0, errors.New(q + " returned an empty file name")
	}
	return file, off, nil
}

// dumpConn is a binlog dump connection of this source, as the server knew
// it: its connection id and when the server had booted (serverBoot).
type dumpConn struct {
	id   uint32
	boot int64
}

// serverBoot returns when the server started, in Unix seconds: a
// connection id means the same connection only within one server run.
func (s *Source) serverBoot(ctx context.Context, db *sql.DB) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, s.callTimeout())
	defer cancel()
	var now int64
	var name string
	var uptime int64
	err := db.QueryRowContext(ctx, "SELECT UNIX_TIMESTAMP()").Scan(&now)
	if err == nil {
		err = db.QueryRowContext(ctx, "SHOW GLOBAL STATUS LIKE 'Uptime'").Scan(&name, &uptime)
	}
	if err != nil {
		return 0, classifyConnErr(fmt.Errorf("read the server's uptime: %w", err))
	}
	return now - uptime, nil
}

// bootSlack is how far two serverBoot readings of one server run may
// differ (whole seconds, two queries apart).
const bootSlack = 3

// killPreviousDump ends this source's previous binlog dump thread when the
// server still runs it (the network broke and the server has not noticed),
// so it does not hold a replica slot or compete with the new one. The id
// alone could name someone else's connection: ids are reused after a
// server restart. So it KILLs only a connection that is, on the server
// run it was made on, a binlog dump (Binlog Dump / Binlog Dump GTID) of
// this user, while a replica with this server_id is registered (SHOW SLAVE
// HOSTS, when the user may run it). Anything else is left alone.
func (s *Source) killPreviousDump(ctx context.Context, db *sql.DB, boot int64) {
	prev := s.prevDump
	s.prevDump = dumpConn{}
	if prev.id == 0 {
		return
	}
	log := s.log.With().Uint32("connection_id", prev.id).Logger()
	if d := boot - prev.boot; d > bootSlack || d < -bootSlack {
		log.Info().Msg("the server restarted since the previous binlog dump connection; not killing by id")
		return
	}
	ctx, cancel := context.WithTimeout(ctx, s.callTimeout())
	defer cancel()
	var user, command string
	err := db.QueryRowContext(ctx, "SELECT USER, COMMAND FROM information_schema.PROCESSLIST WHERE ID = ?", prev.id).Scan(&user, &command)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return // gone already
	case err != nil:
		log.Warn().Err(err).Msg("cannot check the previous binlog dump connection; not killing it")
		return
	case command != "Binlog Dump" && command != "Binlog Dump GTID", user != s.dsn.User:
		log.Info().Str("command", command).Str("user", user).Msg("the previous binlog dump connection's id now names another connection; not killing it")
		return
	}
	if registered, known := s.replicaRegistered(ctx, db); known && !registered {
		log.Info().Msg("no replica with this server_id is registered; not killing the connection")
		return
	}
	if _, err := db.ExecContext(ctx, "KILL CONNECTION "+strconv.FormatUint(uint64(prev.id), 10)); err == nil {
		log.Info().Msg("killed the previous binlog dump connection")
	} else {
		log.Warn().Err(err).Msg("cannot kill the previous binlog dump connection")
	}
}

// replicaRegistered says whether SHOW SLAVE HOSTS (SHOW REPLICAS on MySQL
// 8.4) lists this source's server_id. known is false when the user may not
// run it (MariaDB >= 10.5 wants REPLICATION MASTER ADMIN).
func (s *Source) replicaRegistered(ctx context.Context, db *sql.DB) (registered, known bool) {
	for _, q := range []string{"SHOW SLAVE HOSTS", "SHOW REPLICAS"} {
		rows, err := db.QueryContext(ctx, q)
		if err != nil {
			continue
		}
		cols, _ := rows.Columns()
		for rows.Next() {
			dest := make([]any, len(cols))
			var id uint64
			dest[0] = &id
			for i := 1; i < len(dest); i++ {
				dest[i] = new(sql.RawBytes)
			}
			if rows.Scan(dest...) == nil && id == uint64(s.serverID) {
				registered = true
			}
		}
		err = rows.Err()
		rows.Close()
		return registered, err == nil
	}
	return false, false
}

// checkResume checks, under the call deadline, that the server still holds
// the binlog at p (checkPosition).
func (s *Source) checkResume(ctx context.Context, db *sql.DB, info *serverInfo, p *Pos) error {
	ctx, cancel := context.WithTimeout(ctx, s.callTimeout())
	defer cancel()
	return classifyConnErr(checkPosition(ctx, db, info, p))
}
