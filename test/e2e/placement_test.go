package e2e

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/outbox-cdc/outbox-cdc/ha"
	"github.com/outbox-cdc/outbox-cdc/test/testenv"
)

// TestPlacementThreeReplicasSixConnectors runs three outbox-cdc processes
// with placement on, sharing six connectors (three on MariaDB databases,
// three on Postgres schemas), while every connector's outbox is written to
// throughout. One process is killed (kill -9) mid-write, another frozen
// (SIGSTOP) and resumed after its connectors moved, then the killed one is
// started again. A watcher polls every 50 ms who holds each connector's HA
// lock on the servers (IS_USED_LOCK, pg_locks), mapping the lock session
// to the process by its TCP port, and every process's /active JSON.
// Checked: every committed row is delivered (duplicates counted, allowed
// at least once); no two processes claim one connector active in the same
// poll, and no process claims a connector active while another process
// holds its lock (read before and after the claim); placement ends
// balanced, 2/2/2. The takeover times are logged.
func TestPlacementThreeReplicasSixConnectors(t *testing.T) {
	_, brokers := testenv.Kafka(t, kfake.GroupMinSessionTimeout(time.Second))
	sfx := fmt.Sprintf("%06d", rand.IntN(1000000))
	const n = 6
	type conn struct {
		name string
		b    *backend
		mu   sync.Mutex
		want []string
	}
	conns := make([]*conn, n)
	placed := make([]placedConnector, n)
	for i := range conns {
		c := &conn{name: fmt.Sprintf("pl-%s-%d", sfx, i)}
		placed[i] = newPlacedConnector(t, sfx, i, c.name)
		c.b = placed[i].b
		conns[i] = c
	}
	cfg := placementConfig(t, sfx, brokers[0], brokers[0], placed, "", "")

	// The three replicas; procs[i] is replaced when restarted.
	var pmu sync.Mutex
	procs := make([]*testenv.Connector, 3)
	for i := range procs {
		p := testenv.Start(t, cfg)
		pmu.Lock()
		procs[i] = p
		pmu.Unlock()
	}
	w := startPlacementWatch(t, conns[0].b.db, conns[1].b.db, func() []*testenv.Connector {
		pmu.Lock()
		defer pmu.Unlock()
		return append([]*testenv.Connector(nil), procs...)
	}, placed)
	balanced := func() bool {
		per, total := w.activeCounts()
		return total == n && per[0] == 2 && per[1] == 2 && per[2] == 2
	}
	testenv.Eventually(t, 60*time.Second, "placement balanced 2/2/2 at start", balanced)

	// Writers: one row per connector every ~20 ms, each its own transaction;
	// without pause (a burst) around the freeze, so that the frozen replica
	// has rows read ahead.
	wctx, stopWriters := context.WithCancel(context.Background())
	var burst atomic.Bool
	var wg sync.WaitGroup
	for i, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := 0; wctx.Err() == nil; k++ {
				id := fmt.Sprintf("c%d-%d", i, k)
				c.b.insertTx(t, []row{{id, "ORDER", fmt.Sprintf("agg-%d", k%5), "E", fmt.Sprintf(`{"k": %d}`, k)}}, true)
				c.mu.Lock()
				c.want = append(c.want, id)
				c.mu.Unlock()
				if !burst.Load() {
					time.Sleep(20 * time.Millisecond)
				}
			}
		}()
	}
	t.Cleanup(func() { stopWriters(); wg.Wait() })
	time.Sleep(2 * time.Second)

	// kill -9 the first replica mid-write.
	victim := procs[0]
	held := w.heldBy(0)
	killedAt := time.Now()
	victim.Kill()
	<-victim.Done()
	testenv.Eventually(t, 60*time.Second, "the survivors hold the killed replica's connectors", func() bool {
		per, total := w.activeCounts()
		return total == n && per[0] == 0
	})
	t.Logf("kill -9: %d connectors (%v) streaming on the survivors %s after the kill", len(held), held, time.Since(killedAt).Round(time.Millisecond))
	w.mark("killed", killedAt, held)
	time.Sleep(2 * time.Second)

	// SIGSTOP the second; the third takes everything.
	frozen := procs[1]
	held = w.heldBy(1)
	burst.Store(true)
	time.Sleep(300 * time.Millisecond)
	frozenAt := time.Now()
	frozen.Pause()
	w.setFrozen(1, true)
	testenv.Eventually(t, 60*time.Second, "the third replica holds every connector", func() bool {
		per, _ := w.activeCounts()
		return per[2] == n
	})
	t.Logf("SIGSTOP: %d connectors (%v) streaming on the last replica %s after the freeze", len(held), held, time.Since(frozenAt).Round(time.Millisecond))
	w.mark("frozen", frozenAt, held)
	time.Sleep(500 * time.Millisecond) // the new owner writes a while before the zombie wakes
	burst.Store(false)
	frozen.Resume()
	w.setFrozen(1, false)
	testenv.Eventually(t, 60*time.Second, "the resumed replica gets its share back", func() bool {
		per, total := w.activeCounts()
		return total == n && per[1] == 3 && per[2] == 3
	})
	time.Sleep(time.Second)

	// Restart the killed one.
	restartedAt := time.Now()
	p := testenv.Start(t, cfg)
	pmu.Lock()
	procs[0] = p
	pmu.Unlock()
	testenv.Eventually(t, 60*time.Second, "placement balanced 2/2/2 after the restart", balanced)
	t.Logf("restart: balanced 2/2/2 %s after starting the killed replica again", time.Since(restartedAt).Round(time.Millisecond))
	time.Sleep(time.Second)
	stopWriters()
	wg.Wait()

	// Nothing lost; duplicates counted.
	dups, stale := 0, 0
	for i, c := range conns {
		cons := newConsumer(t, brokers, fmt.Sprintf(`pl%s\.%d\..*`, sfx, i))
		got := cons.waitFor(t, len(c.want), 90*time.Second)
		got = append(got, cons.quiet(t, 300*time.Millisecond)[len(got):]...)
		checkDelivery(t, got, c.want, 3, false)
		dups += len(got) - len(c.want)
		s, _, _ := staleWrites(got)
		stale += s
	}
	// No owner writes after a newer one wrote to the same partition: the
	// frozen replica, resumed, wrote nothing it had read ahead.
	t.Logf("%d records written by a superseded owner (zombie writes)", stale)
	if stale > 0 {
		t.Errorf("%d records written by an owner after a newer owner had written to the partition", stale)
	}
	w.stop()
	per, total := w.activeCounts()
	if total != n || per[0] != 2 || per[1] != 2 || per[2] != 2 {
		t.Fatalf("placement at the end %v (%d active), want 2/2/2", per, total)
	}
	// The watcher saw the locks: at the end each is held by the process
	// that claims the connector.
	for _, name := range w.names {
		w.mu.Lock()
		h, ps := w.holders[name], w.active[name]
		w.mu.Unlock()
		if len(ps) != 1 || h != ps[0] {
			t.Errorf("at the end %s: lock held by process %d, claimed active by %v", name, h, ps)
		}
	}
	total = 0
	for _, c := range conns {
		total += len(c.want)
	}
	t.Logf("%d rows committed over 6 connectors, %d duplicates delivered", total, dups)
	w.report()
}

