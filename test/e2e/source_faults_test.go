package e2e

// Source-side fault scenarios of issue 4, run against the real binary, the
// local MariaDB/PostgreSQL and kfake: the replication connection cut while
// multi-row transactions commit, a checkpoint the server cannot resume
// (purged binlog, GTIDs of another server), a server_id taken by another
// connector, a dropped Postgres slot, ALTER TABLE while streaming, and a
// checkpoint written by the other kind of source. Each test asserts the
// exit status and message, and reads the topics back.
//
// Helpers here are prefixed src so they do not collide with other files of
// the package.

import (
	"context"
	"database/sql"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
	"github.com/outbox-cdc/outbox-cdc/checkpoint"
	"github.com/outbox-cdc/outbox-cdc/test/testenv"
)

// srcSaveCheckpoint writes pos as a valid checkpoint file at path.
func srcSaveCheckpoint(t *testing.T, path string, pos outboxcdc.Position) []byte {
	t.Helper()
	f, err := checkpoint.NewFile(checkpoint.FileConfig{Path: path}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Save(context.Background(), pos); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// srcSlot is the slot (and publication) name postgresBackend configured.
func srcSlot(t *testing.T) string { return strings.ReplaceAll(testObjectName(t), "-", "_") }

func srcSlotExists(t *testing.T, db *sql.DB, slot string) bool {
	t.Helper()
	var n int
	if err := db.QueryRow("SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1", slot).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n > 0
}

func mustContain(t *testing.T, out string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(out, w) {
			t.Fatalf("output does not mention %q:\n%s", w, out)
		}
	}
}

var streamStarted = regexp.MustCompile(`"connection_id":(\d+)[^\n]*"message":"binlog stream started"`)

// cutReplication kills the connector's replication connection on the
// server (the binlog dump thread; the walsender) and waits until the
// connector has reconnected with a new one.
func cutReplication(t *testing.T, b *backend, c *testenv.Connector) {
	t.Helper()
	switch b.kind {
	case "mysql":
		current := func() string {
			m := streamStarted.FindAllStringSubmatch(c.Log(), -1)
			if len(m) == 0 {
				return ""
			}
			return m[len(m)-1][1]
		}
		id := current()
		if id == "" {
			t.Fatalf("no binlog stream logged:\n%s", c.Log())
		}
		if _, err := b.db.Exec("KILL " + id); err != nil {
			t.Fatalf("KILL %s: %v", id, err)
		}
		testenv.Eventually(t, 20*time.Second, "a new binlog dump connection", func() bool { return current() != id })
	case "postgres":
		slot := srcSlot(t)
		pid := func() int {
			var p sql.NullInt64
			b.db.QueryRow("SELECT active_pid FROM pg_replication_slots WHERE slot_name = $1 AND active", slot).Scan(&p)
			return int(p.Int64)
		}
		old := pid()
		if old == 0 {
			t.Fatal("the slot has no active walsender")
		}
		if _, err := b.db.Exec("SELECT pg_terminate_backend($1)", old); err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, 20*time.Second, "a new walsender", func() bool { p := pid(); return p != 0 && p != old })
	}
}

// TestSourceConnectionCut: while a writer commits transactions of 1..5
// outbox rows, the replication connection is killed on the server three
// times (KILL of the binlog dump thread; pg_terminate_backend of the
// walsender). The connector reconnects by itself with backoff (the
// reconnect metric counts each), never exits, resumes at a transaction
// boundary and delivers every committed row exactly once: nothing from a
// half-read transaction is emitted twice or lost.
func TestSourceConnectionCut(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		_, brokers := testenv.Kafka(t)
		cfg := b.config(t, connName(t, "e2e-conncut-"+b.kind), brokers)
		c := testenv.Start(t, cfg, "OUTBOX_CDC_SOURCE_RECONNECT_MIN=50ms", "OUTBOX_CDC_SOURCE_RECONNECT_MAX=1s")
		cons := newConsumer(t, brokers, `outbox\.event\..*`)
		w := startWriter(t, b, "cut", 600, 3*time.Millisecond)
		for i := 0; i < 3; i++ {
			time.Sleep(300 * time.Millisecond) // a deliberate gap between cuts, while the writer commits
			select {
			case <-w.done:
				t.Fatal("the writer finished before every cut: make it write longer")
			default:
			}
			cutReplication(t, b, c)
		}
		want := w.wait()
		got := cons.waitFor(t, len(want), 30*time.Second)
		got = append(got, cons.quiet(t, 500*time.Millisecond)[len(got):]...)
		checkDelivery(t, got, want, 3, true)
		if n := c.Metric("outbox_cdc_source_reconnects_total"); n < 3 {
			t.Fatalf("outbox_cdc_source_reconnects_total = %v, want >= 3", n)
		}
		if n := c.Metric("outbox_cdc_source_connected"); n != 1 {
			t.Fatalf("outbox_cdc_source_connected = %v after reconnecting, want 1", n)
		}
		if err := c.Stop(15 * time.Second); err != nil {
			t.Fatalf("SIGTERM exit: %v", err)
		}
	})
}

