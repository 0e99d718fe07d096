package sinktest

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/outbox-cdc/outbox-cdc/sink/redisstream"
	"github.com/outbox-cdc/outbox-cdc/test/testenv"
)

// TestRedis holds the Redis Streams sink to the contract: stream keys
// under a prefix of the test's own, the connector through a
// testenv.Proxy, read back with redis-cli (XRANGE, JSON output).
func TestRedis(t *testing.T) { Run(t, redisTarget{}) }

type redisTarget struct{}

// redisCLI runs redis-cli against addr and returns its output.
func redisCLI(t *testing.T, addr string, args ...string) []byte {
	t.Helper()
	host, port, _ := strings.Cut(addr, ":")
	out, err := exec.Command("redis-cli", append([]string{"-h", host, "-p", port}, args...)...).Output()
	if err != nil {
		t.Fatalf("redis-cli %v: %v", args, err)
	}
	return out
}

func (redisTarget) Prepare(t *testing.T, o Options) *Setup {
	u := testenv.RedisURL(t)
	if _, err := exec.LookPath("redis-cli"); err != nil {
		testenv.Unavailable(t, "redis-cli: %v", err)
	}
	addr := testenv.HostOf(t, u)
	prefix := fmt.Sprintf("sinktest:%d:", rand.Int64N(1<<40))
	t.Cleanup(func() {
		for _, k := range strings.Fields(string(redisCLI(t, addr, "--raw", "KEYS", prefix+"*"))) {
			redisCLI(t, addr, "DEL", k)
		}
	})
	p := testenv.NewProxy(t, addr)
	s := &Setup{
		Topic:    prefix + "{aggregate_type}",
		DLQTopic: prefix + "dlq",
		Sink: fmt.Sprintf("  type: redis\n  url: %q\n  ack_timeout: 5s\n  retry_backoff_max: 1s\n  ready_interval: 500ms\n",
			testenv.WithHost(t, u, p.Addr())),
		Down: func(*testing.T) { p.Silence(); p.Cut() },
		Up:   func(*testing.T) { p.Heal() },
	}
	if o.MaxMessageBytes > 0 {
		s.Sink += fmt.Sprintf("  max_message_bytes: %d\n", o.MaxMessageBytes)
	}
	s.Read = func(t *testing.T, n int, timeout time.Duration) []Message {
		deadline := time.Now().Add(timeout)
		for {
			var got []Message
			keys := strings.Fields(string(redisCLI(t, addr, "--raw", "KEYS", prefix+"*")))
			sort.Strings(keys)
			for _, k := range keys {
				var entries [][]json.RawMessage
				if err := json.Unmarshal(redisCLI(t, addr, "--json", "XRANGE", k, "-", "+"), &entries); err != nil {
					t.Fatalf("XRANGE %s: %v", k, err)
				}
				for _, e := range entries {
					var fields []string
					if err := json.Unmarshal(e[1], &fields); err != nil {
						t.Fatal(err)
					}
					m := Message{Stream: k, Headers: map[string]string{}}
					for i := 0; i+1 < len(fields); i += 2 {
						switch f, v := fields[i], fields[i+1]; {
						case f == redisstream.FieldKey:
							m.Key = v
						case f == redisstream.FieldValue:
							m.Value = v
						case f == redisstream.FieldMessageID:
							m.DedupeID = v
						case strings.HasPrefix(f, redisstream.FieldHeaderPrefix):
							m.Headers[strings.TrimPrefix(f, redisstream.FieldHeaderPrefix)] = v
						}
					}
					got = append(got, m)
				}
			}
			if len(got) >= n && n > 0 || time.Now().After(deadline) {
				return got
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	return s
}