// placedConnector is one connector of a placement test: connector i of
// the test runs on MariaDB when i is even, on Postgres when odd (the
// order placementWatch expects), and writes to topics
// pl<sfx>.<i>.<aggregate type>.
type placedConnector struct {
	name string
	b    *backend
	cp   string // its checkpoint table
}

func newPlacedConnector(t *testing.T, sfx string, i int, name string) placedConnector {
	obj := fmt.Sprintf("e2e_place_%s_%d", sfx, i)
	if i%2 == 0 {
		return placedConnector{name, mysqlBackendNamed(t, obj), "outbox_cdc_checkpoint"}
	}
	return placedConnector{name, postgresBackendNamed(t, obj), obj + ".outbox_cdc_checkpoint"}
}

// placementConfig writes the configuration of one replica: placement on
// over placementBroker, every connector with HA (session 3s, check 300ms)
// and a Kafka sink on sinkBroker (a replica's own path to the broker,
// testenv.KafkaProxy, or the broker itself); sinkExtra and haExtra are
// more lines of each connector's sink: and ha: sections.
func placementConfig(t *testing.T, sfx, placementBroker, sinkBroker string, conns []placedConnector, sinkExtra, haExtra string) string {
	t.Helper()
	var entries strings.Builder
	for i, c := range conns {
		src := strings.ReplaceAll(strings.TrimRight(c.b.sourceYAML(c.name), "\n"), "\n", "\n    ")
		fmt.Fprintf(&entries, `  - name: %s
    source:
    %s
    route:
      preset: seed
      topic: "pl%s.%d.{aggregate_type}"
    sink:
      type: kafka
      brokers: [%q]
      retry_backoff_min: 20ms
      retry_backoff_max: 500ms
%s    checkpoint:
      type: table
      table: %s
    pipeline:
      shutdown_timeout: 5s
    ha:
      enabled: true
      check_interval: 300ms
      session_timeout: 3s
%s`, c.name, src, sfx, i, sinkBroker, sinkExtra, c.cp, haExtra)
	}
	return writeConfig(t, fmt.Sprintf("log:\n  level: info\nplacement:\n  enabled: true\n  deployment: e2e-%s\n  brokers: [%q]\n  rebalance_timeout: 20s\nconnectors:\n%s",
		sfx, placementBroker, entries.String()))
}

