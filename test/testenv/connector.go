package testenv

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The outbox-cdc binary under test, built once per test process on first
// use and removed by RemoveBinary.
var built struct {
	once sync.Once
	dir  string
	path string
	err  error
}

// EnvBinary names a prebuilt outbox-cdc binary the tests run instead of
// building one: a binary of an older commit, to show that a test fails
// there.
const EnvBinary = "OUTBOX_CDC_TEST_BINARY"

// Binary builds cmd/outbox-cdc once per test process and returns its path
// (or returns $OUTBOX_CDC_TEST_BINARY when set). A failed build fails
// every test that asks for it.
func Binary(t testing.TB) string {
	t.Helper()
	if p := os.Getenv(EnvBinary); p != "" {
		return p
	}
	built.once.Do(func() {
		dir, err := os.MkdirTemp("", "outbox-cdc-bin")
		if err != nil {
			built.err = err
			return
		}
		built.dir = dir
		built.path = filepath.Join(dir, "outbox-cdc")
		out, err := exec.Command("go", "build", "-o", built.path, "github.com/outbox-cdc/outbox-cdc/cmd/outbox-cdc").CombinedOutput()
		if err != nil {
			built.err = fmt.Errorf("build outbox-cdc: %v\n%s", err, out)
		}
	})
	if built.err != nil {
		t.Fatal(built.err)
	}
	return built.path
}

// RemoveBinary removes the binary Binary built. A package's TestMain may
// call it after m.Run.
func RemoveBinary() {
	if built.dir != "" {
		os.RemoveAll(built.dir)
	}
}

// Connector is one outbox-cdc process started by Launch or Start. It is
// killed (SIGCONT first, in case a test stopped it) at test end, and its
// output is logged when the test failed. At test end every line it wrote
// must be one JSON object with unique keys (CheckJSONLines), or the test
// fails naming the line; a test whose process deliberately writes
// something else says so with LogNotJSON.
type Connector struct {
	t       testing.TB
	cmd     *exec.Cmd
	addr    string
	log     syncBuffer
	done    chan struct{}
	exitErr error
	notJSON string // why the log is not checked, if it is not
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

// FreeAddr returns a loopback address with a port free at the time of the
// call, never one it returned before in this process: a port handed to a
// process that has not bound it yet is free again, and the kernel may hand
// it out once more (two instances launched one after the other were given
// the same HTTP port).
func FreeAddr(t testing.TB) string {
	t.Helper()
	handed.mu.Lock()
	defer handed.mu.Unlock()
	var held []net.Listener // kept open while looking, so the kernel gives another
	defer func() {
		for _, ln := range held {
			_ = ln.Close()
		}
	}()
	for range 100 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, ln)
		addr := ln.Addr().String()
		if !handed.ports[addr] {
			handed.ports[addr] = true
			return addr
		}
	}
	t.Fatal("no loopback port that was not handed out before")
	return ""
}

// handed is every address FreeAddr returned.
var handed = struct {
	mu    sync.Mutex
	ports map[string]bool
}{ports: map[string]bool{}}

// Launch runs `outbox-cdc run --config configPath` with env added to the
// environment, JSON logs and the HTTP server on a free port, and returns
// at once: it does not wait for readiness (a standby never gets ready; a
// refused start exits).
func Launch(t testing.TB, configPath string, env ...string) *Connector {
	t.Helper()
	return LaunchArgs(t, []string{"run", "--config", configPath}, env...)
}

// LaunchArgs is Launch with the whole argument list.
func LaunchArgs(t testing.TB, args []string, env ...string) *Connector {
	t.Helper()
	c := &Connector{t: t, addr: FreeAddr(t), done: make(chan struct{})}
	c.cmd = exec.Command(Binary(t), args...)
	c.cmd.Env = append(os.Environ(), append(env, "OUTBOX_CDC_HTTP_LISTEN="+c.addr, "OUTBOX_CDC_LOG_FORMAT=json")...)
	c.cmd.Stdout, c.cmd.Stderr = &c.log, &c.log
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { c.exitErr = c.cmd.Wait(); close(c.done) }()
	t.Cleanup(func() {
		c.Kill()
		if c.notJSON == "" {
			if err := CheckJSONLines(strings.NewReader(c.Log())); err != nil {
				t.Errorf("the connector wrote a line that is not valid JSON with unique keys: %v", err)
			}
		}
		if t.Failed() {
			t.Logf("connector log:\n%s", c.Log())
		}
	})
	return c
}

