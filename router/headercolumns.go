package router

import (
	"fmt"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
)

// HeaderColumn is one route.headers entry resolved: the record header Key
// the relay sends and the outbox Column it reads the value from.
type HeaderColumn struct {
	Key    string
	Column string
	// Role is set when Column is one of the role columns (message id,
	// aggregate type, aggregate id, event type, payload): the header
	// repeats that role's value.
	Role bool
}

// HeaderColumns returns the route.headers entries in order (the preset's
// built-in headers are not among them), so that a writer can fill the
// columns the relay will read: the outbox writer (package outboxwriter)
// builds its layout from it.
func (c Config) HeaderColumns() ([]HeaderColumn, error) {
	p, err := c.preset()
	if err != nil {
		return nil, err
	}
	names := c.columnNames(p)
	out := make([]HeaderColumn, 0, len(c.Headers))
	for i, entry := range c.Headers {
		col, key, _, err := parseHeaderEntry(entry)
		if err != nil {
			return nil, outboxcdc.KeyErrorf(fmt.Sprintf("headers[%d]", i), "", "%v", err)
		}
		out = append(out, HeaderColumn{Key: key, Column: col, Role: roleOf(names, col) != roleNone})
	}
	return out, nil
}
