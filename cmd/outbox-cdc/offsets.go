package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"time"

	"github.com/rs/zerolog"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
	"github.com/outbox-cdc/outbox-cdc/binlog"
	"github.com/outbox-cdc/outbox-cdc/debezium"
	"github.com/outbox-cdc/outbox-cdc/wal"
)

// Offsets in Kafka Connect's KIP-875 shape (GET/PATCH/DELETE
// /connectors/NAME/offsets), with the partition and offset Debezium's own
// connectors use, so that an offset read from a Debezium deployment can be
// written here:
//
//	MySQL/MariaDB  partition {"server": NAME}
//	               offset    {"file": F, "pos": P} and/or {"gtids": SET}
//	Postgres       partition {"server": NAME}
//	               offset    {"lsn": N, "lsn_proc": N, "lsn_commit": N}
//
// NAME is the connector name (Debezium's topic.prefix). A PATCH accepts
// any offset that `position import-debezium` accepts (the partition is
// not compared: Debezium's topic.prefix often differs from the name here).

// connectorOffset is one entry of the offsets list.
type connectorOffset struct {
	Partition map[string]any `json:"partition"`
	Offset    map[string]any `json:"offset"`
}

type connectorOffsets struct {
	Offsets []connectorOffset `json:"offsets"`
}

// debeziumOffset renders pos as Debezium's offset.
func debeziumOffset(name string, pos outboxcdc.Position) (connectorOffset, error) {
	part := map[string]any{"server": name}
	switch pos.Kind() {
	case binlog.Kind:
		p, err := binlog.ParsePosition(pos)
		if err != nil {
			return connectorOffset{}, err
		}
		off := map[string]any{}
		at := p
		if p.Restart != nil {
			at = *p.Restart // reading starts there; Debezium has one place
		}
		if at.File != "" {
			off["file"], off["pos"] = at.File, at.Offset
		}
		switch {
		case p.MySQLGTID != nil:
			off["gtids"] = p.MySQLGTID.String()
		case p.IsMariaDB:
			off["gtids"] = p.MariaDB.String()
		}
		return connectorOffset{Partition: part, Offset: off}, nil
	case wal.Kind:
		lsn, err := wal.ParsePosition(pos)
		if err != nil {
			return connectorOffset{}, err
		}
		n := uint64(lsn)
		return connectorOffset{Partition: part, Offset: map[string]any{"lsn": n, "lsn_proc": n, "lsn_commit": n}}, nil
	}
	return connectorOffset{}, fmt.Errorf("position %q: not a MySQL or Postgres position", pos)
}

// offsetError is a refusal with Connect's status code.
type offsetError struct {
	code int
	msg  string
}

func (e *offsetError) Error() string { return e.msg }

func badOffset(format string, args ...any) error {
	return &offsetError{code: 400, msg: fmt.Sprintf(format, args...)}
}

// readOffsets returns the connector's position in Connect's shape.
func readOffsets(ctx context.Context, cfg Config, log zerolog.Logger) (connectorOffsets, error) {
	store, err := openPositionStore(cfg, cfg.Source.Type, log)
	if err != nil {
		return connectorOffsets{}, err
	}
	defer store.close()
	st, err := store.read(ctx)
	if err != nil {
		return connectorOffsets{}, fmt.Errorf("reading %s: %w", store, err)
	}
	out := connectorOffsets{Offsets: []connectorOffset{}}
	if !st.exists {
		return out, nil
	}
	o, err := debeziumOffset(cfg.Name, st.pos)
	if err != nil {
		return out, err
	}
	out.Offsets = append(out.Offsets, o)
	return out, nil
}

