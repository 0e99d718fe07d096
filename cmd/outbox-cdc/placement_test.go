package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/outbox-cdc/outbox-cdc/test/testenv"
)

func placedEntry(name, extra string) string {
	return "  - name: " + name + "\n    source:\n      type: mysql\n      dsn: \"u@tcp(h:3306)/d\"\n    sink:\n      brokers: [\"k:9092\"]\n" +
		"    checkpoint:\n      type: table\n    ha:\n      enabled: true\n" + extra
}

// TestLoadPlacement: placement: sits beside connectors:, takes its
// OUTBOX_CDC_PLACEMENT_* variables, derives session_timeout from the
// longest ha.session_timeout, and config print shows it in a form that
// loads back.
func TestLoadPlacement(t *testing.T) {
	file := "placement:\n  enabled: true\n  deployment: shop\n  brokers: [\"k1:9092\"]\nconnectors:\n" +
		placedEntry("a", "      session_timeout: 4s\n") + placedEntry("b", "      session_timeout: 7s\n")
	pc, err := loadProcessConfig(writeFile(t, file), map[string]string{"OUTBOX_CDC_PLACEMENT_DEPLOYMENT": "shop-eu", "OUTBOX_CDC_SINK_CLIENT_ID": "x"})
	if err != nil {
		t.Fatal(err)
	}
	p := pc.Placement
	if !p.Enabled || p.Deployment != "shop-eu" || len(p.Brokers) != 1 || p.Brokers[0] != "k1:9092" {
		t.Fatalf("placement %+v", p)
	}
	if p.SessionTimeout != 7*time.Second {
		t.Fatalf("session_timeout %s, want the longest ha.session_timeout 7s", p.SessionTimeout)
	}
	if p.RebalanceTimeout != time.Minute || p.ReplicationFactor != -1 {
		t.Fatalf("defaults lost: %+v", p)
	}
	if len(pc.Connectors) != 2 || pc.Connectors[1].Sink.ClientID != "x" {
		t.Fatalf("connectors %+v", pc.Connectors)
	}

	// The single-connector layout takes it too.
	single := "placement:\n  enabled: true\n  deployment: one\n  brokers: [\"k1:9092\"]\n  session_timeout: 3s\n" +
		"source:\n  type: mysql\n  dsn: \"u@tcp(h:3306)/d\"\nsink:\n  brokers: [\"k:9092\"]\ncheckpoint:\n  type: table\nha:\n  enabled: true\n"
	pc1, err := loadProcessConfig(writeFile(t, single), nil)
	if err != nil {
		t.Fatal(err)
	}
	if !pc1.Placement.Enabled || pc1.Placement.SessionTimeout != 3*time.Second {
		t.Fatalf("single layout placement %+v", pc1.Placement)
	}

	var out bytes.Buffer
	if err := printConfigPlaced(&out, pc1.Connectors[0], &pc1.Placement); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "placement:\n  enabled: true\n  deployment: one\n") {
		t.Fatalf("config print lacks the placement section:\n%s", out.String())
	}
	again, err := loadProcessConfig(writeFile(t, out.String()), nil)
	if err != nil {
		t.Fatalf("config print output does not load: %v\n%s", err, out.String())
	}
	if again.Placement.Deployment != "one" || again.Placement.SessionTimeout != 3*time.Second {
		t.Fatalf("reloaded placement %+v", again.Placement)
	}
}

