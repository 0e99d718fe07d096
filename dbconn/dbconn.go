// Package dbconn opens the connector's side connections to the source
// database: the HA lock, the checkpoint table and the outbox lifecycle.
// The replication streams have their own (binlog/, wal/). Their SQL is
// written once against a Dialect (dialect.go), which holds all that
// differs between MySQL/MariaDB and PostgreSQL.
//
// A side connection must never wait forever on a peer that went silent (a
// dead host, a cut network, a frozen process), on either end:
//
//   - Client side, every connection follows Options.Peer (deadpeer: TCP
//     keepalives and TCP_USER_TIMEOUT with the same total), so the kernel
//     drops a connection whose peer stopped answering within
//     Peer.DeadAfter, whether or not data is outstanding. Connecting is
//     bounded by Options.Connect; on MySQL every packet read or write by
//     Options.IO. Callers still put a context deadline on every call: that
//     is the bound that holds through a path that is silent but alive at
//     the TCP level (a proxy, a NAT that still ACKs).
//   - Server side, PostgreSQL sessions get the same keepalive settings
//     (tcp_keepalives_*, tcp_user_timeout), so the server ends the session
//     of a client host that died. With Options.SessionIdle the server also
//     ends a session that sent no command for that long (MySQL wait_timeout
//     and net timeouts, PostgreSQL 14+ idle_session_timeout): the only
//     bound that frees the locks of a client whose process is frozen, whose
//     kernel keeps answering keepalives.
package dbconn

import (
	"context"
	"database/sql"
	"errors"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/outbox-cdc/outbox-cdc/deadpeer"
)

// Dialects.
const (
	MySQL    = "mysql"
	Postgres = "postgres"
)

// Options bound how long a connection may hang on a silent peer.
type Options struct {
	// Connect bounds establishing a connection (TCP, TLS, authentication),
	// unless the DSN sets its own (MySQL timeout=, PostgreSQL
	// connect_timeout=).
	Connect time.Duration
	// Peer is when the kernel gives up on a silent server (keepalives,
	// TCP_USER_TIMEOUT); a zero Idle leaves Go's keepalive defaults.
	Peer deadpeer.Policy
	// IO bounds one packet read or write on MySQL (go-sql-driver
	// readTimeout/writeTimeout), unless the DSN sets them. It must exceed
	// the longest statement the caller runs. 0: none.
	IO time.Duration
	// SessionIdle makes the server end the session after this long without
	// a command from the client. Only for a connection the caller keeps
	// busy more often than that (the HA lock's checks): a pool's idle
	// connections would be cut. 0: the server's defaults.
	SessionIdle time.Duration
	// LockWait bounds how long a statement waits for a row lock on the
	// server (MySQL innodb_lock_wait_timeout, whole seconds; PostgreSQL
	// lock_timeout), so a statement whose client gave up does not linger
	// there. 0: the server's default.
	LockWait time.Duration
	// Application names the connection on the server (PostgreSQL
	// application_name unless the DSN sets one).
	Application string
}

// Defaults are the bounds of the checkpoint table's and the lifecycle's
// pools: a dead peer is dropped within 20s (deadpeer.Database).
func Defaults() Options {
	return Options{Connect: 10 * time.Second, Peer: deadpeer.Database, IO: 30 * time.Second, Application: "outbox-cdc"}
}

// Dialer returns a dialer that follows o.Peer.
func (o Options) Dialer() *net.Dialer {
	if o.Peer.Idle > 0 {
		return o.Peer.Dialer(o.Connect)
	}
	return &net.Dialer{Timeout: o.Connect}
}

// Open returns a pool on dsn (a go-sql-driver DSN for "mysql", a libpq URL
// or keyword string for "postgres") whose connections follow o. It does
// not connect.
func Open(dialect, dsn string, o Options) (*sql.DB, error) {
	d, err := DialectOf(dialect)
	if err != nil {
		return nil, err
	}
	return d.Open(dsn, o)
}

