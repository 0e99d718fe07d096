// Package testenv gives integration tests their real services: the local
// MariaDB/MySQL and PostgreSQL (DSNs from the environment, local defaults
// otherwise) and an in-process Kafka-protocol broker (kfake).
//
// Without a DSN in the environment and with the local default unreachable,
// a developer machine with a Docker engine gets MySQL 8 / PostgreSQL 15
// containers through testcontainers-go instead (choose.go). When a service
// is still unavailable the test is skipped on a developer machine but fails
// when CI=true: an integration test that skips in CI does not count, and CI
// never falls back to a container.
package testenv

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"strings"
	"testing"

	_ "github.com/go-sql-driver/mysql" // database/sql driver "mysql"
	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kfake"
)

// Environment variables that point tests at services.
const (
	EnvMySQLDSN    = "OUTBOX_CDC_TEST_MYSQL_DSN"
	EnvPostgresDSN = "OUTBOX_CDC_TEST_POSTGRES_DSN"
)

// Defaults match the local services that scripts/prepare-services.sh sets up.
const (
	DefaultMySQLDSN    = "root:@tcp(127.0.0.1:3306)/test"
	DefaultPostgresDSN = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
)

// InCI reports whether the tests run under CI (CI=true).
func InCI() bool {
	v := strings.ToLower(os.Getenv("CI"))
	return v == "true" || v == "1"
}

// Unavailable skips the test outside CI and fails it in CI.
func Unavailable(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if InCI() {
		t.Fatalf("service required in CI: %s (run scripts/prepare-services.sh)", msg)
	}
	t.Skipf("service unavailable: %s (run scripts/prepare-services.sh, or set %s / %s)", msg, EnvMySQLDSN, EnvPostgresDSN)
}

// MySQLDSN returns a go-sql-driver DSN for a reachable MySQL/MariaDB whose
// database exists, or skips/fails the test. The DSN comes from
// OUTBOX_CDC_TEST_MYSQL_DSN, else the local default, else (not in CI, with
// a Docker engine) a MySQL 8 container; see choose.go.
func MySQLDSN(t testing.TB) string {
	t.Helper()
	return mysqlService.dsn(t)
}

var mysqlService = &service{
	what:     "MySQL/MariaDB",
	envVar:   EnvMySQLDSN,
	localDSN: DefaultMySQLDSN,
	ping: func(ctx context.Context, dsn string) error {
		db, err := sql.Open("mysql", dsn)
		if err != nil {
			return err
		}
		defer db.Close()
		return db.PingContext(ctx)
	},
	container: startMySQL,
}

// MySQL opens a database/sql handle on MySQLDSN, closed at test end.
func MySQL(t testing.TB) *sql.DB {
	t.Helper()
	db, err := sql.Open("mysql", MySQLDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// PostgresDSN returns a libpq-style URL for a reachable PostgreSQL, or
// skips/fails the test. The URL comes from OUTBOX_CDC_TEST_POSTGRES_DSN,
// else the local default, else (not in CI, with a Docker engine) a
// PostgreSQL 15 container with wal_level=logical; see choose.go.
func PostgresDSN(t testing.TB) string {
	t.Helper()
	return postgresService.dsn(t)
}

var postgresService = &service{
	what:     "PostgreSQL",
	envVar:   EnvPostgresDSN,
	localDSN: DefaultPostgresDSN,
	ping: func(ctx context.Context, dsn string) error {
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			return err
		}
		return conn.Close(ctx)
	},
	container: startPostgres,
}

// Kafka needs no container: kfake below is a Kafka-protocol broker that
// runs in the test process everywhere.

// Kafka starts an in-process Kafka-protocol broker (kfake) with the given
// extra options and returns it and its bootstrap addresses. It is closed at
// test end. Topics are auto-created with 3 partitions unless opts say
// otherwise.
func Kafka(t testing.TB, opts ...kfake.Opt) (*kfake.Cluster, []string) {
	t.Helper()
	all := append([]kfake.Opt{
		kfake.NumBrokers(1),
		kfake.DefaultNumPartitions(3),
		kfake.AllowAutoTopicCreation(),
	}, opts...)
	c, err := kfake.NewCluster(all...)
	if err != nil {
		t.Fatalf("start kfake: %v", err)
	}
	t.Cleanup(c.Close)
	return c, c.ListenAddrs()
}
