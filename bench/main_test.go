package main

import (
	"os"
	"os/exec"
	"testing"
)

// TestMain lets a test run the bench's main in a child process (the test
// binary re-executed with BENCH_TEST_MAIN=1 and the bench's flags).
func TestMain(m *testing.M) {
	if os.Getenv("BENCH_TEST_MAIN") == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestFailedRunRemovesWorkDir: a run that fails (here: MariaDB cannot be
// reached) exits 1 and still removes its work directory (connector
// configurations, checkpoints and logs). os.Exit skips deferred calls.
func TestFailedRunRemovesWorkDir(t *testing.T) {
	tmp := t.TempDir()
	cmd := exec.Command(os.Args[0], "-dbs", "mysql", "-mysql", "root:@tcp(127.0.0.1:1)/", "-scenarios", "bigtx", "-no-report", "-out", tmp)
	cmd.Env = append(os.Environ(), "BENCH_TEST_MAIN=1", "TMPDIR="+tmp)
	out, err := cmd.CombinedOutput()
	if e, ok := err.(*exec.ExitError); !ok || e.ExitCode() != 1 {
		t.Fatalf("want exit status 1, got %v\n%s", err, out)
	}
	left, err := os.ReadDir(tmp)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range left {
		t.Errorf("left behind in TMPDIR: %s", e.Name())
	}
}
