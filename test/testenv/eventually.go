package testenv

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// pollInterval is how often Eventually and the Connector's waits look.
const pollInterval = 25 * time.Millisecond

// Eventually polls cond until it returns true and fails the test when
// timeout passes first, naming what it waited for. It is the one polling
// loop of the integration tests: a test waits for a condition, never for
// a fixed time.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(pollInterval)
	}
}

// UniqueName returns prefix_<test name>_<random suffix>, lower case, with
// only [a-z0-9_], at most 63 bytes: a name for a database, schema, table,
// replication slot, publication, topic, stream, queue or connector that
// concurrent runs of the same test (another CI job on the same servers)
// do not share.
func UniqueName(t testing.TB, prefix string) string {
	n := strings.ToLower(t.Name())
	n = strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			return r
		}
		return '_'
	}, n)
	suffix := fmt.Sprintf("_%06x", rand.Uint32()&0xffffff)
	if max := 63 - len(prefix) - 1 - len(suffix); len(n) > max {
		n = n[len(n)-max:]
	}
	return prefix + "_" + strings.Trim(n, "_") + suffix
}
