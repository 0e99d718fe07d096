package ha

import (
	"context"
	"database/sql"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/rs/zerolog"

	"github.com/outbox-cdc/outbox-cdc/test/testenv"
)

type backend struct {
	kind, dsn string
	db        *sql.DB
	// killHolder ends the database session holding connector's lock.
	killHolder func(t *testing.T, connector string)
}

func backends(t *testing.T) []backend {
	my := testenv.MySQLDSN(t)
	pg := testenv.PostgresDSN(t)
	mydb := testenv.MySQL(t)
	pgdb, err := sql.Open("pgx", pg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pgdb.Close() })
	return []backend{
		{"mysql", my, mydb, func(t *testing.T, connector string) {
			var id int64
			if err := mydb.QueryRow("SELECT IS_USED_LOCK(?)", LockName(connector)).Scan(&id); err != nil {
				t.Fatal(err)
			}
			if _, err := mydb.Exec(fmt.Sprintf("KILL %d", id)); err != nil {
				t.Fatal(err)
			}
		}},
		{"postgres", pg, pgdb, func(t *testing.T, connector string) {
			key := AdvisoryKey(connector)
			var ok bool
			err := pgdb.QueryRow(`SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory' AND granted
  AND classid = (($1::bigint >> 32) & 4294967295)::oid AND objid = ($1::bigint & 4294967295)::oid`, key).Scan(&ok)
			if err != nil || !ok {
				t.Fatalf("terminate holder: %v %v", ok, err)
			}
		}},
	}
}

func locker(t *testing.T, b backend, connector string) Locker {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Enabled = true
	cfg.CheckInterval = 200 * time.Millisecond
	l, err := New(b.kind, b.dsn, connector, cfg, zerolog.New(zerolog.NewTestWriter(t)))
	if err != nil {
		t.Fatal(err)
	}
	return l
}

type lockResult struct {
	lost    <-chan struct{}
	release func()
	err     error
	at      time.Time
}

func lockAsync(ctx context.Context, l Locker) <-chan lockResult {
	ch := make(chan lockResult, 1)
	go func() {
		lost, rel, err := l.Lock(ctx)
		ch <- lockResult{lost, rel, err, time.Now()}
	}()
	return ch
}

// A second instance waits while the first holds the lock and takes over
// when it releases it, or when its session is killed (the first then
// sees the loss).
func TestLockHandover(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.kind, func(t *testing.T) {
			name := "ha-test-" + strings.ReplaceAll(t.Name(), "/", "-")
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			lost1, release1, err := locker(t, b, name).Lock(ctx)
			if err != nil {
				t.Fatal(err)
			}
			second := lockAsync(ctx, locker(t, b, name))
			select {
			case r := <-second:
				t.Fatalf("second instance got the lock while the first holds it: %v", r.err)
			case <-time.After(1500 * time.Millisecond):
			}
			released := time.Now()
			release1()
			r := <-second
			if r.err != nil {
				t.Fatal(r.err)
			}
			t.Logf("handover after release took %s", r.at.Sub(released))
			if r.at.Sub(released) > 3*time.Second {
				t.Fatalf("handover took %s", r.at.Sub(released))
			}
			select {
			case <-lost1:
				t.Fatal("a released lock reported lost")
			default:
			}

			// Kill the holder's session: it notices, and a third takes over.
			third := lockAsync(ctx, locker(t, b, name))
			killed := time.Now()
			b.killHolder(t, name)
			select {
			case <-r.lost:
				t.Logf("loss noticed after %s", time.Since(killed))
			case <-time.After(5 * time.Second):
				t.Fatal("killed session's lock not reported lost")
			}
			r.release()
			r3 := <-third
			if r3.err != nil {
				t.Fatal(r3.err)
			}
			t.Logf("takeover after kill took %s", r3.at.Sub(killed))
			r3.release()
		})
	}
}

// A standby's Lock returns ctx's error when it is cancelled.
func TestLockCancelled(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.kind, func(t *testing.T) {
			name := "ha-cancel-" + b.kind
			_, release, err := locker(t, b, name).Lock(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			defer release()
			ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
			defer cancel()
			if _, _, err := locker(t, b, name).Lock(ctx); err != context.DeadlineExceeded {
				t.Fatalf("Lock = %v", err)
			}
		})
	}
}

func TestLockName(t *testing.T) {
	if got := LockName("orders"); got != "outbox-cdc:orders" {
		t.Fatal(got)
	}
	long := LockName(strings.Repeat("x", 100))
	if len(long) > 64 || long == LockName(strings.Repeat("x", 99)) {
		t.Fatalf("long name %q", long)
	}
	if AdvisoryKey("a") == AdvisoryKey("b") {
		t.Fatal("keys collide")
	}
}

// viaProxy returns b's DSN rewritten to reach the server through a proxy
// the test controls.
func viaProxy(t *testing.T, b backend) (string, *testenv.Proxy) {
	t.Helper()
	switch b.kind {
	case "mysql":
		cfg, err := mysql.ParseDSN(b.dsn)
		if err != nil {
			t.Fatal(err)
		}
		p := testenv.NewProxy(t, cfg.Addr)
		cfg.Addr = p.Addr()
		return cfg.FormatDSN(), p
	default:
		cfg, err := pgx.ParseConfig(b.dsn)
		if err != nil {
			t.Fatal(err)
		}
		p := testenv.NewProxy(t, net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port))))
		return "postgres://" + cfg.User + "@" + p.Addr() + "/" + cfg.Database + "?sslmode=disable", p
	}
}

