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
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// broker is the kfake-broker process: one broker, or a cluster of several
// on consecutive ports.
type broker struct {
	cmd   *exec.Cmd
	addr  string   // the first broker, for clients that take one seed
	addrs []string // every broker
	done  chan struct{}
}

// startBroker starts n brokers; topics are created at once with their
// partition leaders spread over the brokers.
func startBroker(ctx context.Context, o *options, n int, topics ...string) (*broker, error) {
	port := o.kafkaPort
	if port == 0 {
		var err error
		if port, err = freePorts(n); err != nil {
			return nil, err
		}
	}
	b := &broker{done: make(chan struct{})}
	for i := range n {
		a := fmt.Sprintf("127.0.0.1:%d", port+i)
		if c, err := net.Dial("tcp", a); err == nil {
			c.Close()
			return nil, fmt.Errorf("port %d is already in use (a broker left from an earlier run?); choose another with -kafka-port, or 0 for a free one", port+i)
		}
		b.addrs = append(b.addrs, a)
	}
	b.addr = b.addrs[0]
	args := []string{"-port", strconv.Itoa(port), "-brokers", strconv.Itoa(n), "-partitions", strconv.Itoa(o.partitions)}
	if len(topics) > 0 {
		args = append(args, "-topics", strings.Join(topics, ","))
	}
	b.cmd = exec.Command(o.brokerBin, args...)
	b.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // never outlive the bench
	b.cmd.Stdout, b.cmd.Stderr = io.Discard, os.Stderr
	if err := b.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start broker %s: %w (run make build first)", o.brokerBin, err)
	}
	go func() { b.cmd.Wait(); close(b.done) }()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		up := 0
		for _, a := range b.addrs {
			if c, err := net.Dial("tcp", a); err == nil {
				c.Close()
				up++
			}
		}
		if up == n {
			return b, nil
		}
		select {
		case <-b.done:
			return nil, fmt.Errorf("broker exited at start (port %d busy? an old kfake-broker without -brokers? run make build)", port)
		case <-ctx.Done():
			b.stop()
			return nil, ctx.Err()
		default:
		}
	}
	b.stop()
	return nil, fmt.Errorf("broker not listening on %s within 10s", strings.Join(b.addrs, ","))
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

// freePorts finds n consecutive free ports on 127.0.0.1 (it asks the
// kernel for one and checks the next n-1).
func freePorts(n int) (int, error) {
	for range 50 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		p := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		ok := true
		for i := 1; i < n && ok; i++ {
			l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p+i))
			if err != nil {
				ok = false
				continue
			}
			l.Close()
		}
		if ok {
			return p, nil
		}
	}
	return 0, fmt.Errorf("no %d consecutive free ports found", n)
}

// connSpec is what a connector run differs in.
type connSpec struct {
	name       string
	sourceYAML string
	topic      string
	br         *broker
	exactly    bool     // delivery: exactly-once (progress in Kafka)
	extraYAML  string   // appended to the connector's keys (ha:, pipeline:)
	gctrace    bool     // GODEBUG=gctrace=1, parsed from the log afterwards
	env        []string // more environment, after -connector-env
	// instance tells apart processes that run the same connector (an HA
	// pair): each gets its own directory, configuration, log and port.
	instance string
	// checkpointYAML replaces the checkpoint: section's keys (a file in
	// the run's directory by default).
	checkpointYAML string
}

