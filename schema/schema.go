// Package schema holds the outbox table's DDL, once per database, as the
// SQL files beside it. The files are plain SQL that a database's init
// scripts (Docker Compose) or a shell (the demo) run as they are; Go code
// (testenv, the benchmarks) reads them here under the table name it needs.
package schema

import (
	_ "embed"
	"regexp"
	"strings"
)

// Table is the outbox table's name in the SQL files.
const Table = "outbox_message"

//go:embed mysql.sql
var mysqlDDL string

//go:embed postgres.sql
var postgresDDL string

// MySQLFile and PostgresFile are the files' text, unchanged.
func MySQLFile() string    { return mysqlDDL }
func PostgresFile() string { return postgresDDL }

// MySQL is the CREATE TABLE of the outbox table for MySQL/MariaDB under
// name, which may be database-qualified (db.table).
func MySQL(name string) string {
	stmts := statements(mysqlDDL, name)
	return stmts[0]
}

// Postgres is the outbox table for PostgreSQL under name (optionally
// schema-qualified): the CREATE TABLE, then its indexes, one statement each.
func Postgres(name string) []string {
	return statements(postgresDDL, name)
}

var tableName = regexp.MustCompile(`\b` + Table + `\b`)

// statements drops the comment lines, renames the table and splits the
// text at the semicolons that end its statements.
func statements(ddl, name string) []string {
	var b strings.Builder
	for _, line := range strings.Split(ddl, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "--") {
			continue
		}
		b.WriteString(line)
		b.WriteByte('\n')
	}
	var out []string
	for _, s := range strings.Split(b.String(), ";") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, tableName.ReplaceAllLiteralString(s, name))
		}
	}
	return out
}