// Start is Launch, then waits up to 30s until the process streams (see
// Streaming); the test fails if the process exits first.
func Start(t testing.TB, configPath string, env ...string) *Connector {
	t.Helper()
	c := Launch(t, configPath, env...)
	c.WaitStreaming(30 * time.Second)
	return c
}

// WaitReady waits until /readyz answers 200 (a standby answers 200 too).
func (c *Connector) WaitReady(timeout time.Duration) {
	c.t.Helper()
	c.WaitStatus(200, "", timeout)
}

// Streaming says whether the process streams its connector: /active and
// /readyz both 200 (a standby answers 200 on /readyz, 503 on /active).
func (c *Connector) Streaming() bool {
	return c.Status("/active") == 200 && c.Status("/readyz") == 200
}

// WaitStreaming polls until the process streams (see Streaming) and
// returns how long that took. The test fails when the process exits or
// the timeout passes first.
func (c *Connector) WaitStreaming(timeout time.Duration) time.Duration {
	c.t.Helper()
	start := time.Now()
	for time.Since(start) < timeout {
		if c.Exited() {
			c.t.Fatalf("connector exited: %v\n%s", c.exitErr, c.Log())
		}
		if c.Streaming() {
			return time.Since(start)
		}
		time.Sleep(pollInterval)
	}
	got, body := c.Readyz()
	c.t.Fatalf("not streaming after %s: /readyz %d %q\n%s", timeout, got, body, c.Log())
	return 0
}

// WaitStatus polls /readyz until it answers code with want in its body,
// and returns how long that took. The test fails when the process exits or
// the timeout passes first.
func (c *Connector) WaitStatus(code int, want string, timeout time.Duration) time.Duration {
	c.t.Helper()
	start := time.Now()
	for time.Since(start) < timeout {
		if c.Exited() {
			c.t.Fatalf("connector exited: %v\n%s", c.exitErr, c.Log())
		}
		if got, body := c.Readyz(); got == code && strings.Contains(body, want) {
			return time.Since(start)
		}
		time.Sleep(pollInterval)
	}
	got, body := c.Readyz()
	c.t.Fatalf("/readyz is %d %q after %s, want %d %q\n%s", got, body, timeout, code, want, c.Log())
	return 0
}

// LogNotJSON exempts the process's output from the JSON-lines check at
// test end, for a test that makes it write text on purpose (log.format
// text, human output); reason says why.
func (c *Connector) LogNotJSON(reason string) {
	if reason == "" {
		reason = "unspecified"
	}
	c.notJSON = reason
}

// Log is everything the process wrote to stdout and stderr so far.
func (c *Connector) Log() string { return c.log.String() }

// Addr is the host:port of the process's HTTP server.
func (c *Connector) Addr() string { return c.addr }

// Pid is the process id.
func (c *Connector) Pid() int { return c.cmd.Process.Pid }

// Done is closed when the process has exited.
func (c *Connector) Done() <-chan struct{} { return c.done }

// Err is the process's exit error (nil for status 0); read it after Done.
func (c *Connector) Err() error { return c.exitErr }

// Exited reports whether the process has exited.
func (c *Connector) Exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// Kill stops the process with SIGKILL (no flush, no checkpoint) and waits
// for it.
func (c *Connector) Kill() {
	if c.cmd.Process != nil {
		c.cmd.Process.Signal(syscall.SIGCONT)
		c.cmd.Process.Kill()
	}
	<-c.done
}

// Signal sends sig to the process.
func (c *Connector) Signal(sig os.Signal) {
	c.cmd.Process.Signal(sig)
}

