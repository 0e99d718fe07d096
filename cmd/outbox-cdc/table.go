package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	mysqldriver "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/rs/zerolog"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
	"github.com/outbox-cdc/outbox-cdc/retry"
	"github.com/outbox-cdc/outbox-cdc/router"
)

// The Kafka Connect converters (route.converters) write each column as
// Debezium would, which depends on its type, nullability and default:
// newRouter reads them from the catalog once at start-up. A change of the
// outbox table's types while running is noticed only where a value no
// longer parses (the row is then bad, saying to restart).

// newRouter builds the route, reading the outbox table's columns first
// when the converters need them. Connection failures are retried until ctx
// is done (the database may come up after the connector); a table or a
// type the converters cannot handle is a configuration error.
func newRouter(ctx context.Context, cfg Config, log zerolog.Logger) (*router.Router, error) {
	if !cfg.Route.NeedsTable() {
		rt, err := router.New(cfg.Route)
		if err != nil {
			return nil, sectionError("route", err)
		}
		return rt, nil
	}
	backoff := retry.New(retry.Policy{Min: time.Second, Max: 30 * time.Second})
	for {
		table, err := readOutboxTable(ctx, cfg)
		if err == nil {
			rt, err := router.NewForTable(cfg.Route, table)
			if err != nil {
				return nil, sectionError("route", err)
			}
			log.Info().Str("component", "route").Str("table", table.Schema+"."+table.Name).
				Strs("typed_columns", cfg.Route.TypedColumns()).Msg("read the outbox table's column types for route.converters")
			return rt, nil
		}
		var perm *tableError
		if errors.As(err, &perm) {
			return nil, err
		}
		wait := backoff.Next()
		log.Warn().Str("component", "route").Err(err).Dur("backoff", wait).
			Msg("cannot read the outbox table's column types (route.converters needs them); retrying")
		if retry.Sleep(ctx, wait) != nil {
			return nil, fmt.Errorf("reading the outbox table's column types: %w (last error: %v)", ctx.Err(), err)
		}
	}
}

// tableError is a permanent problem reading the table: it is missing, or
// the database refused the query.
type tableError struct{ err error }

func (e *tableError) Error() string { return e.err.Error() }
func (e *tableError) Unwrap() error { return e.err }

// readOutboxTable reads the outbox table's columns from the catalog. Errors
// the server answered with (no such table, no privilege) are *tableError;
// connection failures are returned as they are.
func readOutboxTable(ctx context.Context, cfg Config) (*router.Table, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return cfg.source().table(ctx, cfg) // sources.go
}

func readMySQLTable(ctx context.Context, cfg Config) (*router.Table, error) {
	dsn, err := mysqlDSN(cfg)
	if err != nil {
		return nil, &tableError{err}
	}
	dc, err := mysqldriver.ParseDSN(dsn)
	if err != nil {
		return nil, &tableError{configErrorf("source.dsn: not a valid go-sql-driver DSN")}
	}
	name := cfg.Source.MySQL.Table
	if name == "" || dc.DBName == "" {
		return nil, &tableError{configErrorf("route.converters: the column types are read from source.table in source.dsn's database; set both")}
	}
	conn, err := mysqldriver.NewConnector(dc)
	if err != nil {
		return nil, &tableError{err}
	}
	db := sql.OpenDB(conn)
	defer db.Close()
	classify := func(err error) error {
		var me *mysqldriver.MySQLError
		if errors.As(err, &me) {
			return &tableError{fmt.Errorf("reading the columns of %s.%s: %w", dc.DBName, name, err)}
		}
		return fmt.Errorf("reading the columns of %s.%s from %s: %w", dc.DBName, name, outboxcdc.RedactDSN(dsn), err)
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
		var c router.TableColumn
		var nullable, extra string
		var def sql.NullString
		if err := rows.Scan(&c.Name, &c.Type, &nullable, &def, &extra); err != nil {
			return nil, classify(err)
		}
		c.Nullable = nullable == "YES"
		if def.Valid {
			c.Default = &def.String
		}
		c.DefaultGenerated = strings.Contains(strings.ToUpper(extra), "DEFAULT_GENERATED")
		t.Columns = append(t.Columns, c)
	}
	if err := rows.Err(); err != nil {
		return nil, classify(err)
	}
	if len(t.Columns) == 0 {
		return nil, &tableError{fmt.Errorf("route.converters: table %s.%s does not exist (or the user may not see it): the converters read its column types",
			dc.DBName, name)}
	}
	return t, nil
}

func readPostgresTable(ctx context.Context, cfg Config) (*router.Table, error) {
	spec := cfg.Source.Postgres.Table
	if spec == "" {
		return nil, &tableError{configErrorf("route.converters: the column types are read from source.table; without a table (logical decoding messages only) give every converted column's type in route.converters.column_types")}
	}
	schema, name := "public", spec
	if i := strings.LastIndexByte(spec, '.'); i >= 0 {
		schema, name = spec[:i], spec[i+1:]
	}
	schema, name = strings.Trim(schema, `"`), strings.Trim(name, `"`)
	pc, err := pgx.ParseConfig(cfg.Source.Postgres.DSN)
	if err != nil {
		return nil, &tableError{configErrorf("source.dsn: not a valid PostgreSQL connection string")}
	}
	delete(pc.RuntimeParams, "replication")
	pc.RuntimeParams["application_name"] = "outbox-cdc"
	conn, err := pgx.ConnectConfig(ctx, pc)
	if err != nil {
		var pe *pgconn.PgError
		if errors.As(err, &pe) {
			return nil, &tableError{fmt.Errorf("connect to %s: %w", outboxcdc.RedactDSN(cfg.Source.Postgres.DSN), err)}
		}
		return nil, fmt.Errorf("connect to %s: %w", outboxcdc.RedactDSN(cfg.Source.Postgres.DSN), err)
	}
	defer conn.Close(context.Background())
	classify := func(err error) error {
		var pe *pgconn.PgError
		if errors.As(err, &pe) {
			return &tableError{fmt.Errorf("reading the columns of %s.%s: %w", schema, name, err)}
		}
		return fmt.Errorf("reading the columns of %s.%s: %w", schema, name, err)
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
		var c router.TableColumn
		var def *string
		var isEnum bool
		var labels []string
		if err := rows.Scan(&c.Name, &c.Type, &c.Nullable, &def, &isEnum, &labels); err != nil {
			return nil, classify(err)
		}
		c.Default = def
		if isEnum {
			c.EnumValues = labels
		}
		t.Columns = append(t.Columns, c)
	}
	if err := rows.Err(); err != nil {
		return nil, classify(err)
	}
	if len(t.Columns) == 0 {
		return nil, &tableError{fmt.Errorf("route.converters: table %s.%s does not exist (or the user may not see it): the converters read its column types", schema, name)}
	}
	return t, nil
}
