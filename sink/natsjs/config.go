package natsjs

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/outbox-cdc/outbox-cdc/router"
	"github.com/outbox-cdc/outbox-cdc/sink"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
)

// Config is the sink section for sink.type: nats.
type Config struct {
	// URL is the server, nats://host:4222 (tls://host:4222 for TLS);
	// several comma-separated for a cluster.
	URL string `yaml:"url"`
	// Username is the user name the connection authenticates with,
	// together with Password; or set Token, or CredsFile.
	Username string `yaml:"username"`
	// Password is the password of the user name (prefer password_file).
	Password string `yaml:"password"`
	// Token authenticates the connection with a token instead.
	Token string `yaml:"token"`
	// CredsFile is a NATS .creds file (user JWT and NKey seed) that
	// authenticates the connection instead.
	CredsFile string `yaml:"creds_file"`
	// Stream is the JetStream stream the subjects belong to. Every
	// publish expects it (a subject stored by another stream is an
	// error), and its PubAck must name it.
	Stream string `yaml:"stream"`
	// CreateStream creates Stream at start when it does not exist, with
	// StreamSubjects, DuplicateWindow, StreamStorage and StreamReplicas.
	// An existing stream is used as it is.
	CreateStream bool `yaml:"create_stream"`
	// StreamSubjects are the subjects of a created stream. Empty: the
	// route.topic template with each placeholder token as '*' (the
	// default template gives outbox.*.*), plus pipeline.dlq_topic.
	StreamSubjects []string `yaml:"stream_subjects"`
	// DuplicateWindow is a created stream's duplicate window: a record
	// sent again within it with the same Nats-Msg-Id is not stored twice.
	DuplicateWindow time.Duration `yaml:"duplicate_window"`
	StreamStorage   string        `yaml:"stream_storage"`  // file | memory
	StreamReplicas  int           `yaml:"stream_replicas"` // 1 to 5
	// PingInterval is how often the client pings an idle server; a
	// connection that misses two pings is given up.
	PingInterval time.Duration `yaml:"ping_interval"`
	// TLS to the server (also on with a tls:// URL).
	TLS         sink.TLS `yaml:"tls"`
	sink.Config `yaml:",inline"`

	// Template is route.topic and DeadLetterTopic pipeline.dlq_topic, set
	// by the command; they derive the subjects of a created stream.
	Template        string `yaml:"-"`
	DeadLetterTopic string `yaml:"-"`
	// Name is the connection name the server shows: the connector's.
	Name string `yaml:"-"`
}

// DefaultTopic is the subject template when route.topic is not set.
const DefaultTopic = "outbox.{aggregate_type}.{aggregate_id}"

// maxSubject bounds a subject: the server refuses protocol lines longer
// than its max_control_line (4 KiB by default) with the connection.
const maxSubject = 1024

// Destination is what route.topic names with this sink: a subject. A
// placeholder's value is one token (no '.'), and no token is empty or a
// wildcard.
var Destination = &router.Destination{
	Noun:        "NATS subject",
	Default:     DefaultTopic,
	AggregateID: true,
	MaxLen:      maxSubject,
	Literal:     func(c byte) bool { return c > ' ' && c != 0x7f && c != '*' && c != '>' },
	Value:       func(c byte) bool { return c > ' ' && c != 0x7f && c != '*' && c != '>' && c != '.' },
	Legal:       "printable characters but * and >; no '.' inside a value",
	Check: func(s string) string {
		if strings.HasPrefix(s, ".") || strings.HasSuffix(s, ".") || strings.Contains(s, "..") {
			return "has an empty token"
		}
		return ""
	},
}

// DefaultConfig returns the defaults; URL still has to be set.
func DefaultConfig() Config {
	return Config{
		Stream:          "OUTBOX",
		DuplicateWindow: 2 * time.Minute,
		StreamStorage:   "file",
		StreamReplicas:  1,
		PingInterval:    10 * time.Second,
		Config:          sink.DefaultConfig(),
	}
}

