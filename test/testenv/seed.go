package testenv

import "github.com/outbox-cdc/outbox-cdc/schema"

// SeedTableMySQL is the CREATE TABLE of the outbox table (schema/mysql.sql)
// for MySQL/MariaDB, under the given (optionally database-qualified) name.
func SeedTableMySQL(name string) string { return schema.MySQL(name) }

// SeedTablePostgres is the same table for PostgreSQL (schema/postgres.sql):
// the CREATE TABLE and its indexes, as separate statements.
func SeedTablePostgres(name string) []string { return schema.Postgres(name) }
