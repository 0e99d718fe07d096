package testenv

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// PGServer is a PostgreSQL server of a test's own, started by PrivatePostgres
// (a primary) or PGServer.Standby (a physical standby cloned from one with
// pg_basebackup): what a failover test needs and must not do to the shared
// server (promote it, kill it, give it standbys).
//
// Every server has its own temporary directory and a free loopback port,
// wal_level logical, trust authentication for the user postgres and a
// database test. It is killed, and its directory removed, at the end of
// the test, and by a watchdog process within a second of the test process
// ending however it ends.
type PGServer struct {
	// Port is the loopback port it listens on.
	Port int
	dir  string // data is dir/data, the log dir/server.log
	bin  string // the directory of initdb, pg_ctl, postgres, pg_basebackup
	cred *syscall.Credential
	t    testing.TB

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// pgBinDir finds the PostgreSQL server binaries: pg_config --bindir on
// PATH, else the newest /usr/lib/postgresql/*/bin.
func pgBinDir() (string, error) {
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		dir := strings.TrimSpace(string(out))
		if _, err := os.Stat(filepath.Join(dir, "initdb")); err == nil {
			return dir, nil
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool {
		vi, _ := strconv.Atoi(filepath.Base(filepath.Dir(dirs[i])))
		vj, _ := strconv.Atoi(filepath.Base(filepath.Dir(dirs[j])))
		return vi > vj
	})
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d, nil
		}
	}
	return "", errors.New("initdb not found (install the PostgreSQL server package; looked at pg_config --bindir and /usr/lib/postgresql/*/bin)")
}

// pgCredential is who the servers run as: PostgreSQL refuses to run as
// root, so as root they run as the user postgres (or nobody).
func pgCredential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	for _, name := range []string{"postgres", "nobody"} {
		u, err := user.Lookup(name)
		if err != nil {
			continue
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
	}
	return nil, errors.New("running as root and there is no user postgres or nobody to run PostgreSQL as")
}

// PrivatePostgres initializes and starts a primary of the test's own (see
// PGServer). It takes a few seconds. Without the PostgreSQL server
// binaries the test is skipped on a developer machine and fails in CI
// (Unavailable).
func PrivatePostgres(t testing.TB) *PGServer {
	t.Helper()
	bin, err := pgBinDir()
	if err != nil {
		Unavailable(t, "private PostgreSQL server: %v", err)
	}
	cred, err := pgCredential()
	if err != nil {
		Unavailable(t, "private PostgreSQL server: %v", err)
	}
	s, err := newPGServer(t, bin, cred)
	if err != nil {
		t.Fatalf("private PostgreSQL server: %v", err)
	}
	// 1 MB WAL segments keep the private servers' disk use small.
	if out, err := s.run("initdb", "-D", s.data(), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync", "--wal-segsize=1"); err != nil {
		t.Fatalf("initdb: %v\n%s", err, out)
	}
	s.start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.dsn("postgres"))
	if err != nil {
		t.Fatalf("private PostgreSQL server: %v", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE test"); err != nil {
		t.Fatalf("private PostgreSQL server: %v", err)
	}
	return s
}

func newPGServer(t testing.TB, bin string, cred *syscall.Credential) (*PGServer, error) {
	dir, err := os.MkdirTemp("", "outbox-cdc-pg-")
	if err != nil {
		return nil, err
	}
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
	}
	port, err := freePort()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	// Removes the directory if this process ends without its cleanup.
	watch := exec.Command("sh", "-c", `while kill -0 "$1" 2>/dev/null; do sleep 1; done; sleep 2; rm -rf "$2"`,
		"watchdog", strconv.Itoa(os.Getpid()), dir)
	if err := watch.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("start the watchdog: %w", err)
	}
	go func() { _ = watch.Wait() }()
	s := &PGServer{Port: port, dir: dir, bin: bin, cred: cred, t: t}
	t.Cleanup(func() {
		s.Kill()
		os.RemoveAll(dir)
	})
	return s, nil
}

func (s *PGServer) data() string { return filepath.Join(s.dir, "data") }

// run runs one of the PostgreSQL programs as the servers' user.
func (s *PGServer) run(prog string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(s.bin, prog), args...)
	cmd.Dir = s.dir
	cmd.Env = append(os.Environ(), "LC_ALL=C", "PGCONNECT_TIMEOUT=10")
	if s.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	}
	return cmd.CombinedOutput()
}

