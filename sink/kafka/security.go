package kafka

import (
	"crypto/tls"
	"errors"
	"strings"

	"github.com/IBM/sarama"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/outbox-cdc/outbox-cdc/tlsconf"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
)

// TLSConfig is sink.tls: TLS to the brokers (Kafka's security.protocol SSL,
// or SASL_SSL with sink.sasl).
type TLSConfig struct {
	// Enabled turns TLS to the brokers on.
	Enabled       bool `yaml:"enabled"`
	tlsconf.Files `yaml:",inline"`
	// InsecureSkipVerify accepts any broker certificate: encryption without
	// authentication. Only for tests; logged as a warning.
	InsecureSkipVerify bool `yaml:"insecure_skip_verify"`
}

// SASL mechanisms (sink.sasl.mechanism).
const (
	SASLPlain       = "PLAIN"
	SASLSCRAMSHA256 = "SCRAM-SHA-256"
	SASLSCRAMSHA512 = "SCRAM-SHA-512"
)

// SASLConfig is sink.sasl: authentication to the brokers.
type SASLConfig struct {
	// Mechanism is PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512; empty turns SASL
	// off.
	Mechanism string `yaml:"mechanism"`
	// Username is the SASL user name.
	Username string `yaml:"username"`
	// Password: prefer password_file, a file such as a mounted Secret.
	Password string `yaml:"password"`
	// AllowPlaintext lets PLAIN send the password over a connection without
	// TLS, where anyone on the path reads it. Off: PLAIN needs tls.enabled.
	AllowPlaintext bool `yaml:"allow_plaintext"`
}

func (s SASLConfig) mechanism() string { return strings.ToUpper(strings.TrimSpace(s.Mechanism)) }

// validateSecurity checks sink.tls and sink.sasl (or the same keys under
// section) without reading files.
func (c *KafkaConfig) validateSecurity(section string, bad func(key, format string, args ...any)) {
	t := c.TLS
	if (t.CertFile == "") != (t.KeyFile == "") {
		bad("tls.cert_file", "and %s.tls.key_file: set both (a client certificate and its key) or neither", section)
	}
	if !t.Enabled && (!t.Files.IsZero() || t.InsecureSkipVerify) {
		bad("tls.enabled", "is false but other %s.tls keys are set; set %s.tls.enabled: true", section, section)
	}
	if t.InsecureSkipVerify && (t.CAFile != "" || t.ServerName != "") {
		bad("tls.insecure_skip_verify", "verifies nothing, so ca_file and server_name would be ignored; drop one or the other")
	}
	s := c.SASL
	switch s.mechanism() {
	case "":
		if s.Username != "" || s.Password != "" {
			bad("sasl.mechanism", "is empty but a username or password is set; set PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512")
		}
		return
	case SASLPlain:
		if !t.Enabled && !s.AllowPlaintext {
			bad("sasl.mechanism", "PLAIN sends the password in clear text: enable %s.tls, or set %s.sasl.allow_plaintext: true if the network is trusted", section, section)
		}
	case SASLSCRAMSHA256, SASLSCRAMSHA512:
	default:
		bad("sasl.mechanism", "%q is not one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512", s.Mechanism)
	}
	if s.Username == "" {
		bad("sasl.username", "required with sasl.mechanism %s", s.mechanism())
	}
	if s.Password == "" {
		bad("sasl.password", "required with sasl.mechanism %s (or sasl.password_file)", s.mechanism())
	}
}

// tlsConfig reads the certificate files; nil when TLS is off. ServerName
// stays empty unless set, so each client fills in the broker it dials.
func (c *KafkaConfig) tlsConfig() (*tls.Config, error) {
	if !c.TLS.Enabled {
		return nil, nil
	}
	v := tlsconf.VerifyFull
	if c.TLS.InsecureSkipVerify {
		v = tlsconf.VerifyNone
	}
	tc, err := c.TLS.Files.Build(v, "")
	if err != nil {
		return nil, outboxcdc.KeysUnder("tls", err)
	}
	return tc, nil
}