// placementWatch polls the HA lock holders on both servers and every
// process's /active every 50 ms.
type placementWatch struct {
	t       *testing.T
	my, pg  *sql.DB
	procs   func() []*testenv.Connector
	names   []string
	ctx     context.Context
	cancel  context.CancelFunc
	done    chan struct{}
	mu      sync.Mutex
	active  map[string][]int // connector -> processes claiming it active (last poll)
	frozen  map[int]bool
	polls   int
	holders map[string]int // connector -> process holding its lock (-1 none, -2 not one of ours)
	// violations of "one connector, one process".
	overlaps []string
	changes  []string
	marks    []string
	// unresolved are the first lock reads the watcher could not map.
	unresolved []string
}

// startPlacementWatch starts watching the connectors conns over the
// processes procs returns, until stop (or the test's end).
func startPlacementWatch(t *testing.T, my, pg *sql.DB, procs func() []*testenv.Connector, conns []placedConnector) *placementWatch {
	ctx, cancel := context.WithCancel(context.Background())
	w := &placementWatch{t: t, my: my, pg: pg, procs: procs, ctx: ctx, cancel: cancel, done: make(chan struct{}),
		active: map[string][]int{}, frozen: map[int]bool{}, holders: map[string]int{}}
	for _, c := range conns {
		w.names = append(w.names, c.name)
	}
	go w.run()
	t.Cleanup(w.stop)
	return w
}

func (w *placementWatch) stop() {
	if w.ctx.Err() == nil {
		w.cancel()
		<-w.done
	}
}

func (w *placementWatch) setFrozen(i int, f bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.frozen[i] = f
}

func (w *placementWatch) mark(what string, at time.Time, conns []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.marks = append(w.marks, fmt.Sprintf("%s at %s: %v", what, at.Format("15:04:05.000"), conns))
}

// activeCounts is how many connectors each process claims active.
func (w *placementWatch) activeCounts() ([3]int, int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	var per [3]int
	total := 0
	for _, ps := range w.active {
		for _, p := range ps {
			per[p]++
		}
		if len(ps) > 0 {
			total++
		}
	}
	return per, total
}

// activeOn lists the processes that claim connector name active.
func (w *placementWatch) activeOn(name string) []int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]int(nil), w.active[name]...)
}

// heldBy lists the connectors process i claims active.
func (w *placementWatch) heldBy(i int) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for _, n := range w.names {
		for _, p := range w.active[n] {
			if p == i {
				out = append(out, n)
			}
		}
	}
	return out
}

func (w *placementWatch) run() {
	defer close(w.done)
	cl := http.Client{Timeout: 200 * time.Millisecond}
	for w.ctx.Err() == nil {
		procs := w.procs()
		before := w.lockHolders(procs)
		active := map[string][]int{}
		answered := map[int]bool{}
		for i, p := range procs {
			select {
			case <-p.Done():
				continue
			default:
			}
			resp, err := cl.Get("http://" + p.Addr() + "/healthz")
			if err != nil {
				continue
			}
			var a readyzAnswer
			json.NewDecoder(resp.Body).Decode(&a)
			resp.Body.Close()
			answered[i] = true
			for _, c := range a.Connectors {
				if c.Active {
					active[c.Name] = append(active[c.Name], i)
				}
			}
		}
		holders := w.lockHolders(procs)
		now := time.Now()
		w.mu.Lock()
		w.polls++
		for _, name := range w.names {
			if ps := active[name]; len(ps) > 1 {
				w.overlaps = append(w.overlaps, fmt.Sprintf("%s %s claimed active by processes %v (lock holder %d)", now.Format("15:04:05.000"), name, ps, holders[name]))
			}
			if h, ok := holders[name]; ok {
				if prev, seen := w.holders[name]; !seen || h != prev {
					w.changes = append(w.changes, fmt.Sprintf("%s %s lock: process %d -> %d", now.Format("15:04:05.000"), name, prev, h))
					w.holders[name] = h
				}
			}
			// A process claiming a connector active while another held
			// its lock from before to after the claim was read streams
			// without the lock.
			if h, ok := holders[name]; ok && h >= 0 && before[name] == h {
				for _, p := range active[name] {
					if p != h && answered[p] {
						w.overlaps = append(w.overlaps, fmt.Sprintf("%s %s claimed active by process %d while process %d holds its lock", now.Format("15:04:05.000"), name, p, h))
					}
				}
			}
		}
		w.active = active
		w.mu.Unlock()
		time.Sleep(50 * time.Millisecond)
	}
}

