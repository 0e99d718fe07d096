package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
	"github.com/outbox-cdc/outbox-cdc/checkpoint"
)

// A connector paused with PUT /connectors/NAME/pause or stopped with PUT
// .../stop (Kafka Connect's PAUSED and KIP-875 STOPPED target states)
// stays so across a restart of the process, and on whichever replica
// takes its HA lock, until PUT .../resume. The target state is kept where
// the connector's position is:
//
//   - checkpoint.type file or kafka: a file beside the checkpoint file,
//     <checkpoint.path>.target-state (an earlier version kept a stop in
//     <checkpoint.path>.stopped, still read);
//   - checkpoint.type table: a row of the checkpoint table under the
//     connector name with ".target-state" appended, which every replica
//     of an HA deployment reads (the file is per host), and which the
//     replica running the connector reads every heldPoll, so that a pause,
//     resume or stop sent to any replica reaches it.
//
// exactly-once mode keeps it with the witness (checkpoint.type names it).

// Target states, as Connect names them.
const (
	targetStarted = "STARTED"
	targetPaused  = "PAUSED"
	targetStopped = "STOPPED"
)

// runControl is what the supervisor gives each run of a connector: the
// pause gate, and notHeld, called when the run found the connector not
// stopped through the API (resumed, perhaps on another replica).
type runControl struct {
	// worker is this replica's worker id (host:port), kept in the
	// checkpoint table when the run takes the HA lock (writeHolder).
	worker string
	gate   *outboxcdc.Gate
	// target is held while the kept target state is read and applied.
	target  *sync.Mutex
	notHeld func()
	// steppedDown: the connector's previous run on this replica stepped
	// down (stepdown.go), so the next one waits out the hysteresis.
	steppedDown bool
	// fitAgain is called when the hold after a step-down has passed
	// (placement: the replica may be given the connector again).
	fitAgain func()
}

// sharedHold: the stop is kept where every replica reads it (the
// checkpoint table, with HA on), so a replica polls it while it holds the
// lock instead of staying stopped for good: a resume on any replica
// starts the connector on whichever takes the lock.
func sharedHold(cfg Config) bool { return cfg.HA.Enabled && cfg.Checkpoint.Type == "table" }

// heldPoll is how often a replica of a connector stopped through the API
// (sharedHold) checks whether it was resumed.
const heldPoll = 2 * time.Second

// errHeld is runOne's answer for a connector stopped through the REST API.
var errHeld = errors.New("stopped through the REST API")

// heldSuffix names the checkpoint-table row that keeps the stop.
const heldSuffix = ".target-state"

// heldState is the content of the .target-state file.
type heldState struct {
	State string    `json:"state"` // PAUSED or STOPPED
	Since time.Time `json:"since"`
}

func targetPath(cfg Config) string { return cfg.Checkpoint.Path + ".target-state" }

// legacyHeldPath is where an earlier version kept a stop.
func legacyHeldPath(cfg Config) string { return cfg.Checkpoint.Path + ".stopped" }

// Table positions need a kind prefix.
const targetPrefix = "target-state:"

func heldTable(cfg Config, log zerolog.Logger) (*checkpoint.Table, error) {
	dsn, err := cfg.sourceDSN()
	if err != nil {
		return nil, err
	}
	return checkpoint.NewTable(cfg.Source.Type, dsn, cfg.Checkpoint.TableConfig, cfg.Name+heldSuffix, log)
}

// readTarget returns the target state kept for the connector: STARTED
// when none is kept.
func readTarget(ctx context.Context, cfg Config, log zerolog.Logger) (string, error) {
	if cfg.Checkpoint.Type == "table" {
		t, err := heldTable(cfg, log)
		if err != nil {
			return "", err
		}
		defer t.Close()
		pos, _, found, err := t.Peek(ctx)
		if err != nil {
			return "", err
		}
		if !found {
			return targetStarted, nil
		}
		switch st := strings.TrimPrefix(string(pos), targetPrefix); st {
		case targetStarted, targetPaused, targetStopped:
			return st, nil
		default:
			return "", fmt.Errorf("the checkpoint table's row %s holds %q, not a target state", cfg.Name+heldSuffix, pos)
		}
	}
	for _, p := range []string{targetPath(cfg), legacyHeldPath(cfg)} {
		data, err := os.ReadFile(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return "", err
		}
		var h heldState
		if err := json.Unmarshal(data, &h); err != nil {
			return "", fmt.Errorf("%s: %w", p, err)
		}
		switch h.State {
		case targetPaused, targetStopped:
			return h.State, nil
		default:
			return "", fmt.Errorf("%s holds the state %q, not PAUSED or STOPPED", p, h.State)
		}
	}
	return targetStarted, nil
}

