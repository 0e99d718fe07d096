package e2e

// Postgres source faults through the real binary: a silent network path
// to the server, a logical decoding message that is not JSON, and a
// checkpoint moved behind the replication slot (with the replay the README
// offers instead).

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
	"github.com/outbox-cdc/outbox-cdc/checkpoint"
	"github.com/outbox-cdc/outbox-cdc/test/testenv"
	"github.com/outbox-cdc/outbox-cdc/wal"
)

// postgresViaProxy is the PostgreSQL DSN pointed at a testenv.Proxy in
// front of the server.
func postgresViaProxy(t *testing.T) (string, *testenv.Proxy) {
	u, err := url.Parse(testenv.PostgresDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	proxy := testenv.NewProxy(t, u.Host)
	u.Host = proxy.Addr()
	return u.String(), proxy
}

// TestFaultPostgresSilentPeer: the connector reaches PostgreSQL through a
// proxy that goes silent in both directions (no FIN, no RST) for longer
// than the detection bound, with the defaults (wal_sender_timeout 20s on
// the replication connection, receive timeout 15s), while rows are
// committed directly. The connector notices within the bound
// (outbox_cdc_source_connected 0, /readyz 503, /healthz 200), keeps
// retrying without exiting, and once the path heals delivers every row
// exactly once. Detection and catch-up times are logged.
func TestFaultPostgresSilentPeer(t *testing.T) {
	b := postgresBackend(t)
	_, brokers := testenv.Kafka(t)
	dsn, proxy := postgresViaProxy(t)
	cfg := b.config(t, connName(t, "e2e-silent-pg"), brokers)
	c := testenv.Start(t, cfg, "OUTBOX_CDC_SOURCE_DSN="+dsn, "OUTBOX_CDC_SOURCE_RECONNECT_MAX=2s")
	cons := newConsumer(t, brokers, `outbox\.event\..*`)
	b.insertTx(t, []row{{"sil-0", "ORDER", "agg-0", "E", `{"seq": 0}`}}, true)
	cons.waitFor(t, 1, 20*time.Second)

	const bound = 15 * time.Second // the derived receive timeout with the defaults
	silenced := time.Now()
	proxy.Silence()
	w := startWriter(t, b, "sil", 120, 100*time.Millisecond)
	var detected time.Duration
	testenv.Eventually(t, bound+20*time.Second, "the connector to notice the silent path", func() bool {
		if c.Metric("outbox_cdc_source_connected") == 0 {
			detected = time.Since(silenced)
			return true
		}
		return false
	})
	if h, r := c.Status("/healthz"), c.Status("/readyz"); h != 200 || r != 503 {
		t.Fatalf("while reconnecting: /healthz %d /readyz %d, want 200 and 503", h, r)
	}
	mustContain(t, c.Log(), "nothing received for", "replication stream lost; reconnecting")
	want := append([]string{"sil-0"}, w.wait()...)
	for time.Since(silenced) < bound+10*time.Second {
		time.Sleep(200 * time.Millisecond) // well past the bound: retrying, not exiting
	}
	select {
	case <-c.Done():
		t.Fatalf("the connector exited while the path was silent: %v", c.Err())
	default:
	}
	if got := len(cons.quiet(t, 100*time.Millisecond)); got != 1 {
		t.Fatalf("%d records arrived through a silent path", got-1)
	}

	healed := time.Now()
	proxy.Heal()
	got := cons.waitFor(t, len(want), 90*time.Second)
	catchUp := time.Since(healed)
	got = append(got, cons.quiet(t, 500*time.Millisecond)[len(got):]...)
	checkDelivery(t, got, want, 3, true)
	testenv.Eventually(t, 10*time.Second, "connected again", func() bool { return c.Metric("outbox_cdc_source_connected") == 1 })
	t.Logf("detection bound %s: silence noticed after %s; %d rows committed while silent, all delivered %s after the path healed",
		bound, detected.Round(100*time.Millisecond), len(want)-1, catchUp.Round(100*time.Millisecond))
	if detected > bound+5*time.Second {
		t.Fatalf("detection took %s, bound %s", detected, bound)
	}
	if err := c.Stop(15 * time.Second); err != nil {
		t.Fatalf("SIGTERM exit: %v", err)
	}
}

// TestFaultPostgresBadLogicalMessage: a transactional logical decoding
// message with the outbox prefix whose content is not JSON. With
// on_error: halt the connector exits 1 naming its LSN, after delivering
// what came before, and without logging the content. Restarted with
// on_error: dlq it sends the message to the dead-letter topic (the content
// as the value, the error headers) and delivers what follows.
func TestFaultPostgresBadLogicalMessage(t *testing.T) {
	b := postgresBackend(t)
	_, brokers := testenv.Kafka(t)
	name := connName(t, "e2e-badmsg-pg")
	prefix := "ob_" + testObjectName(t)
	cfg := b.config(t, name, brokers)
	env := []string{"OUTBOX_CDC_SOURCE_MESSAGES_PREFIX=" + prefix}
	c := testenv.Start(t, cfg, env...)
	emit := func(content string) {
		t.Helper()
		if _, err := b.db.Exec("SELECT pg_logical_emit_message(true, $1, $2)", prefix, content); err != nil {
			t.Fatal(err)
		}
	}
	emit(`{"message_id":"msg-ok-1","aggregate_type":"ORDER","aggregate_id":"A-1","event_type":"E","payload":{"n":1}}`)
	emit(`secret-ish content, not JSON`)
	emit(`{"message_id":"msg-ok-2","aggregate_type":"ORDER","aggregate_id":"A-1","event_type":"E","payload":{"n":2}}`)

	code := c.WaitExit(30 * time.Second)
	log := c.Log()
	if code != 1 || !regexp.MustCompile(`bad outbox row at LSN [0-9A-F]+/[0-9A-F]+ \(logical message\)`).MatchString(log) ||
		!strings.Contains(log, "not a JSON object") || !strings.Contains(log, "on_error is halt") {
		t.Fatalf("exit %d, want 1 naming the message's LSN:\n%s", code, log)
	}
	if strings.Contains(log, "secret-ish") {
		t.Fatal("the message content was logged")
	}
	main := byID(rawRecords(t, brokers, `outbox\.event\..*`, 1, 10*time.Second))
	if main["msg-ok-1"] == nil || main["msg-ok-2"] != nil || len(main) != 1 {
		t.Fatalf("after the halt the topic holds %v", keys(main))
	}

	c = testenv.Start(t, cfg, append(env, "OUTBOX_CDC_PIPELINE_ON_ERROR=dlq")...)
	cons := newConsumer(t, brokers, `outbox\.event\..*`)
	got := cons.waitFor(t, 2, 20*time.Second)
	got = append(got, cons.quiet(t, 500*time.Millisecond)[len(got):]...)
	checkDelivery(t, got, []string{"msg-ok-1", "msg-ok-2"}, 3, false)
	dlq := rawRecords(t, brokers, name+`\.dlq`, 1, 10*time.Second)
	if len(dlq) != 1 {
		t.Fatalf("%d dead letters, want 1", len(dlq))
	}
	r := dlq[0]
	class, _ := header(r, "outbox_cdc.error.class")
	msg, _ := header(r, "outbox_cdc.error")
	origin, _ := header(r, "outbox_cdc.origin")
	if string(r.Value) != "secret-ish content, not JSON" || class != "bad_row" || !strings.Contains(msg, "not a JSON object") ||
		!strings.Contains(origin, "logical message") || r.Key != nil {
		t.Fatalf("dead letter: value %q class %q error %q origin %q key %q", r.Value, class, msg, origin, r.Key)
	}
	if v := c.Metric(`outbox_cdc_dlq_records_total{class="bad_row"}`); v != 1 {
		t.Fatalf(`outbox_cdc_dlq_records_total{class="bad_row"} = %v, want 1`, v)
	}
	if err := c.Stop(15 * time.Second); err != nil {
		t.Fatalf("SIGTERM exit: %v", err)
	}
}

var checkpointPath = regexp.MustCompile(`(?m)^  path: "(.*)"$`)

// TestPostgresBackwardPosition: after rows were delivered and the slot
// confirmed them, moving the checkpoint back is refused by `position set`
// (even with --force), a checkpoint behind the slot written anyway makes
// `run` exit 1 instead of silently starting at the slot's position, and
// `check` fails postgres.position. The replay the README gives instead
// (no checkpoint, source.start: pending with a pending.where selecting the
// rows) publishes the rows again from the table, then streams on.
func TestPostgresBackwardPosition(t *testing.T) {
	b := postgresBackend(t)
	_, brokers := testenv.Kafka(t)
	cfg := b.config(t, connName(t, "e2e-backward-pg"), brokers)
	raw, err := os.ReadFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cp := checkpointPath.FindStringSubmatch(string(raw))[1]
	c := testenv.Start(t, cfg)
	cons := newConsumer(t, brokers, `outbox\.event\..*`)
	insert := func(id string) {
		b.insertTx(t, []row{{id, "ORDER", "agg-1", "E", `{}`}}, true)
	}
	insert("bw-1")
	cons.waitFor(t, 1, 20*time.Second)
	var early outboxcdc.Position
	testenv.Eventually(t, 10*time.Second, "a checkpoint after bw-1", func() bool {
		s, err := checkpoint.ReadFile(cp)
		early = s.Position
		return err == nil
	})
	for _, id := range []string{"bw-2", "bw-3", "bw-4"} {
		insert(id)
	}
	cons.waitFor(t, 4, 20*time.Second)
	lsn, err := wal.ParsePosition(early)
	if err != nil {
		t.Fatal(err)
	}
	earlyLSN := lsn.String()
	testenv.Eventually(t, 20*time.Second, "the slot to confirm past "+earlyLSN, func() bool {
		var past bool
		err := b.db.QueryRow("SELECT confirmed_flush_lsn > $1::pg_lsn FROM pg_replication_slots WHERE slot_name = $2", earlyLSN, srcSlot(t)).Scan(&past)
		return err == nil && past
	})
	if err := c.Stop(15 * time.Second); err != nil {
		t.Fatalf("SIGTERM exit: %v", err)
	}
	saved, err := os.ReadFile(cp)
	if err != nil {
		t.Fatal(err)
	}
	env := []string{}

	// position set refuses, --force or not, and leaves the checkpoint.
	code, out := testenv.Run(t, 60*time.Second, env, "position", "set", "--config", cfg, "--to", string(early), "--force")
	if code != 1 || !strings.Contains(out, "refusing") || !strings.Contains(out, "confirmed_flush_lsn") || !strings.Contains(out, "Positions and replay") {
		t.Fatalf("position set behind the slot: exit %d:\n%s", code, out)
	}
	if now, _ := os.ReadFile(cp); string(now) != string(saved) {
		t.Fatal("the refused position set changed the checkpoint")
	}

	// A checkpoint behind the slot written anyway: run refuses, check fails.
	f, err := checkpoint.NewFile(checkpoint.FileConfig{Path: cp}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Save(context.Background(), early); err != nil {
		t.Fatal(err)
	}
	c = testenv.Launch(t, cfg)
	if code := c.WaitExit(60 * time.Second); code != 1 {
		t.Fatalf("run from a checkpoint behind the slot: exit %d:\n%s", code, c.Log())
	}
	mustContain(t, c.Log(), "checkpoint behind the replication slot", "position set --to postgres:")
	if got := len(cons.quiet(t, time.Second)); got != 4 {
		t.Fatalf("%d records after the refused start, want the 4 of before", got)
	}
	code, out = testenv.Run(t, 60*time.Second, env, "check", "--config", cfg)
	if code != 1 || !regexp.MustCompile(`FAIL\s+postgres\.position\s+the checkpoint \(LSN [0-9A-F/]+\) is behind replication slot`).MatchString(out) {
		t.Fatalf("check: exit %d, want FAIL postgres.position:\n%s", code, out)
	}

	// The replay from the table: no checkpoint, start: pending selecting the
	// rows from bw-2 on; then streaming goes on from the slot.
	if err := os.Remove(cp); err != nil {
		t.Fatal(err)
	}
	var from int64
	if err := b.db.QueryRow("SELECT id FROM " + b.table() + " WHERE message_id = 'bw-2'").Scan(&from); err != nil {
		t.Fatal(err)
	}
	c = testenv.Start(t, cfg, "OUTBOX_CDC_SOURCE_START=pending", fmt.Sprintf("OUTBOX_CDC_SOURCE_PENDING_WHERE=id >= %d", from))
	insert("bw-5")
	got := cons.waitFor(t, 4+3+1, 30*time.Second)
	got = append(got, cons.quiet(t, time.Second)[len(got):]...)
	checkDelivery(t, got, []string{"bw-1", "bw-2", "bw-3", "bw-4", "bw-5"}, 3, false)
	counts := map[string]int{}
	for _, r := range got {
		counts[r.Headers["id"]]++
	}
	if counts["bw-1"] != 1 || counts["bw-2"] != 2 || counts["bw-3"] != 2 || counts["bw-4"] != 2 || counts["bw-5"] != 1 {
		t.Fatalf("deliveries per row %v: want bw-2..bw-4 twice (the replay), the others once", counts)
	}
	if err := c.Stop(15 * time.Second); err != nil {
		t.Fatalf("SIGTERM exit: %v", err)
	}
}

// TestPostgresSlotRecreatedWhileCut: the reproduction through the
// binary. The connector's path to PostgreSQL is cut (silent both ways),
// 100 outbox rows are committed, the slot is dropped and created again
// under its name, the path heals. The reconnect finds a slot that
// confirmed past the connector's checkpoint: the connector exits 1 with
// the slot's and the checkpoint's positions, the re-publish and the
// runbook, delivers none of the 100 rows from the new slot, and `check`
// fails postgres.position. The re-publish the message gives (no
// checkpoint, source.start: pending, source.pending.where "1 = 1")
// delivers all of them. Before the proof ran on every connect, the
// reconnect streamed on from the new slot's creation: all 100 lost, the
// only log line "streaming resumed after reconnect".
func TestPostgresSlotRecreatedWhileCut(t *testing.T) {
	b := postgresBackend(t)
	_, brokers := testenv.Kafka(t)
	dsn, proxy := postgresViaProxy(t)
	cfg := b.config(t, connName(t, "e2e-recreated-pg"), brokers)
	raw, err := os.ReadFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cp := checkpointPath.FindStringSubmatch(string(raw))[1]
	env := []string{"OUTBOX_CDC_SOURCE_DSN=" + dsn, "OUTBOX_CDC_SOURCE_RECONNECT_MAX=1s",
		"OUTBOX_CDC_SOURCE_WAL_SENDER_TIMEOUT=6s", "OUTBOX_CDC_SOURCE_RECEIVE_TIMEOUT=6s"}
	c := testenv.Start(t, cfg, env...)
	cons := newConsumer(t, brokers, `outbox\.event\..*`)
	b.insertTx(t, []row{{"rc-0", "ORDER", "agg-0", "E", `{}`}}, true)
	cons.waitFor(t, 1, 20*time.Second)
	testenv.Eventually(t, 20*time.Second, "a checkpoint after rc-0", func() bool {
		_, err := checkpoint.ReadFile(cp)
		return err == nil
	})

	proxy.Silence()
	testenv.Eventually(t, 30*time.Second, "the connector to notice the cut", func() bool { return c.Metric("outbox_cdc_source_connected") == 0 })
	var want []string
	for i := 1; i <= 100; i++ {
		id := fmt.Sprintf("rc-%d", i)
		b.insertTx(t, []row{{id, "ORDER", fmt.Sprintf("agg-%d", i%7), "E", `{}`}}, true)
		want = append(want, id)
	}
	slot := srcSlot(t)
	testenv.Eventually(t, 30*time.Second, "the cut walsender to be gone", func() bool {
		var pid int
		_ = b.db.QueryRow("SELECT coalesce(active_pid, 0) FROM pg_replication_slots WHERE slot_name = $1", slot).Scan(&pid)
		if pid != 0 {
			_, _ = b.db.Exec("SELECT pg_terminate_backend($1)", pid)
		}
		return pid == 0
	})
	if _, err := b.db.Exec("SELECT pg_drop_replication_slot($1)", slot); err != nil {
		t.Fatal(err)
	}
	if _, err := b.db.Exec("SELECT pg_create_logical_replication_slot($1, 'pgoutput')", slot); err != nil {
		t.Fatal(err)
	}
	proxy.Heal()

	select {
	case <-c.Done():
	case <-time.After(90 * time.Second):
		got := cons.quiet(t, 2*time.Second)
		t.Fatalf("the connector streamed on from the recreated slot: %d of the %d rows committed during the cut delivered; log:\n%s",
			len(got)-1, len(want), c.Log())
	}
	if code := c.WaitExit(10 * time.Second); code != 1 {
		t.Fatalf("exit %d, want 1:\n%s", code, c.Log())
	}
	mustContain(t, c.Log(), "not the one the checkpoint came from", "dropped and created again", "source.start: pending",
		`source.pending.where: \"1 = 1\"`, "Failover runbook")
	if got := cons.quiet(t, time.Second); len(got) != 1 {
		t.Fatalf("%d records, want only rc-0", len(got))
	}
	code, out := testenv.Run(t, 60*time.Second, nil, "check", "--config", cfg)
	if code != 1 || !regexp.MustCompile(`FAIL\s+postgres\.position`).MatchString(out) {
		t.Fatalf("check: exit %d, want FAIL postgres.position:\n%s", code, out)
	}

	// The re-publish the message names.
	if err := os.Remove(cp); err != nil {
		t.Fatal(err)
	}
	c = testenv.Start(t, cfg, append(env, "OUTBOX_CDC_SOURCE_START=pending", "OUTBOX_CDC_SOURCE_PENDING_WHERE=1 = 1")...)
	got := cons.waitFor(t, 1+1+len(want), 60*time.Second)
	got = append(got, cons.quiet(t, time.Second)[len(got):]...)
	checkDelivery(t, got, append([]string{"rc-0"}, want...), 3, false)
	t.Logf("slot recreated during a cut: the connector stopped (exit 1) with none of the %d rows delivered from the new slot; the re-publish delivered all %d (%d records with rc-0's first copy)",
		len(want), len(want), len(got))
	if err := c.Stop(15 * time.Second); err != nil {
		t.Fatalf("SIGTERM exit: %v", err)
	}
}
