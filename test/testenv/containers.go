package testenv

import (
	"context"
	"sync"
	"time"

	"github.com/testcontainers/testcontainers-go"
	tcmysql "github.com/testcontainers/testcontainers-go/modules/mysql"
	tcpostgres "github.com/testcontainers/testcontainers-go/modules/postgres"
)

// Images of the fallback containers: MySQL 8 (the LTS line) and
// PostgreSQL 15. Kafka needs none: the tests always run kfake in-process.
const (
	MySQLImage    = "mysql:8.4"
	PostgresImage = "postgres:15-alpine"
)

var docker struct {
	once sync.Once
	err  error
}

// dockerEngine reports whether a Docker engine answers, with
// testcontainers' own provider health check. It is asked at most once per
// test process.
func dockerEngine() error {
	docker.once.Do(func() {
		p, err := testcontainers.NewDockerProvider()
		if err != nil {
			docker.err = err
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		docker.err = p.Health(ctx) // closes p
	})
	return docker.err
}

// startMySQL runs MySQL 8 with the binlog settings the connector needs
// (the same as scripts/prepare-services.sh and the compose quickstart) and
// returns a root DSN for its "test" database, like DefaultMySQLDSN.
func startMySQL(ctx context.Context) (string, error) {
	c, err := tcmysql.Run(ctx, MySQLImage,
		tcmysql.WithUsername("root"),
		tcmysql.WithPassword("test"),
		tcmysql.WithDatabase("test"),
		testcontainers.WithCmdArgs(
			"--server-id=1",
			"--log-bin=mysql-bin",
			"--binlog-format=ROW",
			"--binlog-row-image=FULL",
			"--binlog-row-metadata=FULL",
			"--gtid-mode=ON",
			"--enforce-gtid-consistency=ON",
		),
	)
	if err != nil {
		if c != nil {
			_ = testcontainers.TerminateContainer(c)
		}
		return "", err
	}
	return c.ConnectionString(ctx)
}

// startPostgres runs PostgreSQL 15 with wal_level=logical and returns a
// superuser URL for its "test" database, like DefaultPostgresDSN.
func startPostgres(ctx context.Context) (string, error) {
	c, err := tcpostgres.Run(ctx, PostgresImage,
		tcpostgres.WithDatabase("test"),
		tcpostgres.WithUsername("postgres"),
		tcpostgres.WithPassword("postgres"),
		testcontainers.WithCmd("postgres", "-c", "fsync=off", "-c", "wal_level=logical", "-c", "max_replication_slots=20", "-c", "max_wal_senders=20"),
		tcpostgres.BasicWaitStrategies(),
	)
	if err != nil {
		if c != nil {
			_ = testcontainers.TerminateContainer(c)
		}
		return "", err
	}
	return c.ConnectionString(ctx, "sslmode=disable")
}
