package e2e

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/outbox-cdc/outbox-cdc/test/testenv"
)

// TestSourceLogsAllJSON: with log.format json (and level debug), every
// line the connector writes is a JSON object while its MySQL connections
// are cut and it reconnects, the MySQL drivers' own messages included
// (go-sql-driver reports the broken pool connections it drops; go-mysql
// reports connecting and closing). They carry a component field.
func TestSourceLogsAllJSON(t *testing.T) {
	b := mysqlBackend(t)
	dc, err := mysql.ParseDSN(testenv.MySQLDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	dc.DBName = testObjectName(t)
	proxy := testenv.NewProxy(t, dc.Addr)
	dc.Addr = proxy.Addr()
	_, brokers := testenv.Kafka(t)
	c := testenv.Start(t, b.config(t, connName(t, "e2e-logs-json"), brokers), "OUTBOX_CDC_SOURCE_DSN="+dc.FormatDSN(),
		"OUTBOX_CDC_SOURCE_RECONNECT_MIN=50ms", "OUTBOX_CDC_SOURCE_RECONNECT_MAX=500ms", "OUTBOX_CDC_LOG_LEVEL=debug")
	cons := newConsumer(t, brokers, `outbox\.event\..*`)
	var want []string
	for i := range 4 {
		id := fmt.Sprintf("json-log-%d", i)
		b.insertTx(t, []row{{id, "ORDER", "A-1", "E", `{}`}}, true)
		want = append(want, id)
		cons.waitFor(t, len(want), 30*time.Second)
		if i == 3 {
			break
		}
		accepted := proxy.Accepted()
		proxy.Cut()
		testenv.Eventually(t, 30*time.Second, "a new connection through the proxy", func() bool { return proxy.Accepted() > accepted })
	}
	if err := c.Stop(15 * time.Second); err != nil {
		t.Fatalf("SIGTERM exit: %v", err)
	}
	components := map[string]int{}
	for _, line := range strings.Split(c.Log(), "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("a log line is not JSON (%v):\n%s\n\nlog:\n%s", err, line, c.Log())
		}
		if comp, ok := m["component"].(string); ok {
			components[comp]++
		}
		if strings.Contains(line, "Password") {
			t.Fatalf("a log line shows the driver's configuration: %s", line)
		}
	}
	if components["mysql-driver"] == 0 || components["binlog-driver"] == 0 {
		t.Fatalf("no driver lines (components %v): the test did not exercise the drivers' logging", components)
	}
	t.Logf("lines per component: %v", components)
}
