package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
	"github.com/outbox-cdc/outbox-cdc/binlog"
	"github.com/outbox-cdc/outbox-cdc/checkpoint"
	"github.com/outbox-cdc/outbox-cdc/test/testenv"
)

// positionEnv writes a configuration for the given source type whose
// checkpoint file lives in a temp dir, and returns both paths.
func positionEnv(t *testing.T, sourceType string) (cfgPath, cpPath string) {
	t.Helper()
	dir := t.TempDir()
	cpPath = filepath.Join(dir, "outbox-cdc.checkpoint")
	dsn := `"root:secret@tcp(127.0.0.1:3306)/shop"`
	if sourceType == "postgres" {
		dsn = `"postgres://u:p@127.0.0.1:5432/shop"`
	}
	body := "source:\n  type: " + sourceType + "\n  dsn: " + dsn + "\nsink:\n  type: stdout\ncheckpoint:\n  path: " + cpPath + "\nlog:\n  format: json\n"
	cfgPath = filepath.Join(dir, "c.yaml")
	if err := os.WriteFile(cfgPath, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return cfgPath, cpPath
}

func runCmd(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var o, e bytes.Buffer
	code = run(args, &o, &e)
	return code, o.String(), e.String()
}

func saveCheckpoint(t *testing.T, path string, pos outboxcdc.Position) {
	t.Helper()
	f, err := checkpoint.NewFile(checkpoint.FileConfig{Path: path}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Save(context.Background(), pos); err != nil {
		t.Fatal(err)
	}
}

func readCheckpoint(t *testing.T, path string) outboxcdc.Position {
	t.Helper()
	s, err := checkpoint.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return s.Position
}

func TestPositionShow(t *testing.T) {
	cfg, cp := positionEnv(t, "mysql")
	code, out, errs := runCmd(t, "position", "show", "--config", cfg)
	if code != 0 || !strings.Contains(out, "no checkpoint") {
		t.Fatalf("no checkpoint: code %d out %q err %q", code, out, errs)
	}
	code, out, _ = runCmd(t, "position", "show", "--config", cfg, "--json")
	if code != 0 || !strings.Contains(out, `"exists": false`) {
		t.Fatalf("no checkpoint json: code %d out %q", code, out)
	}

	saveCheckpoint(t, cp, "mysql:mariadb-gtid:0-1-42")
	code, out, errs = runCmd(t, "position", "show", "--config", cfg)
	if code != 0 || !strings.Contains(out, "position: mysql:mariadb-gtid:0-1-42") || !strings.Contains(out, "meaning:  MariaDB GTID 0-1-42") || !strings.Contains(out, "saved at: ") {
		t.Fatalf("show: code %d out %q err %q", code, out, errs)
	}
	code, out, _ = runCmd(t, "position", "show", "--config", cfg, "--json")
	var js showJSON
	if err := json.Unmarshal([]byte(out), &js); err != nil || code != 0 {
		t.Fatalf("json: code %d %v: %q", code, err, out)
	}
	if !js.Exists || js.Position != "mysql:mariadb-gtid:0-1-42" || js.Kind != "mysql" || js.Form != "mariadb-gtid" || js.SavedAt == "" || js.Path != cp {
		t.Errorf("json %+v", js)
	}

	// Damaged: exit 1 with the checkpoint package's message.
	b, _ := os.ReadFile(cp)
	if err := os.WriteFile(cp, bytes.Replace(b, []byte("0-1-42"), []byte("0-1-43"), 1), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, errs = runCmd(t, "position", "show", "--config", cfg)
	if code != 1 || !strings.Contains(errs, "checkpoint cannot be trusted") || !strings.Contains(errs, "checksum mismatch") {
		t.Fatalf("damaged: code %d err %q", code, errs)
	}

	// Another source's checkpoint: shown, but exit 1.
	saveCheckpoint(t, cp, "postgres:0/16B3748")
	code, out, errs = runCmd(t, "position", "show", "--config", cfg)
	if code != 1 || !strings.Contains(out, "LSN 0/16B3748") || !strings.Contains(errs, "refuses to start") {
		t.Fatalf("foreign: code %d out %q err %q", code, out, errs)
	}
}

func TestPositionSet(t *testing.T) {
	cfg, cp := positionEnv(t, "mysql")

	// First set: no checkpoint, no --force needed; short form.
	code, out, errs := runCmd(t, "position", "set", "--config", cfg, "--to", "mysql-bin.000003:400")
	if code != 0 || !strings.Contains(out, "old: none") || !strings.Contains(out, "binlog file mysql-bin.000003 offset 400") {
		t.Fatalf("first set: code %d out %q err %q", code, out, errs)
	}
	// A command for people: stdout says it, the log below warn is off.
	if errs != "" {
		t.Errorf("first set: stderr holds %q, want nothing (no warning)", errs)
	}
	if got := readCheckpoint(t, cp); got != "mysql:file:mysql-bin.000003:400" {
		t.Fatalf("checkpoint %q", got)
	}

	// Guard: backwards without --force is refused and changes nothing.
	code, out, errs = runCmd(t, "position", "set", "--config", cfg, "--to", "mysql:file:mysql-bin.000003:120")
	if code != 1 || !strings.Contains(out, "BACKWARD") || !strings.Contains(errs, "--force") {
		t.Fatalf("guard: code %d out %q err %q", code, out, errs)
	}
	if got := readCheckpoint(t, cp); got != "mysql:file:mysql-bin.000003:400" {
		t.Fatalf("checkpoint changed to %q", got)
	}

	// --dry-run without --force: the runbook's rehearsal shows the move
	// and what the write would need, exits 0, writes nothing.
	code, out, errs = runCmd(t, "position", "set", "--config", cfg, "--to", "mysql-bin.000003:120", "--dry-run")
	if code != 0 || !strings.Contains(out, "BACKWARD") || !strings.Contains(out, "dry run: nothing was written") ||
		!strings.Contains(out, "needs --force") || readCheckpoint(t, cp) != "mysql:file:mysql-bin.000003:400" {
		t.Fatalf("dry run without --force: code %d out %q err %q", code, out, errs)
	}

	// --dry-run with --force writes nothing.
	code, out, _ = runCmd(t, "position", "set", "--config", cfg, "--to", "mysql-bin.000003:120", "--force", "--dry-run")
	if code != 0 || !strings.Contains(out, "dry run") || readCheckpoint(t, cp) != "mysql:file:mysql-bin.000003:400" {
		t.Fatalf("dry run: code %d out %q", code, out)
	}

	// Forward with --force.
	code, out, errs = runCmd(t, "position", "set", "--config", cfg, "--to", "mysql-bin.000004:4", "--force", "--log-level", "info")
	if code != 0 || !strings.Contains(out, "FORWARD") || !strings.Contains(out, "checkpoint written") {
		t.Fatalf("forward: code %d out %q err %q", code, out, errs)
	}
	if !strings.Contains(errs, `"old_position":"mysql:file:mysql-bin.000003:400"`) || !strings.Contains(errs, `"direction":"forward"`) {
		t.Errorf("no log of the change with --log-level info: %q", errs)
	}

	// Same position: nothing to do, exit 0 without --force.
	code, out, _ = runCmd(t, "position", "set", "--config", cfg, "--to", "mysql:file:mysql-bin.000004:4")
	if code != 0 || !strings.Contains(out, "nothing to do") {
		t.Fatalf("same: code %d out %q", code, out)
	}

	// Different form: not comparable, still guarded.
	code, out, _ = runCmd(t, "position", "set", "--config", cfg, "--to", "0-1-42,1-7-9")
	if code != 1 || !strings.Contains(out, "not comparable") {
		t.Fatalf("form change: code %d out %q", code, out)
	}
	code, _, _ = runCmd(t, "position", "set", "--config", cfg, "--to", "0-1-42,1-7-9", "--force")
	if code != 0 || readCheckpoint(t, cp) != "mysql:mariadb-gtid:0-1-42,1-7-9" {
		t.Fatalf("form change --force: code %d, checkpoint %q", code, readCheckpoint(t, cp))
	}

	// Wrong kind and garbage: usage errors, nothing written.
	for _, to := range []string{"postgres:0/16B3748", "0/16B3748", "mysql-bin.000003", ""} {
		code, _, errs = runCmd(t, "position", "set", "--config", cfg, "--to", to, "--force")
		if code != 2 {
			t.Errorf("--to %q: code %d err %q, want 2", to, code, errs)
		}
	}
	if got := readCheckpoint(t, cp); got != "mysql:mariadb-gtid:0-1-42,1-7-9" {
		t.Fatalf("checkpoint changed to %q", got)
	}
}

func TestPositionSetPostgresAndDamaged(t *testing.T) {
	cfg, cp := positionEnv(t, "postgres")
	saveCheckpoint(t, cp, "postgres:0/16B3748")
	code, out, _ := runCmd(t, "position", "set", "--config", cfg, "--to", "0/1000000", "--force")
	if code != 0 || !strings.Contains(out, "BACKWARD") || readCheckpoint(t, cp) != "postgres:0/1000000" {
		t.Fatalf("backward: code %d out %q", code, out)
	}
	if code, _, errs := runCmd(t, "position", "set", "--config", cfg, "--to", "mysql:file:mysql-bin.000003:4", "--force"); code != 2 || !strings.Contains(errs, "another source") {
		t.Fatalf("wrong kind: code %d err %q", code, errs)
	}

	// A damaged checkpoint is replaced only with --force.
	if err := os.WriteFile(cp, []byte("garbage\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errs := runCmd(t, "position", "set", "--config", cfg, "--to", "0/2000000")
	if code != 1 || !strings.Contains(out, "old: unreadable") || !strings.Contains(errs, "--force") {
		t.Fatalf("damaged: code %d out %q err %q", code, out, errs)
	}
	if code, _, _ := runCmd(t, "position", "set", "--config", cfg, "--to", "0/2000000", "--force"); code != 0 || readCheckpoint(t, cp) != "postgres:0/2000000" {
		t.Fatalf("damaged --force: code %d", code)
	}
}

func TestPositionImportDebezium(t *testing.T) {
	td := filepath.Join("..", "..", "debezium", "testdata")
	cfg, cp := positionEnv(t, "mysql")

	code, out, errs := runCmd(t, "position", "import-debezium", "--config", cfg, "--offset", filepath.Join(td, "offsets-topic.kcat.txt"))
	if code != 1 || !strings.Contains(errs, "orders-outbox") {
		t.Fatalf("several connectors: code %d err %q", code, errs)
	}
	code, out, errs = runCmd(t, "position", "import-debezium", "--config", cfg, "--offset", filepath.Join(td, "connect-mariadb-failover-midtx.json"))
	if code != 0 {
		t.Fatalf("import: code %d out %q err %q", code, out, errs)
	}
	for _, want := range []string{"derived position: mysql:mariadb-gtid:0-2-45,1-7-9", "re-sends that whole transaction", "mysql:file:mariadb-bin.000007:365", "checkpoint written"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if got := readCheckpoint(t, cp); got != "mysql:mariadb-gtid:0-2-45,1-7-9" {
		t.Fatalf("checkpoint %q", got)
	}
	if errs != "" {
		t.Errorf("import: stderr holds %q beside the human output, want nothing", errs)
	}

	// Guarded like set; the Debezium Server file and --connector work.
	dat := filepath.Join(td, "server-two-engines.offsets.dat")
	code, out, _ = runCmd(t, "position", "import-debezium", "--config", cfg, "--offset", dat, "--connector", "billing-engine")
	if code != 1 || !strings.Contains(out, "not comparable (the MariaDB GTID positions name different replication domains)") {
		t.Fatalf("guard: code %d out %q", code, out)
	}
	code, out, _ = runCmd(t, "position", "import-debezium", "--config", cfg, "--offset", dat, "--connector", "billing-engine", "--force")
	if code != 0 || readCheckpoint(t, cp) != "mysql:mariadb-gtid:0-1-3" {
		t.Fatalf("--force: code %d out %q", code, out)
	}

	// Snapshot offsets and other sources' offsets are refused.
	for _, f := range []string{"connect-mysql-snapshot.json", "connect-postgres-boundary.json"} {
		if code, _, errs := runCmd(t, "position", "import-debezium", "--config", cfg, "--offset", filepath.Join(td, f), "--force"); code != 1 || errs == "" {
			t.Errorf("%s: code %d err %q", f, code, errs)
		}
	}
	if got := readCheckpoint(t, cp); got != "mysql:mariadb-gtid:0-1-3" {
		t.Fatalf("checkpoint changed to %q", got)
	}
	if code, _, _ := runCmd(t, "position", "import-debezium", "--config", cfg); code != 2 {
		t.Errorf("missing --offset: code %d", code)
	}
	if code, _, _ := runCmd(t, "position", "import-debezium", "--config", cfg, "--offset", filepath.Join(td, "nope")); code != 1 {
		t.Errorf("missing file: code %d", code)
	}
}

func TestPositionImportPostgres(t *testing.T) {
	td := filepath.Join("..", "..", "debezium", "testdata")
	cfg, cp := positionEnv(t, "postgres")
	code, out, errs := runCmd(t, "position", "import-debezium", "--config", cfg, "--offset", filepath.Join(td, "server-postgres.offsets.dat"))
	if code != 0 || !strings.Contains(out, "derived position: postgres:0/16DA5F0 (LSN 0/16DA5F0)") || !strings.Contains(out, "inside transaction 767") {
		t.Fatalf("import: code %d out %q err %q", code, out, errs)
	}
	if got := readCheckpoint(t, cp); got != "postgres:0/16DA5F0" {
		t.Fatalf("checkpoint %q", got)
	}
}

func TestPositionFileGTIDOff(t *testing.T) {
	td := filepath.Join("..", "..", "debezium", "testdata")
	cfg, cp := positionEnv(t, "mysql")
	t.Setenv("OUTBOX_CDC_SOURCE_GTID", "off")
	code, out, errs := runCmd(t, "position", "import-debezium", "--config", cfg, "--offset", filepath.Join(td, "connect-mysql-gtid.json"))
	if code != 0 || readCheckpoint(t, cp) != "mysql:file:mysql-bin.000003:1748" {
		t.Fatalf("gtid: off: code %d out %q err %q", code, out, errs)
	}
}

func TestPositionUsage(t *testing.T) {
	cfg, _ := positionEnv(t, "mysql")
	for _, args := range [][]string{
		{"position"}, {"position", "frobnicate"}, {"position", "show", "--config", cfg, "extra"},
		{"position", "show", "--config", cfg, "--force"}, {"position", "set", "--config", cfg},
	} {
		if code, _, _ := runCmd(t, args...); code != 2 {
			t.Errorf("%q: code %d, want 2", args, code)
		}
	}
	if code, out, _ := runCmd(t, "help"); code != 0 || !strings.Contains(out, "position import-debezium") {
		t.Errorf("usage lacks the position commands: %q", out)
	}
}

func TestPositionSetLatest(t *testing.T) {
	t.Run("mysql", func(t *testing.T) {
		cfg, cp := positionEnv(t, "mysql")
		t.Setenv("OUTBOX_CDC_SOURCE_DSN", testenv.MySQLDSN(t))
		code, out, errs := runCmd(t, "position", "set", "--config", cfg, "--to", "latest")
		if code != 0 {
			t.Fatalf("code %d out %q err %q", code, out, errs)
		}
		got := readCheckpoint(t, cp)
		if _, err := binlog.ParsePosition(got); err != nil {
			t.Fatal(err)
		}
		// An existing file-form checkpoint keeps its form.
		saveCheckpoint(t, cp, "mysql:file:mysql-bin.000001:4")
		code, out, errs = runCmd(t, "position", "set", "--config", cfg, "--to", "latest", "--force")
		if code != 0 || positionForm(readCheckpoint(t, cp)) != "file" {
			t.Fatalf("file form: code %d out %q err %q checkpoint %q", code, out, errs, readCheckpoint(t, cp))
		}
	})
	t.Run("postgres", func(t *testing.T) {
		cfg, cp := positionEnv(t, "postgres")
		t.Setenv("OUTBOX_CDC_SOURCE_DSN", testenv.PostgresDSN(t))
		code, out, errs := runCmd(t, "position", "set", "--config", cfg, "--to", "latest")
		if code != 0 || positionForm(readCheckpoint(t, cp)) != "lsn" || !strings.Contains(out, "the server's current position is postgres:") {
			t.Fatalf("code %d out %q err %q", code, out, errs)
		}
	})
}

// TestPositionSetTableFencesEarlierOwnerWithHA: with HA on, position set
// claims the checkpoint row before writing it, so an instance that claimed
// it earlier (one that lost the HA lock without noticing yet) cannot
// overwrite the position set by hand.
func TestPositionSetTableFencesEarlierOwnerWithHA(t *testing.T) {
	dsn := testenv.MySQLDSN(t)
	db := testenv.MySQL(t)
	table := fmt.Sprintf("outbox_cdc_checkpoint_posha_%08x", rand.Uint32())
	t.Cleanup(func() { db.Exec("DROP TABLE IF EXISTS " + table) })
	name := "posha-" + table[len(table)-8:]
	dir := t.TempDir()
	cfg := filepath.Join(dir, "c.yaml")
	body := fmt.Sprintf("name: %s\nsource:\n  type: mysql\n  dsn: %q\nsink:\n  type: stdout\ncheckpoint:\n  type: table\n  table: %s\nha:\n  enabled: true\nlog:\n  format: json\n", name, dsn, table)
	if err := os.WriteFile(cfg, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	zombie, err := checkpoint.NewTable("mysql", dsn, checkpoint.TableConfig{Table: table}, name, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	defer zombie.Close()
	if _, err := zombie.Claim(ctx); err != nil {
		t.Fatal(err)
	}
	if err := zombie.Save(ctx, "mysql:mariadb-gtid:0-1-10"); err != nil {
		t.Fatal(err)
	}
	code, out, errs := runCmd(t, "position", "set", "--config", cfg, "--to", "0-1-5", "--force", "--log-level", "info")
	if code != 0 {
		t.Fatalf("position set: code %d out %q err %q", code, out, errs)
	}
	// Its log (log.format json) is JSON lines with unique keys, the HA
	// lock's lines included.
	if !strings.Contains(errs, `"component":"ha"`) {
		t.Fatalf("no HA line in the log:\n%s", errs)
	}
	if err := testenv.CheckJSONLines(strings.NewReader(errs)); err != nil {
		t.Fatal(err)
	}
	if err := zombie.Save(ctx, "mysql:mariadb-gtid:0-1-11"); !errors.Is(err, checkpoint.ErrFenced) {
		t.Fatalf("the earlier owner's save after position set = %v, want checkpoint.ErrFenced", err)
	}
	fresh, err := checkpoint.NewTable("mysql", dsn, checkpoint.TableConfig{Table: table}, name, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	if pos, err := fresh.Load(ctx); err != nil || pos != "mysql:mariadb-gtid:0-1-5" {
		t.Fatalf("table holds %q, %v; want the position set by hand", pos, err)
	}
}
