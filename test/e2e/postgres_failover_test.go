package e2e

// PostgreSQL failover through the binary: a private primary and a physical
// standby built with pg_basebackup (testenv.PrivatePostgres), the
// connector and a writer reaching the primary through a proxy that plays
// the virtual IP, the standby receiving WAL through another proxy that can
// cut it (so it falls behind). The primary is killed, the standby
// promoted, the address moved; what the connector does then is checked
// against the rows the new primary holds.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-cdc/outbox-cdc/checkpoint"
	"github.com/outbox-cdc/outbox-cdc/test/testenv"
	"github.com/outbox-cdc/outbox-cdc/wal"
)

const failoverSlot = "outbox_failover"

// failoverRig is a primary, its standby and the two proxies.
type failoverRig struct {
	primary, standby *testenv.PGServer
	feed             *testenv.Proxy // the standby's replication from the primary
	vip              *testenv.Proxy // the connector and the writer to the current primary
	brokers          []string
	cfg, cp          string
	env              []string
}

func newFailoverRig(t *testing.T) *failoverRig {
	p := testenv.PrivatePostgres(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, p.DSN())
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range testenv.SeedTablePostgres("public.outbox_message") {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	conn.Close(ctx)
	r := &failoverRig{primary: p}
	r.feed = testenv.NewProxy(t, p.Addr())
	r.standby = p.Standby(t, r.feed.Addr())
	r.vip = testenv.NewProxy(t, p.Addr())
	_, r.brokers = testenv.Kafka(t)
	r.cp = filepath.Join(t.TempDir(), "checkpoint")
	r.cfg = writeConfig(t, fmt.Sprintf(`
name: %s
source:
  type: postgres
  dsn: %q
  table: public.outbox_message
  slot: %s
  publication: %s
route:
  preset: seed
  topic: "outbox.event.{aggregate_type}"
sink:
  type: kafka
  brokers: [%q]
checkpoint:
  type: file
  path: %q
`, connName(t, "e2e-failover-pg"), r.viaVIP(), failoverSlot, failoverSlot, r.brokers[0], r.cp))
	r.env = []string{"OUTBOX_CDC_SOURCE_RECONNECT_MAX=1s", "OUTBOX_CDC_SOURCE_CONNECT_TIMEOUT=3s"}
	return r
}

func (r *failoverRig) viaVIP() string {
	return fmt.Sprintf("postgres://postgres@%s/test?sslmode=disable&connect_timeout=3", r.vip.Addr())
}

// queryOn runs q on s and returns its rows' first column as text.
func queryOn(t *testing.T, s *testenv.PGServer, q string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, q)
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return out
}

// lsnOn runs a query returning one value (a pg_lsn as text) on s.
func lsnOn(t *testing.T, s *testenv.PGServer, q string) string {
	t.Helper()
	v := queryOn(t, s, q)
	if len(v) != 1 {
		t.Fatalf("%s: %d rows", q, len(v))
	}
	return v[0]
}

// lsnLE compares two LSNs on a server: a <= b.
func lsnLE(t *testing.T, s *testenv.PGServer, a, b string) bool {
	return lsnOn(t, s, fmt.Sprintf("SELECT (('%s'::pg_lsn) <= ('%s'::pg_lsn))::text", a, b)) == "true"
}

// behindBy is the WAL the standby lacks for the connector's checkpoint to
// lie well past the fork point: more than the promotion and the slot's
// creation write on the new timeline, so that rows committed there fall
// before the checkpoint (as in a standby a few seconds behind).
const behindBy = 256 << 10

// pastBy reports whether LSN a is more than n bytes after b.
func pastBy(t *testing.T, s *testenv.PGServer, a, b string, n int) bool {
	return lsnOn(t, s, fmt.Sprintf("SELECT (('%s'::pg_lsn) - ('%s'::pg_lsn) > %d)::text", a, b, n)) == "true"
}

// idsOn returns the message ids in the outbox table of s: what the server
// holds is the truth the delivery is judged by.
func idsOn(t *testing.T, s *testenv.PGServer) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	for _, id := range queryOn(t, s, "SELECT message_id FROM outbox_message") {
		out[id] = true
	}
	return out
}

// checkpointLSN is the LSN of the connector's checkpoint ("" if none).
func (r *failoverRig) checkpointLSN(t *testing.T) string {
	s, err := checkpoint.ReadFile(r.cp)
	if err != nil {
		return ""
	}
	lsn, err := wal.ParsePosition(s.Position)
	if err != nil {
		t.Fatalf("checkpoint %q: %v", s.Position, err)
	}
	return lsn.String()
}

// rowWriter commits one outbox row per transaction through the virtual
// IP, reconnecting after errors, as an application does through a
// failover, until stopped.
type rowWriter struct {
	mu     sync.Mutex
	paused bool
	n      int
	stop   chan struct{}
	done   chan struct{}
}

