package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
	"github.com/outbox-cdc/outbox-cdc/wal"
)

// refuseUnresumable guards the commands that write a checkpoint by hand
// with the source's guardWrite: for Postgres, a position behind the
// replication slot's confirmed_flush_lsn cannot be streamed from (a
// logical slot is never rewound; the server would silently start at its
// confirmed position), so `run` refuses it, and writing it would only stop
// the connector. It returns 1 after saying so, or 0 to go on (also when
// the guard cannot decide: `run` checks again).
func refuseUnresumable(ctx context.Context, cfg Config, pos outboxcdc.Position, what string, stdout, stderr io.Writer) int {
	guard := cfg.source().guardWrite
	if guard == nil {
		return 0
	}
	err := guard(ctx, cfg, pos)
	switch {
	case errors.Is(err, wal.ErrBehindSlot):
		fmt.Fprintf(stderr, "outbox-cdc %s: refusing to write %s: %v\n"+
			"Nothing between that position and the slot's can be published again from the slot. "+
			"To re-publish rows that are still in the outbox table, see README \"Positions and replay\" (source.start: pending with a pending.where selecting them).\n",
			what, pos, err)
		return 1
	case err != nil:
		fmt.Fprintf(stdout, "  note: could not compare with the replication slot (%v); `run` refuses a position behind the slot's confirmed position\n", err)
	}
	return 0
}
