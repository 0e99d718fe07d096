package outboxcdc

import (
	"fmt"

	"github.com/rs/zerolog"
)

// UpdateError stops a source that met an UPDATE of an outbox row while
// Columns.OnUpdate is "fatal" (Debezium's table.op.invalid.behavior=fatal).
// It is permanent: the connector delivers and checkpoints every
// transaction before the one holding the UPDATE and exits; a restart meets
// the same UPDATE again until the setting changes.
type UpdateError struct {
	Origin string
}

func (e *UpdateError) Error() string {
	return fmt.Sprintf("outbox row UPDATEd at %s and route.on_update is fatal: outbox rows are written once; "+
		"find what updates them, or set route.on_update to skip, warn or error (the update is then skipped)", e.Origin)
}

// UpdateSeen is how a source applies c.OnUpdate to n UPDATEd outbox rows
// found at origin: it counts them in m's skipped operations, logs them at
// warn or error level when asked (the position only, never a value), and
// returns an *UpdateError when OnUpdate is "fatal". Sources call it from
// their reading goroutine.
func (c *Columns) UpdateSeen(log *zerolog.Logger, m *SourceMetrics, origin string, n int) error {
	if n <= 0 {
		return nil
	}
	switch c.OnUpdate {
	case "fatal":
		return &UpdateError{Origin: origin}
	case "warn":
		log.Warn().Str("origin", origin).Int("rows", n).Msg("outbox row UPDATEd: skipped (route.on_update: warn)")
	case "error":
		log.Error().Str("origin", origin).Int("rows", n).Msg("outbox row UPDATEd: skipped (route.on_update: error)")
	}
	m.SkippedOperations.WithLabelValues("update").Add(float64(n))
	return nil
}