func startRowWriter(t *testing.T, dsn, prefix string) *rowWriter {
	w := &rowWriter{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		var conn *pgx.Conn
		defer func() {
			if conn != nil {
				conn.Close(context.Background())
			}
		}()
		for i := 1; ; i++ { // an id is never reused: a failed commit may have happened
			select {
			case <-w.stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
			w.mu.Lock()
			paused := w.paused
			w.mu.Unlock()
			if paused {
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			if conn == nil {
				c, err := pgx.Connect(ctx, dsn)
				if err != nil {
					cancel()
					time.Sleep(100 * time.Millisecond)
					continue
				}
				conn = c
			}
			_, err := conn.Exec(ctx, `INSERT INTO outbox_message (message_id, aggregate_type, aggregate_id, event_type, payload) VALUES ($1, 'ORDER', $2, 'E', '{}')`,
				fmt.Sprintf("%s-%d", prefix, i), fmt.Sprintf("agg-%d", i%7))
			cancel()
			if err != nil {
				conn.Close(context.Background())
				conn = nil
				continue
			}
			w.mu.Lock()
			w.n++
			w.mu.Unlock()
		}
	}()
	t.Cleanup(w.halt)
	return w
}

func (w *rowWriter) setPaused(p bool) {
	w.mu.Lock()
	w.paused = p
	w.mu.Unlock()
}

func (w *rowWriter) committed() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.n
}

func (w *rowWriter) halt() {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	<-w.done
}

// judge compares what the consumer read with the rows the new primary
// holds: lost rows are on the server and never delivered, phantoms were
// delivered from the old primary's history after the fork and are not on
// the server.
func judge(got []consumed, truth map[string]bool) (lost, phantoms []string) {
	seen := map[string]bool{}
	for _, r := range got {
		seen[r.Headers["id"]] = true
	}
	for id := range truth {
		if !seen[id] {
			lost = append(lost, id)
		}
	}
	for id := range seen {
		if !truth[id] {
			phantoms = append(phantoms, id)
		}
	}
	return lost, phantoms
}

// waitDelivered waits until every row on s was read, or fails with how
// many were lost.
func waitDelivered(t *testing.T, cons *consumer, s *testenv.PGServer, timeout time.Duration, what string) ([]consumed, []string) {
	t.Helper()
	truth := idsOn(t, s)
	deadline := time.Now().Add(timeout)
	for {
		got := cons.quiet(t, 500*time.Millisecond)
		lost, phantoms := judge(got, truth)
		if len(lost) == 0 {
			return got, phantoms
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d of the %d rows on the new primary were never delivered (e.g. %s)", what, len(lost), len(truth), lost[0])
		}
	}
}

// waitRefusal waits for the connector to stop (exit 1) after the
// failover, and fails with what it lost if it streams on instead.
func (r *failoverRig) waitRefusal(t *testing.T, c *testenv.Connector, cons *consumer) {
	t.Helper()
	select {
	case <-c.Done():
	case <-time.After(60 * time.Second):
		got := cons.quiet(t, 2*time.Second)
		truth := idsOn(t, r.standby)
		lost, phantoms := judge(got, truth)
		t.Fatalf("the connector streamed on after the failover: %d of the %d rows on the new primary lost, %d phantoms from the old timeline; `check` would say:\n%s",
			len(lost), len(truth), len(phantoms), runCheck(t, r.cfg))
	}
	if code := c.WaitExit(10 * time.Second); code != 1 {
		t.Fatalf("exit %d, want 1:\n%s", code, c.Log())
	}
}

// failOver kills the primary, promotes the standby and moves the virtual
// IP to it (closing what went through it).
func (r *failoverRig) failOver(t *testing.T) {
	r.primary.Kill()
	r.standby.Promote(t)
	r.vip.SetTarget(r.standby.Addr())
	r.vip.Heal()
	r.vip.Cut()
}

// TestPostgresFailoverRecreatedSlot: the failover. The standby is
// cut off from the primary while rows keep being committed, so the
// connector's checkpoint lies past the point the standby received; the
// primary is killed, the standby promoted, the address moved.
//
//   - slot created: the connector's slot is created on the new primary (as
//     Patroni does for a permanent slot missing on a new primary, or an
//     operator). The connector refuses the new primary on its reconnect
//     (exit 1): its checkpoint is past the fork point of the server's
//     timeline history. Before the proof, the reconnect streamed from the
//     checkpoint on the new timeline and silently skipped the rows
//     committed there up to it.
//   - no slot: the new primary has no slot; the connector says so, that
//     the server was promoted, and names the re-publish (before: "the slot
//     was dropped", "delete the checkpoint", which loses every row since
//     the promotion).
//
// Either way it refuses again after a restart, `check` fails, and the
// re-publish the message names (no checkpoint, source.start: pending,
// pending.where "1 = 1") delivers every row the new primary holds.
func TestPostgresFailoverRecreatedSlot(t *testing.T) {
	for _, create := range []bool{true, false} {
		name := "slot-created"
		if !create {
			name = "no-slot"
		}
		t.Run(name, func(t *testing.T) { testFailoverWithoutCarriedSlot(t, create) })
	}
}

func testFailoverWithoutCarriedSlot(t *testing.T, create bool) {
	r := newFailoverRig(t)
	c := testenv.Start(t, r.cfg, r.env...)
	cons := newConsumer(t, r.brokers, `outbox\.event\..*`)
	w := startRowWriter(t, r.viaVIP(), "fo")
	testenv.Eventually(t, 60*time.Second, "rows delivered and replicated", func() bool {
		return len(cons.quiet(t, 100*time.Millisecond)) >= 50 && len(idsOn(t, r.standby)) >= 50
	})

	r.feed.Silence() // the standby falls behind
	received := lsnOn(t, r.standby, "SELECT pg_last_wal_receive_lsn()::text")
	testenv.Eventually(t, 60*time.Second, "the checkpoint past what the standby received", func() bool {
		ck := r.checkpointLSN(t)
		return ck != "" && pastBy(t, r.primary, ck, received, behindBy)
	})
	r.failOver(t)
	if create {
		lsnOn(t, r.standby, fmt.Sprintf("SELECT lsn::text FROM pg_create_logical_replication_slot('%s', 'pgoutput')", failoverSlot))
	}
	time.Sleep(2 * time.Second) // rows committed on the new primary
	w.halt()

	r.waitRefusal(t, c, cons)
	refusal, check := "past the point", `FAIL\s+postgres\.position\s+the checkpoint \(LSN [0-9A-F/]+ on timeline 1`
	if !create {
		refusal, check = "was promoted since", `FAIL\s+postgres\.slot\s+replication slot "`+failoverSlot+`" does not exist on this server`
	}
	mustContain(t, c.Log(), "not the one the checkpoint came from", refusal, "source.start: pending", `source.pending.where: \"1 = 1\"`, "Failover runbook")
	if strings.Contains(c.Log(), "delete the checkpoint") {
		t.Fatalf("the refusal advises deleting the checkpoint:\n%s", c.Log())
	}
	if out := runCheck(t, r.cfg); !regexp.MustCompile(check).MatchString(out) {
		t.Fatalf("check does not fail as %s:\n%s", check, out)
	}
	c = testenv.Launch(t, r.cfg, r.env...)
	if code := c.WaitExit(60 * time.Second); code != 1 || !strings.Contains(c.Log(), refusal) {
		t.Fatalf("restarted: exit %d, want 1 refusing the checkpoint:\n%s", code, c.Log())
	}
	before, _ := judge(cons.quiet(t, time.Second), idsOn(t, r.standby))

	// The re-publish the message names.
	if err := os.Remove(r.cp); err != nil {
		t.Fatal(err)
	}
	c = testenv.Start(t, r.cfg, append(r.env, "OUTBOX_CDC_SOURCE_START=pending", "OUTBOX_CDC_SOURCE_PENDING_WHERE=1 = 1")...)
	got, phantoms := waitDelivered(t, cons, r.standby, 60*time.Second, "after the re-publish")
	t.Logf("failover to a standby behind (received up to %s), slot created on the new primary %v: the connector stopped with %d of %d rows undelivered; "+
		"after the re-publish 0 lost, %d records for %d rows, %d phantoms (delivered from the old primary after the fork; not on the new one)",
		received, create, len(before), len(idsOn(t, r.standby)), len(got), len(idsOn(t, r.standby)), len(phantoms))
	if err := c.Stop(15 * time.Second); err != nil {
		t.Fatalf("SIGTERM exit: %v", err)
	}
}

func runCheck(t *testing.T, cfg string) string {
	_, out := testenv.Run(t, 60*time.Second, nil, "check", "--config", cfg)
	return out
}

var rewindTo = regexp.MustCompile(`position set --to (postgres:[0-9A-F]+/[0-9A-F]+,timeline=2,system=\d+) --force`)

// TestPostgresFailoverCarriedSlot: the slot is carried to the standby
// before the failover, as Patroni's permanent slots do (the primary's slot
// state copied into the standby's pg_replslot), so the new primary has a
// slot that confirmed at most what the connector checkpointed.
//
//   - caught up: the standby had received everything the connector read.
//     The proof passes on the new timeline (the checkpoint is before the
//     fork, the slot not past it): the connector streams on, and every row
//     of the new primary is delivered.
//   - behind: the checkpoint is past the fork. The connector refuses it
//     (exit 1) and names the fork point as the position to go back to:
//     `position set --to` it, and every row of the new primary is
//     delivered. Before the proof the connector streamed on from the
//     checkpoint and skipped the new primary's rows up to it.
func TestPostgresFailoverCarriedSlot(t *testing.T) {
	for _, behind := range []bool{false, true} {
		name := "caught-up"
		if behind {
			name = "behind"
		}
		t.Run(name, func(t *testing.T) {
			r := newFailoverRig(t)
			c := testenv.Start(t, r.cfg, r.env...)
			cons := newConsumer(t, r.brokers, `outbox\.event\..*`)
			w := startRowWriter(t, r.viaVIP(), "cs")
			testenv.Eventually(t, 60*time.Second, "rows delivered and replicated", func() bool {
				return len(cons.quiet(t, 100*time.Millisecond)) >= 30 && len(idsOn(t, r.standby)) >= 30
			})
			r.standby.CopySlot(t, r.primary, failoverSlot)
			time.Sleep(time.Second)
			if behind {
				r.feed.Silence()
				received := lsnOn(t, r.standby, "SELECT pg_last_wal_receive_lsn()::text")
				testenv.Eventually(t, 60*time.Second, "the checkpoint past what the standby received", func() bool {
					ck := r.checkpointLSN(t)
					return ck != "" && pastBy(t, r.primary, ck, received, behindBy)
				})
			} else {
				w.setPaused(true)
				testenv.Eventually(t, 60*time.Second, "everything delivered and the standby caught up", func() bool {
					want := w.committed()
					return len(cons.quiet(t, 100*time.Millisecond)) >= want &&
						lsnLE(t, r.primary, lsnOn(t, r.primary, "SELECT pg_current_wal_lsn()::text"), lsnOn(t, r.standby, "SELECT pg_last_wal_receive_lsn()::text"))
				})
				r.vip.Silence() // the connector reads nothing more from the old primary
				received := lsnOn(t, r.standby, "SELECT pg_last_wal_receive_lsn()::text")
				if ck := r.checkpointLSN(t); !lsnLE(t, r.primary, ck, received) {
					t.Fatalf("checkpoint %s past the standby's %s although caught up", ck, received)
				}
			}
			r.failOver(t)
			w.setPaused(false)
			time.Sleep(2 * time.Second) // rows committed on the new primary
			w.halt()

			if !behind {
				got, phantoms := waitDelivered(t, cons, r.standby, 60*time.Second, "after the failover")
				mustContain(t, c.Log(), "streaming on the new timeline")
				if len(phantoms) != 0 {
					t.Fatalf("%d phantoms although the standby had everything", len(phantoms))
				}
				if s, _ := checkpoint.ReadFile(r.cp); !strings.Contains(string(s.Position), ",timeline=2,") {
					t.Fatalf("the checkpoint %q is not on timeline 2", s.Position)
				}
				t.Logf("caught-up failover with the carried slot: streamed on, all %d rows of the new primary delivered (%d records)", len(idsOn(t, r.standby)), len(got))
				if err := c.Stop(15 * time.Second); err != nil {
					t.Fatalf("SIGTERM exit: %v", err)
				}
				return
			}
			r.waitRefusal(t, c, cons)
			m := rewindTo.FindStringSubmatch(c.Log())
			if m == nil || !strings.Contains(c.Log(), "lossless: the slot still holds everything after") {
				t.Fatalf("the refusal does not name the fork point to go back to:\n%s", c.Log())
			}
			if out := runCheck(t, r.cfg); !strings.Contains(out, m[1]) || !regexp.MustCompile(`FAIL\s+postgres\.position`).MatchString(out) {
				t.Fatalf("check does not fail postgres.position naming %s:\n%s", m[1], out)
			}
			before, _ := judge(cons.quiet(t, time.Second), idsOn(t, r.standby))
			code, out := testenv.Run(t, 60*time.Second, nil, "position", "set", "--config", r.cfg, "--to", m[1], "--force")
			if code != 0 {
				t.Fatalf("position set --to %s: exit %d:\n%s", m[1], code, out)
			}
			c = testenv.Start(t, r.cfg, r.env...)
			got, phantoms := waitDelivered(t, cons, r.standby, 60*time.Second, "after position set to the fork point")
			t.Logf("failover to a standby behind, carried slot: the connector stopped with %d of %d rows undelivered and named %s; after position set: 0 lost, %d records, %d phantoms",
				len(before), len(idsOn(t, r.standby)), m[1], len(got), len(phantoms))
			if err := c.Stop(15 * time.Second); err != nil {
				t.Fatalf("SIGTERM exit: %v", err)
			}
		})
	}
}
