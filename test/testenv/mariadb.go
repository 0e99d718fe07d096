package testenv

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// MariaDBOptions are the startup settings of a private MariaDB server:
// settings that are GLOBAL-only or fixed at startup, which a test must not
// change on the shared server other tests use at the same time.
type MariaDBOptions struct {
	// RowMetadata is binlog_row_metadata: FULL, MINIMAL or NO_LOG (empty:
	// MINIMAL).
	RowMetadata string
	// LowerCaseTableNames is lower_case_table_names (0, 1 or 2).
	LowerCaseTableNames int
	// Instance separates servers with the same settings: a test that
	// changes what other tests rely on (purges binlogs, say) asks for an
	// instance of its own.
	Instance string
	// LogSlaveUpdates writes what the server applies as a replica to its
	// own binlog (log_slave_updates), as a replica that may be promoted
	// must: a failover test's replica.
	LogSlaveUpdates bool
}

func (o MariaDBOptions) key() string {
	md := strings.ToUpper(o.RowMetadata)
	if md == "" {
		md = "MINIMAL"
	}
	k := fmt.Sprintf("metadata=%s,lctn=%d", md, o.LowerCaseTableNames)
	if o.Instance != "" {
		k += ",instance=" + o.Instance
	}
	if o.LogSlaveUpdates {
		k += ",log_slave_updates"
	}
	return k
}

// privateServer is one server this process started.
type privateServer struct {
	once sync.Once
	dsn  string
	err  error
}

var private struct {
	mu      sync.Mutex
	servers map[string]*privateServer
	next    int // server_id offset
}

// PrivateMariaDB returns a go-sql-driver DSN (user root, database test) of
// a MariaDB server of its own, started by this test process with opt: a
// fresh data directory (mariadb-install-db into a temporary directory),
// mariadbd on a free loopback port with its own socket, binlog on in ROW
// format with FULL row images. One server per distinct opt is started on
// first use and shared by every test of the process; it starts in about a
// second. It is killed, and its directory removed, within a second of the
// test process ending (however it ends: a watchdog process polls for it),
// or at once by StopPrivateMariaDB.
//
// Without the MariaDB server binaries the test is skipped on a developer
// machine and fails in CI (Unavailable). Nothing of the shared server is
// touched.
func PrivateMariaDB(t testing.TB, opt MariaDBOptions) string {
	t.Helper()
	k := opt.key()
	private.mu.Lock()
	if private.servers == nil {
		private.servers = map[string]*privateServer{}
	}
	s, ok := private.servers[k]
	if !ok {
		s = &privateServer{}
		private.servers[k] = s
		private.next++
	}
	id := private.next
	private.mu.Unlock()
	s.once.Do(func() {
		t0 := time.Now()
		s.dsn, s.err = startMariaDB(opt, id)
		if s.err == nil {
			fmt.Fprintf(os.Stderr, "testenv: private MariaDB (%s) ready in %s\n", k, time.Since(t0).Round(time.Millisecond))
		}
	})
	if s.err != nil {
		Unavailable(t, "private MariaDB server (%s): %v", k, s.err)
	}
	return s.dsn
}

// running holds what StopPrivateMariaDB stops.
var running struct {
	mu    sync.Mutex
	procs []*exec.Cmd
	dirs  []string
}

// StopPrivateMariaDB kills the private servers this process started and
// removes their directories. A package's TestMain may call it after m.Run;
// without it the watchdog does the same within a second of the exit.
func StopPrivateMariaDB() {
	running.mu.Lock()
	defer running.mu.Unlock()
	for _, p := range running.procs {
		if p.Process != nil {
			p.Process.Kill()
			p.Wait()
		}
	}
	for _, d := range running.dirs {
		os.RemoveAll(d)
	}
	running.procs, running.dirs = nil, nil
}

