package outboxcdc

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// TestLogErrorCauseAndHint: the remedy is a field of its own and not
// repeated in the cause, also when the classified error is wrapped.
func TestLogErrorCauseAndHint(t *testing.T) {
	err := fmt.Errorf("load checkpoint: %w", Permanent(errors.New("file x is empty"), "restore it"))
	var buf bytes.Buffer
	log := zerolog.New(&buf)
	LogError(log.Error(), err).Msg("stopped on error")
	var line map[string]string
	if err := json.Unmarshal(buf.Bytes(), &line); err != nil {
		t.Fatal(err)
	}
	if line["error"] != "load checkpoint: file x is empty" || line["hint"] != "restore it" {
		t.Fatalf("line %v", line)
	}
	buf.Reset()
	LogError(log.Error(), errors.New("plain")).Msg("x")
	if bytes.Contains(buf.Bytes(), []byte(`"hint"`)) {
		t.Fatalf("a hint field without a hint: %s", buf.Bytes())
	}
	if got := Cause(KeyErrorf("dsn", "fix it", "bad")); got != "dsn: bad" {
		t.Fatalf("Cause of a KeyError = %q", got)
	}
}

// TestLogThrottle: yes at once, then no until the interval passed, with
// the count of the occurrences in between; Reset makes the next one news.
func TestLogThrottle(t *testing.T) {
	th := LogThrottle{Interval: 50 * time.Millisecond}
	if ok, n := th.Allow(); !ok || n != 0 {
		t.Fatalf("first Allow = %v, %d", ok, n)
	}
	for range 5 {
		if ok, _ := th.Allow(); ok {
			t.Fatal("allowed within the interval")
		}
	}
	time.Sleep(60 * time.Millisecond)
	if ok, n := th.Allow(); !ok || n != 5 {
		t.Fatalf("Allow after the interval = %v, %d; want true, 5", ok, n)
	}
	th.Allow()
	th.Reset()
	if ok, n := th.Allow(); !ok || n != 0 {
		t.Fatalf("Allow after Reset = %v, %d", ok, n)
	}
}
