package testenv

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// TestChoose covers every path of the DSN decision with fake probes: the
// environment wins outright, then the local default, and a container only
// outside CI with a Docker engine.
func TestChoose(t *testing.T) {
	const local = "root:@tcp(127.0.0.1:3306)/test"
	const env = "u:secret@tcp(db.example:3306)/x"
	refused := errors.New("connection refused")
	noDocker := errors.New("Cannot connect to the Docker daemon")
	up := func(string) error { return nil }
	down := func(string) error { return refused }
	only := func(ok string) func(string) error {
		return func(dsn string) error {
			if dsn == ok {
				return nil
			}
			return refused
		}
	}
	dockerUp := func() error { return nil }
	dockerDown := func() error { return noDocker }

	for _, tc := range []struct {
		name    string
		p       probes
		want    origin
		wantErr string // substring of the reason, for unavailable
	}{
		{"env set and reachable", probes{envDSN: env, ping: up, docker: dockerUp}, fromEnv, ""},
		{"env set, reachable, in CI", probes{envDSN: env, ci: true, ping: up, docker: dockerDown}, fromEnv, ""},
		{"env set but unreachable: no fallback to local", probes{envDSN: env, ping: only(local), docker: dockerUp}, unavailable, "db.example"},
		{"env set but unreachable: no fallback to a container", probes{envDSN: env, ping: down, docker: dockerUp}, unavailable, "connection refused"},
		{"local reachable", probes{ping: only(local), docker: dockerDown}, fromLocal, ""},
		{"local reachable in CI", probes{ci: true, ping: only(local), docker: dockerUp}, fromLocal, ""},
		{"local down, Docker up", probes{ping: down, docker: dockerUp}, fromContainer, ""},
		{"local down, Docker down", probes{ping: down, docker: dockerDown}, unavailable, "no Docker engine"},
		{"local down in CI: never a container", probes{ci: true, ping: down, docker: dockerUp}, unavailable, "127.0.0.1:3306"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dockerAsked := false
			d := tc.p.docker
			tc.p.docker = func() error { dockerAsked = true; return d() }
			got, err := tc.p.choose(local)
			if got != tc.want {
				t.Fatalf("choose = %v (%v), want %v", got, err, tc.want)
			}
			if (err != nil) != (tc.want == unavailable) {
				t.Fatalf("error %v with origin %v", err, got)
			}
			if tc.wantErr != "" && !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("error %q does not mention %q", err, tc.wantErr)
			}
			if err != nil && strings.Contains(err.Error(), "secret") {
				t.Fatalf("error leaks the password: %v", err)
			}
			// Docker is only asked when a container is the last resort.
			if dockerAsked && (tc.p.envDSN != "" || tc.p.ci || got == fromLocal) {
				t.Fatalf("Docker engine probed on path %v (env=%q ci=%v)", got, tc.p.envDSN, tc.p.ci)
			}
		})
	}
}

// TestDockerEngineHere documents this machine: no Docker engine, so the
// health check fails quickly instead of hanging.
func TestDockerEngineHere(t *testing.T) {
	if err := dockerEngine(); err != nil {
		t.Logf("no Docker engine: %v", err)
	} else {
		t.Logf("a Docker engine answers")
	}
}

// TestServiceStartsOneContainer: with the local default down and a Docker
// engine up (both faked), every test of the process gets the DSN of one
// container, started once.
func TestServiceStartsOneContainer(t *testing.T) {
	if InCI() {
		t.Setenv("CI", "false") // the fake path below is the laptop path
	}
	t.Setenv("OUTBOX_CDC_TEST_FAKE_DSN", "")
	starts := 0
	s := &service{
		what:     "fake",
		envVar:   "OUTBOX_CDC_TEST_FAKE_DSN",
		localDSN: "local",
		ping: func(_ context.Context, dsn string) error {
			if dsn == "container" {
				return nil
			}
			return errors.New("connection refused")
		},
		container: func(context.Context) (string, error) { starts++; return "container", nil },
		docker:    func() error { return nil },
	}
	for i := 0; i < 3; i++ {
		if got := s.dsn(t); got != "container" {
			t.Fatalf("dsn = %q, want the container's", got)
		}
	}
	if starts != 1 {
		t.Fatalf("container started %d times, want once", starts)
	}
}