// TestSourceBinlogPositionGone: a checkpoint naming a binlog file the
// server does not have (purged), a MariaDB GTID beyond the server's binlog,
// and a GTID of a replication domain the server never had (a failover to a
// server without our history) each make the connector exit 1 before
// streaming, with a message naming the missing file/GTID and the recovery
// choices. It never jumps to another position: rows committed meanwhile
// are not delivered, and the checkpoint file is left as it was. `check`
// reports the same as a FAIL of mysql.position.
func TestSourceBinlogPositionGone(t *testing.T) {
	b := mysqlBackend(t)
	_, brokers := testenv.Kafka(t)
	cfg := b.config(t, connName(t, "e2e-posgone"), brokers)
	var state string
	if err := b.db.QueryRow("SELECT @@GLOBAL.gtid_binlog_pos").Scan(&state); err != nil {
		t.Fatal(err)
	}
	domain0 := "0-1-1"
	for _, g := range strings.Split(state, ",") {
		if strings.HasPrefix(g, "0-") {
			domain0 = g
		}
	}
	b.insertTx(t, []row{{"gone-1", "ORDER", "A-1", "E", `{}`}}, true)
	cases := []struct {
		name string
		pos  outboxcdc.Position
		want []string
	}{
		{"purged file", "mysql:file:mariadb-bin.000000:4", []string{"binlog file mariadb-bin.000000", "is not on the server", "purged"}},
		{"gtid ahead", "mysql:mariadb-gtid:0-1-999999999999", []string{"GTID 0-1-999999999999 is not in this server's binlog", "The lossless way back: if this server is a promoted replica", "position set --config FILE --to mysql:mariadb-gtid:0-1-"}},
		{"foreign domain", outboxcdc.Position("mysql:mariadb-gtid:" + domain0 + ",4242-9-7"), []string{"4242-9-7", "replication domain 4242", "never contained"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cpPath := filepath.Join(t.TempDir(), "checkpoint")
			saved := srcSaveCheckpoint(t, cpPath, tc.pos)
			env := []string{"OUTBOX_CDC_CHECKPOINT_PATH=" + cpPath}
			code, out := testenv.Run(t, 30*time.Second, env, "run", "--config", cfg)
			if code != 1 {
				t.Fatalf("exit %d, want 1:\n%s", code, out)
			}
			mustContain(t, out, append([]string{"binlog position not available on the server", "move the checkpoint file", "source.start"}, tc.want...)...)
			if now, _ := os.ReadFile(cpPath); string(now) != string(saved) {
				t.Fatal("the checkpoint changed")
			}
			code, out = testenv.Run(t, 30*time.Second, env, "check", "--config", cfg)
			if code != 1 || !regexp.MustCompile(`FAIL\s+mysql\.position`).MatchString(out) {
				t.Fatalf("check: exit %d, want 1 with FAIL mysql.position:\n%s", code, out)
			}
		})
	}
	cons := newConsumer(t, brokers, `outbox\.event\..*`)
	if got := cons.quiet(t, time.Second); len(got) != 0 {
		t.Fatalf("%d records delivered from a refused checkpoint: %+v", len(got), got)
	}
}

