package e2e

import (
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"

	"github.com/outbox-cdc/outbox-cdc/test/testenv"
)

// HA takeover when the active instance is cut off without its connections
// closing: the database never sees a FIN, so only the lock session's
// server-side timeout (ha.session_timeout) frees the lock.

// haCutoffSessionTimeout and haCutoffCheck are the tests' HA timings; the
// takeover bound is session timeout + check interval (ha.TakeoverWithin),
// plus start-up.
const (
	haCutoffSessionTimeout = 3 * time.Second
	haCutoffCheck          = 300 * time.Millisecond
)

// haCutoffConfig is modeConfig with the tests' HA timings; with proxy set,
// every database connection of the instance goes through it.
func (b *backend) haCutoffConfig(t *testing.T, name string, brokers []string, delivery, cp string, proxy *testenv.Proxy) string {
	t.Helper()
	path := b.modeConfig(t, name, brokers, true, delivery, cp)
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Replace(string(raw), "check_interval: 300ms\n",
		"check_interval: "+haCutoffCheck.String()+"\n  session_timeout: "+haCutoffSessionTimeout.String()+"\n", 1)
	if !strings.Contains(text, "session_timeout") {
		t.Fatal("modeConfig changed its ha section; adapt haCutoffConfig")
	}
	if proxy != nil {
		addr := b.serverAddr(t)
		if !strings.Contains(text, addr) {
			t.Fatalf("config does not name %s", addr)
		}
		text = strings.ReplaceAll(text, addr, proxy.Addr())
	}
	return writeConfig(t, text)
}

// serverAddr is the host:port the backend's DSNs connect to.
func (b *backend) serverAddr(t *testing.T) string {
	t.Helper()
	if b.kind == "mysql" {
		cfg, err := mysql.ParseDSN(testenv.MySQLDSN(t))
		if err != nil {
			t.Fatal(err)
		}
		return cfg.Addr
	}
	cfg, err := pgx.ParseConfig(testenv.PostgresDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	return net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port)))
}

// TestHACutOff cuts the active instance off while writes continue, in two
// ways: SIGSTOP (a frozen process: its kernel still answers TCP, so
// keepalives see nothing), and a silent network path between it and the
// database (testenv.Proxy, no FIN, no RST). The standby must take over
// within ha.session_timeout + ha.check_interval plus start-up; nothing
// committed may be lost and, in exactly-once mode, nothing duplicated
// (read_committed). A silenced active instance must notice the loss by
// itself and stop before the standby holds the lock; a frozen one, once
// resumed, must exit non-zero without saving a checkpoint.
func TestHACutOff(t *testing.T) {
	for _, how := range []string{"sigstop", "silence"} {
		for _, mode := range []struct{ delivery, checkpoint string }{{"exactly-once", "kafka"}, {"at-least-once", "table"}} {
			t.Run(how+"/"+mode.delivery, func(t *testing.T) {
				forEachBackend(t, func(t *testing.T, b *backend) { testHACutOff(t, b, how, mode.delivery, mode.checkpoint) })
			})
		}
	}
}

func testHACutOff(t *testing.T, b *backend, how, delivery, checkpoint string) {
	_, brokers := testenv.Kafka(t)
	name := connName(t, "e2e-cut-"+b.kind)
	var proxy *testenv.Proxy
	if how == "silence" {
		proxy = testenv.NewProxy(t, b.serverAddr(t))
	}
	active := testenv.Start(t, b.haCutoffConfig(t, name, brokers, delivery, checkpoint, proxy))
	standby := testenv.Launch(t, b.haCutoffConfig(t, name, brokers, delivery, checkpoint, nil))
	standby.WaitStatus(200, "standby", 15*time.Second)
	cons := newConsumer(t, brokers, `outbox\.event\..*`)
	w := startChaosWriter(t, b, "cut", 2*time.Millisecond)
	time.Sleep(time.Second) // a deliberate gap: the active one streams a while before the cut

	bound := haCutoffSessionTimeout + haCutoffCheck
	cut := time.Now()
	switch how {
	case "sigstop":
		active.Pause()
	case "silence":
		proxy.Silence()
	}
	var noticed, acquired, ready time.Duration
	for ready == 0 {
		if time.Since(cut) > bound+30*time.Second {
			t.Fatalf("%s: the standby did not take over within %s (bound %s + start-up)\nstandby:\n%s", how, time.Since(cut), bound, standby.Log())
		}
		if noticed == 0 && strings.Contains(active.Log(), "lost the HA lock") {
			noticed = time.Since(cut)
		}
		if acquired == 0 && strings.Contains(standby.Log(), "lock acquired") {
			acquired = time.Since(cut)
		}
		if standby.Streaming() {
			ready = time.Since(cut)
		}
		select {
		case <-standby.Done():
			t.Fatalf("standby exited: %v\n%s", standby.Err(), standby.Log())
		default:
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("%s %s %s: standby holds the lock %s after the cut, streams after %s (bound %s + start-up)",
		b.kind, how, delivery, acquired.Round(time.Millisecond), ready.Round(time.Millisecond), bound)
	if acquired > bound+2*time.Second {
		t.Fatalf("the standby took the lock %s after the cut, bound %s", acquired, bound)
	}

	switch how {
	case "silence":
		// The active instance noticed by itself, before the standby took
		// over, and exits with the lock-loss error although its database
		// path is still silent.
		code := active.WaitExit(20 * time.Second)
		exited := time.Since(cut)
		if noticed == 0 && strings.Contains(active.Log(), "lost the HA lock") {
			noticed = acquired // noticed between two polls; cannot be ordered
		}
		t.Logf("%s: the cut-off active noticed after %s (bound %s) and exited %d after %s", b.kind, noticed.Round(time.Millisecond),
			haCutoffCheck+haCutoffSessionTimeout/2, code, exited.Round(time.Millisecond))
		if code != 1 || noticed == 0 {
			t.Fatalf("cut-off active exited %d, noticed %s\n%s", code, noticed, active.Log())
		}
		if noticed >= acquired {
			t.Fatalf("the standby took the lock (%s) before the active noticed losing it (%s)", acquired, noticed)
		}
		proxy.Heal()
	case "sigstop":
		// The frozen process resumes after the takeover: it must stop
		// without a checkpoint of its own (fenced) and exit non-zero.
		time.Sleep(time.Second)
		active.Resume()
		code := active.WaitExit(30 * time.Second)
		log := active.Log()
		if code == 0 || !(strings.Contains(log, "lost the HA lock") || strings.Contains(log, "took over") || strings.Contains(log, "claimed by another instance")) {
			t.Fatalf("resumed zombie exited %d without saying why:\n%s", code, log)
		}
		if strings.Contains(log, `"message":"checkpoint saved"`) {
			t.Fatalf("resumed zombie saved a checkpoint:\n%s", log)
		}
		t.Logf("%s: the resumed zombie exited %d", b.kind, code)
	}

	time.Sleep(time.Second)
	want := w.finish()
	got := cons.waitFor(t, len(want), 60*time.Second)
	got = append(got, cons.quiet(t, time.Second)[len(got):]...)
	checkDelivery(t, got, want, 3, delivery == "exactly-once")
	if err := standby.Stop(15 * time.Second); err != nil {
		t.Fatalf("SIGTERM exit: %v", err)
	}
}
