package sinktest

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"

	"github.com/outbox-cdc/outbox-cdc/test/testenv"
)

// The binary under test, built once per test process.
var (
	buildOnce sync.Once
	binary    string
	buildErr  error
)

func connectorBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "outbox-cdc-sinktest")
		if err != nil {
			buildErr = err
			return
		}
		binary = filepath.Join(dir, "outbox-cdc")
		out, err := exec.Command("go", "build", "-o", binary, "github.com/outbox-cdc/outbox-cdc/cmd/outbox-cdc").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("build outbox-cdc: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binary
}

// Connector is one outbox-cdc process.
type Connector struct {
	t        *testing.T
	cmd      *exec.Cmd
	httpAddr string
	log      *syncBuffer
	done     chan struct{}
	exitErr  error
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// startConnector runs the binary with the configuration and waits until
// /readyz says 200.
func startConnector(t *testing.T, configPath string) *Connector {
	t.Helper()
	c := &Connector{t: t, httpAddr: freeAddr(t), log: &syncBuffer{}, done: make(chan struct{})}
	c.cmd = exec.Command(connectorBinary(t), "run", "--config", configPath)
	c.cmd.Env = append(os.Environ(), "OUTBOX_CDC_HTTP_LISTEN="+c.httpAddr, "OUTBOX_CDC_LOG_FORMAT=json")
	c.cmd.Stdout, c.cmd.Stderr = c.log, c.log
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { c.exitErr = c.cmd.Wait(); close(c.done) }()
	t.Cleanup(func() {
		c.Kill()
		if t.Failed() {
			t.Logf("connector log:\n%s", c.log.String())
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-c.done:
			t.Fatalf("connector exited during start: %v\n%s", c.exitErr, c.log.String())
		default:
		}
		if c.Status("/readyz") == 200 {
			return c
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("connector not ready within 30s:\n%s", c.log.String())
	return nil
}

// Kill stops the process with SIGKILL: no flush, no checkpoint.
func (c *Connector) Kill() {
	if c.cmd.Process != nil {
		c.cmd.Process.Kill()
	}
	<-c.done
}

// Stop sends SIGTERM and returns the exit error (nil for status 0).
func (c *Connector) Stop(timeout time.Duration) error {
	c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
		return c.exitErr
	case <-time.After(timeout):
		c.t.Fatalf("connector did not exit within %s of SIGTERM", timeout)
		return nil
	}
}

// Exited reports whether the process has exited.
func (c *Connector) Exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// Status returns the HTTP status of path, 0 if unreachable.
func (c *Connector) Status(path string) int {
	resp, err := http.Get("http://" + c.httpAddr + path)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// RSS returns the process's resident memory in bytes (Linux), or -1.
func (c *Connector) RSS() int64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", c.cmd.Process.Pid))
	if err != nil {
		return -1
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err == nil {
				return kb << 10
			}
		}
	}
	return -1
}

// source is a source database prepared for one test: a fresh database
// (MySQL) or schema (PostgreSQL) with the seed outbox table.
type source struct {
	kind   string
	db     *sql.DB
	insert string
	yaml   string // the source: section's lines
}

func newSource(t *testing.T, kind, name string) *source {
	t.Helper()
	if kind == "postgres" {
		return postgresSource(t, name)
	}
	return mysqlSource(t, name)
}

func mysqlSource(t *testing.T, name string) *source {
	base := testenv.MySQLDSN(t)
	cfg, err := mysql.ParseDSN(base)
	if err != nil {
		t.Fatal(err)
	}
	admin := testenv.MySQL(t)
	for _, q := range []string{"DROP DATABASE IF EXISTS " + name, "CREATE DATABASE " + name} {
		if _, err := admin.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { admin.Exec("DROP DATABASE IF EXISTS " + name) })
	cfg.DBName = name
	dsn := cfg.FormatDSN()
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if _, err := db.Exec(testenv.SeedTableMySQL("outbox_message")); err != nil {
		t.Fatal(err)
	}
	return &source{
		kind: "mysql", db: db,
		insert: "INSERT INTO outbox_message (message_id, aggregate_type, aggregate_id, event_type, payload) VALUES (?, ?, ?, ?, ?)",
		yaml:   fmt.Sprintf("  type: mysql\n  dsn: %q\n  table: outbox_message\n  start: latest\n", dsn),
	}
}

func postgresSource(t *testing.T, name string) *source {
	dsn := testenv.PostgresDSN(t)
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range append([]string{"DROP SCHEMA IF EXISTS " + name + " CASCADE", "CREATE SCHEMA " + name},
		testenv.SeedTablePostgres(name+".outbox_message")...) {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for i := 0; i < 50; i++ { // the walsender may still be exiting
			if _, err := db.ExecContext(ctx, "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1", name); err == nil {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		db.ExecContext(ctx, "DROP PUBLICATION IF EXISTS "+name)
		db.ExecContext(ctx, "DROP SCHEMA IF EXISTS "+name+" CASCADE")
		db.Close()
	})
	return &source{
		kind: "postgres", db: db,
		insert: "INSERT INTO " + name + ".outbox_message (message_id, aggregate_type, aggregate_id, event_type, payload) VALUES ($1, $2, $3, $4, $5)",
		yaml:   fmt.Sprintf("  type: postgres\n  dsn: %q\n  table: %s.outbox_message\n  slot: %s\n  publication: %s\n", dsn, name, name, name),
	}
}

// Row is one outbox row.
type Row struct{ ID, AggType, AggID, EvType, Payload string }

// insertTx commits rows in one transaction.
func (s *source) insertTx(t testing.TB, rows []Row) {
	t.Helper()
	tx, err := s.db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if _, err := tx.Exec(s.insert, r.ID, r.AggType, r.AggID, r.EvType, r.Payload); err != nil {
			tx.Rollback()
			t.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
}

// writer commits transactions of 1..5 rows over 7 aggregates until done,
// remembering the message ids in commit order.
type writer struct {
	mu   sync.Mutex
	ids  []string
	done chan struct{}
}

func startWriter(t *testing.T, s *source, prefix string, txs int, pause time.Duration, payload int) *writer {
	w := &writer{done: make(chan struct{})}
	go func() {
		defer close(w.done)
		n := 0
		pad := strings.Repeat("x", payload)
		for i := 0; i < txs; i++ {
			rows := make([]Row, 1+i%5)
			for j := range rows {
				n++
				rows[j] = Row{fmt.Sprintf("%s-%d", prefix, n), "ORDER", fmt.Sprintf("agg-%d", (n*7919)%7), "ORDER_CREATED",
					fmt.Sprintf(`{"seq": %d, "pad": %q}`, n, pad)}
			}
			s.insertTx(t, rows)
			w.mu.Lock()
			for _, r := range rows {
				w.ids = append(w.ids, r.ID)
			}
			w.mu.Unlock()
			time.Sleep(pause)
		}
	}()
	return w
}

func (w *writer) wait() []string {
	<-w.done
	return w.ids
}

func writeConfig(t *testing.T, yaml string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "outbox-cdc.yaml")
	if err := os.WriteFile(p, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
