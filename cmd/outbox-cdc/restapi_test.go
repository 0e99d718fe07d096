package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	connect "github.com/go-kafka/connect"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-cdc/outbox-cdc/checkpoint"
	"github.com/outbox-cdc/outbox-cdc/test/testenv"
)

// restProcess runs a process from the configuration file body (with an
// http.listen added) in-process; stop ends it and waits.
type restProcess struct {
	t       *testing.T
	addr    string
	logs    *lockedBuffer
	cancel  context.CancelFunc
	done    chan error
	stopped bool
}

func startRestProcess(t *testing.T, body string) *restProcess {
	t.Helper()
	addr := testenv.FreeAddr(t)
	pc, err := loadProcessConfig(writeFile(t, fmt.Sprintf("http:\n  listen: %q\nlog:\n  format: json\n%s", addr, body)), nil)
	if err != nil {
		t.Fatal(err)
	}
	p := &restProcess{t: t, addr: addr, logs: &lockedBuffer{}, done: make(chan error, 1)}
	var ctx context.Context
	ctx, p.cancel = context.WithCancel(context.Background())
	go func() { p.done <- runProcess(ctx, pc, runOptions{}, p.logs) }()
	t.Cleanup(func() {
		p.stop()
		if t.Failed() {
			t.Logf("log:\n%s", p.logs.String())
		}
	})
	testenv.Eventually(t, 30*time.Second, "the HTTP server answers", func() bool {
		resp, err := http.Get("http://" + addr + "/healthz")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil
	})
	return p
}

func (p *restProcess) stop() {
	if p.stopped {
		return
	}
	p.stopped = true
	p.cancel()
	select {
	case <-p.done:
	case <-time.After(60 * time.Second):
		p.t.Error("the process did not stop within 60s")
	}
}

// do sends a request and returns the status code and body.
func (p *restProcess) do(method, path, body string) (int, string) {
	p.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, "http://"+p.addr+path, rd)
	if err != nil {
		p.t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		p.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// wantError checks Connect's error body: {"error_code": code, "message": ...containing want}.
func wantError(t *testing.T, what string, code int, body string, wantCode int, want string) {
	t.Helper()
	var e struct {
		ErrorCode int    `json:"error_code"`
		Message   string `json:"message"`
	}
	if err := json.Unmarshal([]byte(body), &e); err != nil || code != wantCode || e.ErrorCode != wantCode || !strings.Contains(e.Message, want) {
		t.Fatalf("%s: %d %s, want %d with error_code %d and a message containing %q", what, code, body, wantCode, wantCode, want)
	}
}

// waitStreaming waits until the connector's source streams and its sink
// is connected (/readyz): rows committed before would precede the start.
func (p *restProcess) waitStreaming(name string) {
	p.t.Helper()
	testenv.Eventually(p.t, 60*time.Second, name+" streaming", func() bool {
		code, _ := p.do("GET", "/readyz?connector="+name, "")
		return code == 200 && p.connectorState(name) == "RUNNING"
	})
}

func (p *restProcess) connectorState(name string) string {
	_, body := p.do("GET", "/connectors/"+name+"/status", "")
	var st struct {
		Connector struct{ State string } `json:"connector"`
	}
	json.Unmarshal([]byte(body), &st)
	return st.Connector.State
}

// topicIDs returns the id headers of every record of topic so far.
func topicIDs(t *testing.T, brokers []string, topic string, wait time.Duration) map[string]int {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	out := map[string]int{}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	for ctx.Err() == nil {
		cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
			for _, h := range r.Headers {
				if h.Key == "id" {
					out[string(h.Value)]++
				}
			}
		})
	}
	return out
}

func insertRows(t *testing.T, db *sql.DB, prefix string, n int) {
	t.Helper()
	q := "INSERT INTO outbox_message (message_id, aggregate_type, aggregate_id, event_type, payload) VALUES (?, 'ORDER', 'x', 'E', '{}')"
	for i := 0; i < n; i++ {
		if _, err := db.Exec(q, fmt.Sprintf("%s-%d", prefix, i)); err != nil {
			t.Fatal(err)
		}
	}
}