// applySecurity sets TLS and SASL on a sarama configuration.
func (c *KafkaConfig) applySecurity(s *sarama.Config) error {
	tc, err := c.tlsConfig()
	if err != nil {
		return err
	}
	if tc != nil {
		s.Net.TLS.Enable = true
		s.Net.TLS.Config = tc
	}
	mech := c.SASL.mechanism()
	if mech == "" {
		return nil
	}
	n := &s.Net.SASL
	n.Enable = true
	n.Handshake = true
	n.User, n.Password = c.SASL.Username, c.SASL.Password
	switch mech {
	case SASLPlain:
		n.Mechanism = sarama.SASLTypePlaintext
	case SASLSCRAMSHA256:
		n.Mechanism = sarama.SASLTypeSCRAMSHA256
		n.SCRAMClientGeneratorFunc = func() sarama.SCRAMClient { return &scramClient{} }
	case SASLSCRAMSHA512:
		n.Mechanism = sarama.SASLTypeSCRAMSHA512
		n.SCRAMClientGeneratorFunc = func() sarama.SCRAMClient { return &scramClient{sha512: true} }
	default:
		return outboxcdc.KeyErrorf("sasl.mechanism", "", "%q is not supported", c.SASL.Mechanism)
	}
	return nil
}

// clientConfig is sarama() with TLS and SASL applied.
func (c *KafkaConfig) clientConfig() (*sarama.Config, error) {
	s := c.sarama()
	if err := c.applySecurity(s); err != nil {
		return nil, err
	}
	return s, nil
}

// ClientSecurity checks tls and sasl, set under section (placement), as
// sink.tls and sink.sasl are checked, and returns them as franz-go client
// options, for another Kafka client of the process. It reads the
// certificate files; a mistake names the key under section.
func ClientSecurity(section string, t TLSConfig, s SASLConfig) ([]kgo.Opt, error) {
	c := KafkaConfig{TLS: t, SASL: s}
	var errs []error
	c.validateSecurity(section, func(key, format string, args ...any) {
		errs = append(errs, outboxcdc.KeyErrorf(key, "", format, args...))
	})
	if len(errs) > 0 {
		return nil, outboxcdc.KeysUnder(section, joinErrors(errs))
	}
	opts, err := c.kgoSecurity()
	if err != nil {
		return nil, outboxcdc.KeysUnder(section, err)
	}
	return opts, nil
}

// joinErrors is errors.Join, except that one error stays itself.
func joinErrors(errs []error) error {
	if len(errs) == 1 {
		return errs[0]
	}
	return errors.Join(errs...)
}

// kgoSecurity is the same TLS and SASL for a franz-go client.
func (c *KafkaConfig) kgoSecurity() ([]kgo.Opt, error) {
	tc, err := c.tlsConfig()
	if err != nil {
		return nil, err
	}
	var opts []kgo.Opt
	if tc != nil {
		opts = append(opts, kgo.DialTLSConfig(tc))
	}
	user, pass := c.SASL.Username, c.SASL.Password
	switch c.SASL.mechanism() {
	case "":
	case SASLPlain:
		opts = append(opts, kgo.SASL(plain.Auth{User: user, Pass: pass}.AsMechanism()))
	case SASLSCRAMSHA256:
		opts = append(opts, kgo.SASL(scram.Auth{User: user, Pass: pass}.AsSha256Mechanism()))
	case SASLSCRAMSHA512:
		opts = append(opts, kgo.SASL(scram.Auth{User: user, Pass: pass}.AsSha512Mechanism()))
	default:
		return nil, outboxcdc.KeyErrorf("sasl.mechanism", "", "not supported")
	}
	return opts, nil
}

// warnSecurity logs the settings that weaken the connection to the brokers.
func (c *KafkaConfig) warnSecurity(log zerolog.Logger) {
	if c.TLS.Enabled && c.TLS.InsecureSkipVerify {
		log.Warn().Msg("sink.tls.insecure_skip_verify: the brokers' certificates are not verified; a man in the middle can read and change everything sent to Kafka")
	}
	if c.SASL.mechanism() == SASLPlain && !c.TLS.Enabled {
		log.Warn().Msg("sink.sasl.allow_plaintext: the SASL/PLAIN password is sent without TLS")
	}
}