// start starts the server on its data directory and waits until it
// accepts connections (a standby: until it accepts read-only ones).
func (s *PGServer) start(t testing.TB) {
	t.Helper()
	log, err := os.OpenFile(filepath.Join(s.dir, "server.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	cmd := exec.Command(filepath.Join(s.bin, "postgres"), "-D", s.data(),
		"-c", "listen_addresses=127.0.0.1",
		"-c", "port="+strconv.Itoa(s.Port),
		"-c", "unix_socket_directories="+s.dir,
		"-c", "wal_level=logical",
		"-c", "max_wal_senders=10",
		"-c", "max_replication_slots=10",
		"-c", "wal_keep_size=64MB",
		"-c", "hot_standby=on",
		"-c", "hot_standby_feedback=on",
		"-c", "max_connections=40",
		"-c", "shared_buffers=16MB",
		"-c", "fsync=off", // a killed server keeps its writes in the page cache; nothing here loses power
		"-c", "synchronous_commit=on",
		"-c", "log_min_messages=warning",
	)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: s.cred}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start postgres: %v", err)
	}
	// The watchdog outlives this process: when it is gone (a normal exit,
	// a panic, SIGKILL) while the server runs, the server's process group
	// is killed. It ends with the server.
	pid := strconv.Itoa(cmd.Process.Pid)
	watch := exec.Command("sh", "-c",
		`while kill -0 "$1" 2>/dev/null && kill -0 "$2" 2>/dev/null; do sleep 1; done; kill -0 "$1" 2>/dev/null || kill -9 -"$2" 2>/dev/null`,
		"watchdog", strconv.Itoa(os.Getpid()), pid)
	if err := watch.Start(); err != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
		t.Fatalf("start the watchdog: %v", err)
	}
	go func() { _ = watch.Wait() }()
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	s.mu.Lock()
	s.cmd, s.done = cmd, done
	s.mu.Unlock()

	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		conn, err := pgx.Connect(ctx, s.dsn("postgres"))
		if err == nil {
			conn.Close(ctx)
			cancel()
			return
		}
		cancel()
		select {
		case <-done:
			t.Fatalf("postgres exited during start: %v\n%s", err, s.Log())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("postgres not answering on port %d after 60s: %v\n%s", s.Port, err, s.Log())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Log is the tail of the server's log.
func (s *PGServer) Log() string {
	b, _ := os.ReadFile(filepath.Join(s.dir, "server.log"))
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// Addr is the server's host:port.
func (s *PGServer) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.Port)) }

// DSN is a URL for database test as the user postgres.
func (s *PGServer) DSN() string { return s.dsn("test") }

func (s *PGServer) dsn(db string) string {
	return fmt.Sprintf("postgres://postgres@%s/%s?sslmode=disable", s.Addr(), db)
}

// Standby clones s with pg_basebackup and starts the clone as a physical
// standby streaming from s. via is the address the standby reaches s at
// (a Proxy in front of s, to cut replication); empty: s itself.
func (s *PGServer) Standby(t testing.TB, via string) *PGServer {
	t.Helper()
	if via == "" {
		via = s.Addr()
	}
	host, port, err := net.SplitHostPort(via)
	if err != nil {
		t.Fatal(err)
	}
	sb, err := newPGServer(t, s.bin, s.cred)
	if err != nil {
		t.Fatalf("standby: %v", err)
	}
	// -R writes standby.signal and a primary_conninfo with this address.
	if out, err := sb.run("pg_basebackup", "-h", host, "-p", port, "-U", "postgres", "-D", sb.data(), "-R", "-X", "stream", "--no-sync", "-c", "fast"); err != nil {
		t.Fatalf("pg_basebackup: %v\n%s", err, out)
	}
	sb.start(t)
	return sb
}

// Kill ends the server with SIGKILL, all its processes at once (a crash
// of its host, as far as its clients can tell), and waits for it.
func (s *PGServer) Kill() {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
	}
}

// Stop shuts the server down cleanly (pg_ctl stop -m fast).
func (s *PGServer) Stop(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	if out, err := s.run("pg_ctl", "stop", "-D", s.data(), "-m", "fast", "-w", "-t", "60"); err != nil {
		t.Fatalf("pg_ctl stop: %v\n%s", err, out)
	}
	<-done
}

// Restart stops the server cleanly and starts it again on its data
// directory and port.
func (s *PGServer) Restart(t testing.TB) {
	t.Helper()
	s.Stop(t)
	s.start(t)
}

// Promote ends recovery on a standby (pg_ctl promote) and waits until it
// accepts writes.
func (s *PGServer) Promote(t testing.TB) {
	t.Helper()
	if out, err := s.run("pg_ctl", "promote", "-D", s.data(), "-w", "-t", "60"); err != nil {
		t.Fatalf("pg_ctl promote: %v\n%s\n%s", err, out, s.Log())
	}
}

// CopySlot puts the replication slot named slot of primary on the standby
// s, as Patroni's permanent slots do on its replicas before PostgreSQL 17:
// a CHECKPOINT on the primary writes the slot's state file, which is
// copied into the standby's pg_replslot while the standby is stopped. The
// copy keeps the primary's positions of that moment.
func (s *PGServer) CopySlot(t testing.TB, primary *PGServer, slot string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, primary.DSN())
	if err != nil {
		t.Fatal(err)
	}
	_, err = conn.Exec(ctx, "CHECKPOINT")
	conn.Close(ctx)
	if err != nil {
		t.Fatal(err)
	}
	state, err := os.ReadFile(filepath.Join(primary.data(), "pg_replslot", slot, "state"))
	if err != nil {
		t.Fatalf("read the slot's state on the primary: %v", err)
	}
	s.Stop(t)
	dir := filepath.Join(s.data(), "pg_replslot", slot)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "state"), state, 0o600); err != nil {
		t.Fatal(err)
	}
	if s.cred != nil {
		for _, p := range []string{dir, filepath.Join(dir, "state")} {
			if err := os.Chown(p, int(s.cred.Uid), int(s.cred.Gid)); err != nil {
				t.Fatal(err)
			}
		}
	}
	s.start(t)
}