// Open returns a pool on dsn in d's syntax whose connections follow o
// (see the package Open).
func (d *Dialect) Open(dsn string, o Options) (*sql.DB, error) { return d.open(dsn, o) }

func openMySQL(dsn string, o Options) (*sql.DB, error) {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, errors.New("not a valid go-sql-driver DSN")
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = o.Connect
	}
	if cfg.ReadTimeout == 0 {
		cfg.ReadTimeout = o.IO
	}
	if cfg.WriteTimeout == 0 {
		cfg.WriteTimeout = o.IO
	}
	if cfg.Net == "tcp" || cfg.Net == "tcp4" || cfg.Net == "tcp6" {
		cfg.DialFunc = o.Dialer().DialContext
	}
	// UPDATE's affected rows count matched rows, so a conditional UPDATE
	// that rewrites equal values still reports its match.
	cfg.ClientFoundRows = true
	// go-sql-driver sends each parameter as SET <name>=<value> after
	// connecting.
	set := func(name string, secs int) {
		if cfg.Params == nil {
			cfg.Params = map[string]string{}
		}
		cfg.Params[name] = strconv.Itoa(secs)
	}
	if s := seconds(o.SessionIdle); s > 0 {
		for _, p := range []string{"wait_timeout", "net_read_timeout", "net_write_timeout"} {
			set(p, s)
		}
	}
	if s := seconds(o.LockWait); s > 0 {
		set("innodb_lock_wait_timeout", s)
	}
	c, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, err
	}
	return sql.OpenDB(c), nil
}

func openPostgres(dsn string, o Options) (*sql.DB, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, errors.New("not a valid PostgreSQL connection string")
	}
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = o.Connect
	}
	d := o.Dialer()
	if cfg.ConnectTimeout > 0 {
		d.Timeout = cfg.ConnectTimeout
	}
	cfg.DialFunc = d.DialContext
	if _, ok := cfg.RuntimeParams["application_name"]; !ok && o.Application != "" {
		cfg.RuntimeParams["application_name"] = o.Application
	}
	cfg.AfterConnect = func(ctx context.Context, c *pgconn.PgConn) error {
		q := sessionSettings(c.ParameterStatus("server_version"), o)
		if q == "" {
			return nil
		}
		return c.Exec(ctx, q).Close()
	}
	return stdlib.OpenDB(*cfg), nil
}

// sessionSettings is the SET statement for a PostgreSQL session: the
// server's TCP keepalives (every version), tcp_user_timeout (12+),
// lock_timeout and idle_session_timeout (14+).
func sessionSettings(serverVersion string, o Options) string {
	major, _ := strconv.Atoi(strings.SplitN(serverVersion, ".", 2)[0])
	var sets []string
	if p := o.Peer; p.Idle > 0 {
		sets = append(sets,
			"SET tcp_keepalives_idle = "+strconv.Itoa(seconds(p.Idle)),
			"SET tcp_keepalives_interval = "+strconv.Itoa(seconds(p.Interval)),
			"SET tcp_keepalives_count = "+strconv.Itoa(p.Count))
		if major >= 12 && p.UserTimeout {
			sets = append(sets, "SET tcp_user_timeout = "+strconv.FormatInt(p.DeadAfter().Milliseconds(), 10))
		}
	}
	if o.LockWait > 0 {
		sets = append(sets, "SET lock_timeout = "+strconv.FormatInt(o.LockWait.Milliseconds(), 10))
	}
	if o.SessionIdle > 0 && major >= 14 {
		sets = append(sets, "SET idle_session_timeout = "+strconv.FormatInt(o.SessionIdle.Milliseconds(), 10))
	}
	return strings.Join(sets, "; ")
}

// seconds rounds d up to whole seconds (the unit of MySQL's timeouts and
// of the keepalive settings).
func seconds(d time.Duration) int {
	if d <= 0 {
		return 0
	}
	return int((d + time.Second - 1) / time.Second)
}
