// Package webhook starts receiver.py, an independent webhook receiver in
// Python (stdlib only), for the HTTP sink's tests: it checks signatures
// with code of its own and records every request it accepted.
package webhook

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/outbox-cdc/outbox-cdc/test/testenv"
)

// Options configure the receiver.
type Options struct {
	// SecretFile, when set, makes the receiver verify every request's
	// signature (a request that fails is answered 401).
	SecretFile string
	// MaxBody answers 413 to larger bodies (0: no limit).
	MaxBody int
	// Script is the receiver's misbehaviour for its first POSTs (see
	// receiver.py): "500,429:1,reset,drop".
	Script string
}

// Receiver is a running receiver.py.
type Receiver struct {
	// URL is http://127.0.0.1:<port>.
	URL string
	out string
}

// Line is one request the receiver recorded.
type Line struct {
	Path        string            `json:"path"`
	Headers     map[string]string `json:"headers"`
	Body        []byte            `json:"body"`
	SignatureOK bool              `json:"signature_ok"`
}

// Start runs receiver.py until the test ends.
func Start(t testing.TB, o Options) *Receiver {
	t.Helper()
	py, err := exec.LookPath("python3")
	if err != nil {
		testenv.Unavailable(t, "python3: %v", err)
	}
	_, file, _, _ := runtime.Caller(0)
	r := &Receiver{out: filepath.Join(t.TempDir(), "received.jsonl")}
	args := []string{filepath.Join(filepath.Dir(file), "receiver.py"), "--out", r.out}
	if o.SecretFile != "" {
		args = append(args, "--secret-file", o.SecretFile)
	}
	if o.MaxBody > 0 {
		args = append(args, "--max-body", itoa(o.MaxBody))
	}
	if o.Script != "" {
		args = append(args, "--script", o.Script)
	}
	cmd := exec.Command(py, args...)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	port, ok := strings.CutPrefix(strings.TrimSpace(line), "LISTEN ")
	if err != nil || !ok {
		t.Fatalf("receiver.py did not start: %q %v", line, err)
	}
	r.URL = "http://127.0.0.1:" + port
	return r
}

// Lines returns what the receiver recorded so far.
func (r *Receiver) Lines(t testing.TB) []Line {
	t.Helper()
	b, err := os.ReadFile(r.out)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var out []Line
	for _, l := range bytes.Split(b, []byte("\n")) {
		if len(bytes.TrimSpace(l)) == 0 {
			continue
		}
		var x Line
		if err := json.Unmarshal(l, &x); err != nil {
			continue // a line being written
		}
		out = append(out, x)
	}
	return out
}

func itoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}