func TestLoadPlacementMistakes(t *testing.T) {
	head := "placement:\n  enabled: true\n  deployment: shop\n  brokers: [\"k1:9092\"]\n"
	list := "connectors:\n" + placedEntry("a", "")
	for _, tc := range []struct {
		name, file string
		env        map[string]string
		want       string
	}{
		{"connector without HA", head + "connectors:\n" + placedEntry("a", "") +
			"  - name: b\n    source:\n      type: mysql\n      dsn: \"u@tcp(h:3306)/d\"\n    sink:\n      brokers: [\"k:9092\"]\n",
			nil, `connectors[1].ha.enabled (connector "b"): placement.enabled needs every connector's HA lock`},
		{"no brokers", "placement:\n  enabled: true\n  deployment: shop\n" + list, nil, "placement.brokers: placement needs a Kafka-protocol cluster"},
		{"broker not host:port", "placement:\n  enabled: true\n  deployment: shop\n  brokers: [k1]\n" + list, nil, `placement.brokers: "k1" is not host:port`},
		{"bad deployment", "placement:\n  enabled: true\n  deployment: \"a b\"\n  brokers: [\"k1:9092\"]\n" + list, nil, `placement.deployment: "a b" must be`},
		{"unknown key", head + "  brokerz: [x]\n" + list, nil, `placement.brokerz (line 5): unknown configuration key "placement.brokerz" (did you mean "placement.brokers"?)`},
		{"wrong type", head + "  session_timeout: soon\n" + list, nil, "placement.session_timeout"},
		{"not a mapping", "placement: yes\n" + list, nil, "placement (line 1): want a mapping"},
		{"unknown variable", head + list, map[string]string{"OUTBOX_CDC_PLACEMENT_BROKER": "x:1"}, "OUTBOX_CDC_PLACEMENT_BROKER matches no configuration key"},
		{"session below 1s", head + "  session_timeout: 500ms\n" + list, nil, "placement.session_timeout: 500ms is outside 1s..30m"},
		{"bad SASL", head + "  sasl:\n    mechanism: MD5\n    username: u\n    password: p\n" + list, nil, `placement.sasl.mechanism: "MD5" is not one of`},
		{"PLAIN without TLS", head + "  sasl:\n    mechanism: PLAIN\n    username: u\n    password: p\n" + list, nil, "enable placement.tls, or set placement.sasl.allow_plaintext"},
		{"inside an entry", head + "connectors:\n" + placedEntry("a", "    placement:\n      enabled: true\n"), nil, `unknown configuration key "placement"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := loadProcessConfig(writeFile(t, tc.file), tc.env)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want it to contain %q", err, tc.want)
			}
			if _, ok := err.(*configError); !ok {
				t.Fatalf("%T is not a configuration error", err)
			}
		})
	}
	// Off, nothing is required of the connectors.
	if _, err := loadProcessConfig(writeFile(t, "placement:\n  enabled: false\nconnectors:\n  - name: a\n    source:\n      type: mysql\n      dsn: \"u@tcp(h:3306)/d\"\n    sink:\n      brokers: [\"k:9092\"]\n"), nil); err != nil {
		t.Fatal(err)
	}
}

// TestPlacedReplicaWithoutConnector: two processes with placement share
// one connector. The one the group gives nothing keeps running, answers
// 200 on /readyz and 503 on /active with the connector "stopped"; when the
// other stops (SIGTERM), it takes the connector over and streams.
func TestPlacedReplicaWithoutConnector(t *testing.T) {
	dsn, suffix := placedTable(t)
	_, brokers := testenv.Kafka(t, kfake.GroupMinSessionTimeout(time.Second))
	name := "placed-" + suffix
	file := writeFile(t, fmt.Sprintf(`placement:
  enabled: true
  deployment: test-%s
  brokers: [%q]
connectors:
  - name: %s
    source: {type: mysql, dsn: %q, table: outbox_message}
    route: {preset: seed, topic: %q}
    sink: {brokers: [%q]}
    checkpoint: {type: table}
    ha: {enabled: true, check_interval: 200ms, session_timeout: 2s}
`, suffix, brokers[0], name, dsn, name, brokers[0]))

	type proc struct {
		addr   string
		cancel context.CancelFunc
		done   chan error
		logs   *lockedBuffer
	}
	launch := func() *proc {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		p := &proc{addr: ln.Addr().String(), done: make(chan error, 1), logs: &lockedBuffer{}}
		ln.Close()
		pc, err := loadProcessConfig(file, map[string]string{"OUTBOX_CDC_HTTP_LISTEN": p.addr, "OUTBOX_CDC_LOG_FORMAT": "json"})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		p.cancel = cancel
		go func() { p.done <- runProcess(ctx, pc, runOptions{}, p.logs) }()
		t.Cleanup(func() {
			cancel()
			select {
			case <-p.done:
			case <-time.After(40 * time.Second):
			}
			if t.Failed() {
				t.Logf("log of %s:\n%s", p.addr, p.logs.String())
			}
		})
		return p
	}
	get := func(p *proc, path string) (int, healthAnswer) {
		var a healthAnswer
		resp, err := http.Get("http://" + p.addr + path)
		if err != nil {
			return 0, a
		}
		defer resp.Body.Close()
		json.NewDecoder(resp.Body).Decode(&a)
		return resp.StatusCode, a
	}
	active := func(p *proc) bool { code, _ := get(p, "/active"); return code == 200 }

	a := launch()
	testenv.Eventually(t, 30*time.Second, "the first replica streams the connector", func() bool { return active(a) })
	b := launch()
	testenv.Eventually(t, 30*time.Second, "the second replica joined the group", func() bool {
		return strings.Contains(b.logs.String(), "joining the placement group")
	})
	// Long enough for a rebalance to have run: the sticky balancer leaves
	// the connector where it is.
	time.Sleep(3 * time.Second)
	code, st := get(b, "/readyz")
	if code != 200 || len(st.Connectors) != 1 || st.Connectors[0].State != stateStopped || st.Active != 0 {
		t.Fatalf("replica without connector: /readyz %d %+v, want 200 with the connector stopped", code, st)
	}
	if code, _ := get(b, "/active"); code != 503 {
		t.Fatalf("replica without connector: /active %d, want 503", code)
	}
	select {
	case err := <-b.done:
		t.Fatalf("the replica holding no connector exited: %v", err)
	default:
	}
	if !active(a) {
		t.Fatal("the first replica lost its connector when the second joined")
	}

	// A stop sent to the replica that does not run the connector stops it
	// on the one that does, and leaves it stopped (not a standby competing
	// for the lock) where placement did not put it; a resume sent there
	// starts it again on the first replica.
	send := func(p *proc, method, path string) (int, string) {
		req, _ := http.NewRequest(method, "http://"+p.addr+path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	restState := func(p *proc) string {
		_, body := send(p, "GET", "/connectors/"+name+"/status")
		var st restStatus
		json.Unmarshal([]byte(body), &st)
		return st.Connector.State
	}
	if code, body := send(b, "PUT", "/connectors/"+name+"/stop"); code != 204 {
		t.Fatalf("stop on the replica without the connector: %d %s", code, body)
	}
	testenv.Eventually(t, 30*time.Second, "the first replica stopped the connector", func() bool { return restState(a) == "STOPPED" && !active(a) })
	time.Sleep(time.Second)
	if _, st := get(b, "/readyz"); len(st.Connectors) != 1 || st.Connectors[0].State != stateStopped {
		t.Fatalf("after the stop, the replica placement gave nothing: %+v, want the connector stopped", st)
	}
	if code, body := send(b, "PUT", "/connectors/"+name+"/resume"); code != 202 {
		t.Fatalf("resume on the replica without the connector: %d %s", code, body)
	}
	testenv.Eventually(t, 30*time.Second, "the first replica streams again after the resume", func() bool { return active(a) })
	if _, st := get(b, "/readyz"); len(st.Connectors) != 1 || st.Connectors[0].State != stateStopped {
		t.Fatalf("after the resume, the replica placement gave nothing: %+v, want the connector stopped", st)
	}

	a.cancel()
	stopped := time.Now()
	if err := <-a.done; err != nil {
		t.Fatalf("first replica: %v", err)
	}
	testenv.Eventually(t, 20*time.Second, "the second replica takes the connector over", func() bool { return active(b) })
	t.Logf("takeover after a graceful stop: %s", time.Since(stopped).Round(time.Millisecond))
}

// placedTable creates a database with the seed outbox table and returns
// its DSN and a random suffix for names.
func placedTable(t *testing.T) (dsn, suffix string) {
	t.Helper()
	dsn, suffix = privateDatabase(t, "placed_")
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(testenv.SeedTableMySQL("outbox_message")); err != nil {
		t.Fatal(err)
	}
	return dsn, suffix
}

// privateDatabase creates a MariaDB database named prefix + a random
// suffix, dropped when the test ends, and returns a DSN that selects it
// and the suffix (for other names of the test).
func privateDatabase(t *testing.T, prefix string) (dsn, suffix string) {
	t.Helper()
	admin := testenv.MySQL(t)
	suffix = fmt.Sprintf("%06d", rand.IntN(1e6))
	dbName := prefix + suffix
	if _, err := admin.Exec("CREATE DATABASE " + dbName); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Exec("DROP DATABASE IF EXISTS " + dbName) })
	mc, err := mysql.ParseDSN(testenv.MySQLDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	mc.DBName = dbName
	return mc.FormatDSN(), suffix
}

// TestPlacementBrokersDownAtStart: a replica whose placement brokers
// refuse connections when it starts keeps running, holding no connector:
// it logs each failed attempt with the remedy, answers 200 on /readyz,
// and joins the group once the brokers are up, then streams its
// connector. SIGTERM while it waits stops it at once.
func TestPlacementBrokersDownAtStart(t *testing.T) {
	dsn, suffix := placedTable(t)
	addr := testenv.FreeAddr(t) // nothing listens here yet
	_, portText, _ := net.SplitHostPort(addr)
	var port int
	fmt.Sscan(portText, &port)
	name := "placed-down-" + suffix
	file := writeFile(t, fmt.Sprintf(`placement:
  enabled: true
  deployment: test-down-%s
  brokers: [%q]
connectors:
  - name: %s
    source: {type: mysql, dsn: %q, table: outbox_message}
    route: {preset: seed, topic: %q}
    sink: {brokers: [%q]}
    checkpoint: {type: table}
    ha: {enabled: true, check_interval: 200ms, session_timeout: 2s}
`, suffix, addr, name, dsn, name, addr))

	type replica struct {
		addr   string
		cancel context.CancelFunc
		exited chan struct{} // closed when runProcess returned, err set
		err    error
		logs   *lockedBuffer
	}
	launch := func(file string) *replica {
		r := &replica{addr: testenv.FreeAddr(t), exited: make(chan struct{}), logs: &lockedBuffer{}}
		pc, err := loadProcessConfig(file, map[string]string{"OUTBOX_CDC_HTTP_LISTEN": r.addr, "OUTBOX_CDC_LOG_FORMAT": "json"})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		r.cancel = cancel
		go func() { r.err = runProcess(ctx, pc, runOptions{}, r.logs); close(r.exited) }()
		t.Cleanup(func() {
			cancel()
			select {
			case <-r.exited:
			case <-time.After(40 * time.Second):
			}
			if t.Failed() {
				t.Logf("log of %s:\n%s", r.addr, r.logs.String())
			}
		})
		return r
	}
	const retrying = "cannot set up the placement group"
	waitRetries := func(r *replica, n int) {
		testenv.Eventually(t, 40*time.Second, fmt.Sprintf("%d failed attempts logged", n), func() bool {
			select {
			case <-r.exited:
				t.Fatalf("the replica exited while the placement brokers were down: %v", r.err)
			default:
			}
			return strings.Count(r.logs.String(), retrying) >= n
		})
	}
	get := func(httpAddr, path string) (int, healthAnswer) {
		var a healthAnswer
		resp, err := http.Get("http://" + httpAddr + path)
		if err != nil {
			return 0, a
		}
		defer resp.Body.Close()
		json.NewDecoder(resp.Body).Decode(&a)
		return resp.StatusCode, a
	}

	a := launch(file)
	waitRetries(a, 2)
	if !strings.Contains(a.logs.String(), "placement.brokers") {
		t.Fatalf("the retry log does not name the remedy:\n%s", a.logs.String())
	}
	if code, st := get(a.addr, "/readyz"); code != 200 || st.Active != 0 {
		t.Fatalf("waiting for the placement brokers: /readyz %d %+v, want 200 with no connector", code, st)
	}

	// The brokers come up on the address the replica keeps trying.
	testenv.Kafka(t, kfake.Ports(port), kfake.GroupMinSessionTimeout(time.Second))
	up := time.Now()
	testenv.Eventually(t, 60*time.Second, "the replica joins and streams the connector", func() bool {
		code, _ := get(a.addr, "/active")
		return code == 200
	})
	t.Logf("streaming %s after the brokers came up", time.Since(up).Round(time.Millisecond))

	// SIGTERM while waiting for brokers that never come stops at once.
	never := testenv.FreeAddr(t)
	file2 := strings.ReplaceAll(strings.ReplaceAll(mustRead(t, file), addr, never), "test-down-", "test-never-")
	b := launch(writeFile(t, file2))
	waitRetries(b, 1)
	b.cancel()
	stopped := time.Now()
	select {
	case <-b.exited:
		if b.err != nil {
			t.Fatalf("stopped while waiting for the brokers: %v, want a clean exit", b.err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the replica did not stop within 5s of SIGTERM while waiting for the brokers")
	}
	t.Logf("stopped %s after SIGTERM while waiting for the brokers", time.Since(stopped).Round(time.Millisecond))
}

func mustRead(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
