package binlog

import (
	"errors"
	"hash/fnv"
	"time"

	mysqldriver "github.com/go-sql-driver/mysql"
	"github.com/outbox-cdc/outbox-cdc/backfill"
	"github.com/outbox-cdc/outbox-cdc/source"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
)

// Start settings: where a first run without a checkpoint begins.
const (
	StartLatest   = "latest"   // the server's current position: only new transactions
	StartEarliest = "earliest" // the oldest binlog still on the server
	// StartPending publishes the rows a polling relay had not sent
	// (Pending.Where), then streams; see pending.go.
	StartPending = backfill.StartPending
)

// GTID settings: which position form a first run without a checkpoint uses.
// A checkpoint always keeps the form it was written in.
const (
	GTIDAuto = "auto" // GTID positions when the server has them (MySQL gtid_mode=ON; MariaDB always)
	GTIDOff  = "off"  // file:offset positions
)

// Config configures the MySQL/MariaDB source. cmd/ fills it from YAML.
type Config struct {
	// Common holds dsn, table, tables, start, pending and reconnect, the
	// keys every source has.
	source.Common `yaml:",inline"`
	// ServerID is the replica id this connector registers with; it must be
	// unique among the server's replicas. 0 derives one from the connector
	// name.
	ServerID uint32 `yaml:"server_id"`
	// GTID chooses the position form of a first run: auto | off.
	GTID string `yaml:"gtid"`
	// HeartbeatPeriod asks the server for a heartbeat when the binlog is idle.
	HeartbeatPeriod time.Duration `yaml:"heartbeat_period"`
	// ReadTimeout drops a connection that sent nothing (not even a
	// heartbeat) for this long; the source then reconnects.
	ReadTimeout time.Duration `yaml:"read_timeout"`
	// TLS secures every connection to the server (see tls.go).
	TLS TLSConfig `yaml:"tls"`
	// TakeOver says this instance is entitled to the connector's binlog
	// stream (it holds the HA lock, so any other instance is fenced): a
	// previous binlog dump with the same server_id is ended at once (see
	// dumplock.go). cmd/ sets it when ha.enabled; it has no YAML key.
	TakeOver bool `yaml:"-"`
	// ProgressInterval is the least time between two progress lines while
	// the source is behind or publishing pending rows (log.progress_interval,
	// set by the command; 0: outboxcdc.DefaultProgressInterval).
	ProgressInterval time.Duration `yaml:"-"`
}

// BackoffConfig is a capped exponential backoff (source.Backoff).
type BackoffConfig = source.Backoff

// DefaultConfig returns the defaults; DSN is left empty.
func DefaultConfig() Config {
	return Config{
		Common: source.Common{
			Table:     "outbox_message",
			Start:     StartLatest,
			Pending:   backfill.DefaultConfig(),
			Reconnect: BackoffConfig{Min: time.Second, Max: 30 * time.Second},
		},
		GTID:            GTIDAuto,
		HeartbeatPeriod: 5 * time.Second,
		ReadTimeout:     30 * time.Second,
		TLS:             TLSConfig{Mode: TLSDisabled},
	}
}

// Validate checks the settings without connecting anywhere. Messages name
// the YAML key.
func (c Config) Validate() error {
	var errs []error
	if c.DSN == "" {
		errs = append(errs, outboxcdc.KeyErrorf("dsn", `e.g. "user:pass@tcp(127.0.0.1:3306)/shop"`, "required"))
	} else if dc, err := mysqldriver.ParseDSN(c.DSN); err != nil {
		// The driver's message may quote the DSN; do not repeat it.
		errs = append(errs, outboxcdc.KeyErrorf("dsn", `expected "user:pass@tcp(host:3306)/database"`, "not a valid go-sql-driver DSN"))
	} else if dc.DBName == "" {
		errs = append(errs, outboxcdc.KeyErrorf("dsn", `end it with the database: ".../shop"`, "must name the database that holds the outbox table"))
	}
	if c.Table == "" && len(c.Tables) == 0 {
		errs = append(errs, outboxcdc.KeyErrorf("table", "", "required"))
	}
	if len(c.Tables) > 0 {
		if c.Table != "" && c.Table != DefaultConfig().Table {
			errs = append(errs, outboxcdc.KeyErrorf("tables", "", "set either table or tables, not both"))
		}
		db := ""
		if dc, err := mysqldriver.ParseDSN(c.DSN); err == nil {
			db = dc.DBName
		}
		if _, err := parseTables(c.Tables, db); err != nil {
			errs = append(errs, err)
		}
		if c.Start == StartPending {
			errs = append(errs, outboxcdc.KeyErrorf("start", "", "pending reads one table; it cannot be used with tables"))
		}
	}
	if c.Start != StartLatest && c.Start != StartEarliest && c.Start != StartPending {
		errs = append(errs, outboxcdc.KeyErrorf("start", "", "%q is not one of latest, earliest, pending", c.Start))
	}
	if c.Start == StartPending {
		if err := c.Pending.Validate(); err != nil {
			errs = append(errs, outboxcdc.KeysUnder("pending", err))
		}
	}
	if c.GTID != GTIDAuto && c.GTID != GTIDOff {
		errs = append(errs, outboxcdc.KeyErrorf("gtid", "", "%q is not one of auto, off", c.GTID))
	}
	if c.HeartbeatPeriod <= 0 {
		errs = append(errs, outboxcdc.KeyErrorf("heartbeat_period", "", "must be positive"))
	}
	if c.ReadTimeout <= c.HeartbeatPeriod {
		errs = append(errs, outboxcdc.KeyErrorf("read_timeout", "", "%s must be longer than heartbeat_period %s, or an idle server looks dead", c.ReadTimeout, c.HeartbeatPeriod))
	}
	errs = append(errs, c.Reconnect.Validate()...)
	if err := c.TLS.validate(c.DSN); err != nil {
		errs = append(errs, outboxcdc.KeysUnder("tls", err))
	}
	return errors.Join(errs...)
}

// DeriveServerID maps a connector name to a replica server_id in the upper
// half of the range (2^31 .. 2^32-1), far from the small ids people give
// their real servers, and never 0. The same name always gives the same id,
// so a restarted connector replaces its own old dump thread instead of
// looking like a second replica.
func DeriveServerID(name string) uint32 {
	h := fnv.New32a()
	h.Write([]byte(name))
	return h.Sum32() | 1<<31
}
