package dbconn

import (
	"context"
	"database/sql"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"

	"github.com/outbox-cdc/outbox-cdc/test/testenv"
)

// viaProxy rewrites dsn to reach its server through p.
func viaProxy(t *testing.T, dialect, dsn string, target func(string) *testenv.Proxy) string {
	t.Helper()
	switch dialect {
	case MySQL:
		cfg, err := mysql.ParseDSN(dsn)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Addr = target(cfg.Addr).Addr()
		return cfg.FormatDSN()
	default:
		cfg, err := pgx.ParseConfig(dsn)
		if err != nil {
			t.Fatal(err)
		}
		p := target(net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port))))
		return "postgres://" + cfg.User + "@" + p.Addr() + "/" + cfg.Database + "?sslmode=disable"
	}
}

type server struct {
	dialect, dsn string
	admin        *sql.DB
	// session returns the server's id of the connection c.
	session string
	// alive says whether the session with that id still exists.
	alive string
}

func servers(t *testing.T) []server {
	my := testenv.MySQLDSN(t)
	pg := testenv.PostgresDSN(t)
	pgAdmin, err := sql.Open("pgx", pg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pgAdmin.Close() })
	return []server{
		{MySQL, my, testenv.MySQL(t), "SELECT CONNECTION_ID()", "SELECT COUNT(*) FROM information_schema.processlist WHERE id = ?"},
		{Postgres, pg, pgAdmin, "SELECT pg_backend_pid()", "SELECT count(*) FROM pg_stat_activity WHERE pid = $1"},
	}
}

// The session settings reach the server: the keepalives on PostgreSQL,
// and with SessionIdle the idle timeouts on both.
func TestSessionSettings(t *testing.T) {
	for _, s := range servers(t) {
		t.Run(s.dialect, func(t *testing.T) {
			o := Defaults()
			o.SessionIdle = 3 * time.Second
			o.LockWait = 4 * time.Second
			db, err := Open(s.dialect, s.dsn, o)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			switch s.dialect {
			case MySQL:
				var wait, netRead, netWrite, lockWait int
				if err := db.QueryRowContext(ctx, "SELECT @@session.wait_timeout, @@session.net_read_timeout, @@session.net_write_timeout, @@session.innodb_lock_wait_timeout").
					Scan(&wait, &netRead, &netWrite, &lockWait); err != nil {
					t.Fatal(err)
				}
				if wait != 3 || netRead != 3 || netWrite != 3 || lockWait != 4 {
					t.Fatalf("wait_timeout %d, net_read_timeout %d, net_write_timeout %d (want 3), innodb_lock_wait_timeout %d (want 4)", wait, netRead, netWrite, lockWait)
				}
			case Postgres:
				var idle, kaIdle, kaCount, userTimeout, lockWait, app string
				if err := db.QueryRowContext(ctx, `SELECT current_setting('idle_session_timeout'), current_setting('tcp_keepalives_idle'),
  current_setting('tcp_keepalives_count'), current_setting('tcp_user_timeout'), current_setting('lock_timeout'), current_setting('application_name')`).
					Scan(&idle, &kaIdle, &kaCount, &userTimeout, &lockWait, &app); err != nil {
					t.Fatal(err)
				}
				if idle != "3s" || kaIdle != "5" || kaCount != "3" || userTimeout != "20000" || lockWait != "4s" || app != "outbox-cdc" {
					t.Fatalf("idle_session_timeout %s, tcp_keepalives_idle %s, tcp_keepalives_count %s, tcp_user_timeout %s, lock_timeout %s, application_name %s",
						idle, kaIdle, kaCount, userTimeout, lockWait, app)
				}
			}
		})
	}
}

// With SessionIdle, the server ends a session whose client went silent
// (here: a proxy that stopped delivering, which keeps both TCP ends alive,
// as a frozen process does) within SessionIdle; without it, the session
// stays.
func TestServerEndsSilentSession(t *testing.T) {
	for _, s := range servers(t) {
		t.Run(s.dialect, func(t *testing.T) {
			var proxy *testenv.Proxy
			dsn := viaProxy(t, s.dialect, s.dsn, func(addr string) *testenv.Proxy {
				proxy = testenv.NewProxy(t, addr)
				return proxy
			})
			o := Defaults()
			o.SessionIdle = 2 * time.Second
			db, err := Open(s.dialect, dsn, o)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			ctx := context.Background()
			conn, err := db.Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			var id int64
			if err := conn.QueryRowContext(ctx, s.session).Scan(&id); err != nil {
				t.Fatal(err)
			}
			proxy.Silence()
			silenced := time.Now()
			for {
				var n int
				if err := s.admin.QueryRowContext(ctx, s.alive, id).Scan(&n); err != nil {
					t.Fatal(err)
				}
				if n == 0 {
					break
				}
				if time.Since(silenced) > 15*time.Second {
					t.Fatalf("session %d still alive %s after its client went silent (session idle timeout 2s)", id, time.Since(silenced))
				}
				time.Sleep(100 * time.Millisecond)
			}
			t.Logf("server ended the silent session after %s (idle timeout 2s)", time.Since(silenced).Round(10*time.Millisecond))
		})
	}
}

func TestOpenRejectsBadDSN(t *testing.T) {
	if _, err := Open(MySQL, "not a dsn", Defaults()); err == nil {
		t.Fatal("bad mysql DSN accepted")
	}
	if _, err := Open(Postgres, "postgres://x:y@:99999999/db", Defaults()); err == nil {
		t.Fatal("bad postgres DSN accepted")
	}
	if _, err := Open("sqlite", "x", Defaults()); err == nil {
		t.Fatal("sqlite accepted")
	}
}
