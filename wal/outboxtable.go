package wal

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
	"github.com/outbox-cdc/outbox-cdc/router"
)

// ReadOutboxTable reads the columns of c.Table (schema.table, public when
// no schema is given) from the catalog, for route.converters: each
// column's type, nullability, default and enum labels. A table or DSN
// that is not set or not valid is a *outboxcdc.KeyError; an error the
// server answered with (authentication, no privilege) and a table without
// columns (missing, or not visible to the user) are permanent; a failure
// to reach the server is transient (outboxcdc.IsTransient).
// binlog.ReadOutboxTable is the same for MySQL and MariaDB.
func ReadOutboxTable(ctx context.Context, c Config) (*router.Table, error) {
	spec := c.Table
	if spec == "" {
		return nil, outboxcdc.KeyErrorf("table", "without a table (logical decoding messages only) give every converted column's type in route.converters.column_types",
			"route.converters reads the column types from this table")
	}
	schema, name := "public", spec
	if i := strings.LastIndexByte(spec, '.'); i >= 0 {
		schema, name = spec[:i], spec[i+1:]
	}
	schema, name = strings.Trim(schema, `"`), strings.Trim(name, `"`)
	pc, err := pgx.ParseConfig(c.DSN)
	if err != nil {
		return nil, outboxcdc.KeyErrorf("dsn", "", "not a valid PostgreSQL connection string")
	}
	delete(pc.RuntimeParams, "replication")
	pc.RuntimeParams["application_name"] = "outbox-cdc"
	conn, err := pgx.ConnectConfig(ctx, pc)
	if err != nil {
		err = fmt.Errorf("connect to %s: %w", outboxcdc.RedactDSN(c.DSN), err)
		var pe *pgconn.PgError
		if errors.As(err, &pe) {
			return nil, outboxcdc.Permanent(err, "")
		}
		return nil, outboxcdc.Transient(err)
	}
	defer conn.Close(context.Background())
	classify := func(err error) error {
		err = fmt.Errorf("reading the columns of %s.%s: %w", schema, name, err)
		var pe *pgconn.PgError
		if errors.As(err, &pe) {
			return outboxcdc.Permanent(err, "")
		}
		return outboxcdc.Transient(err)
	}
	rows, err := conn.Query(ctx, `SELECT a.attname, format_type(a.atttypid, a.atttypmod), NOT a.attnotnull,
			pg_get_expr(d.adbin, d.adrelid), t.typtype = 'e',
			COALESCE((SELECT array_agg(e.enumlabel::text ORDER BY e.enumsortorder) FROM pg_enum e WHERE e.enumtypid = t.oid), '{}')
		FROM pg_attribute a
		JOIN pg_class c ON c.oid = a.attrelid
		JOIN pg_namespace n ON n.oid = c.relnamespace
		JOIN pg_type t ON t.oid = a.atttypid
		LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
		WHERE n.nspname = $1 AND c.relname = $2 AND a.attnum > 0 AND NOT a.attisdropped
		ORDER BY a.attnum`, schema, name)
	if err != nil {
		return nil, classify(err)
	}
	defer rows.Close()
	t := &router.Table{Flavor: router.FlavorPostgres, Schema: schema, Name: name}
	for rows.Next() {
		var col router.TableColumn
		var def *string
		var isEnum bool
		var labels []string
		if err := rows.Scan(&col.Name, &col.Type, &col.Nullable, &def, &isEnum, &labels); err != nil {
			return nil, classify(err)
		}
		col.Default = def
		if isEnum {
			col.EnumValues = labels
		}
		t.Columns = append(t.Columns, col)
	}
	if err := rows.Err(); err != nil {
		return nil, classify(err)
	}
	if len(t.Columns) == 0 {
		return nil, outboxcdc.Permanent(fmt.Errorf("route.converters: table %s.%s does not exist (or the user may not see it): the converters read its column types", schema, name), "")
	}
	return t, nil
}
