package sink

import (
	"crypto/tls"
	"errors"

	"github.com/rs/zerolog"

	"github.com/outbox-cdc/outbox-cdc/tlsconf"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
)

// TLS is sink.tls of a broker sink: the same keys as the Kafka sink's.
// A URL scheme that implies TLS (amqps://, rediss://, tls://) turns it on
// too; these keys then choose the certificates.
type TLS struct {
	// Enabled turns TLS to the broker on (a TLS URL scheme does too).
	Enabled       bool `yaml:"enabled"`
	tlsconf.Files `yaml:",inline"`
	// InsecureSkipVerify accepts any server certificate: encryption
	// without authentication. Only for tests; logged as a warning.
	InsecureSkipVerify bool `yaml:"insecure_skip_verify"`
}

// Validate checks the keys without reading the files.
func (t TLS) Validate() error {
	var errs []error
	if err := t.Files.Validate(); err != nil {
		errs = append(errs, err)
	}
	if !t.Enabled && (!t.Files.IsZero() || t.InsecureSkipVerify) {
		errs = append(errs, outboxcdc.KeyErrorf("enabled", "set sink.tls.enabled: true", "is false but other sink.tls keys are set"))
	}
	if t.InsecureSkipVerify && (t.CAFile != "" || t.ServerName != "") {
		errs = append(errs, outboxcdc.KeyErrorf("insecure_skip_verify", "drop one or the other", "verifies nothing, so ca_file and server_name would be ignored"))
	}
	return errors.Join(errs...)
}

// Load reads the certificate files when TLS is on, so a missing or bad
// file is a configuration error at start rather than a failed connect.
func (t TLS) Load() error {
	if !t.Enabled {
		return nil
	}
	_, err := t.Build(true, "")
	return err
}

// Build reads the certificate files; nil when TLS is off and the URL does
// not ask for it (schemeTLS). host is the name to verify when server_name
// is not set.
func (t TLS) Build(schemeTLS bool, host string) (*tls.Config, error) {
	if !t.Enabled && !schemeTLS {
		return nil, nil
	}
	v := tlsconf.VerifyFull
	if t.InsecureSkipVerify {
		v = tlsconf.VerifyNone
	}
	c, err := t.Files.Build(v, host)
	if err != nil {
		return nil, outboxcdc.KeysUnder("tls", err)
	}
	return c, nil
}

// Warn logs the settings that weaken the connection.
func (t TLS) Warn(log zerolog.Logger) {
	if t.Enabled && t.InsecureSkipVerify {
		log.Warn().Msg("sink.tls.insecure_skip_verify: the broker's certificate is not verified; a man in the middle can read and change everything sent")
	}
}