// TestRESTAPIMySQLConnectClient drives a MariaDB connector through Kafka
// Connect's REST API, with an unmodified third-party Connect client
// (github.com/go-kafka/connect v0.9.0) for what it covers (list, info,
// config, tasks, status, pause, resume, restart) and plain HTTP in
// Connect's documented shapes for stop and offsets (KIP-875), which that
// client predates:
//   - pause holds under load: nothing is written, the checkpoint does not
//     move, /readyz and outbox_cdc_connector_state say paused; resume
//     delivers every row committed meanwhile;
//   - an offsets PATCH while running is refused (400, Connect's message);
//   - stop keeps the connector stopped across a restart of the process;
//   - offsets GET answers Debezium's {"server"}/{"file","pos"} shape; a
//     PATCH ahead of the server's binlog is refused with the reason; a
//     PATCH back to an earlier offset is written and replayed from.
func TestRESTAPIMySQLConnectClient(t *testing.T) {
	db, dsn, suffix, brokers := seededMySQL(t, "rest")
	name := "rest-" + suffix
	cpPath := filepath.Join(t.TempDir(), "cp")
	body := fmt.Sprintf(`name: %s
source:
  type: mysql
  dsn: %q
  table: outbox_message
  gtid: "off"
route:
  preset: seed
  topic: %q
sink:
  brokers: [%q]
checkpoint:
  type: file
  path: %q
`, name, dsn, name, brokers[0], cpPath)
	p := startRestProcess(t, body)
	base := "http://" + p.addr
	cl := connect.NewClient(base)

	testenv.Eventually(t, 60*time.Second, "RUNNING", func() bool { return p.connectorState(name) == "RUNNING" })

	// Read-only endpoints through the third-party client.
	names, _, err := cl.ListConnectors()
	if err != nil || len(names) != 1 || names[0] != name {
		t.Fatalf("ListConnectors: %v %v", names, err)
	}
	info, _, err := cl.GetConnector(name)
	if err != nil || info.Name != name || info.Config["connector.class"] != "outbox-cdc.mysql" || len(info.Tasks) != 1 || info.Tasks[0].ID != 0 {
		t.Fatalf("GetConnector: %+v %v", info, err)
	}
	conf, _, err := cl.GetConnectorConfig(name)
	if err != nil || conf["source.table"] != "outbox_message" || conf["checkpoint.path"] != cpPath || conf["name"] != name {
		t.Fatalf("GetConnectorConfig: %v %v", conf, err)
	}
	tasks, _, err := cl.GetConnectorTasks(name)
	if err != nil || len(tasks) != 1 || tasks[0].ID.ConnectorName != name {
		t.Fatalf("GetConnectorTasks: %+v %v", tasks, err)
	}
	st, _, err := cl.GetConnectorStatus(name)
	if err != nil || st.Connector.State != "RUNNING" || len(st.Tasks) != 1 || st.Tasks[0].State != "RUNNING" || st.Connector.WorkerID != p.addr {
		t.Fatalf("GetConnectorStatus: %+v %v", st, err)
	}
	if _, _, err := cl.GetConnectorStatus("nope"); err == nil {
		t.Fatal("status of an unknown connector: no error")
	} else if ae, ok := err.(connect.APIError); !ok || ae.Code != 404 {
		t.Fatalf("status of an unknown connector: %#v", err)
	}

	p.waitStreaming(name)
	insertRows(t, db, "before", 20)
	testenv.Eventually(t, 30*time.Second, "20 rows delivered", func() bool {
		return len(topicIDs(t, brokers, name, time.Second)) == 20
	})
	early, err := checkpoint.ReadFile(cpPath)
	if err != nil {
		t.Fatal(err)
	}

	// Pause under load: rows keep being committed.
	stopLoad := make(chan struct{})
	loadDone := make(chan int, 1)
	var stopOnce sync.Once
	endLoad := func() int {
		stopOnce.Do(func() { close(stopLoad) })
		return <-loadDone
	}
	t.Cleanup(func() { stopOnce.Do(func() { close(stopLoad) }) })
	go func() {
		n := 0
		for {
			select {
			case <-stopLoad:
				loadDone <- n
				return
			default:
			}
			if _, err := db.Exec("INSERT INTO outbox_message (message_id, aggregate_type, aggregate_id, event_type, payload) VALUES (?, 'ORDER', 'x', 'E', '{}')", fmt.Sprintf("load-%d", n)); err != nil {
				loadDone <- -1 // reported by endLoad's caller
				return
			}
			n++
			time.Sleep(5 * time.Millisecond)
		}
	}()
	time.Sleep(500 * time.Millisecond)
	if resp, err := cl.PauseConnector(name); err != nil || resp.StatusCode != 202 {
		t.Fatalf("PauseConnector: %v %v", resp, err)
	}
	testenv.Eventually(t, 30*time.Second, "PAUSED", func() bool { return p.connectorState(name) == "PAUSED" })
	time.Sleep(time.Second) // what the pipeline held is written and checkpointed
	atPause, err := checkpoint.ReadFile(cpPath)
	if err != nil {
		t.Fatal(err)
	}
	deliveredAtPause := len(topicIDs(t, brokers, name, time.Second))
	time.Sleep(3 * time.Second) // the load goes on
	if n := len(topicIDs(t, brokers, name, time.Second)); n != deliveredAtPause {
		t.Fatalf("records written while paused: %d, then %d", deliveredAtPause, n)
	}
	if now, _ := checkpoint.ReadFile(cpPath); now.Position != atPause.Position {
		t.Fatalf("the checkpoint moved while paused: %s -> %s", atPause.Position, now.Position)
	}
	code, rz := p.do("GET", "/readyz", "")
	if code != 200 || !strings.Contains(rz, `"state": "paused"`) {
		t.Fatalf("/readyz while paused: %d %s", code, rz)
	}
	if _, m := p.do("GET", "/metrics", ""); !strings.Contains(m, `outbox_cdc_connector_state{connector="`+name+`",state="paused"} 1`) {
		t.Fatal("outbox_cdc_connector_state does not say paused")
	}
	// Offsets cannot change while the connector is not stopped (Connect: 400).
	code, b := p.do("PATCH", "/connectors/"+name+"/offsets", `{"offsets":[{"partition":{"server":"`+name+`"},"offset":{"file":"x.000001","pos":4}}]}`)
	wantError(t, "PATCH offsets while paused", code, b, 400, "must be in the STOPPED state")

	if resp, err := cl.ResumeConnector(name); err != nil || resp.StatusCode != 202 {
		t.Fatalf("ResumeConnector: %v %v", resp, err)
	}
	loaded := endLoad()
	if loaded < 0 {
		t.Fatal("the load's INSERT failed")
	}
	testenv.Eventually(t, 60*time.Second, "every row delivered after resume", func() bool {
		ids := topicIDs(t, brokers, name, time.Second)
		for i := 0; i < loaded; i++ {
			if ids[fmt.Sprintf("load-%d", i)] == 0 {
				return false
			}
		}
		return true
	})
	if deliveredAtPause >= 20+loaded {
		t.Fatalf("the pause held nothing back (%d delivered at pause, %d loaded): the test proves nothing", deliveredAtPause, loaded)
	}

	// Restart through the client: 204, then RUNNING again.
	if resp, err := cl.RestartConnector(name); err != nil || resp.StatusCode != 204 {
		t.Fatalf("RestartConnector: %v %v", resp, err)
	}
	testenv.Eventually(t, 60*time.Second, "RUNNING after restart", func() bool { return p.connectorState(name) == "RUNNING" })
	code, b = p.do("POST", "/connectors/"+name+"/restart?includeTasks=true&onlyFailed=true", "")
	if code != 202 || !strings.Contains(b, `"state": "RUNNING"`) {
		t.Fatalf("restart onlyFailed of a running connector: %d %s", code, b)
	}
	// The PATCH while running is refused as well.
	code, b = p.do("PATCH", "/connectors/"+name+"/offsets", `{"offsets":[{"partition":{"server":"`+name+`"},"offset":{"file":"x.000001","pos":4}}]}`)
	wantError(t, "PATCH offsets while running", code, b, 400, "'/connectors/"+name+"/stop'")

	// Stop (KIP-875): 204, STOPPED, no tasks.
	if code, b := p.do("PUT", "/connectors/"+name+"/stop", ""); code != 204 {
		t.Fatalf("stop: %d %s", code, b)
	}
	if s := p.connectorState(name); s != "STOPPED" {
		t.Fatalf("after stop: %s", s)
	}
	// It stays stopped across a restart of the process.
	p.stop()
	p = startRestProcess(t, body)
	time.Sleep(2 * time.Second)
	if s := p.connectorState(name); s != "STOPPED" {
		t.Fatalf("after a process restart: %s, want STOPPED", s)
	}
	code, b = p.do("GET", "/connectors/"+name+"/offsets", "")
	var offs connectorOffsets
	if err := json.Unmarshal([]byte(b), &offs); code != 200 || err != nil || len(offs.Offsets) != 1 ||
		offs.Offsets[0].Partition["server"] != name || offs.Offsets[0].Offset["file"] == nil || offs.Offsets[0].Offset["pos"] == nil {
		t.Fatalf("GET offsets: %d %s", code, b)
	}
	file := offs.Offsets[0].Offset["file"].(string)
	// Ahead of the server's binlog: refused with the reason.
	code, b = p.do("PATCH", "/connectors/"+name+"/offsets", fmt.Sprintf(`{"offsets":[{"partition":{"server":%q},"offset":{"file":%q,"pos":4000000000}}]}`, name, file))
	wantError(t, "PATCH ahead of the binlog", code, b, 400, "ahead of the server's binlog")
	// Back to the offset before the pause: written, and replayed from.
	earlyOff, err := debeziumOffset(name, early.Position)
	if err != nil {
		t.Fatal(err)
	}
	patch, _ := json.Marshal(connectorOffsets{Offsets: []connectorOffset{earlyOff}})
	code, b = p.do("PATCH", "/connectors/"+name+"/offsets", string(patch))
	if code != 200 || !strings.Contains(b, "The offsets for this connector have been altered successfully") {
		t.Fatalf("PATCH offsets: %d %s", code, b)
	}
	if now, _ := checkpoint.ReadFile(cpPath); now.Position != early.Position {
		t.Fatalf("checkpoint after PATCH: %s, want %s", now.Position, early.Position)
	}
	before := topicIDs(t, brokers, name, time.Second)
	if code, b := p.do("PUT", "/connectors/"+name+"/resume", ""); code != 202 {
		t.Fatalf("resume: %d %s", code, b)
	}
	testenv.Eventually(t, 60*time.Second, "the rows after the patched offset published again", func() bool {
		return topicIDs(t, brokers, name, time.Second)["load-0"] > before["load-0"]
	})
	if s := p.connectorState(name); s != "RUNNING" {
		t.Fatalf("after resume: %s", s)
	}
}