// lockHolders maps each connector to the process whose session holds its
// HA lock (-1: nobody; -2: a session of no known process); a connector
// missing from the map could not be resolved this round.
func (w *placementWatch) lockHolders(procs []*testenv.Connector) map[string]int {
	ports := map[int]int{} // client TCP port -> process index
	sockets := map[string]int{}
	for i, p := range procs {
		select {
		case <-p.Done():
			continue
		default:
		}
		fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", p.Pid()))
		for _, fd := range fds {
			l, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", p.Pid(), fd.Name()))
			if err == nil && strings.HasPrefix(l, "socket:[") {
				sockets[strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]")] = i
			}
		}
	}
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		fh, err := os.Open(f)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			fs := strings.Fields(sc.Text())
			if len(fs) < 10 {
				continue
			}
			if i, ok := sockets[fs[9]]; ok {
				if _, port, ok := strings.Cut(fs[1], ":"); ok {
					if v, err := strconv.ParseInt(port, 16, 32); err == nil {
						ports[int(v)] = i
					}
				}
			}
		}
		fh.Close()
	}
	out := map[string]int{}
	who := func(port sql.NullInt64) int {
		if !port.Valid {
			return -1
		}
		if i, ok := ports[int(port.Int64)]; ok {
			return i
		}
		return -2
	}
	ctx, cancel := context.WithTimeout(w.ctx, time.Second)
	defer cancel()
	// One query per server for all its connectors.
	var q strings.Builder
	var args []any
	var mine []string
	for i, name := range w.names {
		if i%2 == 0 {
			if len(args) > 0 {
				q.WriteString(", ")
			}
			q.WriteString("(SELECT HOST FROM information_schema.PROCESSLIST WHERE ID = IS_USED_LOCK(?))")
			args = append(args, ha.LockName(name))
			mine = append(mine, name)
		}
	}
	hosts := make([]sql.NullString, len(mine))
	dst := make([]any, len(mine))
	for i := range hosts {
		dst[i] = &hosts[i]
	}
	if err := w.my.QueryRowContext(ctx, "SELECT "+q.String(), args...).Scan(dst...); err != nil {
		w.note("MariaDB lock query: %v", err)
	} else {
		for i, name := range mine {
			var port sql.NullInt64
			if hosts[i].Valid {
				if _, p, ok := strings.Cut(hosts[i].String, ":"); ok {
					v, err := strconv.Atoi(p)
					port = sql.NullInt64{Int64: int64(v), Valid: err == nil}
				}
			}
			if h := who(port); h != -2 {
				out[name] = h
			} else {
				w.note("lock of %s held from port %d, no process of ours", name, port.Int64)
			}
		}
	}
	rows, err := w.pg.QueryContext(ctx, `SELECT (l.classid::bigint << 32) | l.objid::bigint, a.client_port FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
  WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1`)
	if err != nil {
		w.note("Postgres lock query: %v", err)
		return out
	}
	defer rows.Close()
	byKey := map[int64]sql.NullInt64{}
	for rows.Next() {
		var key int64
		var port sql.NullInt64
		if rows.Scan(&key, &port) == nil {
			byKey[key] = port
		}
	}
	if rows.Err() != nil {
		w.note("Postgres lock query: %v", rows.Err())
		return out
	}
	for i, name := range w.names {
		if i%2 == 1 {
			if h := who(byKey[ha.AdvisoryKey(name)]); h != -2 {
				out[name] = h
			} else {
				w.note("lock of %s held from port %d, no process of ours", name, byKey[ha.AdvisoryKey(name)].Int64)
			}
		}
	}
	return out
}

// note keeps the first few unresolved lock reads, for the report.
func (w *placementWatch) note(format string, args ...any) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.unresolved) < 10 {
		w.unresolved = append(w.unresolved, fmt.Sprintf(format, args...))
	}
}

func (w *placementWatch) report() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, m := range w.marks {
		w.t.Log(m)
	}
	w.t.Logf("%d polls; lock holder changes:\n%s", w.polls, strings.Join(w.changes, "\n"))
	if len(w.unresolved) > 0 {
		w.t.Logf("unresolved lock reads (first %d):\n%s", len(w.unresolved), strings.Join(w.unresolved, "\n"))
	}
	if len(w.overlaps) > 0 {
		w.t.Fatalf("%d polls saw a connector on two processes:\n%s", len(w.overlaps), strings.Join(w.overlaps[:min(20, len(w.overlaps))], "\n"))
	}
}
