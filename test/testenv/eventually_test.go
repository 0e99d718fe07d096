package testenv

import (
	"fmt"
	"regexp"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// fatalRecorder is a testing.TB whose Fatalf records instead of stopping.
type fatalRecorder struct {
	testing.TB
	msg string
}

func (f *fatalRecorder) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}
func (f *fatalRecorder) Helper() {}

func TestEventually(t *testing.T) {
	var n atomic.Int32
	Eventually(t, 5*time.Second, "the third poll", func() bool { return n.Add(1) == 3 })
	if n.Load() != 3 {
		t.Fatalf("polled %d times, want 3", n.Load())
	}

	r := &fatalRecorder{TB: t}
	start := time.Now()
	done := make(chan struct{})
	go func() { // Fatalf ends this goroutine, as it ends a test's
		defer close(done)
		Eventually(r, 100*time.Millisecond, "nothing", func() bool { return false })
	}()
	<-done
	if !strings.Contains(r.msg, "waiting for nothing") || time.Since(start) < 100*time.Millisecond {
		t.Fatalf("after %s: %q", time.Since(start), r.msg)
	}
}

func TestUniqueName(t *testing.T) {
	valid := regexp.MustCompile(`^[a-z0-9_]{1,63}$`)
	t.Run(strings.Repeat("Very-Long/Name ", 10), func(t *testing.T) {
		a, b := UniqueName(t, "e2e"), UniqueName(t, "e2e")
		if a == b {
			t.Fatalf("two names alike: %s", a)
		}
		for _, n := range []string{a, b} {
			if !valid.MatchString(n) || !strings.HasPrefix(n, "e2e_") {
				t.Fatalf("name %q: not a portable identifier of at most 63 bytes", n)
			}
		}
	})
}
