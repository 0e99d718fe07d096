package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestMigrateDebeziumConfigLoads: the configuration printed for a realistic
// Debezium connector is one outbox-cdc accepts as it is (after the
// password, which is never copied); an incomplete one is refused naming
// what to fill in.
func TestMigrateDebeziumConfigLoads(t *testing.T) {
	dir := filepath.Join("..", "..", "debezium", "testdata", "debezium-config")
	cases := []struct {
		file    string
		code    int    // with --strict
		loadErr string // "" loads
	}{
		{"connect-mysql-outbox.json", 0, ""},
		{"connect-postgres-outbox.json", 0, ""},
		{"server-postgres.properties", 0, ""},
		{"connect-mysql-unsupported.json", 1, "source."},
	}
	for _, tc := range cases {
		t.Run(tc.file, func(t *testing.T) {
			var out, errOut bytes.Buffer
			code := run([]string{"migrate", "debezium-config", "--strict", "--input", filepath.Join(dir, tc.file)}, &out, &errOut)
			if code != tc.code {
				t.Fatalf("exit %d, want %d; stderr: %s", code, tc.code, errOut.String())
			}
			if tc.code == 1 && !strings.Contains(errOut.String(), "cannot be honoured") {
				t.Fatalf("stderr does not say keys cannot be honoured: %s", errOut.String())
			}
			if !strings.HasPrefix(out.String(), "# outbox-cdc configuration translated") {
				t.Fatalf("output:\n%s", out.String())
			}
			path := filepath.Join(t.TempDir(), "outbox-cdc.yaml")
			if err := os.WriteFile(path, out.Bytes(), 0o600); err != nil {
				t.Fatal(err)
			}
			cfg, err := loadConfig(path, map[string]string{})
			if tc.loadErr == "" {
				if err != nil {
					t.Fatalf("the translation does not load: %v\n%s", err, out.String())
				}
				if cfg.Route.Preset != "debezium" {
					t.Fatalf("route.preset %q", cfg.Route.Preset)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.loadErr) {
				t.Fatalf("load = %v, want an error about %q", err, tc.loadErr)
			}
		})
	}
	var out, errOut bytes.Buffer
	if code := run([]string{"migrate", "nope"}, &out, &errOut); code != 2 {
		t.Fatalf("unknown migrate command: exit %d", code)
	}
}
