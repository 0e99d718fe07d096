package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/outbox-cdc/outbox-cdc/test/testenv"
)

// TestNetworkSilentMySQL: the connector reaches MariaDB through a TCP path
// that goes silent both ways (no FIN, no RST), as a cut network or a dead
// firewall state looks, for 25 s while rows keep committing. With
// read_timeout 3s the connector must notice within the bound
// (outbox_cdc_source_connected 0, /readyz 503, /healthz 200), keep
// retrying without exiting although every reconnect attempt times out,
// and once the path heals deliver every committed row exactly once.
func TestNetworkSilentMySQL(t *testing.T) {
	b := mysqlBackend(t)
	var dsn string
	for _, line := range strings.Split(b.sourceYAML(""), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "dsn: "); ok {
			dsn = strings.Trim(v, `"`)
		}
	}
	dc, err := mysql.ParseDSN(dsn)
	if err != nil || dc.Net != "tcp" {
		t.Skipf("the test DSN is not TCP: %v", err)
	}
	proxy := testenv.NewProxy(t, dc.Addr)
	dc.Addr = proxy.Addr()
	_, brokers := testenv.Kafka(t)
	cfg := b.config(t, connName(t, "e2e-silent-mysql"), brokers)
	const readTimeout = 3 * time.Second
	c := testenv.Start(t, cfg,
		"OUTBOX_CDC_SOURCE_DSN="+dc.FormatDSN(),
		"OUTBOX_CDC_SOURCE_READ_TIMEOUT="+readTimeout.String(),
		"OUTBOX_CDC_SOURCE_HEARTBEAT_PERIOD=1s",
		"OUTBOX_CDC_SOURCE_RECONNECT_MIN=200ms",
		"OUTBOX_CDC_SOURCE_RECONNECT_MAX=2s")
	cons := newConsumer(t, brokers, `outbox\.event\..*`)
	before := ids("before", 1, 5)
	b.insertRows(t, before, 100)
	cons.waitFor(t, len(before), 20*time.Second)

	proxy.Silence()
	silenced := time.Now()
	var during []string
	var detected time.Duration
	for n := 1; time.Since(silenced) < 25*time.Second; n++ {
		id := ids("during", n, n)
		b.insertRows(t, id, 100)
		during = append(during, id...)
		if detected == 0 && c.Metric("outbox_cdc_source_connected") == 0 {
			detected = time.Since(silenced)
		}
		if s := c.Status("/healthz"); s != 200 {
			t.Fatalf("/healthz %d while the source reconnects", s)
		}
		select {
		case <-c.Done():
			t.Fatalf("the connector exited while the server was silent: %v", c.Err())
		default:
		}
		time.Sleep(200 * time.Millisecond)
	}
	if detected == 0 {
		t.Fatal("outbox_cdc_source_connected stayed 1 through 25 s of silence")
	}
	if bound := readTimeout + 2*time.Second; detected > bound {
		t.Fatalf("noticed after %v, bound %v", detected, bound)
	}
	if s := c.Status("/readyz"); s != 503 {
		t.Fatalf("/readyz %d while the source is not connected", s)
	}
	proxy.Heal()
	healed := time.Now()
	after := ids("after", 1, 5)
	b.insertRows(t, after, 100)
	want := append(append(append([]string{}, before...), during...), after...)
	got := cons.waitFor(t, len(want), 60*time.Second)
	caughtUp := time.Since(healed)
	got = append(got, cons.quiet(t, 500*time.Millisecond)[len(got):]...)
	checkDelivery(t, got, want, 3, true)
	t.Logf("silence of %v, read_timeout %v: noticed after %v; %d rows committed meanwhile, all delivered %v after the path healed",
		healed.Sub(silenced).Round(time.Millisecond), readTimeout, detected.Round(time.Millisecond), len(during), caughtUp.Round(time.Millisecond))
	testenv.Eventually(t, 20*time.Second, "outbox_cdc_source_connected 1", func() bool { return c.Metric("outbox_cdc_source_connected") == 1 })
	if err := c.Stop(15 * time.Second); err != nil {
		t.Fatalf("SIGTERM exit: %v", err)
	}
}
