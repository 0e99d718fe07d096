package binlog

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	mysqldriver "github.com/go-sql-driver/mysql"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
	"github.com/outbox-cdc/outbox-cdc/router"
)

// ReadOutboxTable reads the columns of c.Table (in the DSN's database)
// from information_schema, for route.converters: each column's type,
// nullability and default, and whether the server is MariaDB. A DSN or
// table that is not set is a *outboxcdc.KeyError; an error the server
// answered with (no privilege) and a table without columns (missing, or
// not visible to the user) are permanent; a failure to reach the server is
// transient (outboxcdc.IsTransient). wal.ReadOutboxTable is the same for
// Postgres.
func ReadOutboxTable(ctx context.Context, c Config) (*router.Table, error) {
	dsn, err := c.ConnDSN()
	if err != nil {
		return nil, err
	}
	dc, err := mysqldriver.ParseDSN(dsn)
	if err != nil {
		return nil, outboxcdc.KeyErrorf("dsn", "", "not a valid go-sql-driver DSN")
	}
	name := c.Table
	if name == "" || dc.DBName == "" {
		return nil, outboxcdc.KeyErrorf("table", "set both", "route.converters reads the column types of this table in the DSN's database")
	}
	conn, err := mysqldriver.NewConnector(dc)
	if err != nil {
		return nil, outboxcdc.Permanent(err, "")
	}
	db := sql.OpenDB(conn)
	defer db.Close()
	classify := func(err error) error {
		var me *mysqldriver.MySQLError
		if errors.As(err, &me) {
			return outboxcdc.Permanent(fmt.Errorf("reading the columns of %s.%s: %w", dc.DBName, name, err), "")
		}
		return outboxcdc.Transient(fmt.Errorf("reading the columns of %s.%s from %s: %w", dc.DBName, name, outboxcdc.RedactDSN(dsn), err))
	}
	var version string
	if err := db.QueryRowContext(ctx, "SELECT VERSION()").Scan(&version); err != nil {
		return nil, classify(err)
	}
	t := &router.Table{Flavor: router.FlavorMySQL, Schema: dc.DBName, Name: name}
	if strings.Contains(strings.ToLower(version), "mariadb") {
		t.Flavor = router.FlavorMariaDB
	}
	rows, err := db.QueryContext(ctx, `SELECT COLUMN_NAME, COLUMN_TYPE, IS_NULLABLE, COLUMN_DEFAULT, EXTRA
		FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? ORDER BY ORDINAL_POSITION`, dc.DBName, name)
	if err != nil {
		return nil, classify(err)
	}
	defer rows.Close()
	for rows.Next() {
		var col router.TableColumn
		var nullable, extra string
		var def sql.NullString
		if err := rows.Scan(&col.Name, &col.Type, &nullable, &def, &extra); err != nil {
			return nil, classify(err)
		}
		col.Nullable = nullable == "YES"
		if def.Valid {
			col.Default = &def.String
		}
		col.DefaultGenerated = strings.Contains(strings.ToUpper(extra), "DEFAULT_GENERATED")
		t.Columns = append(t.Columns, col)
	}
	if err := rows.Err(); err != nil {
		return nil, classify(err)
	}
	if len(t.Columns) == 0 {
		return nil, outboxcdc.Permanent(fmt.Errorf("route.converters: table %s.%s does not exist (or the user may not see it): the converters read its column types",
			dc.DBName, name), "")
	}
	return t, nil
}
