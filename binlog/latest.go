package binlog

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/go-mysql-org/go-mysql/mysql"
	mysqldriver "github.com/go-sql-driver/mysql"
	outboxcdc "github.com/outbox-cdc/outbox-cdc"
)

// LatestPosition asks the server for its current position (`position set
// --to latest`), in form (FormFile, FormMySQLGTID, FormMariaDBGTID: the
// form of the checkpoint it replaces) or, when form is "", in the form a
// first run with cfg would take. A GTID form on a server without GTIDs is
// an error.
func LatestPosition(ctx context.Context, cfg Config, form string) (outboxcdc.Position, error) {
	dsn, err := cfg.ConnDSN()
	if err != nil {
		return "", err
	}
	dc, err := mysqldriver.ParseDSN(dsn)
	if err != nil {
		return "", errors.New("dsn: not a valid go-sql-driver DSN")
	}
	conn, err := mysqldriver.NewConnector(dc)
	if err != nil {
		return "", err
	}
	db := sql.OpenDB(conn)
	defer db.Close()
	var version string
	if err := db.QueryRowContext(ctx, "SELECT VERSION()").Scan(&version); err != nil {
		return "", classifyConnErr(err)
	}
	info := serverInfo{flavor: mysql.MySQLFlavor, version: version}
	if strings.Contains(strings.ToLower(version), "mariadb") {
		info.flavor = mysql.MariaDBFlavor
	} else if err := db.QueryRowContext(ctx, "SELECT @@GLOBAL.gtid_mode").Scan(&info.gtidMode); err != nil {
		return "", classifyConnErr(err)
	}
	if form == FormFile || (form == "" && cfg.GTID == GTIDOff) {
		return fileStatus(ctx, db)
	}
	var p Pos
	switch {
	case info.flavor == mysql.MariaDBFlavor:
		var v string
		if err := db.QueryRowContext(ctx, "SELECT @@GLOBAL.gtid_binlog_pos").Scan(&v); err != nil {
			return "", classifyConnErr(err)
		}
		g, err := ParseMariaDBGTIDs(v)
		if err != nil {
			return "", fmt.Errorf("gtid_binlog_pos: %w", err)
		}
		p = Pos{MariaDB: g, IsMariaDB: len(g) > 0}
	case strings.EqualFold(info.gtidMode, "ON"):
		if p, err = mysqlGTIDVar(ctx, db, "gtid_executed"); err != nil {
			return "", err
		}
		if p.MySQLGTID.String() == "" {
			p.MySQLGTID = nil
		}
	}
	if p.IsGTID() {
		return p.Encode(), nil
	}
	if form != "" {
		return "", fmt.Errorf("the checkpoint is in %s form but the server has no GTIDs", form)
	}
	return fileStatus(ctx, db)
}

func fileStatus(ctx context.Context, db *sql.DB) (outboxcdc.Position, error) {
	file, off, err := binlogStatus(ctx, db)
	if err != nil {
		return "", classifyConnErr(err)
	}
	p := Pos{File: file, Offset: off}
	return p.Encode(), nil
}