// alterOffsets writes the offset of body (a PATCH) as the connector's
// position, with the guards of `position set`: a position the source
// could not resume from is refused, and with HA on the lock is held and
// the checkpoint row claimed (fencing an instance that lost the lock
// without noticing) while it is written. The connector must be stopped.
// It returns true when the offset was null: a reset.
func alterOffsets(ctx context.Context, cfg Config, body []byte, log zerolog.Logger) (reset bool, err error) {
	var req struct {
		Offsets []struct {
			Partition map[string]any  `json:"partition"`
			Offset    json.RawMessage `json:"offset"`
		} `json:"offsets"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		return false, badOffset("the body is not Kafka Connect's offsets JSON ({\"offsets\": [{\"partition\": {...}, \"offset\": {...}}]}): %v", err)
	}
	if len(req.Offsets) == 0 {
		return false, badOffset("Partitions / offsets need to be provided for an alter offsets request")
	}
	if len(req.Offsets) > 1 {
		return false, badOffset("the connector has one source partition ({\"server\": %q}); the request has %d", cfg.Name, len(req.Offsets))
	}
	e := req.Offsets[0]
	if e.Partition == nil {
		return false, badOffset("the partition is missing; this connector's is {\"server\": %q}", cfg.Name)
	}
	if _, ok := e.Partition["server"]; !ok {
		return false, badOffset("the partition %v is not a Debezium source partition; this connector's is {\"server\": %q}", e.Partition, cfg.Name)
	}
	if len(e.Offset) == 0 || string(e.Offset) == "null" {
		return true, resetOffsets(ctx, cfg, log)
	}
	pos, _, err := debezium.Convert(cfg.Source.Type, e.Offset, debezium.Options{PreferFile: cfg.source().preferFileForm(cfg)})
	if err != nil {
		return false, badOffset("%v", err)
	}
	if err := guardOffset(ctx, cfg, pos); err != nil {
		return false, err
	}
	store, err := openPositionStore(cfg, cfg.Source.Type, log)
	if err != nil {
		return false, err
	}
	defer store.close()
	old, _ := store.read(ctx)
	if cfg.HA.Enabled {
		release, err := holdHALock(ctx, cfg, log)
		if err != nil {
			return false, &offsetError{code: 409, msg: err.Error()}
		}
		defer release()
	}
	if err := store.write(ctx, pos); err != nil {
		return false, fmt.Errorf("writing %s: %w", store, err)
	}
	ev := log.Info().Str("command", "PATCH /connectors/"+cfg.Name+"/offsets").Str("position", string(pos)).Str("store", store.String())
	if old.exists {
		ev = ev.Str("old_position", string(old.pos))
	}
	ev.Msg("position set through the REST API")
	return false, nil
}

// guardOffset refuses a position the source could not resume from: for
// Postgres one behind the slot (as `position set`), for MySQL/MariaDB a
// file position ahead of the server's binlog.
func guardOffset(ctx context.Context, cfg Config, pos outboxcdc.Position) error {
	if guard := cfg.source().guardWrite; guard != nil {
		refusal, err := guard(ctx, cfg, pos)
		if refusal != "" {
			return badOffset("refusing to write %s: %s", pos, refusal)
		}
		if err != nil {
			return fmt.Errorf("could not check that the source can resume from %s: %w", pos, err)
		}
	}
	if cfg.Source.Type != binlog.Kind {
		return nil
	}
	qctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	latest, err := cfg.source().latest(qctx, cfg, positionForm(pos))
	if err != nil {
		return fmt.Errorf("reading the server's current position to check %s against it: %w", pos, err)
	}
	dir, err := comparePositions(latest, pos)
	if err == nil && dir < 0 {
		return badOffset("refusing to write %s: it is ahead of the server's binlog (the server is at %s); a position the server has not written yet would skip every transaction up to it", pos, latest)
	}
	return nil
}

// resetOffsets removes the position (DELETE .../offsets): the connector
// then starts where source.start says. Only a checkpoint file can be
// removed this way.
func resetOffsets(ctx context.Context, cfg Config, log zerolog.Logger) error {
	if cfg.Delivery == deliveryExactlyOnce || cfg.Checkpoint.Type != "file" {
		return badOffset("resetting the offsets needs checkpoint.type file (this connector keeps its position in %s); set a position with PATCH instead, or start afresh with `outbox-cdc run --fresh-start`", storeName(cfg))
	}
	if cfg.HA.Enabled {
		release, err := holdHALock(ctx, cfg, log)
		if err != nil {
			return &offsetError{code: 409, msg: err.Error()}
		}
		defer release()
	}
	if err := os.Remove(cfg.Checkpoint.Path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	log.Info().Str("command", "DELETE /connectors/"+cfg.Name+"/offsets").Str("store", cfg.Checkpoint.Path).Msg("position removed through the REST API")
	return nil
}

func storeName(cfg Config) string {
	if cfg.Delivery == deliveryExactlyOnce {
		return "the progress topic (exactly-once)"
	}
	return "checkpoint.type " + strings.TrimSpace(cfg.Checkpoint.Type)
}
