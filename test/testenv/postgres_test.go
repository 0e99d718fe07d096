package testenv

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestPrivatePostgresFailover: a private primary and a standby cloned
// from it through a proxy; what the primary commits reaches the standby;
// with the proxy silent it does not; the primary killed, the standby
// promoted is a new primary on timeline 2 with the rows it had received.
func TestPrivatePostgresFailover(t *testing.T) {
	p := PrivatePostgres(t)
	feed := NewProxy(t, p.Addr())
	sb := p.Standby(t, feed.Addr())
	ctx := context.Background()
	connect := func(s *PGServer) *pgx.Conn {
		t.Helper()
		c, err := pgx.Connect(ctx, s.DSN())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close(ctx) })
		return c
	}
	pc, sc := connect(p), connect(sb)
	count := func() int {
		var n int
		if err := sc.QueryRow(ctx, "SELECT count(*) FROM t").Scan(&n); err != nil {
			return -1
		}
		return n
	}
	if _, err := pc.Exec(ctx, "CREATE TABLE t (id int); INSERT INTO t VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	Eventually(t, 30*time.Second, "the standby to replay the row", func() bool { return count() == 1 })
	feed.Silence()
	if _, err := pc.Exec(ctx, "INSERT INTO t VALUES (2)"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	if n := count(); n != 1 {
		t.Fatalf("the standby has %d rows through a silent feed", n)
	}
	p.Kill()
	if _, err := pc.Exec(ctx, "SELECT 1"); err == nil {
		t.Fatal("the killed primary answers")
	}
	sb.Promote(t)
	var walFile string
	var recovery bool
	if err := sc.QueryRow(ctx, "SELECT pg_walfile_name(pg_current_wal_lsn()), pg_is_in_recovery()").Scan(&walFile, &recovery); err != nil {
		t.Fatal(err)
	}
	if recovery || walFile[:8] != "00000002" || count() != 1 {
		t.Fatalf("after promotion: in recovery %v, WAL file %s (want timeline 2), %d rows", recovery, walFile, count())
	}
	if _, err := sc.Exec(ctx, "INSERT INTO t VALUES (3)"); err != nil {
		t.Fatalf("the promoted standby refuses writes: %v", err)
	}
}
