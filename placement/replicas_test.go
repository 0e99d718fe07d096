package placement

import (
	"bufio"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/outbox-cdc/outbox-cdc/ha"
	"github.com/outbox-cdc/outbox-cdc/test/testenv"
)

// cluster is the test's view of N replica processes sharing connectors.
type cluster struct {
	t        *testing.T
	spec     memberSpec
	db       *sql.DB
	mu       sync.Mutex
	procs    map[string]*exec.Cmd
	events   []event
	connOf   map[int64]string // lock session id -> member
	holders  map[string]string
	changes  []holderChange
	watchErr error
}

type holderChange struct {
	connector, from, to string
	at                  time.Time
}

func suffix() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func newCluster(t *testing.T, n int) *cluster {
	t.Helper()
	db := testenv.MySQL(t)
	dsn := testenv.MySQLDSN(t)
	kf, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.GroupMinSessionTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kf.Close)
	sfx := suffix()
	schema := "placement_" + sfx
	if _, err := db.Exec("CREATE DATABASE " + schema); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Exec("DROP DATABASE " + schema) })
	if _, err := db.Exec("CREATE TABLE " + schema + ".activity (id BIGINT AUTO_INCREMENT PRIMARY KEY, connector VARCHAR(64) NOT NULL, member VARCHAR(16) NOT NULL, conn BIGINT NOT NULL, at DATETIME(6) NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	var names []string
	for i := range n {
		names = append(names, fmt.Sprintf("pl-%s-c%d", sfx, i+1))
	}
	c := &cluster{t: t, db: db, procs: map[string]*exec.Cmd{}, connOf: map[int64]string{}, holders: map[string]string{},
		spec: memberSpec{Brokers: kf.ListenAddrs(), Deployment: "test-" + sfx, Connectors: names, DSN: dsn,
			Activity: schema + ".activity", Session: 3 * time.Second, HACheck: 500 * time.Millisecond}}
	ctx, cancel := context.WithCancel(context.Background())
	watched := make(chan struct{})
	go c.watch(ctx, watched)
	t.Cleanup(func() {
		for name := range c.procs {
			c.signal(name, syscall.SIGCONT)
			c.stop(name)
		}
		cancel()
		<-watched
	})
	return c
}

// watch polls the lock holders every 20ms and records every change.
func (c *cluster) watch(ctx context.Context, done chan struct{}) {
	defer close(done)
	var q strings.Builder
	q.WriteString("SELECT ")
	args := make([]any, len(c.spec.Connectors))
	for i, n := range c.spec.Connectors {
		if i > 0 {
			q.WriteString(", ")
		}
		q.WriteString("IS_USED_LOCK(?)")
		args[i] = ha.LockName(n)
	}
	for ctx.Err() == nil {
		ids := make([]sql.NullInt64, len(args))
		dst := make([]any, len(ids))
		for i := range ids {
			dst[i] = &ids[i]
		}
		if err := c.db.QueryRowContext(ctx, q.String(), args...).Scan(dst...); err != nil {
			if ctx.Err() == nil {
				c.mu.Lock()
				c.watchErr = err
				c.mu.Unlock()
			}
			return
		}
		now := time.Now()
		c.mu.Lock()
		for i, n := range c.spec.Connectors {
			who := ""
			if ids[i].Valid {
				who = c.connOf[ids[i].Int64]
				if who == "" {
					// Taken, but the holder has not reported it yet.
					who = fmt.Sprintf("?%d", ids[i].Int64)
				}
			}
			if strings.HasPrefix(who, "?") {
				continue
			}
			if prev := c.holders[n]; prev != who {
				c.changes = append(c.changes, holderChange{n, prev, who, now})
				c.holders[n] = who
			}
		}
		c.mu.Unlock()
		time.Sleep(20 * time.Millisecond)
	}
}

// start launches replica name as a child process.
func (c *cluster) start(name string) {
	c.t.Helper()
	spec := c.spec
	spec.Name = name
	b, _ := json.Marshal(spec)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), memberEnv+"="+string(b))
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		c.t.Fatal(err)
	}
	logf, err := os.Create(fmt.Sprintf("%s/%s-%d.log", c.t.TempDir(), name, time.Now().UnixNano()))
	if err != nil {
		c.t.Fatal(err)
	}
	cmd.Stderr = logf
	if err := cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	c.mu.Lock()
	c.procs[name] = cmd
	c.mu.Unlock()
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var e event
			if json.Unmarshal(sc.Bytes(), &e) != nil {
				continue
			}
			c.mu.Lock()
			c.events = append(c.events, e)
			if e.Kind == "active" {
				c.connOf[e.Conn] = e.Member
			}
			c.mu.Unlock()
		}
	}()
}

func (c *cluster) signal(name string, sig syscall.Signal) {
	c.mu.Lock()
	cmd := c.procs[name]
	c.mu.Unlock()
	if cmd != nil {
		_ = cmd.Process.Signal(sig)
	}
}

