package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/outbox-cdc/outbox-cdc/test/testenv"
)

// After a restart, once the connector runs again, neither /readyz nor the
// REST status carries the previous run's reason ("source: binlog source
// stopped" stayed beside state "running").
func TestRestartClearsReason(t *testing.T) {
	_, dsn, suffix, brokers := seededMySQL(t, "rr")
	name := "rr-" + suffix
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
`, name, dsn, name, brokers[0], filepath.Join(t.TempDir(), "cp"))
	p := startRestProcess(t, body)
	p.waitStreaming(name)
	type readyz struct {
		Connectors []connectorStatus `json:"connectors"`
	}
	check := func(when string) {
		t.Helper()
		testenv.Eventually(t, 60*time.Second, "running and ready "+when, func() bool {
			code, b := p.do("GET", "/readyz?connector="+name, "")
			var r readyz
			_ = json.Unmarshal([]byte(b), &r)
			return code == 200 && len(r.Connectors) == 1 && r.Connectors[0].State == stateRunning
		})
		// Stable: sampled for a while, the reason stays empty.
		for i := 0; i < 20; i++ {
			_, b := p.do("GET", "/readyz?connector="+name, "")
			var r readyz
			_ = json.Unmarshal([]byte(b), &r)
			if len(r.Connectors) != 1 || r.Connectors[0].State != stateRunning || r.Connectors[0].Reason != "" {
				t.Fatalf("%s: /readyz %s, want state running without a reason", when, b)
			}
			_, b = p.do("GET", "/connectors?expand=status", "")
			var st map[string]struct {
				Status restStatus `json:"status"`
			}
			_ = json.Unmarshal([]byte(b), &st)
			if s := st[name].Status; s.Connector.State != "RUNNING" || s.Connector.Trace != "" {
				t.Fatalf("%s: /connectors?expand=status %s, want RUNNING without a trace", when, b)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	check("before the restart")
	if code, b := p.do("POST", "/connectors/"+name+"/restart", ""); code != 204 {
		t.Fatalf("restart: %d %s", code, b)
	}
	check("after the restart")
}

type notReady struct{ err error }

func (n notReady) Ready() error { return n.err }

// Start forgets the previous run's HA role at once: until the new run
// reported its own, /readyz derived "running" and the old run's reason
// ("source: binlog source stopped") from the stopped pipeline.
func TestStartForgetsPreviousRun(t *testing.T) {
	pc, err := loadProcessConfig(writeFile(t, fmt.Sprintf(`name: c
source:
  type: mysql
  dsn: "u@tcp(%s)/db"
  table: outbox_message
route:
  preset: seed
  topic: t
sink:
  type: stdout
checkpoint:
  type: file
  path: %q
`, testenv.FreeAddr(t), filepath.Join(t.TempDir(), "cp"))), nil)
	if err != nil {
		t.Fatal(err)
	}
	s := newSupervisor(context.Background(), pc.Connectors, runOptions{}, zerolog.Nop())
	m := s.conns["c"]
	old := &haState{ready: notReady{errors.New("source: binlog source stopped")}}
	done := make(chan struct{})
	close(done)
	m.state, m.err, m.role, m.done = stateHalted, errors.New("halted"), old, done
	if err := s.Start("c"); err != nil {
		t.Fatal(err)
	}
	st := s.status()[0]
	if st.State == stateRunning || st.Reason == "source: binlog source stopped" {
		t.Fatalf("right after Start: %+v, want the new run's state (starting), not the previous run's", st)
	}
	s.Stop("c")
}