// TestRESTAPIContract checks the status codes and bodies of the endpoints
// against Kafka Connect's (ConnectorsResource, RootResource,
// ConnectorPluginsResource, ConnectExceptionMapper): the error body, 404
// for an unknown connector or task, 405 with Connect's body for the
// writes a file-configured connector does not take, and the shapes of
// GET /, /connector-plugins and ?expand.
func TestRESTAPIContract(t *testing.T) {
	testenv.MySQL(t)
	dsn, suffix := privateDatabase(t, "restc_")
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if _, err := db.Exec(testenv.SeedTableMySQL("outbox_message")); err != nil {
		t.Fatal(err)
	}
	_, brokers := testenv.Kafka(t)
	name := "restc-" + suffix
	p := startRestProcess(t, fmt.Sprintf(`name: %s
source:
  type: mysql
  dsn: %q
  table: outbox_message
route:
  preset: seed
  topic: %q
sink:
  brokers: [%q]
  sasl:
    mechanism: SCRAM-SHA-256
    username: u
    password: hunter2
checkpoint:
  path: %q
`, name, dsn, name, brokers[0], filepath.Join(t.TempDir(), "cp")))
	testenv.Eventually(t, 60*time.Second, "RUNNING or FAILED", func() bool { s := p.connectorState(name); return s == "RUNNING" || s == "FAILED" })

	code, b := p.do("GET", "/", "")
	var root map[string]string
	if json.Unmarshal([]byte(b), &root); code != 200 || root["version"] == "" || root["kafka_cluster_id"] == "" {
		t.Fatalf("GET /: %d %s", code, b)
	}
	if _, ok := root["commit"]; !ok {
		t.Fatalf("GET /: no commit: %s", b)
	}
	code, b = p.do("GET", "/connector-plugins", "")
	if code != 200 || !strings.Contains(b, `"class": "outbox-cdc.mysql"`) || !strings.Contains(b, `"class": "outbox-cdc.postgres"`) || !strings.Contains(b, `"type": "source"`) {
		t.Fatalf("GET /connector-plugins: %d %s", code, b)
	}
	code, b = p.do("GET", "/connectors", "")
	if code != 200 || strings.TrimSpace(b) != fmt.Sprintf("[\n  %q\n]", name) {
		t.Fatalf("GET /connectors: %d %s", code, b)
	}
	code, b = p.do("GET", "/connectors?expand=status&expand=info", "")
	var exp map[string]struct {
		Status restStatus `json:"status"`
		Info   restInfo   `json:"info"`
	}
	if err := json.Unmarshal([]byte(b), &exp); code != 200 || err != nil || exp[name].Status.Name != name || exp[name].Info.Name != name || exp[name].Status.Type != "source" {
		t.Fatalf("GET /connectors?expand: %d %s", code, b)
	}
	// Secrets are redacted in /config.
	code, b = p.do("GET", "/connectors/"+name+"/config", "")
	if code != 200 || strings.Contains(b, "hunter2") || !strings.Contains(b, `"sink.sasl.password": "xxxxx"`) {
		t.Fatalf("GET config: %d %s", code, b)
	}
	code, b = p.do("GET", "/connectors/"+name+"/tasks/0/status", "")
	if code != 200 || !strings.Contains(b, `"id": 0`) || !strings.Contains(b, `"worker_id"`) {
		t.Fatalf("GET tasks/0/status: %d %s", code, b)
	}
	code, b = p.do("GET", "/connectors/nope", "")
	wantError(t, "unknown connector", code, b, 404, "Connector nope not found")
	code, b = p.do("GET", "/connectors/"+name+"/tasks/1/status", "")
	wantError(t, "unknown task", code, b, 404, "one task, 0")
	code, b = p.do("POST", "/connectors", `{"name":"x","config":{}}`)
	wantError(t, "POST /connectors", code, b, 405, "configuration file")
	code, b = p.do("PUT", "/connectors/"+name+"/config", `{}`)
	wantError(t, "PUT config", code, b, 405, "SIGHUP")
	code, b = p.do("DELETE", "/connectors/"+name, "")
	wantError(t, "DELETE connector", code, b, 405, "configuration file")
	code, b = p.do("GET", "/connectors/"+name+"/pause", "")
	wantError(t, "GET pause", code, b, 405, "Method Not Allowed")
	code, b = p.do("POST", "/connectors/"+name+"/restart?onlyFailed=maybe", "")
	wantError(t, "restart with a bad flag", code, b, 400, "onlyFailed")
	code, b = p.do("DELETE", "/connectors/"+name+"/offsets", "")
	wantError(t, "DELETE offsets while running", code, b, 400, "STOPPED state")
	if code, b := p.do("POST", "/connectors/"+name+"/tasks/0/restart", ""); code != 204 {
		t.Fatalf("task restart: %d %s", code, b)
	}
	// Stopped: no tasks; DELETE offsets resets (checkpoint file removed).
	if code, b := p.do("PUT", "/connectors/"+name+"/stop", ""); code != 204 {
		t.Fatalf("stop: %d %s", code, b)
	}
	code, b = p.do("GET", "/connectors/"+name+"/tasks", "")
	if code != 200 || strings.TrimSpace(b) != "[]" {
		t.Fatalf("tasks while stopped: %d %s", code, b)
	}
	code, b = p.do("DELETE", "/connectors/"+name+"/offsets", "")
	if code != 200 || !strings.Contains(b, "have been reset successfully") {
		t.Fatalf("DELETE offsets: %d %s", code, b)
	}
	code, b = p.do("GET", "/connectors/"+name+"/offsets", "")
	if code != 200 || !strings.Contains(b, `"offsets": []`) {
		t.Fatalf("GET offsets after reset: %d %s", code, b)
	}
	code, b = p.do("PATCH", "/connectors/"+name+"/offsets", `{"offsets":[]}`)
	wantError(t, "empty PATCH", code, b, 400, "need to be provided")
	code, b = p.do("PATCH", "/connectors/"+name+"/offsets", `{"offsets":[{"partition":{"server":"x"},"offset":{"lsn":5}}]}`)
	wantError(t, "a Postgres offset for MySQL", code, b, 400, "PostgreSQL offset")
}