// findBinary looks for the first of names on PATH and in the sbin
// directories distributions install the server into.
func findBinary(names ...string) (string, error) {
	for _, n := range names {
		if p, err := exec.LookPath(n); err == nil {
			return p, nil
		}
		for _, dir := range []string{"/usr/sbin", "/usr/local/sbin", "/usr/local/mysql/bin", "/usr/bin"} {
			p := filepath.Join(dir, n)
			if fi, err := os.Stat(p); err == nil && !fi.IsDir() {
				return p, nil
			}
		}
	}
	return "", fmt.Errorf("none of %s found (install the MariaDB server package)", strings.Join(names, ", "))
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

func startMariaDB(opt MariaDBOptions, id int) (string, error) {
	server, err := findBinary("mariadbd", "mysqld")
	if err != nil {
		return "", err
	}
	install, err := findBinary("mariadb-install-db", "mysql_install_db")
	if err != nil {
		return "", err
	}
	dir, err := os.MkdirTemp("", "outbox-cdc-mariadb-")
	if err != nil {
		return "", err
	}
	fail := func(err error) (string, error) {
		log, _ := os.ReadFile(filepath.Join(dir, "error.log"))
		os.RemoveAll(dir)
		if len(log) > 2000 {
			log = log[len(log)-2000:]
		}
		if len(log) > 0 {
			return "", fmt.Errorf("%w; server log:\n%s", err, log)
		}
		return "", err
	}
	data := filepath.Join(dir, "data")
	md := strings.ToUpper(opt.RowMetadata)
	if md == "" {
		md = "MINIMAL"
	}
	lctn := "--lower-case-table-names=" + strconv.Itoa(opt.LowerCaseTableNames)
	asRoot := os.Geteuid() == 0
	// Its own temporary directory: the bootstrap server's temporary tables
	// do not meet any other server's (a shared /tmp once lost one mid-install,
	// "Could not remove temporary table", with several installs at once).
	tmp := filepath.Join(dir, "tmp")
	if err := os.MkdirAll(tmp, 0o700); err != nil {
		return fail(err)
	}
	args := []string{"--no-defaults", "--datadir=" + data, "--tmpdir=" + tmp, "--auth-root-authentication-method=normal", "--skip-test-db", lctn}
	if asRoot {
		args = append(args, "--user=root")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// Installed at most twice: a failed install leaves a partial data
	// directory, removed before the second try.
	for attempt := 1; ; attempt++ {
		out, err := exec.CommandContext(ctx, install, args...).CombinedOutput()
		if err == nil {
			break
		}
		if attempt < 2 && ctx.Err() == nil {
			os.RemoveAll(data)
			continue
		}
		if len(out) > 2000 {
			out = out[len(out)-2000:]
		}
		return fail(fmt.Errorf("%s: %v\n%s", filepath.Base(install), err, out))
	}
	port, err := freePort()
	if err != nil {
		return fail(err)
	}
	args = []string{
		"--no-defaults",
		"--datadir=" + data,
		"--tmpdir=" + tmp,
		"--port=" + strconv.Itoa(port),
		"--bind-address=127.0.0.1",
		"--socket=" + filepath.Join(dir, "mysqld.sock"),
		"--pid-file=" + filepath.Join(dir, "mysqld.pid"),
		"--log-error=" + filepath.Join(dir, "error.log"),
		"--server-id=" + strconv.Itoa(1000+id),
		"--log-bin=" + filepath.Join(dir, "binlog"),
		"--binlog-format=ROW",
		"--binlog-row-image=FULL",
		"--binlog-row-metadata=" + md,
		lctn,
		"--innodb-buffer-pool-size=32M",
		"--performance-schema=OFF",
		"--max-connections=300",
	}
	if opt.LogSlaveUpdates {
		args = append(args, "--log-slave-updates")
	}
	if asRoot {
		args = append(args, "--user=root")
	}
	cmd := exec.Command(server, args...)
	if err := cmd.Start(); err != nil {
		return fail(err)
	}
	// The watchdog outlives this process: when it is gone (a normal exit,
	// a panic, SIGKILL), the server is killed and its directory removed.
	watch := exec.Command("sh", "-c",
		`while kill -0 "$1" 2>/dev/null; do sleep 1; done; kill -9 "$2" 2>/dev/null; sleep 1; rm -rf "$3"`,
		"watchdog", strconv.Itoa(os.Getpid()), strconv.Itoa(cmd.Process.Pid), dir)
	if err := watch.Start(); err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		return fail(fmt.Errorf("start the watchdog: %w", err))
	}
	go watch.Wait() // reap it if this process outlives it
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	running.mu.Lock()
	running.procs = append(running.procs, cmd)
	running.dirs = append(running.dirs, dir)
	running.mu.Unlock()

	admin := fmt.Sprintf("root@tcp(127.0.0.1:%d)/", port)
	db, err := sql.Open("mysql", admin)
	if err != nil {
		return fail(err)
	}
	defer db.Close()
	deadline := time.Now().Add(60 * time.Second)
	for {
		pctx, pcancel := context.WithTimeout(context.Background(), 2*time.Second)
		err = db.PingContext(pctx)
		pcancel()
		if err == nil {
			break
		}
		select {
		case werr := <-exited:
			return fail(fmt.Errorf("mariadbd exited during start: %v", werr))
		default:
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			return fail(fmt.Errorf("mariadbd not answering on port %d after 60s: %w", port, err))
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, err := db.Exec("CREATE DATABASE IF NOT EXISTS test"); err != nil {
		cmd.Process.Kill()
		return fail(err)
	}
	var got string
	if err := db.QueryRow("SELECT @@GLOBAL.binlog_row_metadata").Scan(&got); err != nil {
		cmd.Process.Kill()
		return fail(err)
	}
	if !strings.EqualFold(got, md) {
		cmd.Process.Kill()
		return fail(errors.New("binlog_row_metadata is " + got + ", not " + md))
	}
	return admin + "test", nil
}
