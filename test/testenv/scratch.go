package testenv

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"
)

// ScratchMySQL creates a fresh database called name on the MySQL/MariaDB
// of MySQLDSN, dropped at test end, and returns a handle on it and its
// DSN.
func ScratchMySQL(t testing.TB, name string) (*sql.DB, string) {
	t.Helper()
	cfg, err := mysql.ParseDSN(MySQLDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	admin := MySQL(t)
	for _, q := range []string{"DROP DATABASE IF EXISTS " + name, "CREATE DATABASE " + name} {
		if _, err := admin.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { admin.Exec("DROP DATABASE IF EXISTS " + name) })
	cfg.DBName = name
	dsn := cfg.FormatDSN()
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db, dsn
}

// ScratchPostgres creates a fresh schema called name on the PostgreSQL of
// PostgresDSN, dropped at test end (with the replication slot and the
// publication of the same name, should the test have made them), and
// returns a database/sql handle (driver "pgx") and the DSN.
func ScratchPostgres(t testing.TB, name string) (*sql.DB, string) {
	t.Helper()
	dsn := PostgresDSN(t)
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"DROP SCHEMA IF EXISTS " + name + " CASCADE", "CREATE SCHEMA " + name} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for i := 0; i < 50; i++ { // a walsender may still be exiting
			if _, err := db.ExecContext(ctx, "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1", name); err == nil {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		db.ExecContext(ctx, "DROP PUBLICATION IF EXISTS "+name)
		db.ExecContext(ctx, "DROP SCHEMA IF EXISTS "+name+" CASCADE")
		db.Close()
	})
	return db, dsn
}