// TestSourceServerIDConflict: two connectors (different names and
// checkpoints) configured with the same server_id. MariaDB lets the newest
// replica stream and tells the older one (error 4052); the older connector
// exits 1 promptly naming the server_id, without reconnecting (which would
// kick the other in turn), and the newer one keeps delivering.
func TestSourceServerIDConflict(t *testing.T) {
	b := mysqlBackend(t)
	_, brokers := testenv.Kafka(t)
	// A server_id of this run only: a concurrent run of this test on the
	// same server must not take part in the conflict.
	sid := strconv.FormatUint(uint64(1<<31+rand.Uint32N(1<<31)), 10)
	env := []string{"OUTBOX_CDC_SOURCE_SERVER_ID=" + sid}
	first := testenv.Start(t, b.config(t, connName(t, "e2e-sid-a"), brokers), env...)
	second := testenv.Launch(t, b.config(t, connName(t, "e2e-sid-b"), brokers), env...)
	var loser, winner *testenv.Connector
	select {
	case <-first.Done():
		loser, winner = first, second
	case <-second.Done():
		loser, winner = second, first
	case <-time.After(20 * time.Second):
		t.Fatal("two connectors with one server_id both kept running")
	}
	if code := testenv.ExitCode(loser.Err()); code != 1 {
		t.Fatalf("exit %d, want 1:\n%s", code, loser.Log())
	}
	log := loser.Log()
	mustContain(t, log, "server_id already used by another replica", "server_id "+sid, "give each connector its own server_id")
	if n := strings.Count(log, `"message":"binlog stream started"`); n > 1 {
		t.Fatalf("the refused connector streamed %d times: it reconnected and fought the other:\n%s", n, log)
	}
	// The survivor streams on.
	testenv.Eventually(t, 20*time.Second, "the remaining connector to be ready", func() bool {
		_, body := winner.Readyz()
		return strings.Contains(body, `"status": "ready"`)
	})
	cons := newConsumer(t, brokers, `outbox\.event\..*`)
	b.insertTx(t, []row{{"sid-1", "ORDER", "A-1", "E", `{}`}}, true)
	got := cons.waitFor(t, 1, 20*time.Second)
	got = append(got, cons.quiet(t, 500*time.Millisecond)[len(got):]...)
	checkDelivery(t, got, []string{"sid-1"}, 3, true)
	select {
	case <-winner.Done():
		t.Fatalf("the remaining connector exited too:\n%s", winner.Log())
	default:
	}
	if err := winner.Stop(15 * time.Second); err != nil {
		t.Fatalf("SIGTERM exit: %v", err)
	}
}

// TestSourcePostgresSlotDropped: the slot is dropped while the connector
// is down and its checkpoint exists. The restart exits 1 saying the slot is
// gone, was not created again, and the lossless way first (the re-publish
// from the table); no slot is created, the checkpoint is untouched, and
// `check` fails postgres.slot the same way. Following the re-publish
// delivers the row committed while the slot was gone.
func TestSourcePostgresSlotDropped(t *testing.T) {
	b := postgresBackend(t)
	_, brokers := testenv.Kafka(t)
	cpPath := filepath.Join(t.TempDir(), "checkpoint")
	env := []string{"OUTBOX_CDC_CHECKPOINT_PATH=" + cpPath}
	cfg := b.config(t, connName(t, "e2e-slotdropped"), brokers)
	c := testenv.Start(t, cfg, env...)
	cons := newConsumer(t, brokers, `outbox\.event\..*`)
	b.insertTx(t, []row{{"sd-1", "ORDER", "A-1", "E", `{}`}}, true)
	cons.waitFor(t, 1, 20*time.Second)
	if err := c.Stop(15 * time.Second); err != nil {
		t.Fatalf("SIGTERM exit: %v", err)
	}
	saved, err := os.ReadFile(cpPath)
	if err != nil {
		t.Fatal(err)
	}
	slot := srcSlot(t)
	testenv.Eventually(t, 10*time.Second, "the slot to be dropped", func() bool {
		_, err := b.db.Exec("SELECT pg_drop_replication_slot($1)", slot)
		return err == nil
	})
	b.insertTx(t, []row{{"sd-lost", "ORDER", "A-1", "E", `{}`}}, true)

	code, out := testenv.Run(t, 30*time.Second, env, "run", "--config", cfg)
	if code != 1 {
		t.Fatalf("exit %d, want 1:\n%s", code, out)
	}
	mustContain(t, out, "replication slot \\\""+slot+"\\\" does not exist, but the checkpoint", "NOT created again",
		`to re-publish the rows still in the outbox table`, `source.pending.where: \"1 = 1\"`, "Failover runbook")
	if srcSlotExists(t, b.db, slot) {
		t.Fatal("the slot was recreated")
	}
	if now, _ := os.ReadFile(cpPath); string(now) != string(saved) {
		t.Fatal("the checkpoint changed")
	}
	code, out = testenv.Run(t, 30*time.Second, env, "check", "--config", cfg)
	if code != 1 || !regexp.MustCompile(`FAIL\s+postgres\.slot\s+replication slot "`+slot+`" does not exist, but the checkpoint`).MatchString(out) {
		t.Fatalf("check: exit %d, want 1 with FAIL postgres.slot:\n%s", code, out)
	}
	if srcSlotExists(t, b.db, slot) {
		t.Fatal("check created the slot")
	}
	got := cons.quiet(t, 500*time.Millisecond)
	checkDelivery(t, got, []string{"sd-1"}, 3, true)

	// The re-publish the message names: the slot is created in the
	// snapshot the rows are read in.
	if err := os.Remove(cpPath); err != nil {
		t.Fatal(err)
	}
	c = testenv.Start(t, cfg, append(env, "OUTBOX_CDC_SOURCE_START=pending", "OUTBOX_CDC_SOURCE_PENDING_WHERE=1 = 1")...)
	got = cons.waitFor(t, 3, 30*time.Second)
	got = append(got, cons.quiet(t, 500*time.Millisecond)[len(got):]...)
	checkDelivery(t, got, []string{"sd-1", "sd-lost"}, 3, false)
	if err := c.Stop(15 * time.Second); err != nil {
		t.Fatalf("SIGTERM exit: %v", err)
	}
}