// stop sends SIGTERM and waits for the child to exit.
func (c *cluster) stop(name string) {
	c.signal(name, syscall.SIGTERM)
	c.reap(name)
}

// kill sends SIGKILL and reaps the child.
func (c *cluster) kill(name string) {
	c.signal(name, syscall.SIGKILL)
	c.reap(name)
}

func (c *cluster) reap(name string) {
	c.mu.Lock()
	cmd := c.procs[name]
	delete(c.procs, name)
	c.mu.Unlock()
	if cmd != nil {
		_ = cmd.Wait()
	}
}

// snapshot returns connector -> holding member.
func (c *cluster) snapshot() map[string]string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.watchErr != nil {
		c.t.Fatalf("watching the lock holders: %v", c.watchErr)
	}
	return maps.Clone(c.holders)
}

// perMember counts connectors held per member.
func perMember(h map[string]string) map[string]int {
	out := map[string]int{}
	for _, m := range h {
		if m != "" {
			out[m]++
		}
	}
	return out
}

// waitFor waits until cond holds on the holders, or fails after limit.
func (c *cluster) waitFor(what string, limit time.Duration, cond func(map[string]string) bool) (map[string]string, time.Time) {
	c.t.Helper()
	deadline := time.Now().Add(limit)
	for {
		h := c.snapshot()
		if cond(h) {
			return h, time.Now()
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("%s: not within %s; holders %v", what, limit, h)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// balanced holds when every connector is held and the members hold
// len/len(members) each (the counts differ by at most one).
func balanced(members ...string) func(map[string]string) bool {
	return func(h map[string]string) bool {
		counts := perMember(h)
		total := 0
		lo, hi := 1<<30, 0
		for _, m := range members {
			total += counts[m]
			lo = min(lo, counts[m])
			hi = max(hi, counts[m])
		}
		return total == len(h) && hi-lo <= 1 && len(counts) == len(members)
	}
}

// moved lists the connectors whose holder differs between two snapshots.
func moved(before, after map[string]string) []string {
	var out []string
	for n, m := range after {
		if before[n] != m {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

// takeover returns when the last of lost's connectors got a new holder
// other than from after at, from the recorded changes.
func (c *cluster) takeover(from string, conns []string, since time.Time) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	var last time.Time
	for _, n := range conns {
		for _, ch := range c.changes {
			if ch.connector == n && ch.at.After(since) && ch.to != "" && ch.to != from {
				if ch.at.After(last) {
					last = ch.at
				}
				break
			}
		}
	}
	return last.Sub(since)
}

func heldBy(h map[string]string, m string) []string {
	var out []string
	for n, who := range h {
		if who == m {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

// checkTenures asserts what the locks promise: the fenced writes of two
// lock sessions of one connector never interleave in time.
func (c *cluster) checkTenures() (tenures int) {
	c.t.Helper()
	rows, err := c.db.Query("SELECT connector, member, conn, MIN(at), MAX(at), COUNT(*) FROM " + c.spec.Activity + " GROUP BY connector, member, conn ORDER BY connector, MIN(at)")
	if err != nil {
		c.t.Fatal(err)
	}
	defer rows.Close()
	type tenure struct {
		member     string
		conn       int64
		first, end time.Time
		n          int
	}
	by := map[string][]tenure{}
	for rows.Next() {
		var cn string
		var tn tenure
		var first, end string
		if err := rows.Scan(&cn, &tn.member, &tn.conn, &first, &end, &tn.n); err != nil {
			c.t.Fatal(err)
		}
		tn.first, _ = time.Parse("2006-01-02 15:04:05.999999", first)
		tn.end, _ = time.Parse("2006-01-02 15:04:05.999999", end)
		by[cn] = append(by[cn], tn)
	}
	if err := rows.Err(); err != nil {
		c.t.Fatal(err)
	}
	for cn, ts := range by {
		for i := 1; i < len(ts); i++ {
			if !ts[i-1].end.Before(ts[i].first) {
				c.t.Errorf("connector %s active on two replicas at once: %s (session %d) wrote until %s, %s (session %d) from %s",
					cn, ts[i-1].member, ts[i-1].conn, ts[i-1].end.Format(time.StampMicro), ts[i].member, ts[i].conn, ts[i].first.Format(time.StampMicro))
			}
		}
		tenures += len(ts)
	}
	return tenures
}

func (c *cluster) count(kind, member string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, e := range c.events {
		if e.Kind == kind && (member == "" || e.Member == member) {
			n++
		}
	}
	return n
}

// TestThreeReplicasSixConnectors runs 3 replica processes sharing 6
// connectors through kill -9, SIGSTOP/SIGCONT and a graceful restart, and
// checks that placement is balanced after each, that only the connectors
// that had to move moved, and that no two lock sessions of a connector
// were ever active at once. It logs the takeover times.
func TestThreeReplicasSixConnectors(t *testing.T) {
	c := newCluster(t, 6)
	session := c.spec.Session
	hacfg := ha.DefaultConfig()
	hacfg.SessionTimeout, hacfg.CheckInterval = session, c.spec.HACheck
	// After a replica goes silent: the group drops it after the session
	// timeout, a survivor's heartbeat (a fifth of it) starts the
	// rebalance, and the new owner takes the lock, which the database
	// frees within TakeoverWithin of the silence.
	bound := max(session+2*session/5, hacfg.TakeoverWithin()) + 2*time.Second

	for _, m := range []string{"m1", "m2", "m3"} {
		c.start(m)
	}
	before, _ := c.waitFor("3 replicas balanced", 60*time.Second, balanced("m1", "m2", "m3"))
	t.Logf("start: %v", perMember(before))

	// kill -9: the database frees m3's locks at once (its sockets close);
	// the group notices after the session timeout.
	lostConns := heldBy(before, "m3")
	killedAt := time.Now()
	c.kill("m3")
	after, _ := c.waitFor("m3's connectors on m1 and m2", 3*bound, balanced("m1", "m2"))
	took := c.takeover("m3", lostConns, killedAt)
	t.Logf("kill -9: %v moved in %s (bound %s): %v", lostConns, took.Round(time.Millisecond), bound, perMember(after))
	if took > bound {
		t.Errorf("takeover after kill -9 took %s, bound %s", took, bound)
	}
	if got := moved(before, after); !slices.Equal(got, lostConns) {
		t.Errorf("kill -9 moved %v; only m3's %v had to", got, lostConns)
	}

	// The replica comes back: two connectors move to it, no others.
	before = after
	c.start("m3")
	after, _ = c.waitFor("m3 back, balanced", 60*time.Second, balanced("m1", "m2", "m3"))
	if got := moved(before, after); len(got) != 2 {
		t.Errorf("restarting m3 moved %v; 2 connectors had to move", got)
	}
	t.Logf("m3 restarted: moved %v: %v", moved(before, after), perMember(after))

	// SIGSTOP: m2 is frozen, its kernel still answers TCP. The database
	// ends its lock sessions after session_timeout, the group drops it
	// after the session timeout.
	before = after
	lostConns = heldBy(before, "m2")
	stoppedAt := time.Now()
	c.signal("m2", syscall.SIGSTOP)
	after, _ = c.waitFor("m2's connectors on m1 and m3", 3*bound, balanced("m1", "m3"))
	took = c.takeover("m2", lostConns, stoppedAt)
	t.Logf("SIGSTOP: %v moved in %s (bound %s): %v", lostConns, took.Round(time.Millisecond), bound, perMember(after))
	if took > bound {
		t.Errorf("takeover after SIGSTOP took %s, bound %s", took, bound)
	}
	if got := moved(before, after); !slices.Equal(got, lostConns) {
		t.Errorf("SIGSTOP moved %v; only m2's %v had to", got, lostConns)
	}
	// Frozen long enough for its stale connectors to try writing when it
	// resumes; then it rejoins and gets two connectors back.
	time.Sleep(time.Second)
	before = after
	c.signal("m2", syscall.SIGCONT)
	after, _ = c.waitFor("m2 resumed, balanced", 60*time.Second, balanced("m1", "m2", "m3"))
	if got := moved(before, after); len(got) != 2 {
		t.Errorf("resuming m2 moved %v; 2 connectors had to move", got)
	}
	t.Logf("SIGCONT: m2 lost its lock %d times, %d writes refused by the fence; moved %v: %v",
		c.count("lostlock", "m2"), c.count("fenced", "m2"), moved(before, after), perMember(after))

	// Graceful restart (a rolling update's step): m1 stops its
	// connectors and leaves the group, the others take over without
	// waiting for the session timeout.
	before = after
	lostConns = heldBy(before, "m1")
	termAt := time.Now()
	c.stop("m1")
	after, _ = c.waitFor("m1's connectors on m2 and m3", 3*bound, balanced("m2", "m3"))
	took = c.takeover("m1", lostConns, termAt)
	t.Logf("SIGTERM: %v moved in %s: %v", lostConns, took.Round(time.Millisecond), perMember(after))
	if took >= session {
		t.Errorf("handover after a graceful stop took %s, not under the session timeout %s", took, session)
	}
	if got := moved(before, after); !slices.Equal(got, lostConns) {
		t.Errorf("SIGTERM moved %v; only m1's %v had to", got, lostConns)
	}
	before = after
	c.start("m1")
	after, _ = c.waitFor("m1 back, balanced", 60*time.Second, balanced("m1", "m2", "m3"))
	if got := moved(before, after); len(got) != 2 {
		t.Errorf("restarting m1 moved %v; 2 connectors had to move", got)
	}
	t.Logf("end: %v", perMember(after))

	for _, m := range []string{"m1", "m2", "m3"} {
		c.stop(m)
	}
	n := c.checkTenures()
	if n < 6 {
		t.Errorf("only %d lock tenures wrote activity; the fake connectors did not run", n)
	}
	t.Logf("%d lock tenures, none overlapping", n)
}
