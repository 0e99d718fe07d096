// Package testenv gives integration tests their real services: the local
// MariaDB/MySQL and PostgreSQL (DSNs from the environment, local defaults
// otherwise) and an in-process Kafka-protocol broker (kfake).
//
// When a service is unreachable the test is skipped on a developer machine
// but fails when CI=true: an integration test that skips in CI does not count.
package testenv

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql" // database/sql driver "mysql"
	"github.com/jackc/pgx/v5"
	outboxcdc "github.com/outbox-cdc/outbox-cdc"
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
// database exists, or skips/fails the test.
func MySQLDSN(t testing.TB) string {
	t.Helper()
	dsn := os.Getenv(EnvMySQLDSN)
	if dsn == "" {
		dsn = DefaultMySQLDSN
	}
	db, err := sql.Open("mysql", dsn)
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err = db.PingContext(ctx)
		cancel()
		db.Close()
	}
	if err != nil {
		Unavailable(t, "MySQL/MariaDB at %s: %v", outboxcdc.RedactDSN(dsn), err)
	}
	return dsn
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
// skips/fails the test.
func PostgresDSN(t testing.TB) string {
	t.Helper()
	dsn := os.Getenv(EnvPostgresDSN)
	if dsn == "" {
		dsn = DefaultPostgresDSN
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err == nil {
		conn.Close(ctx)
	}
	if err != nil {
		Unavailable(t, "PostgreSQL at %s: %v", outboxcdc.RedactDSN(dsn), err)
	}
	return dsn
}

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
