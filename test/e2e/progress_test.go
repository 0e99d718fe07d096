package e2e

// Progress and connection state an operator can see (issue 24, points 5
// and 10): a source that never connected says so (state "connecting", a
// line naming the address and the cause, its own metric) instead of
// passing for a running connector whose stream was lost; a catch-up is
// logged at a bounded rate until it is caught up; a pending backfill
// exports its progress and a true lag.

import (
	"encoding/json"
	"net"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outbox-cdc/outbox-cdc/test/testenv"
)

// deadAddr returns a loopback address nothing listens on.
func deadAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// sourceAddr returns b's server address (host:port) and a function giving
// b's DSN pointed at another address.
func (b *backend) sourceAddr(t *testing.T) (string, func(addr string) string) {
	t.Helper()
	if b.kind == "mysql" {
		dc, err := mysql.ParseDSN(testenv.MySQLDSN(t))
		if err != nil {
			t.Fatal(err)
		}
		dc.DBName = testObjectName(t)
		return dc.Addr, func(addr string) string { c := dc.Clone(); c.Addr = addr; return c.FormatDSN() }
	}
	dsn := testenv.PostgresDSN(t)
	if u, err := url.Parse(dsn); err == nil && (u.Scheme == "postgres" || u.Scheme == "postgresql") {
		host := u.Host
		if !strings.Contains(host, ":") {
			host += ":5432"
		}
		return host, func(addr string) string { v := *u; v.Host = addr; return v.String() }
	}
	t.Fatalf("PostgreSQL DSN %q is not a URL", dsn)
	return "", nil
}

// emptyPositions returns the lines with a position field that is empty.
func emptyPositions(lines []logLine) []logLine {
	var out []logLine
	for _, l := range lines {
		for _, k := range []string{"position", "resume_lsn", "start_lsn"} {
			if v, ok := l[k]; ok && v == "" {
				out = append(out, l)
			}
		}
	}
	return out
}

// TestNeverConnectedIsNotLost: the source's address answers nothing (the
// proxy in front of the server has nowhere to send connections). The
// connector is "connecting", not running: /readyz and the REST status say
// so with the address and the cause, it logs "cannot connect" with both
// (never "stream lost", never an empty position), and counts connect
// failures, not reconnections. Once the server is reachable it runs; a
// stream lost after that is "lost" and counted as a reconnection. Before,
// a wrong host or port was logged forever as "binlog stream lost;
// reconnecting" with "position":"", in state running, with the reconnect
// counter rising.
func TestNeverConnectedIsNotLost(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		real, dsnAt := b.sourceAddr(t)
		proxy := testenv.NewProxy(t, deadAddr(t))
		_, brokers := testenv.Kafka(t)
		name := connName(t, "e2e-connecting-"+b.kind)
		c := testenv.Launch(t, b.config(t, name, brokers), "OUTBOX_CDC_SOURCE_DSN="+dsnAt(proxy.Addr()),
			"OUTBOX_CDC_SOURCE_RECONNECT_MIN=100ms", "OUTBOX_CDC_SOURCE_RECONNECT_MAX=300ms")

		testenv.Eventually(t, 60*time.Second, "two failed connection attempts", func() bool {
			return c.Metric("outbox_cdc_source_connect_failures_total") >= 2
		})
		code, body := c.Readyz()
		var rz healthAnswerJSON
		if err := json.Unmarshal([]byte(body), &rz); err != nil || code != 503 || len(rz.Connectors) != 1 {
			t.Fatalf("/readyz %d %s", code, body)
		}
		if st := rz.Connectors[0]; st.State != "connecting" || !strings.Contains(st.Reason, proxy.Addr()) || !strings.Contains(st.Reason, "cannot connect") {
			t.Fatalf("want state connecting with the address %s in the reason: %+v", proxy.Addr(), st)
		}
		code, body = c.Get("/connectors/" + name + "/status")
		if code != 200 || strings.Contains(body, `"RUNNING"`) || !strings.Contains(body, proxy.Addr()) {
			t.Fatalf("REST status while it never connected: %d %s", code, body)
		}
		if v := c.Metric(`outbox_cdc_connector_state{state="connecting"}`); v != 1 {
			t.Fatalf("outbox_cdc_connector_state{state=connecting} = %v, want 1", v)
		}
		if v := c.Metric("outbox_cdc_source_reconnects_total"); v != 0 {
			t.Fatalf("reconnects %v while it never connected, want 0", v)
		}
		lines := logLines(t, c.Log())
		var cannot []logLine
		for _, l := range lines {
			msg := l.str("message")
			if strings.Contains(msg, "stream lost") {
				t.Fatalf("a source that never connected logged a lost stream:\n%s", dump([]logLine{l}))
			}
			if strings.HasPrefix(msg, "cannot connect to the") {
				cannot = append(cannot, l)
			}
		}
		if len(cannot) < 2 || cannot[0].str("address") != proxy.Addr() || cannot[0].str("error") == "" || cannot[0].str("level") != "warn" {
			t.Fatalf("want warn lines \"cannot connect\" with the address %s and the cause:\n%s", proxy.Addr(), c.Log())
		}
		if bad := emptyPositions(lines); len(bad) > 0 {
			t.Fatalf("lines with an empty position:\n%s", dump(bad))
		}

		// The server becomes reachable: running, ready.
		failures := c.Metric("outbox_cdc_source_connect_failures_total")
		proxy.SetTarget(real)
		c.WaitStreaming(60 * time.Second)
		cons := newConsumer(t, brokers, `outbox\.event\..*`)
		b.insertRows(t, []string{"conn-1"}, 100)
		cons.waitFor(t, 1, 30*time.Second)

		// Lost after streaming: a reconnection, not a connect failure.
		proxy.Cut()
		testenv.Eventually(t, 60*time.Second, "a reconnection counted", func() bool {
			return c.Metric("outbox_cdc_source_reconnects_total") >= 1
		})
		c.WaitStreaming(60 * time.Second)
		if v := c.Metric("outbox_cdc_source_connect_failures_total"); v != failures {
			t.Fatalf("connect failures went from %v to %v after a loss", failures, v)
		}
		if !strings.Contains(c.Log(), "stream lost; reconnecting") {
			t.Fatalf("the loss after streaming was not logged as one:\n%s", c.Log())
		}
		if bad := emptyPositions(logLines(t, c.Log())); len(bad) > 0 {
			t.Fatalf("lines with an empty position:\n%s", dump(bad))
		}
		if err := c.Stop(15 * time.Second); err != nil {
			t.Fatalf("SIGTERM exit: %v", err)
		}
	})
}

