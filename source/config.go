// Package source is the kit both sources (binlog/ for MySQL and MariaDB,
// wal/ for PostgreSQL) are built from: the configuration keys every source
// has (Common), the source.tables patterns (tables.go), the reconnect loop
// with its one backoff rule (reconnect.go), and the registry contract the
// command uses to pick a source by source.type (kind.go). A new source is
// a package that embeds Common in its Config, reconnects with Reconnector
// and implements Kind.
package source

import (
	"time"

	"github.com/outbox-cdc/outbox-cdc/backfill"
	"github.com/outbox-cdc/outbox-cdc/retry"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
)

// StartPending publishes the rows a polling relay had not sent
// (Common.Pending), then streams.
const StartPending = backfill.StartPending

// Common holds the keys every source has. A source's Config embeds it with
// `yaml:",inline"`, so its keys sit directly under source:, and fills the
// defaults that differ (Table, Start, Reconnect) in its DefaultConfig.
type Common struct {
	// DSN is the connection string of the database that holds the outbox
	// table: for mysql go-sql-driver's form "user:pass@tcp(host:3306)/db"
	// (the database in it holds the outbox table); for postgres a libpq URL
	// or keyword/value string, postgres://user:pass@host:5432/db?sslmode=disable,
	// whose role needs the REPLICATION attribute (and ownership of the table
	// to create the publication).
	DSN string `yaml:"dsn"`
	// Table is the outbox table: for mysql a table in DSN's database; for
	// postgres "schema.table" or "table" (schema public), and empty means
	// no table: only logical decoding messages (source.messages) are read,
	// and the publication is created empty.
	Table string `yaml:"table"`
	// Tables, when set, replaces Table: several outbox tables read over one
	// stream, each "database.table" (mysql) or "schema.table" (postgres) or
	// just "table" (in DSN's database; schema public); either part may hold
	// the wildcards * and % (any run of characters), e.g. "*.outbox_message"
	// or "tenant_%.outbox". A table created later that matches is read from
	// its first row on; on postgres a pattern takes a publication FOR TABLES
	// IN SCHEMA (a literal schema) or FOR ALL TABLES (a schema pattern),
	// which need a superuser to create (see docs/sources.md).
	Tables []string `yaml:"tables"`
	// Start is where a first run (no checkpoint) begins: earliest, latest
	// or pending (first the rows the polling relay had not sent, see
	// source.pending). mysql: latest (the default) is the server's current
	// position, only new transactions; earliest the oldest binlog still on
	// the server. postgres: earliest (the default) is what the slot retains
	// and never confirmed (for a slot this run creates, the transactions
	// committed after its creation); latest the server's current WAL
	// position, skipping what an existing slot retains.
	Start string `yaml:"start"`
	// Pending selects the rows start: pending publishes first.
	Pending backfill.Config `yaml:"pending"`
	// Reconnect bounds the capped exponential wait between reconnection
	// attempts; the wait starts again from min only after a stream that
	// stayed up for a while (see docs/faults.md).
	Reconnect Backoff `yaml:"reconnect"`
}

// Backoff is a capped exponential backoff: the first wait is Min, each
// further one doubles, up to Max.
type Backoff struct {
	// Min is the wait before the first reconnection attempt; it doubles
	// with each failed attempt.
	Min time.Duration `yaml:"min"`
	// Max caps the wait between reconnection attempts.
	Max time.Duration `yaml:"max"`
}

// Policy is the backoff as a retry policy (no jitter, no attempt limit).
func (b Backoff) Policy() retry.Policy { return retry.Policy{Min: b.Min, Max: b.Max} }

// Validate checks the bounds; its keys are relative to the source section
// ("reconnect.min").
func (b Backoff) Validate() []error {
	var errs []error
	if b.Min <= 0 {
		errs = append(errs, outboxcdc.KeyErrorf("reconnect.min", "", "must be positive"))
	}
	if b.Max < b.Min {
		errs = append(errs, outboxcdc.KeyErrorf("reconnect.max", "", "%s is below reconnect.min %s", b.Max, b.Min))
	}
	return errs
}
