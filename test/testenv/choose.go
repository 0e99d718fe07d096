package testenv

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
)

// A database for the tests comes from one of three places, tried in this
// order:
//
//  1. the DSN in the service's environment variable, when it is set: used
//     as given, never replaced by anything else;
//  2. the local default (what scripts/prepare-services.sh prepares);
//  3. a container started through testcontainers-go, only when the local
//     default is unreachable, a Docker engine answers, and CI is not set.
//
// When none applies the test is skipped, or fails under CI=true. CI never
// starts a container: there a missing local service is a failure.

// origin says where a service's DSN comes from.
type origin int

const (
	fromEnv origin = iota
	fromLocal
	fromContainer
	unavailable
)

func (o origin) String() string {
	return [...]string{"environment", "local default", "container", "unavailable"}[o]
}

// probes are the outside facts the choice depends on; tests replace them
// with fakes.
type probes struct {
	envDSN string                 // the environment variable's value, "" if unset
	ci     bool                   // CI=true
	ping   func(dsn string) error // nil when a database answers at dsn
	docker func() error           // nil when a Docker engine answers
}

// choose picks where the DSN comes from. The error says why a service is
// unavailable (only with unavailable).
func (p probes) choose(localDSN string) (origin, error) {
	if p.envDSN != "" {
		if err := p.ping(p.envDSN); err != nil {
			return unavailable, fmt.Errorf("%s: %w", outboxcdc.RedactDSN(p.envDSN), err)
		}
		return fromEnv, nil
	}
	localErr := p.ping(localDSN)
	if localErr == nil {
		return fromLocal, nil
	}
	localErr = fmt.Errorf("%s: %w", outboxcdc.RedactDSN(localDSN), localErr)
	if p.ci {
		return unavailable, localErr
	}
	if err := p.docker(); err != nil {
		return unavailable, fmt.Errorf("%w; no Docker engine for testcontainers either: %v", localErr, err)
	}
	return fromContainer, nil
}

// service is one database the tests need.
type service struct {
	what     string // for messages
	envVar   string
	localDSN string
	ping     func(ctx context.Context, dsn string) error
	// container starts the container and returns its DSN; it runs at most
	// once per test process and the container lives until the process
	// exits (testcontainers' reaper removes it).
	container func(ctx context.Context) (string, error)
	// docker is the engine check; nil means dockerEngine.
	docker func() error

	once   sync.Once
	ctrDSN string
	ctrErr error
}

// dsn returns a reachable DSN for the service or skips/fails the test.
func (s *service) dsn(t testing.TB) string {
	t.Helper()
	dockerCheck := s.docker
	if dockerCheck == nil {
		dockerCheck = dockerEngine
	}
	p := probes{
		envDSN: os.Getenv(s.envVar),
		ci:     InCI(),
		ping: func(dsn string) error {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			return s.ping(ctx, dsn)
		},
		docker: dockerCheck,
	}
	o, err := p.choose(s.localDSN)
	switch o {
	case fromEnv:
		return p.envDSN
	case fromLocal:
		return s.localDSN
	case fromContainer:
		s.once.Do(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			s.ctrDSN, s.ctrErr = s.container(ctx)
		})
		if s.ctrErr != nil {
			Unavailable(t, "%s: local default unreachable and the container did not start: %v", s.what, s.ctrErr)
		}
		t.Logf("%s: using a testcontainers container (no %s, local default unreachable)", s.what, s.envVar)
		return s.ctrDSN
	}
	Unavailable(t, "%s at %v", s.what, err)
	return ""
}