// healthAnswerJSON is /readyz's body.
type healthAnswerJSON struct {
	Ready      bool `json:"ready"`
	Connectors []struct {
		Name   string `json:"name"`
		State  string `json:"state"`
		Reason string `json:"reason"`
	} `json:"connectors"`
}

// holdProduce makes kc hold every produce request while it is on, until
// release (also at test end).
func holdProduce(t *testing.T, kc *kfake.Cluster) (on func(), release func()) {
	var mu sync.Mutex
	var hold chan struct{}
	kc.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		kc.KeepControl()
		mu.Lock()
		h := hold
		mu.Unlock()
		if h != nil {
			kc.SleepControl(func() { <-h })
		}
		return nil, nil, false
	})
	release = func() {
		mu.Lock()
		defer mu.Unlock()
		if hold != nil {
			close(hold)
			hold = nil
		}
	}
	t.Cleanup(release)
	return func() { mu.Lock(); hold = make(chan struct{}); mu.Unlock() }, release
}

// TestCatchUpLogged: rows committed while the connector was stopped are
// read when it starts again, 12 s later. It logs "source is behind:
// catching up" with the position and how far behind at once, progress
// lines (rows per second, position, how far behind, an estimate while the
// lag shrinks) at most once per log.progress_interval, here once the
// broker held the writes for longer than that, and one "caught up" line
// once a fresh row is read; nothing of it before. Before, a catch-up
// logged nothing.
func TestCatchUpLogged(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		kc, brokers := testenv.Kafka(t)
		hold, release := holdProduce(t, kc)
		cfg := b.config(t, connName(t, "e2e-catchup-"+b.kind), brokers)
		env := []string{"OUTBOX_CDC_LOG_PROGRESS_INTERVAL=1s",
			// Small writes and a short queue: held writes stop the source.
			"OUTBOX_CDC_PIPELINE_MAX_BATCH_RECORDS=100", "OUTBOX_CDC_PIPELINE_QUEUE_TRANSACTIONS=2"}
		if b.kind == "postgres" {
			env = append(env, "OUTBOX_CDC_SOURCE_BUFFER_BYTES=65536") // the source's own queue: one transaction of 500 rows
		}
		c := testenv.Start(t, cfg, env...)
		cons := newConsumer(t, brokers, `outbox\.event\..*`)
		b.insertRows(t, []string{"before-1"}, 100)
		cons.waitFor(t, 1, 30*time.Second)
		if err := c.Stop(15 * time.Second); err != nil {
			t.Fatalf("SIGTERM exit: %v", err)
		}
		if strings.Contains(c.Log(), "catching up") {
			t.Fatalf("a source that is not behind logged a catch-up:\n%s", c.Log())
		}

		backlog := b.seedRows(t, "behind", 5000)
		time.Sleep(12 * time.Second) // older than the 10 s that count as behind
		began := time.Now()
		hold()
		c = testenv.Start(t, cfg, env...)
		testenv.Eventually(t, 30*time.Second, "the behind line", func() bool { return strings.Contains(c.Log(), "source is behind: catching up") })
		time.Sleep(1500 * time.Millisecond) // longer than log.progress_interval
		release()
		cons.waitFor(t, 1+len(backlog), 60*time.Second)
		b.insertRows(t, []string{"fresh-1"}, 100) // read up: the next transaction is fresh
		cons.waitFor(t, 2+len(backlog), 30*time.Second)
		testenv.Eventually(t, 30*time.Second, "the caught-up line", func() bool { return strings.Contains(c.Log(), `"caught up"`) })
		took := time.Since(began)
		if err := c.Stop(15 * time.Second); err != nil {
			t.Fatalf("SIGTERM exit: %v", err)
		}
		var behind, progress, caught []logLine
		lines := logLines(t, c.Log())
		for _, l := range lines {
			switch msg := l.str("message"); {
			case msg == "source is behind: catching up":
				behind = append(behind, l)
			case strings.HasPrefix(msg, "catching up"):
				progress = append(progress, l)
			case msg == "caught up":
				caught = append(caught, l)
			}
		}
		if len(behind) != 1 || len(caught) != 1 {
			t.Fatalf("want one behind and one caught-up line, got %d and %d:\n%s", len(behind), len(caught), c.Log())
		}
		if s, _ := behind[0]["behind_seconds"].(float64); s < 12 || behind[0].str("position") == "" {
			t.Fatalf("the behind line does not say how far behind (12 s or more) and where: %v", behind[0])
		}
		if n, _ := caught[0]["rows_read"].(float64); n < float64(len(backlog)) || caught[0].str("position") == "" {
			t.Fatalf("the caught-up line does not count the %d rows read or say where: %v", len(backlog), caught[0])
		}
		// At least one (the writes were held for longer than the interval
		// while rows remained), at most one per second in between.
		if max := int(took/time.Second) + 1; len(progress) == 0 || len(progress) > max {
			t.Fatalf("%d progress lines in %s at one per second:\n%s", len(progress), took, dump(progress))
		}
		for _, l := range progress {
			if l.str("position") == "" || l["rows_per_second"] == nil || l["behind_seconds"] == nil {
				t.Fatalf("a progress line without position, rate or lag: %v", l)
			}
			if l.str("message") == "catching up" && l["eta_seconds"] == nil {
				t.Fatalf("a catching-up line without an estimate: %v", l)
			}
		}
		t.Logf("catch-up: %d progress lines in %s", len(progress), took)
	})
}

