package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outbox-cdc/outbox-cdc/test/testenv"
)

// TestDemoTwiceAtOnce runs scripts/demo.sh (what `make demo` runs after
// building) twice at the same time with the defaults: each picks its own
// broker and HTTP ports and its own database, so both deliver their four
// records, exit 0 and drop their database.
func TestDemoTwiceAtOnce(t *testing.T) {
	localServicesOnly(t, testenv.EnvMySQLDSN)
	testenv.MySQLDSN(t)
	root := repoRoot(t)
	bin := filepath.Join(t.TempDir(), "bin")
	if out, err := exec.Command("make", "-C", root, "build", "BIN="+bin).CombinedOutput(); err != nil {
		t.Fatalf("make build: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	outs := make([]string, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i := range outs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd := exec.CommandContext(ctx, filepath.Join(root, "scripts", "demo.sh"))
			cmd.Env = append(os.Environ(), "SINK=kafka", "DEMO_BIN="+bin)
			cmd.WaitDelay = 10 * time.Second
			out, err := cmd.CombinedOutput()
			outs[i], errs[i] = string(out), err
		}()
	}
	wg.Wait()
	for i, out := range outs {
		if errs[i] != nil || !strings.Contains(out, "outbox-cdc exit status: 0") || strings.Count(out, "outbox.event.") < 4 {
			t.Errorf("demo %d: %v\n%s", i, errs[i], out)
		}
	}
	db := testenv.MySQL(t)
	var left string
	if err := db.QueryRow("SELECT COALESCE(GROUP_CONCAT(schema_name), '') FROM information_schema.schemata WHERE schema_name IN (?, ?)",
		demoDB(outs[0]), demoDB(outs[1])).Scan(&left); err != nil || left != "" {
		t.Errorf("databases left behind: %q (%v)", left, err)
	}
}

// demoDB is the database a demo's output says it created.
func demoDB(out string) string {
	_, rest, ok := strings.Cut(out, "creating database ")
	if !ok {
		return ""
	}
	name, _, _ := strings.Cut(rest, " ")
	return name
}