func (s connSpec) dir(o *options) string {
	if s.instance != "" {
		return filepath.Join(o.work, s.name+"-"+s.instance)
	}
	return filepath.Join(o.work, s.name)
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

// entryYAML is one connector's keys at the top level: name, source, route,
// sink, delivery, checkpoint (in cpPath unless s.checkpointYAML says
// otherwise) and s.extraYAML.
func entryYAML(s connSpec, cpPath string) string {
	brokers := make([]string, len(s.br.addrs))
	for i, a := range s.br.addrs {
		brokers[i] = strconv.Quote(a)
	}
	delivery, cp := "at-least-once", fmt.Sprintf("  type: file\n  path: %q\n", cpPath)
	if s.exactly {
		// The witness file of exactly-once mode lives in the run's own
		// directory: the default (the working directory) would carry one
		// drain's witness into the next database's drain.
		delivery, cp = "exactly-once", fmt.Sprintf("  type: kafka\n  path: %q\n", cpPath)
	}
	if s.checkpointYAML != "" {
		cp = s.checkpointYAML
	}
	return fmt.Sprintf(`name: %s
source:
%sroute:
  preset: seed
  topic: %q
sink:
  type: kafka
  brokers: [%s]
delivery: %s
checkpoint:
%s%s`, s.name, s.sourceYAML, s.topic, strings.Join(brokers, ", "), delivery, cp, s.extraYAML)
}

// processYAML is the process's own keys: the HTTP endpoint and JSON logs.
func processYAML(c *connector) string {
	return fmt.Sprintf("http:\n  listen: %s\nlog:\n  format: json\n", c.http)
}

// startConnector writes the configuration and starts the binary. It does
// not wait for readiness: a drain is timed from process start.
func startConnector(o *options, s connSpec) (*connector, error) {
	return startProcess(o, s.dir(o), append(append([]string(nil), s.env...), gcEnv(s.gctrace)...), func(c *connector) string {
		return entryYAML(s, c.cpPath) + processYAML(c)
	})
}

// startConnectors starts one process that runs every spec of specs in a
// connectors: list (each with its checkpoint file in dir), with top (such
// as a placement: section) beside the list.
func startConnectors(o *options, dir, top string, specs []connSpec, env []string) (*connector, error) {
	return startProcess(o, filepath.Join(o.work, dir), env, func(c *connector) string { return listYAML(c, top, specs) })
}

// listYAML is the configuration of a process c running specs.
func listYAML(c *connector, top string, specs []connSpec) string {
	var b strings.Builder
	b.WriteString(processYAML(c))
	b.WriteString(top)
	b.WriteString("connectors:\n")
	for _, s := range specs {
		entry := entryYAML(s, filepath.Join(filepath.Dir(c.cpPath), s.name+".checkpoint"))
		for i, l := range strings.Split(strings.TrimRight(entry, "\n"), "\n") {
			if i == 0 {
				b.WriteString("  - " + l + "\n")
			} else {
				b.WriteString("    " + l + "\n")
			}
		}
	}
	return b.String()
}

func gcEnv(on bool) []string {
	if on {
		return []string{"GODEBUG=gctrace=1"}
	}
	return nil
}

// startProcess starts the connector binary in dir with the configuration
// config returns (given the process's port and paths) and env added after
// -connector-env.
func startProcess(o *options, dir string, env []string, config func(c *connector) string) (*connector, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	port := o.httpPort
	if port == 0 {
		var err error
		if port, err = freePorts(1); err != nil {
			return nil, err
		}
	}
	c := &connector{
		http:    fmt.Sprintf("127.0.0.1:%d", port),
		logPath: filepath.Join(dir, "outbox-cdc.log"),
		cpPath:  filepath.Join(dir, "checkpoint"),
		done:    make(chan struct{}),
	}
	cfgPath := filepath.Join(dir, "outbox-cdc.yaml")
	if err := os.WriteFile(cfgPath, []byte(config(c)), 0o600); err != nil {
		return nil, err
	}
	logf, err := os.Create(c.logPath)
	if err != nil {
		return nil, err
	}
	c.cmd = exec.Command(o.bin, "run", "--config", cfgPath)
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	c.cmd.Env = append(os.Environ(), o.env...)
	c.cmd.Env = append(c.cmd.Env, env...)
	c.cmd.Stdout, c.cmd.Stderr = logf, logf
	c.started = time.Now()
	if err := c.cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w (run make build first)", o.bin, err)
	}
	go func() { c.err = c.cmd.Wait(); logf.Close(); close(c.done) }()
	return c, nil
}