// TestSourceAlterTable: while the connector streams, a column is added to
// the outbox table, then an extra (non-role) column is dropped: rows keep
// flowing. Then a role column (event_type) is dropped: the connector exits
// 1 naming the column, after delivering every row committed before.
func TestSourceAlterTable(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		_, brokers := testenv.Kafka(t)
		c := testenv.Start(t, b.config(t, connName(t, "e2e-alter-"+b.kind), brokers))
		cons := newConsumer(t, brokers, `outbox\.event\..*`)
		exec := func(q string) {
			t.Helper()
			if _, err := b.db.Exec(q); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
		b.insertTx(t, []row{{"alt-1", "ORDER", "A-1", "E", `{"n": 1}`}}, true)
		exec("ALTER TABLE " + b.table() + " ADD COLUMN tenant VARCHAR(16) NULL")
		b.insertTx(t, []row{{"alt-2", "ORDER", "A-1", "E", `{"n": 2}`}, {"alt-3", "ORDER", "A-2", "E", `{"n": 3}`}}, true)
		exec("ALTER TABLE " + b.table() + " DROP COLUMN retry_count")
		b.insertTx(t, []row{{"alt-4", "ORDER", "A-1", "E", `{"n": 4}`}}, true)
		want := []string{"alt-1", "alt-2", "alt-3", "alt-4"}
		got := cons.waitFor(t, len(want), 20*time.Second)
		checkDelivery(t, got, want, 3, true)

		exec("ALTER TABLE " + b.table() + " DROP COLUMN event_type")
		ph := "?, ?, ?, ?"
		if b.kind == "postgres" {
			ph = "$1, $2, $3, $4"
		}
		if _, err := b.db.Exec("INSERT INTO "+b.table()+" (message_id, aggregate_type, aggregate_id, payload) VALUES ("+ph+")",
			"alt-5", "ORDER", "A-1", `{"n": 5}`); err != nil {
			t.Fatal(err)
		}
		select {
		case <-c.Done():
		case <-time.After(20 * time.Second):
			t.Fatalf("still running after a role column was dropped:\n%s", c.Log())
		}
		if code := testenv.ExitCode(c.Err()); code != 1 {
			t.Fatalf("exit %d, want 1:\n%s", code, c.Log())
		}
		mustContain(t, c.Log(), "event_type")
		if b.kind == "mysql" {
			mustContain(t, c.Log(), "has no column event_type")
		} else {
			mustContain(t, c.Log(), "dropped")
		}
		got = append(got, cons.quiet(t, 500*time.Millisecond)[len(got):]...)
		checkDelivery(t, got, want, 3, true)
	})
}

// TestSourceForeignCheckpoint: a valid checkpoint file written by the other
// kind of source makes the connector exit 1 before connecting to the
// source, saying whose checkpoint it is; the file is unchanged and (for
// Postgres) no slot is created.
func TestSourceForeignCheckpoint(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		_, brokers := testenv.Kafka(t)
		cpPath := filepath.Join(t.TempDir(), "checkpoint")
		foreign, other := outboxcdc.Position("postgres:0/16B3748"), "postgres"
		if b.kind == "postgres" {
			foreign, other = "mysql:mariadb-gtid:0-1-42", "mysql"
		}
		saved := srcSaveCheckpoint(t, cpPath, foreign)
		b.insertTx(t, []row{{"fc-1", "ORDER", "A-1", "E", `{}`}}, true)
		code, out := testenv.Run(t, 30*time.Second, []string{"OUTBOX_CDC_CHECKPOINT_PATH=" + cpPath},
			"run", "--config", b.config(t, connName(t, "e2e-foreign-"+b.kind), brokers))
		if code != 1 {
			t.Fatalf("exit %d, want 1:\n%s", code, out)
		}
		mustContain(t, out, "checkpoint belongs to another source", `written by a \"`+other+`\" source`, `"hint":"point the checkpoint at this source's own store`)
		if now, _ := os.ReadFile(cpPath); string(now) != string(saved) {
			t.Fatal("the checkpoint changed")
		}
		if b.kind == "postgres" && srcSlotExists(t, b.db, srcSlot(t)) {
			t.Fatal("a slot was created for a refused checkpoint")
		}
		cons := newConsumer(t, brokers, `outbox\.event\..*`)
		if got := cons.quiet(t, 500*time.Millisecond); len(got) != 0 {
			t.Fatalf("records delivered: %+v", got)
		}
	})
}
