package awsmsg

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/outbox-cdc/outbox-cdc/test/testenv"
)

func TestMain(m *testing.M) {
	// The default credentials chain, fed from the environment; no shared
	// files or instance metadata of the machine.
	testenv.AWSTestEnv()
	os.Exit(m.Run())
}

// TestRegionAndProfile: the region comes from sink.region, else from the
// profile in the shared configuration file; none at all is a
// configuration error naming sink.region.
func TestRegionAndProfile(t *testing.T) {
	f := t.TempDir() + "/config"
	if err := os.WriteFile(f, []byte("[profile relay]\nregion = eu-west-2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("AWS_CONFIG_FILE", f)
	cfg := DefaultConfig(1024)
	cfg.Profile = "relay"
	ac, err := Load(context.Background(), cfg)
	if err != nil || ac.Region != "eu-west-2" {
		t.Fatalf("profile region: %q %v", ac.Region, err)
	}
	cfg.Region = "ap-south-1"
	if ac, _ := Load(context.Background(), cfg); ac.Region != "ap-south-1" {
		t.Fatalf("sink.region: %q", ac.Region)
	}
	cfg = DefaultConfig(1024)
	if _, err := Load(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), "region") {
		t.Fatalf("no region: %v", err)
	}
	cfg.Profile = "absent"
	if _, err := Load(context.Background(), cfg); err == nil {
		t.Fatal("a missing profile loaded")
	}
}
