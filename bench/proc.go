package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// broker is the kfake-broker process.
type broker struct {
	cmd  *exec.Cmd
	addr string
	done chan struct{}
}

func startBroker(ctx context.Context, o *options) (*broker, error) {
	b := &broker{addr: fmt.Sprintf("127.0.0.1:%d", o.kafkaPort), done: make(chan struct{})}
	if c, err := net.Dial("tcp", b.addr); err == nil {
		c.Close()
		return nil, fmt.Errorf("port %d is already in use (a broker left from an earlier run?); choose another with -kafka-port", o.kafkaPort)
	}
	b.cmd = exec.Command(o.brokerBin, "-port", strconv.Itoa(o.kafkaPort), "-partitions", "3")
	b.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // never outlive the bench
	b.cmd.Stdout, b.cmd.Stderr = io.Discard, os.Stderr
	if err := b.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start broker %s: %w (run make build first)", o.brokerBin, err)
	}
	go func() { b.cmd.Wait(); close(b.done) }()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if c, err := net.Dial("tcp", b.addr); err == nil {
			c.Close()
			return b, nil
		}
		select {
		case <-b.done:
			return nil, fmt.Errorf("broker exited at start (port %d busy?)", o.kafkaPort)
		case <-ctx.Done():
			b.stop()
			return nil, ctx.Err()
		default:
		}
	}
	b.stop()
	return nil, fmt.Errorf("broker not listening on %s within 10s", b.addr)
}

func (b *broker) stop() {
	b.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-b.done:
	case <-time.After(5 * time.Second):
		b.cmd.Process.Kill()
		<-b.done
	}
}

// connector is one outbox-cdc process.
type connector struct {
	cmd     *exec.Cmd
	started time.Time
	http    string
	logPath string
	cpPath  string
	done    chan struct{}
	err     error
}

// startConnector writes the configuration and starts the binary. It does
// not wait for readiness: the drain is timed from process start.
func startConnector(o *options, name, sourceYAML, topic string, br *broker) (*connector, error) {
	dir := filepath.Join(o.work, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	c := &connector{
		http:    fmt.Sprintf("127.0.0.1:%d", o.httpPort),
		logPath: filepath.Join(dir, "outbox-cdc.log"),
		cpPath:  filepath.Join(dir, "checkpoint"),
		done:    make(chan struct{}),
	}
	cfg := fmt.Sprintf(`name: %s
source:
%sroute:
  preset: seed
  topic: %q
sink:
  type: kafka
  brokers: [%q]
checkpoint:
  type: file
  path: %q
http:
  listen: %s
log:
  format: json
`, name, sourceYAML, topic, br.addr, c.cpPath, c.http)
	cfgPath := filepath.Join(dir, "outbox-cdc.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		return nil, err
	}
	logf, err := os.Create(c.logPath)
	if err != nil {
		return nil, err
	}
	c.cmd = exec.Command(o.bin, "run", "--config", cfgPath)
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	c.cmd.Env = append(os.Environ(), o.env...)
	c.cmd.Stdout, c.cmd.Stderr = logf, logf
	c.started = time.Now()
	if err := c.cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w (run make build first)", o.bin, err)
	}
	go func() { c.err = c.cmd.Wait(); logf.Close(); close(c.done) }()
	return c, nil
}

// waitReady polls /readyz.
func (c *connector) waitReady(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		select {
		case <-c.done:
			return fmt.Errorf("connector exited: %v\n%s", c.err, c.tail())
		case <-ctx.Done():
			return ctx.Err()
		default:
		}
		if resp, err := http.Get("http://" + c.http + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return nil
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("connector not ready within %s\n%s", timeout, c.tail())
}

// metric returns the value of an unlabelled metric from /metrics.
func (c *connector) metric(name string) (float64, error) {
	resp, err := http.Get("http://" + c.http + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if bytes.HasPrefix(line, []byte(name+" ")) {
			return strconv.ParseFloat(string(line[len(name)+1:]), 64)
		}
	}
	return 0, fmt.Errorf("metric %s not found", name)
}

// stop sends SIGTERM and waits.
func (c *connector) stop() error {
	c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
	case <-time.After(40 * time.Second):
		c.cmd.Process.Kill()
		<-c.done
		return fmt.Errorf("connector did not stop within 40s of SIGTERM")
	}
	if c.err != nil {
		return fmt.Errorf("connector exit: %v\n%s", c.err, c.tail())
	}
	return nil
}

func (c *connector) tail() string {
	b, _ := os.ReadFile(c.logPath)
	if len(b) > 3000 {
		b = b[len(b)-3000:]
	}
	return string(b)
}

// procStats is what /proc says about a process.
type procStats struct {
	CPUSeconds float64 // utime + stime
	PeakRSSMiB float64 // VmHWM
	RSSMiB     float64 // VmRSS
}

// clockTicks is sysconf(_SC_CLK_TCK); 100 on every Linux this runs on.
const clockTicks = 100

func readProc(pid int) (procStats, error) {
	var s procStats
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return s, err
	}
	// Fields after the ")" that closes the command name: state is field 3,
	// utime 14 and stime 15 (1-based over the whole line).
	i := bytes.LastIndexByte(stat, ')')
	f := strings.Fields(string(stat[i+2:]))
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	s.CPUSeconds = (ut + st) / clockTicks
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return s, err
	}
	for _, line := range strings.Split(string(status), "\n") {
		k, v, _ := strings.Cut(line, ":")
		kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
		switch k {
		case "VmHWM":
			s.PeakRSSMiB = kb / 1024
		case "VmRSS":
			s.RSSMiB = kb / 1024
		}
	}
	return s, nil
}

// describeMachine records nproc, free and lscpu.
func describeMachine() machine {
	run := func(name string, args ...string) string {
		out, err := exec.Command(name, args...).Output()
		if err != nil {
			return "(" + name + ": " + err.Error() + ")"
		}
		return strings.TrimSpace(string(out))
	}
	var m machine
	m.Nproc = run("nproc")
	m.Free = run("free", "-m")
	var keep []string
	for _, l := range strings.Split(run("lscpu"), "\n") {
		for _, k := range []string{"Architecture", "CPU(s):", "Model name", "Thread(s) per core", "Core(s) per socket", "Hypervisor vendor", "L2 cache", "L3 cache"} {
			if strings.HasPrefix(l, k) {
				keep = append(keep, strings.Join(strings.Fields(l), " "))
			}
		}
	}
	m.LSCPU = strings.Join(keep, "\n")
	m.Kernel = run("uname", "-sr")
	m.Go = run("go", "version")
	return m
}

// loadAvg is the 1-minute load average.
func loadAvg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return ""
	}
	return f[0]
}
