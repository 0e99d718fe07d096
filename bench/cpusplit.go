package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Where the machine's CPU went during a measured window: the database
// server, the broker, the connector, this process (load generator and
// consumer), and the rest of the machine. Read from /proc at the start and
// the end of the window.
//
// The database server is every process of the server the bench talks to:
// MariaDB's mariadbd (found through @@pid_file; it is one process, so other
// users' sessions on a shared server count too), PostgreSQL's postmaster
// and its children. For PostgreSQL the bench's own share is also given: the
// backends connected to the bench database (the writers' sessions) and the
// walsenders reading its slots.

// cpuGroup is a named set of processes.
type cpuGroup struct {
	name string
	// of names the group this one is part of (the bench's backends of a
	// database server): it is not counted twice.
	of   string
	pids func() []int // read at both ends; a process that appears in between counts from its start
}

// cpuShare is one group's CPU over a window.
type cpuShare struct {
	Name string
	Of   string `json:",omitempty"`
	// Seconds of CPU (user + system) in the window, and that over the
	// window's length: cores busy on average (1 = one full core).
	Seconds, Cores float64
}

// cpuWindow is a window's CPU split.
type cpuWindow struct {
	Seconds float64
	// MachineCores is the whole machine's busy time (/proc/stat) over the
	// window; Shares are the groups'; Other is the machine less the
	// groups that are not part of another (other users' work, the
	// kernel's).
	MachineCores float64
	Shares       []cpuShare
	OtherCores   float64
	Error        string `json:",omitempty"`
}

// cpuSnap is the CPU seconds of every process of every group and of the
// machine at one time.
type cpuSnap struct {
	at      time.Time
	machine float64 // busy seconds, all CPUs
	procs   []map[int]float64
}

// cpuMeter takes the snapshots of a window.
type cpuMeter struct {
	groups []cpuGroup
	a      cpuSnap
}

func (m *cpuMeter) snap() cpuSnap {
	s := cpuSnap{at: time.Now(), machine: machineBusy()}
	for _, g := range m.groups {
		cpu := map[int]float64{}
		for _, pid := range g.pids() {
			if ps, err := readProc(pid); err == nil {
				cpu[pid] = ps.CPUSeconds
			}
		}
		s.procs = append(s.procs, cpu)
	}
	return s
}

func (m *cpuMeter) begin() { m.a = m.snap() }

func (m *cpuMeter) end() cpuWindow {
	b := m.snap()
	return splitCPU(m.groups, m.a, b)
}

// splitCPU is the window between snapshots a and b.
func splitCPU(groups []cpuGroup, a, b cpuSnap) cpuWindow {
	w := cpuWindow{Seconds: b.at.Sub(a.at).Seconds()}
	if w.Seconds <= 0 {
		w.Error = "empty window"
		return w
	}
	w.MachineCores = (b.machine - a.machine) / w.Seconds
	sum := 0.0
	for i, g := range groups {
		var secs float64
		for pid, cb := range b.procs[i] {
			ca, ok := a.procs[i][pid]
			if !ok {
				ca = 0 // started in the window
			}
			if cb >= ca {
				secs += cb - ca
			}
		}
		sh := cpuShare{Name: g.name, Of: g.of, Seconds: secs, Cores: secs / w.Seconds}
		w.Shares = append(w.Shares, sh)
		if g.of == "" {
			sum += sh.Cores
		}
	}
	w.OtherCores = max(0, w.MachineCores-sum)
	return w
}

// machineBusy is the machine's busy CPU time in seconds (/proc/stat).
func machineBusy() float64 {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	v, _ := parseProcStatBusy(b)
	return v
}

// parseProcStatBusy reads the "cpu" line of /proc/stat: user, nice,
// system, idle, iowait, irq, softirq, steal (guest time is part of user);
// busy is all but idle and iowait, in seconds.
func parseProcStatBusy(b []byte) (float64, error) {
	line, _, _ := bytes.Cut(b, []byte{'\n'})
	f := strings.Fields(string(line))
	if len(f) < 9 || f[0] != "cpu" {
		return 0, fmt.Errorf("/proc/stat: first line %q is not the cpu total", line)
	}
	var busy float64
	for i, s := range f[1:9] {
		v, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/stat: field %d %q", i+1, s)
		}
		if i == 3 || i == 4 { // idle, iowait
			continue
		}
		busy += v
	}
	return busy / clockTicks, nil
}

// parsePPid is the parent pid, field 4 of /proc/<pid>/stat.
func parsePPid(stat []byte) (int, error) {
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 || i+2 > len(stat) {
		return 0, fmt.Errorf("/proc stat: no command name in %q", stat)
	}
	f := strings.Fields(string(stat[i+2:]))
	if len(f) < 2 {
		return 0, fmt.Errorf("/proc stat: too short: %q", stat)
	}
	return strconv.Atoi(f[1])
}

