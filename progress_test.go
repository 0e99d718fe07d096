package outboxcdc

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// TestCatchUpLogsAtBoundedRate: a source reading transactions that
// committed a minute ago logs one line at once, then at most one per
// interval with rows per second, position, lag and an estimate while the
// lag shrinks, and one "caught up" line when it is read up; nothing while
// it is not behind.
func TestCatchUpLogsAtBoundedRate(t *testing.T) {
	var buf bytes.Buffer
	c := NewCatchUp(zerolog.New(&buf), 10*time.Second)
	now := time.Unix(1_000_000, 0)
	c.now = func() time.Time { return now }
	pos := 0
	posText := func() string { return fmt.Sprint("p", pos) }

	// Not behind: silent.
	c.Observe(now.Add(-time.Second), 5, posText)
	if buf.Len() != 0 {
		t.Fatalf("logged while not behind: %s", buf.String())
	}
	// 60 s behind, reading 3 s of history per second for 60 s, 100
	// transactions of 10 rows per second.
	commit := now.Add(-60 * time.Second)
	for i := 0; i < 6000; i++ {
		now = now.Add(10 * time.Millisecond)
		commit = commit.Add(30 * time.Millisecond)
		pos++
		c.Observe(commit, 10, posText)
		if now.Sub(commit) < BehindThreshold {
			break
		}
	}
	var lines []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatal(err)
		}
		lines = append(lines, m)
	}
	if len(lines) < 3 {
		t.Fatalf("want a first line, progress lines and a caught-up line:\n%s", buf.String())
	}
	if lines[0]["message"] != "source is behind: catching up" || lines[0]["behind_seconds"].(float64) < 59 {
		t.Fatalf("first line: %v", lines[0])
	}
	last := lines[len(lines)-1]
	if last["message"] != "caught up" || last["position"] == "" || last["rows_read"].(float64) < 1000 {
		t.Fatalf("last line: %v", last)
	}
	// About 25 s of catch-up at one line per 10 s: at most 2 between.
	mid := lines[1 : len(lines)-1]
	if len(mid) > 3 {
		t.Fatalf("%d progress lines for a 25 s catch-up at one per 10 s:\n%s", len(mid), buf.String())
	}
	for _, l := range mid {
		if l["message"] != "catching up" || l["rows_per_second"].(float64) != 1000 || l["position"] == "" {
			t.Fatalf("progress line: %v", l)
		}
		// lag L shrinks by 2 s per second: the estimate is L/2.
		if eta, behind := l["eta_seconds"].(float64), l["behind_seconds"].(float64); eta < behind/2-1 || eta > behind/2+1 {
			t.Fatalf("eta %v for %v s behind at 3x: %v", eta, behind, l)
		}
	}
	// Idle after catching up: nothing more; a new lag starts over.
	n := buf.Len()
	c.Idle(posText)
	if buf.Len() != n {
		t.Fatal("Idle logged while not behind")
	}
	c.Observe(now.Add(-time.Minute), 1, posText)
	c.Idle(posText)
	if got := strings.Count(buf.String()[n:], "\n"); got != 2 {
		t.Fatalf("want a behind and a caught-up line, got %d:\n%s", got, buf.String()[n:])
	}
}

func TestConnectingError(t *testing.T) {
	err := fmt.Errorf("source: %w", Connecting(errors.New("dial tcp: refused")))
	if !IsConnecting(err) || IsConnecting(errors.New("lost")) || err.Error() != "source: dial tcp: refused" {
		t.Fatalf("IsConnecting wrong for %v", err)
	}
}