// TestRESTAPIPostgresOffsets: a Postgres connector paused keeps its slot
// and the slot's lag shows the WAL it retains; stopped, its offsets read
// in Debezium's {"lsn","lsn_proc","lsn_commit"} shape, a PATCH behind the
// slot's confirmed position is refused with the reason (the slot cannot
// rewind), and a PATCH at the current offset is accepted.
func TestRESTAPIPostgresOffsets(t *testing.T) {
	name := fmt.Sprintf("rest_pg_%06d", rand.IntN(1e6))
	db, dsn := testenv.ScratchPostgres(t, name)
	for _, q := range testenv.SeedTablePostgres(name + ".outbox_message") {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	_, brokers := testenv.Kafka(t)
	p := startRestProcess(t, fmt.Sprintf(`name: %s
source:
  type: postgres
  dsn: %q
  table: %s.outbox_message
  slot: %s
  publication: %s
route:
  preset: seed
  topic: %q
sink:
  brokers: [%q]
checkpoint:
  type: file
  path: %q
`, name, dsn, name, name, name, name, brokers[0], filepath.Join(t.TempDir(), "cp")))
	p.waitStreaming(name)
	// Driven through the third-party Connect client where it has a method,
	// and its generic request for stop and offsets (KIP-875, newer than it).
	cl := connect.NewClient("http://" + p.addr)
	if names, _, err := cl.ListConnectors(); err != nil || len(names) != 1 || names[0] != name {
		t.Fatalf("ListConnectors: %v %v", names, err)
	}
	if info, _, err := cl.GetConnector(name); err != nil || info.Config["connector.class"] != "outbox-cdc.postgres" {
		t.Fatalf("GetConnector: %+v %v", info, err)
	}
	clientState := func() string {
		st, _, err := cl.GetConnectorStatus(name)
		if err != nil {
			return err.Error()
		}
		return st.Connector.State
	}
	clientDo := func(method, path string, body any, v any) int {
		t.Helper()
		req, err := cl.NewRequest(method, path, body)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := cl.Do(req, v)
		if resp == nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		return resp.StatusCode
	}
	insert := func(prefix string, n int) {
		for i := 0; i < n; i++ {
			if _, err := db.Exec("INSERT INTO "+name+".outbox_message (message_id, aggregate_type, aggregate_id, event_type, payload) VALUES ($1, 'ORDER', 'x', 'E', '{}')", fmt.Sprintf("%s-%d", prefix, i)); err != nil {
				t.Fatal(err)
			}
		}
	}
	insert("a", 10)
	testenv.Eventually(t, 30*time.Second, "10 rows delivered", func() bool { return len(topicIDs(t, brokers, name, time.Second)) == 10 })

	if resp, err := cl.PauseConnector(name); err != nil || resp.StatusCode != 202 {
		t.Fatalf("PauseConnector: %v %v", resp, err)
	}
	testenv.Eventually(t, 30*time.Second, "PAUSED", func() bool { return clientState() == "PAUSED" })
	insert("b", 50)
	time.Sleep(2 * time.Second)
	if n := len(topicIDs(t, brokers, name, time.Second)); n != 10 {
		t.Fatalf("%d records while paused, want 10", n)
	}
	var active bool
	if err := db.QueryRow("SELECT active FROM pg_replication_slots WHERE slot_name = $1", name).Scan(&active); err != nil || !active {
		t.Fatalf("the slot while paused: active=%v %v", active, err)
	}
	if resp, err := cl.ResumeConnector(name); err != nil || resp.StatusCode != 202 {
		t.Fatalf("ResumeConnector: %v %v", resp, err)
	}
	testenv.Eventually(t, 60*time.Second, "60 rows delivered after resume", func() bool { return len(topicIDs(t, brokers, name, time.Second)) == 60 })

	if code := clientDo("PUT", "connectors/"+name+"/stop", nil, nil); code != 204 {
		t.Fatalf("stop: %d", code)
	}
	testenv.Eventually(t, 30*time.Second, "STOPPED", func() bool { return clientState() == "STOPPED" })
	var offs struct {
		Offsets []struct {
			Partition map[string]any    `json:"partition"`
			Offset    map[string]uint64 `json:"offset"`
		} `json:"offsets"`
	}
	code := clientDo("GET", "connectors/"+name+"/offsets", nil, &offs)
	got, _ := json.Marshal(offs)
	b := string(got)
	if code != 200 || len(offs.Offsets) != 1 || offs.Offsets[0].Partition["server"] != name ||
		offs.Offsets[0].Offset["lsn"] == 0 || offs.Offsets[0].Offset["lsn_commit"] != offs.Offsets[0].Offset["lsn"] {
		t.Fatalf("GET offsets: %d %s", code, b)
	}
	lsn := offs.Offsets[0].Offset["lsn"]
	var confirmed uint64
	if err := db.QueryRow("SELECT (confirmed_flush_lsn - '0/0'::pg_lsn)::bigint FROM pg_replication_slots WHERE slot_name = $1", name).Scan(&confirmed); err != nil || confirmed == 0 {
		t.Fatalf("the slot's confirmed position: %d %v", confirmed, err)
	}
	code, b = p.do("PATCH", "/connectors/"+name+"/offsets", fmt.Sprintf(`{"offsets":[{"partition":{"server":%q},"offset":{"lsn":%d,"lsn_commit":%d,"txId":1}}]}`, name, confirmed-1, confirmed-1))
	wantError(t, "PATCH behind the slot", code, b, 400, "behind")
	code, b = p.do("PATCH", "/connectors/"+name+"/offsets", fmt.Sprintf(`{"offsets":[{"partition":{"server":"dbserver1"},"offset":{"lsn":%d,"lsn_proc":%d,"lsn_commit":%d,"txId":1,"ts_usec":1}}]}`, lsn, lsn, lsn))
	if code != 200 {
		t.Fatalf("PATCH at the current offset: %d %s", code, b)
	}
	if code, b := p.do("PUT", "/connectors/"+name+"/resume", ""); code != 202 {
		t.Fatalf("resume: %d %s", code, b)
	}
	p.waitStreaming(name)
	insert("c", 1)
	testenv.Eventually(t, 30*time.Second, "61 rows delivered", func() bool { return len(topicIDs(t, brokers, name, time.Second)) == 61 })
}

// TestRESTAPIAuth: with http.auth.token a change without the bearer token
// (or with a wrong one) is refused with 401 and Connect's error body and
// changes nothing; with the token it is done; reads stay open. With
// http.read_only every change is refused with 403.
func TestRESTAPIAuth(t *testing.T) {
	cfg := defaultConfig()
	cfg.Name = "auth"
	cfg.Checkpoint.Path = filepath.Join(t.TempDir(), "cp")
	sup := newSupervisor(context.Background(), []Config{cfg}, runOptions{}, zerolog.Nop())
	token := "s3cret-token"
	srv := httptest.NewServer(httpHandler(prometheus.NewRegistry(), sup, HTTPConfig{Auth: HTTPAuthConfig{Token: token}}))
	defer srv.Close()
	send := func(method, path, auth string) (int, string) {
		req, _ := http.NewRequest(method, srv.URL+path, nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	code, b := send("PUT", "/connectors/auth/pause", "")
	wantError(t, "pause without a token", code, b, 401, "Authorization: Bearer")
	code, b = send("PUT", "/connectors/auth/pause", "Bearer wrong")
	wantError(t, "pause with a wrong token", code, b, 401, "Authorization: Bearer")
	code, b = send("PATCH", "/connectors/auth/offsets", "")
	wantError(t, "offsets without a token", code, b, 401, "Authorization: Bearer")
	if sup.conns["auth"].gate.Paused() {
		t.Fatal("a refused pause paused the connector")
	}
	if code, b := send("GET", "/connectors/auth/status", ""); code != 200 {
		t.Fatalf("status without a token: %d %s", code, b)
	}
	if code, b := send("GET", "/connectors/auth/config", ""); code != 200 || strings.Contains(b, token) {
		t.Fatalf("config: %d, token shown: %v", code, strings.Contains(b, token))
	}
	if code, b := send("PUT", "/connectors/auth/pause", "Bearer "+token); code != 202 || !sup.conns["auth"].gate.Paused() {
		t.Fatalf("pause with the token: %d %s", code, b)
	}

	ro := httptest.NewServer(httpHandler(prometheus.NewRegistry(), sup, HTTPConfig{ReadOnly: true}))
	defer ro.Close()
	req, _ := http.NewRequest("PUT", ro.URL+"/connectors/auth/resume", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	rb, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	wantError(t, "resume on a read-only listener", resp.StatusCode, string(rb), 403, "read-only")
	if !sup.conns["auth"].gate.Paused() {
		t.Fatal("a refused resume resumed the connector")
	}
}

// TestRESTAPIStopWithHA: two replicas of one connector with HA and the
// checkpoint table. PUT .../stop on the active one keeps the stop in the
// table: the standby that takes the lock does not start the connector
// (both report STOPPED, a committed row is not delivered); the offsets
// PATCH on the standby takes the HA lock and writes; PUT .../resume on the
// standby starts the connector on one replica, which delivers the row.
func TestRESTAPIStopWithHA(t *testing.T) {
	db, name, brokers, body := haRestConnector(t, "resth")
	a := startRestProcess(t, body)
	a.waitStreaming(name)
	b := startRestProcess(t, body)
	testenv.Eventually(t, 30*time.Second, "b standby", func() bool { return b.connectorState(name) == "UNASSIGNED" })
	// The standby names the replica that runs the connector, as Connect's
	// REST does on any worker.
	_, got := b.do("GET", "/connectors/"+name+"/status", "")
	var bst restStatus
	if err := json.Unmarshal([]byte(got), &bst); err != nil || bst.Connector.WorkerID != a.addr || len(bst.Tasks) != 1 || bst.Tasks[0].WorkerID != a.addr {
		t.Fatalf("the standby's status: %s, want worker_id %s (the active replica)", got, a.addr)
	}
	insertRows(t, db, "one", 1)
	testenv.Eventually(t, 30*time.Second, "one delivered", func() bool { return topicIDs(t, brokers, name, time.Second)["one-0"] == 1 })

	if code, body := a.do("PUT", "/connectors/"+name+"/stop", ""); code != 204 {
		t.Fatalf("stop: %d %s", code, body)
	}
	testenv.Eventually(t, 30*time.Second, "both replicas STOPPED", func() bool {
		return a.connectorState(name) == "STOPPED" && b.connectorState(name) == "STOPPED"
	})
	insertRows(t, db, "two", 1)
	time.Sleep(5 * time.Second) // both replicas took the lock meanwhile, and found the stop
	if n := topicIDs(t, brokers, name, time.Second)["two-0"]; n != 0 {
		t.Fatal("a replica streamed the stopped connector")
	}
	if a.connectorState(name) != "STOPPED" || b.connectorState(name) != "STOPPED" {
		t.Fatalf("states: a %s, b %s", a.connectorState(name), b.connectorState(name))
	}
	code, got := b.do("GET", "/connectors/"+name+"/offsets", "")
	var offs connectorOffsets
	if err := json.Unmarshal([]byte(got), &offs); code != 200 || err != nil || len(offs.Offsets) != 1 {
		t.Fatalf("GET offsets: %d %s", code, got)
	}
	patch, _ := json.Marshal(offs)
	if code, got := b.do("PATCH", "/connectors/"+name+"/offsets", string(patch)); code != 200 {
		t.Fatalf("PATCH offsets on the standby: %d %s", code, got)
	}
	if code, got := b.do("PUT", "/connectors/"+name+"/resume", ""); code != 202 {
		t.Fatalf("resume: %d %s", code, got)
	}
	testenv.Eventually(t, 60*time.Second, "two delivered after resume", func() bool { return topicIDs(t, brokers, name, time.Second)["two-0"] >= 1 })
	testenv.Eventually(t, 30*time.Second, "one replica RUNNING, the other UNASSIGNED", func() bool {
		sa, sb := a.connectorState(name), b.connectorState(name)
		return (sa == "RUNNING" && sb == "UNASSIGNED") || (sa == "UNASSIGNED" && sb == "RUNNING")
	})
}

// TestRESTAPIPauseReachesActive: with HA and the checkpoint table a pause
// sent to the standby reaches the active replica (it stops delivering),
// survives the connector's move to the standby (the new active starts
// paused), a resume sent to any replica delivers what was held back, and a
// stop sent to the standby stops the active. Before, the pause closed only
// the standby's own gate: the active kept streaming.
func TestRESTAPIPauseReachesActive(t *testing.T) {
	db, name, brokers, body := haRestConnector(t, "restp")
	a := startRestProcess(t, body)
	a.waitStreaming(name)
	b := startRestProcess(t, body)
	testenv.Eventually(t, 30*time.Second, "b standby", func() bool { return b.connectorState(name) == "UNASSIGNED" })
	insertRows(t, db, "one", 1)
	testenv.Eventually(t, 30*time.Second, "one delivered", func() bool { return topicIDs(t, brokers, name, time.Second)["one-0"] == 1 })

	if code, got := b.do("PUT", "/connectors/"+name+"/pause", ""); code != 202 {
		t.Fatalf("pause on the standby: %d %s", code, got)
	}
	testenv.Eventually(t, 30*time.Second, "the active replica PAUSED", func() bool { return a.connectorState(name) == "PAUSED" })
	insertRows(t, db, "two", 3)
	time.Sleep(3 * time.Second)
	if n := topicIDs(t, brokers, name, time.Second)["two-0"]; n != 0 {
		t.Fatal("the active replica delivered after a pause sent to the standby")
	}

	// The connector moves to b: it starts paused there.
	a.stop()
	testenv.Eventually(t, 60*time.Second, "b took over, PAUSED", func() bool { return b.connectorState(name) == "PAUSED" })
	time.Sleep(3 * time.Second)
	if n := topicIDs(t, brokers, name, time.Second)["two-0"]; n != 0 {
		t.Fatal("the replica that took over delivered while the connector is paused")
	}
	c := startRestProcess(t, body)
	testenv.Eventually(t, 30*time.Second, "c standby", func() bool { return c.connectorState(name) == "UNASSIGNED" })
	if code, got := c.do("PUT", "/connectors/"+name+"/resume", ""); code != 202 {
		t.Fatalf("resume on the standby: %d %s", code, got)
	}
	testenv.Eventually(t, 60*time.Second, "two delivered after the resume", func() bool {
		ids := topicIDs(t, brokers, name, time.Second)
		return ids["two-0"] == 1 && ids["two-1"] == 1 && ids["two-2"] == 1
	})
	if st := b.connectorState(name); st != "RUNNING" {
		t.Fatalf("b after the resume: %s, want RUNNING", st)
	}

	if code, got := c.do("PUT", "/connectors/"+name+"/stop", ""); code != 204 {
		t.Fatalf("stop on the standby: %d %s", code, got)
	}
	testenv.Eventually(t, 30*time.Second, "both replicas STOPPED", func() bool {
		return b.connectorState(name) == "STOPPED" && c.connectorState(name) == "STOPPED"
	})
	insertRows(t, db, "three", 1)
	time.Sleep(3 * time.Second)
	if n := topicIDs(t, brokers, name, time.Second)["three-0"]; n != 0 {
		t.Fatal("a replica streamed after a stop sent to the standby")
	}
}

// haRestConnector makes a private MariaDB database with the seed outbox
// table and a Kafka broker, and returns the database, a connector name
// (prefix and a random suffix) and its configuration: HA with the
// checkpoint table, for several in-process replicas (startRestProcess).
func haRestConnector(t *testing.T, prefix string) (db *sql.DB, name string, brokers []string, body string) {
	t.Helper()
	db, dsn, suffix, brokers := seededMySQL(t, prefix)
	name = prefix + "-" + suffix
	body = fmt.Sprintf(`name: %s
source:
  type: mysql
  dsn: %q
  table: outbox_message
route:
  preset: seed
  topic: %q
sink:
  brokers: [%q]
checkpoint:
  type: table
ha:
  enabled: true
  check_interval: 200ms
`, name, dsn, name, brokers[0])
	return db, name, brokers, body
}

// seededMySQL makes a private MariaDB database (prefix_ and a random
// suffix, dropped at the end) holding the seed outbox table, and a Kafka
// broker; it returns the database, its DSN, the suffix and the brokers.
func seededMySQL(t *testing.T, prefix string) (db *sql.DB, dsn, suffix string, brokers []string) {
	t.Helper()
	testenv.MySQL(t)
	dsn, suffix = privateDatabase(t, prefix+"_")
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if _, err := db.Exec(testenv.SeedTableMySQL("outbox_message")); err != nil {
		t.Fatal(err)
	}
	_, brokers = testenv.Kafka(t)
	return db, dsn, suffix, brokers
}