// readHeld reports whether the connector was stopped through the REST API.
func readHeld(ctx context.Context, cfg Config, log zerolog.Logger) (bool, error) {
	st, err := readTarget(ctx, cfg, log)
	return st == targetStopped, err
}

// writeTarget keeps the target state (STARTED clears what is kept).
func writeTarget(ctx context.Context, cfg Config, state string, log zerolog.Logger) error {
	if cfg.Checkpoint.Type == "table" {
		t, err := heldTable(cfg, log)
		if err != nil {
			return err
		}
		defer t.Close()
		return t.Save(ctx, outboxcdc.Position(targetPrefix+state))
	}
	if err := os.Remove(legacyHeldPath(cfg)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	p := targetPath(cfg)
	if state == targetStarted {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return nil
	}
	data, _ := json.Marshal(heldState{State: state, Since: time.Now().UTC()})
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, p)
}

// applyPause sets the gate as the kept target state says.
func applyPause(g *outboxcdc.Gate, target string, log zerolog.Logger) {
	if g == nil {
		return
	}
	switch {
	case target == targetPaused && !g.Paused():
		log.Info().Msg("pausing: the connector was paused through the REST API")
		g.Pause()
	case target == targetStarted && g.Paused():
		log.Info().Msg("resuming: the connector was resumed through the REST API")
		g.Resume()
	}
}

// watchTarget reads the kept target state every heldPoll while the
// connector runs and applies it: a pause or resume to the gate, a stop
// through stopped (once). A read that fails changes nothing.
func watchTarget(ctx context.Context, cfg Config, ctl runControl, log zerolog.Logger, stopped func()) {
	t := time.NewTicker(heldPoll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		ctl.target.Lock()
		rctx, cancel := context.WithTimeout(ctx, heldPoll)
		target, err := readTarget(rctx, cfg, log)
		cancel()
		if err == nil && target != targetStopped {
			applyPause(ctl.gate, target, log)
		}
		ctl.target.Unlock()
		if err == nil && target == targetStopped {
			log.Info().Msg("stopping: the connector was stopped through the REST API on another replica")
			stopped()
			return
		}
	}
}

// The replica holding a connector's HA lock names itself in the
// checkpoint table (sharedHold), in a row under the connector name with
// ".worker" appended, so that the REST API of every other replica reports
// where the connector runs (Connect's worker_id). The row names the last
// holder: after it died, until another takes the lock, it is stale.
const holderSuffix = ".worker"

const holderPrefix = "worker:"

func holderTable(cfg Config, log zerolog.Logger) (*checkpoint.Table, error) {
	dsn, err := cfg.sourceDSN()
	if err != nil {
		return nil, err
	}
	return checkpoint.NewTable(cfg.Source.Type, dsn, cfg.Checkpoint.TableConfig, cfg.Name+holderSuffix, log)
}

// writeHolder keeps worker as the connector's holder.
func writeHolder(ctx context.Context, cfg Config, worker string, log zerolog.Logger) error {
	t, err := holderTable(cfg, log)
	if err != nil {
		return err
	}
	defer t.Close()
	return t.Save(ctx, outboxcdc.Position(holderPrefix+worker))
}

// readHolder returns the worker id of the connector's last holder, "" if
// none was kept.
func readHolder(ctx context.Context, cfg Config, log zerolog.Logger) (string, error) {
	t, err := holderTable(cfg, log)
	if err != nil {
		return "", err
	}
	defer t.Close()
	pos, _, found, err := t.Peek(ctx)
	if err != nil || !found {
		return "", err
	}
	return strings.TrimPrefix(string(pos), holderPrefix), nil
}