// The active instance's path to the database goes silent (no FIN, no RST:
// a cut network, a dead host, or, as the server sees it, a frozen
// process). The server ends the silent lock session within
// ha.session_timeout, a standby takes the lock within TakeoverWithin, and
// the active instance reports the loss within ActiveStopsWithin, before the
// standby holds the lock.
func TestLockTakeoverWhenActiveGoesSilent(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.kind, func(t *testing.T) {
			name := "ha-silent-" + b.kind
			cfg := DefaultConfig()
			cfg.Enabled = true
			cfg.CheckInterval = 200 * time.Millisecond
			cfg.SessionTimeout = 2 * time.Second
			dsn, proxy := viaProxy(t, b)
			log := zerolog.New(zerolog.NewTestWriter(t))
			active, err := New(b.kind, dsn, name, cfg, log)
			if err != nil {
				t.Fatal(err)
			}
			standby, err := New(b.kind, b.dsn, name, cfg, log)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			lost, release, err := active.Lock(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer release()
			second := lockAsync(ctx, standby)
			time.Sleep(time.Second)
			select {
			case r := <-second:
				t.Fatalf("standby got the lock while the active holds it: %v", r.err)
			default:
			}

			proxy.Silence()
			silenced := time.Now()
			var noticed time.Duration
			select {
			case <-lost:
				noticed = time.Since(silenced)
			case <-time.After(cfg.ActiveStopsWithin() + 5*time.Second):
				t.Fatalf("active did not notice the silent path within %s", cfg.ActiveStopsWithin()+5*time.Second)
			}
			var r lockResult
			select {
			case r = <-second:
			case <-time.After(cfg.TakeoverWithin() + 10*time.Second):
				t.Fatalf("standby did not take over within %s of the active going silent (bound %s)", cfg.TakeoverWithin()+10*time.Second, cfg.TakeoverWithin())
			}
			if r.err != nil {
				t.Fatal(r.err)
			}
			defer r.release()
			took := r.at.Sub(silenced)
			t.Logf("%s: active noticed after %s (bound %s); standby took over after %s (bound %s)",
				b.kind, noticed.Round(time.Millisecond), cfg.ActiveStopsWithin(), took.Round(time.Millisecond), cfg.TakeoverWithin())
			if noticed >= took {
				t.Fatalf("the standby took the lock (%s) before the active noticed losing it (%s)", took, noticed)
			}
			if took > cfg.TakeoverWithin()+5*time.Second {
				t.Fatalf("takeover took %s, bound %s", took, cfg.TakeoverWithin())
			}
		})
	}
}

func TestConfigBounds(t *testing.T) {
	c := DefaultConfig()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if got := c.ActiveStopsWithin(); got != 6*time.Second {
		t.Fatalf("ActiveStopsWithin = %s", got)
	}
	if got := c.TakeoverWithin(); got != 11*time.Second {
		t.Fatalf("TakeoverWithin = %s", got)
	}
	c.SinkUnreachableTimeout = 500 * time.Millisecond
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "sink_unreachable_timeout:") {
		t.Fatalf("0.5s sink_unreachable_timeout: %v", err)
	}
	c.SinkUnreachableTimeout = DefaultConfig().SinkUnreachableTimeout
	c.SessionTimeout = 2 * time.Second
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "3 × ha.check_interval") {
		t.Fatalf("session timeout below 3 check intervals: %v", err)
	}
	c.SessionTimeout = time.Second
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "session_timeout:") {
		t.Fatalf("1s session timeout: %v", err)
	}
}

// TestLeaseExpiresOnTheMonotonicClock: a lease whose last confirmation is
// older than session_timeout minus the margin is invalid at once, without
// its timer having run (a process resumed after SIGSTOP), and a
// confirmation extends it only from the time the check was sent.
func TestLeaseExpiresOnTheMonotonicClock(t *testing.T) {
	cfg := DefaultConfig()
	cfg.SessionTimeout = 2 * time.Second
	now := time.Now()
	l := newLease(cfg, now)
	if !l.Valid(now) || !l.Valid(now.Add(cfg.SessionTimeout-cfg.LeaseMargin()-time.Millisecond)) {
		t.Fatal("a fresh lease is not valid")
	}
	if l.Valid(now.Add(cfg.SessionTimeout - cfg.LeaseMargin())) {
		t.Fatal("the lease is valid at session_timeout minus the margin")
	}
	l.confirm(now.Add(time.Second))
	if !l.Valid(now.Add(cfg.SessionTimeout)) || l.Valid(now.Add(time.Second+cfg.SessionTimeout-cfg.LeaseMargin())) {
		t.Fatalf("confirm at +1s: expiry %s after the start, want %s", l.Expiry().Sub(now), time.Second+cfg.SessionTimeout-cfg.LeaseMargin())
	}
	l.confirm(now) // an older check never shortens it
	if !l.Valid(now.Add(cfg.SessionTimeout)) {
		t.Fatal("an older confirmation shortened the lease")
	}

	frozen := newLease(cfg, time.Now().Add(-cfg.SessionTimeout)) // confirmed, then frozen for a session timeout
	if frozen.Valid(time.Now()) {
		t.Fatal("a lease last confirmed a session timeout ago is valid")
	}
	select {
	case <-frozen.Lost():
	case <-time.After(5 * time.Second):
		t.Fatal("an expired lease does not close Lost")
	}
	if frozen.Why() == "" {
		t.Fatal("no reason for the expiry")
	}
	if frozen.end("again") {
		t.Fatal("a lease ended twice")
	}
}
