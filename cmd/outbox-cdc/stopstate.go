package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	"github.com/rs/zerolog"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
	"github.com/outbox-cdc/outbox-cdc/checkpoint"
)

// A connector stopped with PUT /connectors/NAME/stop (Kafka Connect's
// KIP-875 STOPPED target state) stays stopped across a restart of the
// process, and on whichever replica takes its HA lock, until PUT
// .../resume. The stop is kept where the connector's position is:
//
//   - checkpoint.type file or kafka: a file beside the checkpoint file,
//     <checkpoint.path>.stopped;
//   - checkpoint.type table: a row of the checkpoint table under the
//     connector name with ".target-state" appended, which every replica
//     of an HA deployment reads (the file is per host).
//
// exactly-once mode keeps it with the witness (checkpoint.type names it).

// runControl is what the supervisor gives each run of a connector: the
// pause gate, and notHeld, called when the run found the connector not
// stopped through the API (resumed, perhaps on another replica).
type runControl struct {
	gate    *outboxcdc.Gate
	notHeld func()
	// steppedDown: the connector's previous run on this replica stepped
	// down (stepdown.go), so the next one waits out the hysteresis.
	steppedDown bool
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

// heldState is the content of the .stopped file.
type heldState struct {
	State string    `json:"state"` // STOPPED
	Since time.Time `json:"since"`
}

func heldPath(cfg Config) string { return cfg.Checkpoint.Path + ".stopped" }

// Table positions need a kind prefix; these two are the only ones the row holds.
const (
	heldStopped outboxcdc.Position = "target-state:STOPPED"
	heldStarted outboxcdc.Position = "target-state:STARTED"
)

func heldTable(cfg Config, log zerolog.Logger) (*checkpoint.Table, error) {
	dsn, err := cfg.sourceDSN()
	if err != nil {
		return nil, err
	}
	return checkpoint.NewTable(cfg.Source.Type, dsn, cfg.Checkpoint.TableConfig, cfg.Name+heldSuffix, log)
}

// readHeld reports whether the connector was stopped through the REST API.
func readHeld(ctx context.Context, cfg Config, log zerolog.Logger) (bool, error) {
	if cfg.Checkpoint.Type == "table" {
		t, err := heldTable(cfg, log)
		if err != nil {
			return false, err
		}
		defer t.Close()
		pos, _, found, err := t.Peek(ctx)
		if err != nil {
			return false, err
		}
		return found && pos == heldStopped, nil
	}
	data, err := os.ReadFile(heldPath(cfg))
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	var h heldState
	if err := json.Unmarshal(data, &h); err != nil {
		return false, fmt.Errorf("%s: %w", heldPath(cfg), err)
	}
	return h.State == "STOPPED", nil
}

// writeHeld keeps (held) or clears the stop.
func writeHeld(ctx context.Context, cfg Config, held bool, log zerolog.Logger) error {
	if cfg.Checkpoint.Type == "table" {
		t, err := heldTable(cfg, log)
		if err != nil {
			return err
		}
		defer t.Close()
		pos := heldStarted
		if held {
			pos = heldStopped
		}
		return t.Save(ctx, pos)
	}
	p := heldPath(cfg)
	if !held {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return nil
	}
	data, _ := json.Marshal(heldState{State: "STOPPED", Since: time.Now().UTC()})
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, p)
}
