package e2e

import (
	"bufio"
	"context"
	"database/sql"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/outbox-cdc/outbox-cdc/test/testenv"
)

// readmeBlock is one block of the README's quick start.
type readmeBlock struct {
	file string // the file the block is (a configuration), or "" for commands
	text string
}

// quickstartMark marks a quick-start block: <!-- quickstart: DB [file NAME] -->
// right before its fence, DB being mariadb, postgres or both.
var quickstartMark = regexp.MustCompile(`^<!-- quickstart: (mariadb|postgres|both)(?: file (\S+))? -->$`)

// readmeQuickStart returns the README's quick-start blocks for db, in
// order.
func readmeQuickStart(t *testing.T, db string) []readmeBlock {
	t.Helper()
	f, err := os.Open(filepath.Join(repoRoot(t), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []readmeBlock
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		m := quickstartMark.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		if !sc.Scan() || !strings.HasPrefix(sc.Text(), "```") {
			t.Fatalf("README.md: %q is not followed by a fenced block", m[0])
		}
		var b strings.Builder
		for sc.Scan() && sc.Text() != "```" {
			b.WriteString(sc.Text() + "\n")
		}
		if m[1] == db || m[1] == "both" {
			out = append(out, readmeBlock{file: m[2], text: b.String()})
		}
	}
	if len(out) < 5 {
		t.Fatalf("README.md has %d quick-start blocks for %s; the markers are gone?", len(out), db)
	}
	return out
}

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// TestReadmeQuickStart does what the README's quick start says, block by
// block, in a scratch directory, on each database: build, start the test
// broker, create the database, the table and the user, write the
// configuration, check, run, insert, and read the record back with kcat.
// What it changes, so that it shares nothing with other runs: the
// database, user and connector names get a unique suffix, the ports are
// free ones, and `make build` writes into the scratch directory's bin/.
func TestReadmeQuickStart(t *testing.T) {
	for _, db := range []string{"mariadb", "postgres"} {
		t.Run(db, func(t *testing.T) {
			if _, err := exec.LookPath("kcat"); err != nil {
				testenv.Unavailable(t, "kcat is not installed (apt-get install kcat)")
			}
			switch db {
			case "mariadb":
				localServicesOnly(t, testenv.EnvMySQLDSN)
				testenv.MySQLDSN(t)
			case "postgres":
				localServicesOnly(t, testenv.EnvPostgresDSN)
				testenv.PostgresDSN(t)
			}
			runQuickStart(t, db)
		})
	}
}

func runQuickStart(t *testing.T, db string) {
	root := repoRoot(t)
	dir := t.TempDir()
	if err := os.Symlink(filepath.Join(root, "schema"), filepath.Join(dir, "schema")); err != nil {
		t.Fatal(err)
	}
	suffix := testSuffix(t)
	names := map[string]string{
		"shop":          "qs_shop_" + suffix,
		"outbox_cdc":    "qs_cdc_" + suffix,
		"orders-outbox": "qs-orders-" + suffix,
		"9092":          freePort(t),
		"9464":          freePort(t),
	}
	cleanupQuickStart(t, db, names["shop"], names["outbox_cdc"])
	subst := func(s string) string {
		for from, to := range names {
			s = regexp.MustCompile(`\b`+regexp.QuoteMeta(from)+`\b`).ReplaceAllString(s, to)
		}
		return s
	}

	script := "set -euo pipefail\ntrap 'kill $(jobs -p) 2>/dev/null; wait' EXIT\n"
	for _, b := range readmeQuickStart(t, db) {
		text := subst(b.text)
		if b.file != "" {
			if err := os.WriteFile(filepath.Join(dir, b.file), []byte(text), 0o600); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if strings.TrimSpace(text) == "make build" {
			text = fmt.Sprintf("make -C %q build BIN=%q\n", root, filepath.Join(dir, "bin"))
		}
		script += "echo '+ block'\n" + text
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", script)
	cmd.Dir = dir
	cmd.Env = os.Environ()
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "OUTBOX_CDC_") {
			cmd.Env = append(cmd.Env, strings.SplitN(kv, "=", 2)[0]+"=") // the README sets nothing from the environment
		}
	}
	cmd.WaitDelay = 10 * time.Second
	out, err := cmd.CombinedOutput()
	t.Logf("quick start script:\n%s\noutput:\n%s", script, out)
	if err != nil {
		t.Fatalf("the quick start failed: %v (output above)", err)
	}
	for _, want := range []string{"0 failed", "key=A-1001 ", "event_type=ORDER_CREATED", `value={"order_no": "A-1001"}`} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output lacks %q", want)
		}
	}
}

// freePort returns a port nothing listens on now.
func freePort(t *testing.T) string {
	t.Helper()
	_, port, err := net.SplitHostPort(testenv.FreeAddr(t))
	if err != nil {
		t.Fatal(err)
	}
	return port
}

// cleanupQuickStart removes the database, user and (PostgreSQL) slots the
// quick start creates, at the end of the test.
func cleanupQuickStart(t *testing.T, db, database, user string) {
	t.Cleanup(func() {
		switch db {
		case "mariadb":
			h, err := sql.Open("mysql", testenv.MySQLDSN(t))
			if err != nil {
				t.Error(err)
				return
			}
			defer h.Close()
			for _, q := range []string{"DROP DATABASE IF EXISTS `" + database + "`", "DROP USER IF EXISTS '" + user + "'@'%'"} {
				if _, err := h.Exec(q); err != nil {
					t.Errorf("%s: %v", q, err)
				}
			}
		case "postgres":
			h, err := sql.Open("pgx", testenv.PostgresDSN(t))
			if err != nil {
				t.Error(err)
				return
			}
			defer h.Close()
			// The connector's slot outlives its process; its walsender may
			// take a moment to end after the kill.
			testenv.Eventually(t, 30*time.Second, "the quick start's slots dropped", func() bool {
				_, err := h.Exec(`SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE database = $1`, database)
				return err == nil
			})
			for _, q := range []string{`DROP DATABASE IF EXISTS "` + database + `" WITH (FORCE)`, `DROP ROLE IF EXISTS "` + user + `"`} {
				if _, err := h.Exec(q); err != nil {
					t.Errorf("%s: %v", q, err)
				}
			}
		}
	})
}
