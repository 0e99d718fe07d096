package sourcetest_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/rs/zerolog"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
	"github.com/outbox-cdc/outbox-cdc/test/sourcetest"
	"github.com/outbox-cdc/outbox-cdc/test/testenv"
	"github.com/outbox-cdc/outbox-cdc/wal"
)

func TestWALSource(t *testing.T) {
	sourcetest.Run(t, newPostgresEnv)
}

// postgresEnv is an outbox table with a publication of every operation
// (so that UPDATEs and DELETEs reach the source to be skipped and counted)
// and, per connector name, a slot dropped at the end.
type postgresEnv struct {
	dsn   string
	db    *pgx.Conn
	table string
	pub   string
}

func newPostgresEnv(t *testing.T) sourcetest.Env {
	dsn := testenv.PostgresDSN(t)
	ctx := context.Background()
	db, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	suffix := fmt.Sprintf("%08x", rand.Uint32())
	e := &postgresEnv{dsn: dsn, db: db, table: "st_outbox_" + suffix, pub: "st_pub_" + suffix}
	for _, q := range testenv.SeedTablePostgres(e.table) {
		e.exec(t, q)
	}
	e.exec(t, "CREATE PUBLICATION "+e.pub+" FOR TABLE "+e.table+" WITH (publish = 'insert, update, delete')")
	t.Cleanup(func() {
		e.db.Exec(ctx, "DROP PUBLICATION IF EXISTS "+e.pub)
		e.db.Exec(ctx, "DROP TABLE IF EXISTS "+e.table)
		e.db.Close(ctx)
	})
	return e
}

func (e *postgresEnv) exec(t *testing.T, q string, args ...any) {
	t.Helper()
	if _, err := e.db.Exec(context.Background(), q, args...); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

// slot is the replication slot of connector name.
func slot(name string) string { return "st_" + strings.ReplaceAll(name, "-", "_") }

// dropSlot drops the slot once no walsender holds it (registered before
// the source's own cleanup, so it runs after the source stopped).
func (e *postgresEnv) dropSlot(t *testing.T, name string) {
	t.Cleanup(func() {
		ctx := context.Background()
		deadline := time.Now().Add(15 * time.Second)
		for {
			var pid int32
			err := e.db.QueryRow(ctx, `SELECT coalesce(active_pid, 0) FROM pg_replication_slots WHERE slot_name = $1`, slot(name)).Scan(&pid)
			if errors.Is(err, pgx.ErrNoRows) {
				return
			}
			if err == nil && pid == 0 {
				if _, err = e.db.Exec(ctx, `SELECT pg_drop_replication_slot($1)`, slot(name)); err == nil {
					return
				}
			}
			if time.Now().After(deadline) {
				if pid != 0 {
					e.db.Exec(ctx, `SELECT pg_terminate_backend($1)`, pid)
				}
				if time.Now().After(deadline.Add(5 * time.Second)) {
					t.Errorf("could not drop slot %s: %v", slot(name), err)
					return
				}
			}
			time.Sleep(100 * time.Millisecond)
		}
	})
}

func (e *postgresEnv) Source(t *testing.T, name string, short bool, m *outboxcdc.SourceMetrics) outboxcdc.Source {
	e.dropSlot(t, name)
	c := wal.DefaultConfig()
	c.DSN, c.Table, c.Slot, c.Publication = e.dsn, e.table, slot(name), e.pub
	c.Reconnect = wal.BackoffConfig{Min: 50 * time.Millisecond, Max: 500 * time.Millisecond}
	if short {
		c.StatusInterval, c.WalSenderTimeout, c.ReceiveTimeout = 300*time.Millisecond, time.Second, e.ReadTimeout()
		c.BufferBytes = 1 // the first transaction fills the queue: the reader pauses while the consumer blocks
	}
	src, err := wal.New(c, name, seedCols, zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.InfoLevel), m, nil)
	if err != nil {
		t.Fatal(err)
	}
	return src
}

func (e *postgresEnv) ReadTimeout() time.Duration { return 2 * time.Second }

func (e *postgresEnv) Commit(t *testing.T, stmts ...string) {
	t.Helper()
	ctx := context.Background()
	tx, err := e.db.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range stmts {
		if _, err := tx.Exec(ctx, s); err != nil {
			tx.Rollback(ctx)
			t.Fatalf("%s: %v", s, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
}

func (e *postgresEnv) Insert(id string) string {
	return fmt.Sprintf(`INSERT INTO %s (message_id, aggregate_type, aggregate_id, event_type, payload) VALUES ('%s', 'ORDER', 'agg-%s', 'ORDER_CREATED', '{"id": "%s"}')`,
		e.table, id, id, id)
}

func (e *postgresEnv) Update(id string) string {
	return fmt.Sprintf("UPDATE %s SET status = status + 1 WHERE message_id = '%s'", e.table, id)
}

func (e *postgresEnv) Delete(id string) string {
	return fmt.Sprintf("DELETE FROM %s WHERE message_id = '%s'", e.table, id)
}

// KillStream terminates the walsender that holds connector name's slot.
func (e *postgresEnv) KillStream(t *testing.T, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		var pid int32
		err := e.db.QueryRow(ctx, `SELECT coalesce(active_pid, 0) FROM pg_replication_slots WHERE slot_name = $1`, slot(name)).Scan(&pid)
		if err == nil && pid != 0 {
			e.exec(t, `SELECT pg_terminate_backend($1)`, pid)
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("no walsender holds slot %s: %v", slot(name), err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// GonePosition is a position behind the slot's confirmed_flush_lsn: the
// slot cannot stream it again.
func (e *postgresEnv) GonePosition(t *testing.T, name string) (outboxcdc.Position, error) {
	t.Helper()
	e.dropSlot(t, name)
	e.exec(t, `SELECT pg_create_logical_replication_slot($1, 'pgoutput')`, slot(name))
	return outboxcdc.MakePosition(wal.Kind, "0/1"), wal.ErrBehindSlot
}

func (e *postgresEnv) Compare(a, b outboxcdc.Position) (int, error) { return wal.Compare(a, b) }