// TestPendingProgress: a pending backfill exports the rows it published
// and the rows it will have published, and a lag that grows while the
// backfill is held up (the broker holds every produce request): the
// stream waits behind its snapshot. Released, it logs progress lines with
// the counts, rate and estimate, and publishes every row. Before, only its
// start and end were logged, no metric showed its progress and the lag
// read 0 throughout.
func TestPendingProgress(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		kc, brokers := testenv.Kafka(t)
		hold, release := holdProduce(t, kc)
		hold()

		pending := b.seedRows(t, "pend", 2000)
		cfg := b.tunedConfig(t, connName(t, "e2e-pendprog-"+b.kind), brokers,
			"  start: pending\n  pending:\n    where: \"status = 0\"\n    batch: 10\n", "")
		// Small writes and a short queue: the hold-up stops the backfill
		// after a few batches.
		c := testenv.Launch(t, cfg, "OUTBOX_CDC_LOG_PROGRESS_INTERVAL=1s",
			"OUTBOX_CDC_PIPELINE_MAX_BATCH_RECORDS=10", "OUTBOX_CDC_PIPELINE_QUEUE_TRANSACTIONS=2")
		testenv.Eventually(t, 60*time.Second, "the expected rows exported", func() bool {
			return c.Metric("outbox_cdc_backfill_rows_expected") == float64(len(pending))
		})
		testenv.Eventually(t, 30*time.Second, "a lag of a second or more while held up", func() bool {
			return c.Metric("outbox_cdc_source_lag_seconds") >= 1
		})
		if v := c.Metric("outbox_cdc_backfill_rows_published"); v < 0 || v >= float64(len(pending)) {
			t.Fatalf("rows published %v while the broker holds every produce, want fewer than %d", v, len(pending))
		}

		release()
		cons := newConsumer(t, brokers, `outbox\.event\..*`)
		cons.waitFor(t, len(pending), 60*time.Second)
		testenv.Eventually(t, 30*time.Second, "every pending row counted as published", func() bool {
			return c.Metric("outbox_cdc_backfill_rows_published") == float64(len(pending))
		})
		if err := c.Stop(15 * time.Second); err != nil {
			t.Fatalf("SIGTERM exit: %v", err)
		}
		var progress []logLine
		for _, l := range logLines(t, c.Log()) {
			if l.str("message") == "pending backfill: progress" {
				progress = append(progress, l)
			}
		}
		if len(progress) == 0 {
			t.Fatalf("no progress line after a hold-up longer than log.progress_interval:\n%s", c.Log())
		}
		for _, l := range progress {
			if l["rows_published"] == nil || l["rows_expected"] != float64(len(pending)) || l["rows_per_second"] == nil || l.str("stream_position") == "" {
				t.Fatalf("a progress line without the counts, rate or stream position: %v", l)
			}
		}
	})
}

