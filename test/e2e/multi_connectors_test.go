package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/outbox-cdc/outbox-cdc/test/testenv"
)

// readyzAnswer is the JSON of /readyz, /active and /healthz.
type readyzAnswer struct {
	Status     string `json:"status"`
	Ready      bool   `json:"ready"`
	Active     int    `json:"active"`
	Connectors []struct {
		Name   string `json:"name"`
		State  string `json:"state"`
		Active bool   `json:"active"`
		Ready  bool   `json:"ready"`
		Reason string `json:"reason"`
	} `json:"connectors"`
}

func getJSON(t *testing.T, c *testenv.Connector, method, path string) (int, readyzAnswer) {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+c.Addr()+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var a readyzAnswer
	if resp.Header.Get("Content-Type") == "application/json" {
		if err := json.Unmarshal(body, &a); err != nil {
			t.Fatalf("%s %s: %v in %q", method, path, err, body)
		}
	}
	return resp.StatusCode, a
}

// TestSixConnectorsOnePoisoned runs one process with six connectors, three
// on MariaDB databases and three on Postgres schemas, all to one Kafka
// cluster. One Postgres connector (on_error halt) gets a poison row (an
// empty aggregate id): it halts alone, its state and error visible on
// /readyz, while the other five keep delivering every row, also rows
// committed after the halt. Every outbox_cdc_* sample carries the
// connector label. POST /connectors/NAME/restart starts the halted one
// again (it halts again on the same row); SIGTERM then stops the process,
// which exits 1 because a connector halted.
func TestSixConnectorsOnePoisoned(t *testing.T) {
	_, brokers := testenv.Kafka(t)
	suffix := fmt.Sprintf("%06d", rand.IntN(1000000))
	type conn struct {
		name string
		b    *backend
		want []string
	}
	var conns []*conn
	var entries strings.Builder
	const poisoned = 4
	for i := 0; i < 6; i++ {
		obj := fmt.Sprintf("e2e_multi_%s_%d", suffix, i)
		var b *backend
		if i < 3 {
			b = mysqlBackendNamed(t, obj)
		} else {
			b = postgresBackendNamed(t, obj)
		}
		c := &conn{name: fmt.Sprintf("multi-%s-%d", suffix, i), b: b}
		conns = append(conns, c)
		src := strings.ReplaceAll(strings.TrimRight(b.sourceYAML(c.name), "\n"), "\n", "\n    ")
		fmt.Fprintf(&entries, `  - name: %s
    source:
    %s
    route:
      preset: seed
      topic: "multi.%d.{aggregate_type}"
    sink:
      type: kafka
      brokers: [%q]
    checkpoint:
      type: file
      path: %q
    pipeline:
      on_error: halt
`, c.name, src, i, brokers[0], filepath.Join(t.TempDir(), "checkpoint"))
	}
	cfg := writeConfig(t, "log:\n  level: info\nconnectors:\n"+entries.String())
	p := testenv.Start(t, cfg)
	cons := newConsumer(t, brokers, `multi\..*`)

	commit := func(round string, n int) {
		for i, c := range conns {
			for k := 0; k < n; k++ {
				id := fmt.Sprintf("c%d-%s-%d", i, round, k)
				c.b.insertTx(t, []row{{id, "ORDER", fmt.Sprintf("agg-%d", k%3), "E", fmt.Sprintf(`{"k": %d}`, k)}}, true)
				c.want = append(c.want, id)
			}
		}
	}
	commit("before", 20)
	// The poison row, then rows behind it that its connector never sends.
	poison := conns[poisoned]
	poison.b.insertRaw(t, poison.b.insertOutbox, "poison-1", "", `{"bad": true}`)
	for k := 0; k < 5; k++ {
		poison.b.insertRaw(t, poison.b.insertOutbox, fmt.Sprintf("behind-%d", k), "agg-0", `{}`)
	}

	q := "/readyz?connector=" + poison.name
	testenv.Eventually(t, 30*time.Second, "the poisoned connector halted", func() bool {
		code, a := getJSON(t, p, "GET", q)
		return code == 503 && len(a.Connectors) == 1 && a.Connectors[0].State == "halted"
	})
	_, a := getJSON(t, p, "GET", q)
	if r := a.Connectors[0].Reason; !strings.Contains(r, "poison-1") || !strings.Contains(r, "aggregate id") {
		t.Fatalf("halted connector's reason %q does not name the row and the cause", r)
	}
	// Committed after the halt: the other five deliver them too.
	commit("after", 20)

	for i, c := range conns {
		if i == poisoned {
			continue
		}
		ccons := newConsumer(t, brokers, fmt.Sprintf(`multi\.%d\..*`, i))
		got := ccons.waitFor(t, len(c.want), 60*time.Second)
		checkDelivery(t, got, c.want, 3, false)
	}
	// The poisoned one delivered what came before the poison row, nothing after.
	pc := newConsumer(t, brokers, fmt.Sprintf(`multi\.%d\..*`, poisoned))
	var before []string
	for _, id := range poison.want {
		if strings.Contains(id, "-before-") {
			before = append(before, id)
		}
	}
	got := pc.waitFor(t, len(before), 30*time.Second)
	got = append(got, pc.quiet(t, 500*time.Millisecond)[len(got):]...)
	checkDelivery(t, got, before, 3, false)
	_ = cons

	// Overall readiness is 503 naming the halted one; the other five are
	// running, ready and active.
	code, all := getJSON(t, p, "GET", "/readyz")
	if code != 503 || all.Ready || len(all.Connectors) != 6 || all.Active != 5 {
		t.Fatalf("/readyz %d ready %v, %d connectors, %d active; want 503, 6, 5", code, all.Ready, len(all.Connectors), all.Active)
	}
	for i, st := range all.Connectors {
		want := "running"
		if i == poisoned {
			want = "halted"
		}
		if st.Name != conns[i].name || st.State != want || st.Ready != (i != poisoned) || st.Active != (i != poisoned) {
			t.Fatalf("/readyz connector %d: %+v, want %s state %s", i, st, conns[i].name, want)
		}
	}
	if code, _ := getJSON(t, p, "GET", "/readyz?connector="+conns[0].name); code != 200 {
		t.Fatalf("/readyz?connector=%s %d, want 200", conns[0].name, code)
	}
	if code, _ := getJSON(t, p, "GET", "/readyz?connector=nope"); code != 404 {
		t.Fatalf("/readyz?connector=nope %d, want 404", code)
	}
	if code, a := getJSON(t, p, "GET", "/active"); code != 200 || a.Active != 5 {
		t.Fatalf("/active %d with %d active, want 200 and 5", code, a.Active)
	}
	if code := p.Status("/healthz"); code != 200 {
		t.Fatalf("/healthz %d with one connector halted, want 200 (the process is alive)", code)
	}

	// Metrics: every outbox_cdc_* sample carries a connector label (but
	// build_info, the process's), and each connector counts its records.
	resp, err := http.Get("http://" + p.Addr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, line := range strings.Split(string(raw), "\n") {
		if strings.HasPrefix(line, "outbox_cdc_") && !strings.HasPrefix(line, "outbox_cdc_build_info") && !strings.Contains(line, `connector="`) {
			t.Fatalf("sample without a connector label: %s", line)
		}
	}
	for i, c := range conns {
		name := fmt.Sprintf(`outbox_cdc_records_delivered_total{connector=%q}`, c.name)
		v := metricIn(string(raw), name)
		want := float64(len(c.want))
		if i == poisoned {
			want = float64(len(before))
		}
		if v < want {
			t.Fatalf("%s = %v, want at least %v", name, v, want)
		}
		state := fmt.Sprintf(`outbox_cdc_connector_state{connector=%q,state="halted"}`, c.name)
		if v, want := metricIn(string(raw), state), map[bool]float64{true: 1, false: 0}[i == poisoned]; v != want {
			t.Fatalf("%s = %v, want %v", state, v, want)
		}
	}

	// An operator restarts the halted connector: it starts afresh from its
	// checkpoint and halts again on the same row.
	if code, _ := getJSON(t, p, "POST", "/connectors/nope/restart"); code != 404 {
		t.Fatalf("restart of an unknown connector: %d, want 404", code)
	}
	if code, _ := getJSON(t, p, "GET", "/connectors/"+poison.name+"/restart"); code != 405 {
		t.Fatalf("GET restart: %d, want 405", code)
	}
	// Kafka Connect's answer to a restart without includeTasks/onlyFailed: 204, no body.
	if code, _ := getJSON(t, p, "POST", "/connectors/"+poison.name+"/restart"); code != 204 {
		t.Fatalf("restart: %d, want 204", code)
	}
	// The state reads halted until the restart takes effect: wait for the
	// second halt itself.
	testenv.Eventually(t, 30*time.Second, "the restarted connector halted again", func() bool {
		_, a := getJSON(t, p, "GET", q)
		return len(a.Connectors) == 1 && a.Connectors[0].State == "halted" &&
			strings.Count(p.Log(), "connector halted; the others keep running") >= 2
	})
	time.Sleep(time.Second) // a third halt would show by now
	if n := strings.Count(p.Log(), "connector halted; the others keep running"); n != 2 {
		t.Fatalf("%d halt messages, want 2", n)
	}
	select {
	case <-p.Done():
		t.Fatalf("the process exited: %v", p.Err())
	default:
	}
	if err := p.Stop(30 * time.Second); testenv.ExitCode(err) != 1 {
		t.Fatalf("SIGTERM with a halted connector: exit %v, want 1", err)
	}
}

// metricIn returns the value of the sample line starting with name in a
// /metrics body, or -1.
func metricIn(body, name string) float64 {
	for _, line := range strings.Split(body, "\n") {
		if rest, ok := strings.CutPrefix(line, name+" "); ok {
			var v float64
			if _, err := fmt.Sscan(rest, &v); err == nil {
				return v
			}
		}
	}
	return -1
}