// childrenOf lists the processes whose parent is pid, from proc (/proc).
func childrenOf(proc string, pid int) []int {
	ents, _ := os.ReadDir(proc)
	var out []int
	for _, e := range ents {
		n, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join(proc, e.Name(), "stat"))
		if err != nil {
			continue
		}
		if pp, err := parsePPid(stat); err == nil && pp == pid {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

// processesNamed lists the processes whose command (/proc/<pid>/comm) is one
// of names.
func processesNamed(proc string, names ...string) []int {
	ents, _ := os.ReadDir(proc)
	var out []int
	for _, e := range ents {
		n, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		comm, err := os.ReadFile(filepath.Join(proc, e.Name(), "comm"))
		if err == nil && slices.Contains(names, strings.TrimSpace(string(comm))) {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

// databaseGroups are the CPU groups of the database server: the whole
// server, and for PostgreSQL the bench's backends and walsenders. An error
// says why the server's processes cannot be found (a server on another
// machine, a pid file the bench cannot read).
func (be *backend) databaseGroups(ctx context.Context) ([]cpuGroup, error) {
	switch be.kind {
	case "mysql":
		var pidFile string
		if err := be.db.QueryRowContext(ctx, "SELECT @@pid_file").Scan(&pidFile); err != nil {
			return nil, err
		}
		pid := 0
		if raw, err := os.ReadFile(pidFile); err == nil {
			pid, _ = strconv.Atoi(strings.TrimSpace(string(raw)))
		}
		if pid == 0 {
			// Not readable: the only mariadbd or mysqld of the machine.
			if ps := processesNamed("/proc", "mariadbd", "mysqld"); len(ps) == 1 {
				pid = ps[0]
			} else {
				return nil, fmt.Errorf("the server's pid file %s is not readable and %d mariadbd/mysqld processes run here", pidFile, len(ps))
			}
		}
		if _, err := readProc(pid); err != nil {
			return nil, fmt.Errorf("MariaDB process %d: %w (is the server on this machine?)", pid, err)
		}
		return []cpuGroup{{name: "MariaDB server (mariadbd, all sessions)", pids: func() []int { return []int{pid} }}}, nil
	case "postgres":
		var backend int
		if err := be.db.QueryRowContext(ctx, "SELECT pg_backend_pid()").Scan(&backend); err != nil {
			return nil, err
		}
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", backend))
		if err != nil {
			return nil, fmt.Errorf("PostgreSQL backend %d: %w (is the server on this machine?)", backend, err)
		}
		postmaster, err := parsePPid(stat)
		if err != nil {
			return nil, err
		}
		server := func() []int { return append([]int{postmaster}, childrenOf("/proc", postmaster)...) }
		ours := func(walsender bool) func() []int {
			return func() []int {
				q := "SELECT pid FROM pg_stat_activity WHERE datname = $1 AND backend_type "
				if walsender {
					q += "= 'walsender'"
				} else {
					q += "<> 'walsender'"
				}
				qctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
				defer cancel()
				rows, err := be.admin.QueryContext(qctx, q, be.name)
				if err != nil {
					return nil
				}
				defer rows.Close()
				var out []int
				for rows.Next() {
					var p int
					if rows.Scan(&p) == nil {
						out = append(out, p)
					}
				}
				return out
			}
		}
		const all = "PostgreSQL server (postmaster and children, all sessions)"
		return []cpuGroup{
			{name: all, pids: server},
			{name: "backends of the bench database", of: all, pids: ours(false)},
			{name: "walsenders of the bench database", of: all, pids: ours(true)},
		}, nil
	}
	return nil, fmt.Errorf("unknown database %q", be.kind)
}

// newCPUMeter is the meter of a run: the database server, the broker, the
// connector process and this one.
func newCPUMeter(ctx context.Context, be *backend, brokerPid, connectorPid int) (*cpuMeter, error) {
	m := &cpuMeter{}
	db, err := be.databaseGroups(ctx)
	m.groups = append(m.groups, db...)
	one := func(pid int) func() []int { return func() []int { return []int{pid} } }
	m.groups = append(m.groups,
		cpuGroup{name: "broker (kfake-broker)", pids: one(brokerPid)},
		cpuGroup{name: "connector (outbox-cdc)", pids: one(connectorPid)},
		cpuGroup{name: "bench process (load generator and consumer)", pids: one(os.Getpid())})
	return m, err
}

// share is the first share whose name begins with prefix.
func (w *cpuWindow) share(prefix string) (cpuShare, bool) {
	if w == nil {
		return cpuShare{}, false
	}
	for _, sh := range w.Shares {
		if strings.HasPrefix(sh.Name, prefix) {
			return sh, true
		}
	}
	return cpuShare{}, false
}