// Pause freezes the process (SIGSTOP): it keeps its connections but
// answers nothing, like a stalled or partitioned instance.
func (c *Connector) Pause() { c.Signal(syscall.SIGSTOP) }

// Resume thaws a paused process (SIGCONT).
func (c *Connector) Resume() { c.Signal(syscall.SIGCONT) }

// Stop sends SIGTERM and returns the exit error (nil for status 0); the
// test fails if the process is still running after timeout.
func (c *Connector) Stop(timeout time.Duration) error {
	c.t.Helper()
	c.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
		return c.exitErr
	case <-time.After(timeout):
		c.t.Fatalf("connector did not exit within %s of SIGTERM", timeout)
		return nil
	}
}

// WaitExit waits for the process to end by itself and returns its exit
// status; the test fails if it is still running after timeout.
func (c *Connector) WaitExit(timeout time.Duration) int {
	c.t.Helper()
	select {
	case <-c.done:
	case <-time.After(timeout):
		c.t.Fatalf("connector still running after %s:\n%s", timeout, c.Log())
	}
	return ExitCode(c.exitErr)
}

// ExitCode turns an exec error into an exit status: 0 for nil, -1 when the
// process did not exit normally.
func ExitCode(err error) int {
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		return ee.ExitCode()
	case err != nil:
		return -1
	}
	return 0
}

var (
	readyzClient = &http.Client{Timeout: 500 * time.Millisecond}
	httpClient   = &http.Client{Timeout: 5 * time.Second}
)

// Get returns the status and body of path on the process's HTTP server,
// 0 and "" when unreachable.
func (c *Connector) Get(path string) (int, string) {
	return get(httpClient, "http://"+c.addr+path)
}

// Status returns the HTTP status of path, 0 when unreachable.
func (c *Connector) Status(path string) int {
	code, _ := c.Get(path)
	return code
}

// Readyz returns /readyz's status and body, 0 and "" when it does not
// answer within half a second.
func (c *Connector) Readyz() (int, string) {
	return get(readyzClient, "http://"+c.addr+"/readyz")
}

func get(cl *http.Client, url string) (int, string) {
	resp, err := cl.Get(url)
	if err != nil {
		return 0, ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// Metric returns the value of the first sample named name on /metrics, or
// -1. Labels are part of the name, as name{k="v"} exactly as exposed but
// without the connector label, so that a test's name matches whichever
// connector exported it (the tests' processes run one).
func (c *Connector) Metric(name string) float64 {
	code, body := c.Get("/metrics")
	if code != 200 {
		return -1
	}
	for _, line := range strings.Split(body, "\n") {
		line = withoutConnectorLabel(line)
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			if f, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil {
				return f
			}
		}
	}
	return -1
}

// connectorLabel is the label every connector metric carries.
var connectorLabel = regexp.MustCompile(`connector="[^"]*",?`)

func withoutConnectorLabel(line string) string {
	line = connectorLabel.ReplaceAllString(line, "")
	line = strings.ReplaceAll(line, ",}", "}")
	return strings.ReplaceAll(line, "{}", "")
}

// RSS returns the process's resident memory in bytes (Linux), or -1.
func (c *Connector) RSS() int64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", c.Pid()))
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

// Run runs `outbox-cdc args...` (a subcommand such as check, position or
// config print, or a run expected to stop by itself) with env added to
// the environment, no HTTP server and JSON logs. It must end within
// timeout; Run returns its exit status and combined output.
func Run(t testing.TB, timeout time.Duration, env []string, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, Binary(t), args...)
	cmd.Env = append(os.Environ(), append(env, "OUTBOX_CDC_HTTP_LISTEN=", "OUTBOX_CDC_LOG_FORMAT=json")...)
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("outbox-cdc %v still running after %s:\n%s", args, timeout, out)
	}
	return ExitCode(err), string(out)
}

// Command returns an exec.Cmd for `outbox-cdc args...` with nothing set,
// for the rare test that needs its own environment or streams; Run is the
// usual way to run a subcommand.
func Command(t testing.TB, args ...string) *exec.Cmd {
	t.Helper()
	return exec.Command(Binary(t), args...)
}
