package main

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/rs/zerolog"
)

// TestTargetStateFile: the target state kept beside a checkpoint file —
// a pause and a stop are read back, a resume clears them, a stop kept by
// the earlier version (<checkpoint.path>.stopped) still reads as a stop,
// and a process that starts on a kept pause starts the connector paused.
func TestTargetStateFile(t *testing.T) {
	ctx := context.Background()
	cfg := defaultConfig()
	cfg.Name = "ts"
	cfg.Checkpoint.Path = filepath.Join(t.TempDir(), "cp")
	read := func() string {
		t.Helper()
		st, err := readTarget(ctx, cfg, zerolog.Nop())
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	if st := read(); st != targetStarted {
		t.Fatalf("nothing kept: %s", st)
	}
	for _, st := range []string{targetPaused, targetStopped, targetStarted} {
		if err := writeTarget(ctx, cfg, st, zerolog.Nop()); err != nil {
			t.Fatal(err)
		}
		if got := read(); got != st {
			t.Fatalf("kept %s, read %s", st, got)
		}
	}
	if _, err := os.Stat(targetPath(cfg)); !os.IsNotExist(err) {
		t.Fatalf("a resume left %s", targetPath(cfg))
	}
	if err := os.WriteFile(legacyHeldPath(cfg), []byte(`{"state":"STOPPED","since":"2026-12-01T00:00:00Z"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if st := read(); st != targetStopped {
		t.Fatalf("the earlier version's stop: %s", st)
	}
	if err := writeTarget(ctx, cfg, targetPaused, zerolog.Nop()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(legacyHeldPath(cfg)); !os.IsNotExist(err) {
		t.Fatal("the earlier version's stop file outlived a pause")
	}
	sup := newSupervisor(ctx, []Config{cfg}, runOptions{}, zerolog.Nop())
	sup.loadHeld(ctx)
	if !sup.conns["ts"].gate.Paused() {
		t.Fatal("a process starting on a kept pause does not start the connector paused")
	}
}