// Validate checks the configuration without connecting.
func (c Config) Validate() error {
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, outboxcdc.KeyErrorf(key, "", format, args...))
	}
	if c.URL == "" {
		bad("url", "required: nats://host:4222")
	}
	for _, s := range strings.Split(c.URL, ",") {
		if c.URL == "" {
			break
		}
		u, err := url.Parse(strings.TrimSpace(s))
		if err != nil || u.Host == "" || (u.Scheme != "nats" && u.Scheme != "tls") {
			bad("url", "%q is not nats://host:port or tls://host:port", outboxcdcRedact(s))
		}
	}
	if c.Stream == "" || strings.ContainsAny(c.Stream, " \t\r\n.*>/\\") {
		bad("stream", "%q: a stream name is required and holds no spaces, '.', '*', '>', '/' or '\\'", c.Stream)
	}
	auths := 0
	for _, set := range []bool{c.Username != "" || c.Password != "", c.Token != "", c.CredsFile != ""} {
		if set {
			auths++
		}
	}
	if auths > 1 {
		bad("username", "set one of username/password, token and creds_file")
	}
	if c.Password != "" && c.Username == "" {
		bad("username", "required with sink.password")
	}
	if c.DuplicateWindow <= 0 {
		bad("duplicate_window", "must be positive, got %s", c.DuplicateWindow)
	}
	if c.StreamStorage != "file" && c.StreamStorage != "memory" {
		bad("stream_storage", "%q is not file or memory", c.StreamStorage)
	}
	if c.StreamReplicas < 1 || c.StreamReplicas > 5 {
		bad("stream_replicas", "must be 1 to 5, got %d", c.StreamReplicas)
	}
	if c.PingInterval < time.Second {
		bad("ping_interval", "must be at least 1s, got %s", c.PingInterval)
	}
	for i, s := range c.StreamSubjects {
		if !validFilter(s) {
			bad(fmt.Sprintf("stream_subjects[%d]", i), "%q is not a NATS subject (tokens separated by '.', '*' and '>' only as whole tokens, '>' last)", s)
		}
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

func outboxcdcRedact(s string) string {
	u, err := url.Parse(strings.TrimSpace(s))
	if err != nil || u.User == nil {
		return s
	}
	u.User = url.User(u.User.Username())
	return u.String()
}

// subjects returns the subjects a created stream captures.
func (c Config) subjects() []string {
	if len(c.StreamSubjects) > 0 {
		return c.StreamSubjects
	}
	t := c.Template
	if t == "" {
		t = DefaultTopic
	}
	out := []string{SubjectsOf(t)}
	if c.DeadLetterTopic != "" && !matches(out[0], c.DeadLetterTopic) {
		out = append(out, c.DeadLetterTopic)
	}
	return out
}

// SubjectsOf turns a subject template into the subject filter that
// captures every subject it renders: each token holding a placeholder
// becomes '*'.
func SubjectsOf(template string) string {
	toks := strings.Split(template, ".")
	for i, t := range toks {
		if strings.Contains(t, "{") {
			toks[i] = "*"
		}
	}
	return strings.Join(toks, ".")
}

// validFilter reports whether s is a subject or a subject filter.
func validFilter(s string) bool {
	if s == "" {
		return false
	}
	toks := strings.Split(s, ".")
	for i, t := range toks {
		switch {
		case t == "":
			return false
		case t == ">" && i != len(toks)-1:
			return false
		case t != "*" && t != ">" && strings.ContainsAny(t, "*> \t\r\n"):
			return false
		}
	}
	return true
}

// matches reports whether subject falls under filter ('*' one token, '>'
// one or more).
func matches(filter, subject string) bool {
	f := strings.Split(filter, ".")
	s := strings.Split(subject, ".")
	for i, t := range f {
		if t == ">" {
			return len(s) > i
		}
		if i >= len(s) || t != "*" && t != s[i] {
			return false
		}
	}
	return len(f) == len(s)
}