// TestNeverConnectedPending: with source.start: pending, a server that
// cannot be reached is "connecting" as well, logged as "cannot connect"
// with the address, not as an interrupted backfill; reachable, the
// backfill publishes every pending row. Before: "pending backfill
// interrupted; resuming after the last batch sent" although no batch was
// ever read, in state running.
func TestNeverConnectedPending(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		real, dsnAt := b.sourceAddr(t)
		proxy := testenv.NewProxy(t, deadAddr(t))
		_, brokers := testenv.Kafka(t)
		pending := b.seedRows(t, "pend", 50)
		cfg := b.tunedConfig(t, connName(t, "e2e-connpend-"+b.kind), brokers,
			"  start: pending\n  pending:\n    where: \"status = 0\"\n", "")
		c := testenv.Launch(t, cfg, "OUTBOX_CDC_SOURCE_DSN="+dsnAt(proxy.Addr()),
			"OUTBOX_CDC_SOURCE_RECONNECT_MIN=100ms", "OUTBOX_CDC_SOURCE_RECONNECT_MAX=300ms")
		testenv.Eventually(t, 60*time.Second, "two failed connection attempts", func() bool {
			return c.Metric("outbox_cdc_source_connect_failures_total") >= 2
		})
		code, body := c.Readyz()
		var rz healthAnswerJSON
		if err := json.Unmarshal([]byte(body), &rz); err != nil || code != 503 || len(rz.Connectors) != 1 ||
			rz.Connectors[0].State != "connecting" || !strings.Contains(rz.Connectors[0].Reason, proxy.Addr()) {
			t.Fatalf("/readyz %d %s: want state connecting naming %s", code, body, proxy.Addr())
		}
		if strings.Contains(c.Log(), "pending backfill interrupted") || !strings.Contains(c.Log(), "cannot connect to the") {
			t.Fatalf("a backfill that never connected was logged as interrupted:\n%s", c.Log())
		}
		proxy.SetTarget(real)
		cons := newConsumer(t, brokers, `outbox\.event\..*`)
		cons.waitFor(t, len(pending), 60*time.Second)
		c.WaitStreaming(60 * time.Second)
		if err := c.Stop(15 * time.Second); err != nil {
			t.Fatalf("SIGTERM exit: %v", err)
		}
	})
}
