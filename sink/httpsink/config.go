package httpsink

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/outbox-cdc/outbox-cdc/router"
	"github.com/outbox-cdc/outbox-cdc/sink"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
)

// Modes and bodies.
const (
	ModeMessage  = "message"
	ModeBatch    = "batch"
	BodyEnvelope = "envelope"
	BodyRaw      = "raw"
)

// Config is the sink section for sink.type: http. The URL each record is
// posted to is route.topic, rendered per row.
type Config struct {
	// Mode is message (one POST per record) or batch (one POST carries up
	// to batch_max_messages records of one URL, as a JSON array of
	// envelopes).
	Mode string `yaml:"mode"`
	// BatchMaxMessages is the most records in one POST in batch mode.
	BatchMaxMessages int `yaml:"batch_max_messages"`
	// Body is envelope (a JSON object with the message id, aggregate id,
	// event type, timestamp, headers and payload) or raw (the payload as
	// stored, the rest in HTTP headers). Batch mode needs envelope.
	Body string `yaml:"body"`
	// ContentType is the Content-Type of a raw body.
	ContentType string `yaml:"content_type"`
	// SigningSecretFile is a file holding the signing secret; when set,
	// every request carries webhook-id, webhook-timestamp and
	// webhook-signature in the Standard Webhooks scheme (v1, HMAC-SHA256).
	// A secret written whsec_<base64> is the base64-decoded bytes, any
	// other the file's bytes without the trailing newline.
	SigningSecretFile string `yaml:"signing_secret_file"`
	// Headers are sent with every request, as name: value pairs (an
	// Authorization header, a tenant); their values are never logged.
	Headers map[string]string `yaml:"headers"`
	// RetryAfterMax caps the wait a receiver may ask for in the
	// retry-after header of a 429 or 5xx answer.
	RetryAfterMax time.Duration `yaml:"retry_after_max"`
	// ProbeURL is where an idle sink sends a HEAD request to check that
	// the receiver answers (for /readyz); empty: the scheme and host of
	// route.topic with the path /.
	ProbeURL string `yaml:"probe_url"`
	// TLS to the receiver (on with an https:// URL); cert_file and
	// key_file send a client certificate (mTLS).
	TLS         sink.TLS `yaml:"tls"`
	sink.Config `yaml:",inline"`

	// Template is route.topic, set by the command (not a key of this
	// section).
	Template string `yaml:"-"`
	// Name is the connector's name, sent as the User-Agent's comment.
	Name string `yaml:"-"`
}

// Destination is what route.topic names with this sink: an http:// or
// https:// URL. Placeholder values must be URL-safe (unreserved
// characters), so a row cannot change the URL's shape.
var Destination = &router.Destination{
	Noun:        "HTTP URL",
	AggregateID: true,
	MaxLen:      8192,
	Value:       unreserved,
	Legal:       "in placeholder values: a-z A-Z 0-9 - . _ ~",
	Check: func(s string) string {
		if why := urlProblem(s); why != "" {
			return why
		}
		return ""
	},
}

func unreserved(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~'
}

// urlProblem says why s is not an absolute http(s) URL, or "".
func urlProblem(s string) string {
	u, err := url.Parse(s)
	switch {
	case err != nil:
		return "is not a URL"
	case u.Scheme != "http" && u.Scheme != "https":
		return "is not an http:// or https:// URL"
	case u.Host == "":
		return "has no host"
	}
	return ""
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	c := Config{
		Mode:             ModeMessage,
		BatchMaxMessages: 100,
		Body:             BodyEnvelope,
		ContentType:      "application/json",
		RetryAfterMax:    time.Minute,
		Config:           sink.DefaultConfig(),
	}
	c.MaxInFlight = 16 // concurrent requests
	c.AckTimeout = 10 * time.Second
	return c
}

// Validate checks the configuration without connecting; it reads the
// secret and certificate files, so a missing one fails at start.
func (c Config) Validate() error {
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, outboxcdc.KeyErrorf(key, "", format, args...))
	}
	switch c.Mode {
	case ModeMessage, ModeBatch:
	default:
		bad("mode", "want message or batch, got %q", c.Mode)
	}
	switch c.Body {
	case BodyEnvelope:
	case BodyRaw:
		if c.Mode == ModeBatch {
			bad("body", "raw cannot carry several records in one request: use body: envelope with mode: batch")
		}
	default:
		bad("body", "want envelope or raw, got %q", c.Body)
	}
	if c.BatchMaxMessages < 1 {
		bad("batch_max_messages", "must be at least 1, got %d", c.BatchMaxMessages)
	}
	if c.RetryAfterMax < 0 {
		bad("retry_after_max", "must not be negative, got %s", c.RetryAfterMax)
	}
	// route.topic is no key of this section: wrapped, its error keeps its
	// own name when the command puts the section's keys under sink.
	if c.Template == "" {
		errs = append(errs, fmt.Errorf("%w", outboxcdc.KeyErrorf("route.topic", "set it to the receiver's URL, e.g. https://hooks.example.com/outbox/{aggregate_type}",
			"is required with sink.type http")))
	} else if why := urlProblem(strings.NewReplacer("{", "", "}", "").Replace(c.Template)); why != "" {
		errs = append(errs, fmt.Errorf("%w", outboxcdc.KeyErrorf("route.topic", "", "%q %s", c.Template, why)))
	}
	if c.ProbeURL != "" {
		if why := urlProblem(c.ProbeURL); why != "" {
			bad("probe_url", "%q %s", c.ProbeURL, why)
		}
	}
	for k := range c.Headers {
		if !validHeaderName(k) {
			bad("headers", "%q is not a valid HTTP header name", k)
		}
	}
	if c.SigningSecretFile != "" {
		if _, err := c.secret(); err != nil {
			bad("signing_secret_file", "%v", err)
		}
	}
	if err := c.TLS.Validate(); err != nil {
		errs = append(errs, outboxcdc.KeysUnder("tls", err))
	} else if err := c.TLS.Load(); err != nil {
		errs = append(errs, err)
	}
	if err := c.Config.Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func validHeaderName(k string) bool {
	if k == "" {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if !unreserved(c) && strings.IndexByte("!#$%&'*+^`|", c) < 0 {
			return false
		}
	}
	return true
}

// secret reads the signing key (nil: requests are not signed).
func (c Config) secret() ([]byte, error) {
	if c.SigningSecretFile == "" {
		return nil, nil
	}
	b, err := os.ReadFile(c.SigningSecretFile)
	if err != nil {
		return nil, err
	}
	return parseSecret(b)
}

// probeURL is where Probe sends its HEAD request ("": nowhere, the
// template's host depends on the row).
func (c Config) probeURL() string {
	if c.ProbeURL != "" {
		return c.ProbeURL
	}
	u, err := url.Parse(c.Template)
	if err != nil || strings.ContainsAny(u.Scheme+u.Host, "{}") {
		return ""
	}
	return u.Scheme + "://" + u.Host + "/"
}
