package main

import (
	"context"
	"fmt"
	"io"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
)

// refuseUnresumable guards the commands that write a checkpoint by hand
// with the source's guardWrite (sources.go): a position `run` would refuse
// (for Postgres, one behind the replication slot's confirmed position) is
// not written, since writing it would only stop the connector. It returns
// 1 after saying why, or 0 to go on (also when the guard cannot decide:
// `run` checks again).
func refuseUnresumable(ctx context.Context, cfg Config, pos outboxcdc.Position, what string, stdout, stderr io.Writer) int {
	guard := cfg.source().guardWrite
	if guard == nil {
		return 0
	}
	refusal, err := guard(ctx, cfg, pos)
	switch {
	case refusal != "":
		fmt.Fprintf(stderr, "outbox-cdc %s: refusing to write %s: %s\n", what, pos, refusal)
		return 1
	case err != nil:
		fmt.Fprintf(stdout, "  note: could not check that the source can resume from it (%v); `run` checks again and refuses it if not\n", err)
	}
	return 0
}
