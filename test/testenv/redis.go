package testenv

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// PrivateRedis is a redis-server of the test's own, on a free port, with
// no persistence: Restart comes back empty, as a Redis without AOF or RDB
// after a crash. Never restart the shared Redis; use this.
type PrivateRedis struct {
	t    testing.TB
	port int
	dir  string
	cmd  *exec.Cmd
	done chan struct{}
}

// StartPrivateRedis starts a private redis-server, stopped at test end.
// Without redis-server on the machine the test is Unavailable.
func StartPrivateRedis(t testing.TB) *PrivateRedis {
	t.Helper()
	bin, err := findBinary("redis-server")
	if err != nil {
		Unavailable(t, "redis-server for a private Redis: %v", err)
	}
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	r := &PrivateRedis{t: t, port: port, dir: t.TempDir()}
	r.start(bin)
	t.Cleanup(r.Stop)
	return r
}

// Addr is host:port of the server (the same across restarts).
func (r *PrivateRedis) Addr() string { return "127.0.0.1:" + strconv.Itoa(r.port) }

// URL is redis://Addr/0.
func (r *PrivateRedis) URL() string { return "redis://" + r.Addr() + "/0" }

func (r *PrivateRedis) start(bin string) {
	r.t.Helper()
	r.cmd = exec.Command(bin, "--port", strconv.Itoa(r.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", r.dir, "--logfile", filepath.Join(r.dir, "redis.log"))
	r.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := r.cmd.Start(); err != nil {
		r.t.Fatalf("start redis-server: %v", err)
	}
	r.done = make(chan struct{})
	go func(c *exec.Cmd, done chan struct{}) { c.Wait(); close(done) }(r.cmd, r.done)
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", r.Addr(), 200*time.Millisecond)
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(r.dir, "redis.log"))
			r.t.Fatalf("private redis-server on %s did not start: %v\n%s", r.Addr(), err, log)
		}
		time.Sleep(pollInterval)
	}
}

// Kill stops the server with SIGKILL (everything it held is lost) and
// waits for it to exit.
func (r *PrivateRedis) Kill() {
	if r.cmd == nil {
		return
	}
	r.cmd.Process.Kill()
	<-r.done
	r.cmd = nil
}

// Restart kills the server and starts an empty one on the same port.
func (r *PrivateRedis) Restart() {
	r.t.Helper()
	r.Kill()
	bin, err := findBinary("redis-server")
	if err != nil {
		r.t.Fatal(err)
	}
	r.start(bin)
}

// Stop kills the server; it is not started again.
func (r *PrivateRedis) Stop() { r.Kill() }

func (r *PrivateRedis) String() string { return fmt.Sprintf("private redis %s", r.Addr()) }
