package redisstream

import (
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/outbox-cdc/outbox-cdc/router"
	"github.com/outbox-cdc/outbox-cdc/sink"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
)

// Config is the sink section for sink.type: redis.
type Config struct {
	// URL is redis://host:6379/0 (rediss:// for TLS). Credentials in it
	// are allowed, but prefer username and password(_file).
	URL string `yaml:"url"`
	// Username is the Redis 6 ACL user (empty: default); it overrides the
	// URL's.
	Username string `yaml:"username"`
	// Password overrides the URL's password (prefer password_file).
	Password string `yaml:"password"`
	// MaxLen trims each stream to about this many entries at every XADD
	// (MAXLEN ~); 0 does not trim by length.
	MaxLen int64 `yaml:"max_len"`
	// MinIDAge trims entries older than this at every XADD (MINID ~ of
	// now minus the age, as entry ids start with their time in ms); 0
	// does not trim by age.
	MinIDAge time.Duration `yaml:"min_id_age"`
	// ExactTrim trims exactly (=) instead of approximately (~), which
	// costs the server more.
	ExactTrim bool `yaml:"exact_trim"`
	// TLS to the server (also on with a rediss:// URL).
	TLS         sink.TLS `yaml:"tls"`
	sink.Config `yaml:",inline"`
}

// DefaultTopic is the stream key template when route.topic is not set.
const DefaultTopic = "outbox:{aggregate_type}"

// Destination is what route.topic names with this sink: a stream key
// (Redis keys are binary-safe).
var Destination = &router.Destination{
	Noun:        "Redis stream key",
	Default:     DefaultTopic,
	AggregateID: true,
	Legal:       "any bytes",
}

// DefaultConfig returns the defaults; URL still has to be set.
func DefaultConfig() Config {
	c := Config{Config: sink.DefaultConfig()}
	c.MaxInFlight = 500 // XADDs per pipeline round trip
	return c
}

// Validate checks the configuration without connecting.
func (c Config) Validate() error {
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, outboxcdc.KeyErrorf(key, "", format, args...))
	}
	if c.URL == "" {
		bad("url", "required: redis://host:6379/0 (or rediss:// for TLS)")
	} else if u, err := url.Parse(c.URL); err != nil || (u.Scheme != "redis" && u.Scheme != "rediss") {
		bad("url", "want redis://host:port/db or rediss://host:port/db")
	} else if _, err := redis.ParseURL(c.URL); err != nil {
		bad("url", "%v", err)
	}
	if c.MaxLen < 0 {
		bad("max_len", "must not be negative, got %d", c.MaxLen)
	}
	if c.MinIDAge < 0 {
		bad("min_id_age", "must not be negative, got %s", c.MinIDAge)
	}
	if c.MaxLen > 0 && c.MinIDAge > 0 {
		bad("max_len", "and sink.min_id_age: XADD trims by one of them; set one")
	}
	if err := c.TLS.Validate(); err != nil {
		errs = append(errs, outboxcdc.KeysUnder("tls", err))
	} else if err := c.TLS.Load(); err != nil {
		errs = append(errs, err) // Build names the key under tls
	}
	if err := c.Config.Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// options builds the client options. The client's own retries are off
// (MaxRetries -1): the sink's Write is the one retry layer.
func (c Config) options() (*redis.Options, error) {
	o, err := redis.ParseURL(c.URL)
	if err != nil {
		return nil, fmt.Errorf("sink.url: %w", err)
	}
	if c.Password != "" {
		o.Username, o.Password = c.Username, c.Password
	}
	u, _ := url.Parse(c.URL)
	tc, err := c.TLS.Build(u.Scheme == "rediss", u.Hostname())
	if err != nil {
		return nil, err
	}
	o.TLSConfig = tc
	o.DialTimeout = c.DialTimeout
	o.ReadTimeout = c.AckTimeout
	o.WriteTimeout = c.AckTimeout
	o.ContextTimeoutEnabled = true
	o.MaxRetries = -1
	o.PoolSize = 2
	o.MinIdleConns = 0
	o.DisableIdentity = true
	return o, nil
}
