package wal

import (
	"context"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-cdc/outbox-cdc/test/testenv"
)

// The instance streaming the slot is cut off by a silent network path (no
// FIN: its walsender keeps the slot until wal_sender_timeout, a minute by
// default). A source without TakeOverSlot leaves that walsender alone; one
// with it (the HA active instance) ends it and streams within seconds.
func TestTakeOverSlotFromSilentWalsender(t *testing.T) {
	e := newPgEnv(t)
	pc, err := pgx.ParseConfig(e.dsn)
	if err != nil {
		t.Fatal(err)
	}
	proxy := testenv.NewProxy(t, net.JoinHostPort(pc.Host, strconv.Itoa(int(pc.Port))))
	cut := e.config()
	cut.DSN = "postgres://" + pc.User + "@" + proxy.Addr() + "/" + pc.Database + "?sslmode=disable"
	old, _ := e.source(cut, seedCols)
	a := start(t, old, "", 16)
	a.waitReady()
	stale := e.activePID()
	if stale == 0 {
		t.Fatal("no walsender holds the slot")
	}
	proxy.Silence()

	polite, _ := e.source(e.config(), seedCols)
	b := start(t, polite, "", 16)
	time.Sleep(2 * time.Second)
	if polite.Ready() == nil || e.activePID() != stale {
		t.Fatalf("without TakeOverSlot the source took the slot (ready %v, holder %d, stale walsender %d)", polite.Ready(), e.activePID(), stale)
	}
	b.stop()

	cfg := e.config()
	cfg.TakeOverSlot = true
	src, _ := e.source(cfg, seedCols)
	began := time.Now()
	r := start(t, src, "", 16)
	r.waitReady()
	took := time.Since(began)
	if pid := e.activePID(); pid == stale || pid == 0 {
		t.Fatalf("slot holder %d after takeover (stale walsender %d)", pid, stale)
	}
	e.insertTx("after-takeover")
	if tx := r.next(10 * time.Second); ids(tx) != "after-takeover" {
		t.Fatalf("got %s", ids(tx))
	}
	t.Logf("streaming %s after starting, with the previous walsender (pid %d) silent", took.Round(time.Millisecond), stale)
	if took > 8*time.Second {
		t.Fatalf("takeover took %s", took)
	}
	var n int
	if err := e.db.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity WHERE pid = $1`, stale).Scan(&n); err != nil || n != 0 {
		t.Fatalf("stale walsender %d still there (%d, %v)", stale, n, err)
	}
}
