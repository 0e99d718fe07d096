package sink

import (
	"errors"
	"time"

	"github.com/outbox-cdc/outbox-cdc/retry"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
)

// Config is what every message-broker sink shares; each sink's
// configuration inlines it, so the keys sit directly under sink:.
type Config struct {
	// MaxInFlight bounds the records published and not yet acknowledged
	// by the broker (the publish window); the pipeline waits while it is
	// reached.
	MaxInFlight int `yaml:"max_in_flight"`
	// MaxInFlightBytes bounds the bytes of those records (destination,
	// key, value and headers); a single larger record is still sent,
	// alone.
	MaxInFlightBytes int64 `yaml:"max_in_flight_bytes"`
	// MaxMessageBytes is the largest record (value, key, headers and
	// destination) the sink sends. A larger one is refused before
	// it is sent, as a permanent error naming the row, so
	// pipeline.on_error applies. Keep it at or below the broker's own
	// limit.
	MaxMessageBytes int `yaml:"max_message_bytes"`
	// AckTimeout is how long the sink waits for the broker's answer to a
	// published record before it gives the connection up and sends the
	// unanswered records again on a new one.
	AckTimeout time.Duration `yaml:"ack_timeout"`
	// DialTimeout bounds connecting (TCP, TLS, handshake, authentication).
	DialTimeout time.Duration `yaml:"dial_timeout"`
	// RetryBackoffMin is the first wait before a write is tried again
	// while the broker fails; the wait doubles with each failed attempt.
	RetryBackoffMin time.Duration `yaml:"retry_backoff_min"`
	// RetryBackoffMax caps the wait between two attempts of a write while
	// the broker fails.
	RetryBackoffMax time.Duration `yaml:"retry_backoff_max"`
	// ReadyInterval is how often an idle sink checks that the broker
	// answers, for /readyz and outbox_cdc_sink_connected.
	ReadyInterval time.Duration `yaml:"ready_interval"`
}

// DefaultConfig returns the shared defaults.
func DefaultConfig() Config {
	return Config{
		MaxInFlight:      1000,
		MaxInFlightBytes: 16 << 20,
		MaxMessageBytes:  1 << 20,
		AckTimeout:       30 * time.Second,
		DialTimeout:      10 * time.Second,
		RetryBackoffMin:  100 * time.Millisecond,
		RetryBackoffMax:  10 * time.Second,
		ReadyInterval:    5 * time.Second,
	}
}

// Validate checks the shared keys; messages name the key under sink.
func (c Config) Validate() error {
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, outboxcdc.KeyErrorf(key, "", format, args...))
	}
	if c.MaxInFlight < 1 {
		bad("max_in_flight", "must be at least 1, got %d", c.MaxInFlight)
	}
	if c.MaxInFlightBytes < 1024 {
		bad("max_in_flight_bytes", "must be at least 1024, got %d", c.MaxInFlightBytes)
	}
	if c.MaxMessageBytes < 1024 {
		bad("max_message_bytes", "must be at least 1024, got %d", c.MaxMessageBytes)
	}
	positive := func(key string, d time.Duration) {
		if d <= 0 {
			bad(key, "must be a positive duration such as 10s, got %s", d)
		}
	}
	positive("ack_timeout", c.AckTimeout)
	positive("dial_timeout", c.DialTimeout)
	positive("retry_backoff_min", c.RetryBackoffMin)
	positive("retry_backoff_max", c.RetryBackoffMax)
	positive("ready_interval", c.ReadyInterval)
	if c.RetryBackoffMax < c.RetryBackoffMin {
		bad("retry_backoff_max", "%s is below retry_backoff_min %s", c.RetryBackoffMax, c.RetryBackoffMin)
	}
	return errors.Join(errs...)
}

func (c Config) policy() retry.Policy {
	return retry.Policy{Min: c.RetryBackoffMin, Max: c.RetryBackoffMax, Jitter: 0.2}
}