// status is the HTTP status of a GET of path (0: no answer).
func (c *connector) status(path string) int {
	cl := http.Client{Timeout: 2 * time.Second}
	resp, err := cl.Get("http://" + c.http + path)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// waitStatus polls path until it answers code.
func (c *connector) waitStatus(ctx context.Context, path string, code int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		select {
		case <-c.done:
			return fmt.Errorf("connector exited: %v\n%s", c.err, c.tail())
		case <-ctx.Done():
			return ctx.Err()
		default:
		}
		if c.status(path) == code {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("%s did not answer %d within %s\n%s", path, code, timeout, c.tail())
}

// waitReady polls /readyz.
func (c *connector) waitReady(ctx context.Context, timeout time.Duration) error {
	return c.waitStatus(ctx, "/readyz", 200, timeout)
}

// metric returns the value of one unlabelled metric from /metrics.
func (c *connector) metric(name string) (float64, error) {
	m, err := c.metrics(name)
	if err != nil {
		return 0, err
	}
	v, ok := m[name]
	if !ok {
		return 0, fmt.Errorf("metric %s not found", name)
	}
	return v, nil
}

// metrics returns the values of the named unlabelled metrics.
func (c *connector) metrics(names ...string) (map[string]float64, error) {
	resp, err := http.Get("http://" + c.http + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return parseMetrics(resp.Body, names...)
}

var connectorOnly = regexp.MustCompile(`^connector="[^"]*"}$`)

// parseMetrics reads the Prometheus text format and returns the values of
// the named unlabelled samples that it holds.
func parseMetrics(r io.Reader, names ...string) (map[string]float64, error) {
	want := make(map[string]bool, len(names))
	for _, n := range names {
		want[n] = true
	}
	out := make(map[string]float64, len(names))
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if len(line) == 0 || line[0] == '#' {
			continue
		}
		name, val, ok := bytes.Cut(line, []byte{' '})
		// The relay labels every metric with its connector's name; the
		// bench runs one connector, so a sample whose only label is the
		// connector counts as unlabelled.
		if base, labels, found := bytes.Cut(name, []byte{'{'}); found && connectorOnly.Match(labels) {
			name = base
		}
		if !ok || !want[string(name)] {
			continue
		}
		val, _, _ = bytes.Cut(val, []byte{' '}) // an optional timestamp follows
		v, err := strconv.ParseFloat(string(val), 64)
		if err != nil {
			return nil, fmt.Errorf("metric %s: %w", name, err)
		}
		out[string(name)] = v
	}
	return out, sc.Err()
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

// kill stops the process without waiting for a graceful end.
func (c *connector) kill() {
	c.cmd.Process.Kill()
	<-c.done
}

// tail is the end of the connector's log, without gctrace lines.
func (c *connector) tail() string {
	b, _ := os.ReadFile(c.logPath)
	var keep []string
	for _, l := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(l, "gc ") {
			keep = append(keep, l)
		}
	}
	s := strings.Join(keep, "\n")
	if len(s) > 3000 {
		s = s[len(s)-3000:]
	}
	return s
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
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procStats{}, err
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return procStats{}, err
	}
	return parseProc(stat, status)
}

// parseProc reads utime+stime from /proc/<pid>/stat and VmHWM and VmRSS
// from /proc/<pid>/status.
func parseProc(stat, status []byte) (procStats, error) {
	var s procStats
	// Fields after the ")" that closes the command name (which may hold
	// spaces and parentheses): state is field 3, utime 14 and stime 15
	// (1-based over the whole line).
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 || i+2 > len(stat) {
		return s, fmt.Errorf("/proc stat: no command name in %q", stat)
	}
	f := strings.Fields(string(stat[i+2:]))
	if len(f) < 13 {
		return s, fmt.Errorf("/proc stat: %d fields after the command name, want at least 13", len(f))
	}
	ut, err1 := strconv.ParseFloat(f[11], 64)
	st, err2 := strconv.ParseFloat(f[12], 64)
	if err1 != nil || err2 != nil {
		return s, fmt.Errorf("/proc stat: utime %q, stime %q", f[11], f[12])
	}
	s.CPUSeconds = (ut + st) / clockTicks
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

// gcTrace sums the lines GODEBUG=gctrace=1 prints, one per collection:
//
//	gc 7 @1.234s 5%: 0.01+2.1+0.02 ms clock, 0.03+0.5/1.9/0.4+0.05 ms cpu, 40->41->20 MB, 42 MB goal, 0 MB stacks, 0 MB globals, 2 P
type gcTrace struct {
	Cycles int
	// CPUSeconds is the CPU of every GC phase: the two stop-the-world
	// phases, mark assists, background and idle marking.
	CPUSeconds float64
	// Percent is the runtime's own figure on the last line: the share of
	// the available CPU (GOMAXPROCS × wall time) spent in GC since the
	// process started.
	Percent float64
	// PeakHeapMB is the largest heap at the start of a collection.
	PeakHeapMB float64
}

// parseGCTrace reads gctrace lines from r and ignores every other line.
func parseGCTrace(r io.Reader) gcTrace {
	var t gcTrace
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "gc ") {
			continue
		}
		head, rest, ok := strings.Cut(line, ": ")
		if !ok {
			continue
		}
		parts := strings.Split(rest, ", ")
		if len(parts) < 3 || !strings.HasSuffix(parts[1], " ms cpu") {
			continue
		}
		var cpu float64
		for _, f := range strings.FieldsFunc(strings.TrimSuffix(parts[1], " ms cpu"), func(r rune) bool { return r == '+' || r == '/' }) {
			v, err := strconv.ParseFloat(f, 64)
			if err != nil {
				cpu = -1
				break
			}
			cpu += v
		}
		if cpu < 0 {
			continue
		}
		t.Cycles++
		t.CPUSeconds += cpu / 1000
		if hf := strings.Fields(head); len(hf) >= 4 {
			if p, err := strconv.ParseFloat(strings.TrimSuffix(hf[3], "%"), 64); err == nil {
				t.Percent = p
			}
		}
		if heap, _, ok := strings.Cut(parts[2], "->"); ok {
			if v, err := strconv.ParseFloat(heap, 64); err == nil && v > t.PeakHeapMB {
				t.PeakHeapMB = v
			}
		}
	}
	return t
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
	m.LoadAvg = loadAvg()
	m.Commit = run("git", "describe", "--always", "--dirty")
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
