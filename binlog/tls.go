package binlog

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"strings"

	mysqldriver "github.com/go-sql-driver/mysql"
	"github.com/rs/zerolog"

	"github.com/outbox-cdc/outbox-cdc/tlsconf"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
)

// TLS modes (source.tls.mode), the MySQL client's --ssl-mode with libpq's
// name for the strictest one.
const (
	TLSDisabled   = "disabled"    // no TLS (unless the DSN's own tls parameter asks for it)
	TLSPreferred  = "preferred"   // TLS when the server offers it, without verifying the server; else plaintext
	TLSRequired   = "required"    // TLS, without verifying the server
	TLSVerifyCA   = "verify-ca"   // TLS; the certificate must chain to ca_file (or the system roots)
	TLSVerifyFull = "verify-full" // verify-ca, and the certificate must name the host (or server_name)
)

// ErrTLS: the TLS handshake failed in a way reconnecting cannot fix (the
// server's certificate does not verify, or the server offers no TLS).
var ErrTLS = errors.New("TLS handshake failed")

// TLSConfig is source.tls: TLS for every MySQL connection of the connector
// (the binlog dump, the metadata queries, the HA lock, the checkpoint table,
// `check` and `position`).
type TLSConfig struct {
	// Mode is disabled, preferred, required, verify-ca or verify-full.
	// MySQL's spellings (VERIFY_IDENTITY, DISABLED, ...) and libpq's
	// (disable, require, ...) are accepted too.
	Mode          string `yaml:"mode"`
	tlsconf.Files `yaml:",inline"`
}

// normalizeTLSMode maps the accepted spellings to the TLS* constants; an
// unknown mode is returned lower-cased for the error message.
func normalizeTLSMode(m string) string {
	m = strings.ReplaceAll(strings.ToLower(strings.TrimSpace(m)), "_", "-")
	switch m {
	case "", "disable", "off", "false":
		return TLSDisabled
	case "prefer":
		return TLSPreferred
	case "require", "on", "true":
		return TLSRequired
	case "verify-identity":
		return TLSVerifyFull
	}
	return m
}

// validate checks the section against the DSN. Keys are relative to
// source.tls.
func (t TLSConfig) validate(dsn string) error {
	mode := normalizeTLSMode(t.Mode)
	switch mode {
	case TLSDisabled, TLSPreferred, TLSRequired, TLSVerifyCA, TLSVerifyFull:
	default:
		return outboxcdc.KeyErrorf("mode", "", "%q is not one of disabled, preferred, required, verify-ca, verify-full", t.Mode)
	}
	if err := t.Files.Validate(); err != nil {
		return err
	}
	switch {
	case mode == TLSDisabled && !t.Files.IsZero():
		return outboxcdc.KeyErrorf("mode", "set tls.mode to verify-full (or verify-ca, required)", "is disabled but other tls keys are set")
	case (mode == TLSPreferred || mode == TLSRequired) && t.CAFile != "":
		return outboxcdc.KeyErrorf("ca_file", "set tls.mode to verify-ca or verify-full", "%s does not verify the server, so a CA is not used", mode)
	case (mode == TLSPreferred || mode == TLSRequired || mode == TLSVerifyCA) && t.ServerName != "":
		return outboxcdc.KeyErrorf("server_name", "set tls.mode to verify-full", "%s does not check the server's name", mode)
	}
	if mode != TLSDisabled {
		if dc, err := mysqldriver.ParseDSN(dsn); err == nil && dc.TLSConfig != "" {
			return outboxcdc.KeyErrorf("mode", "set TLS in one place: prefer source.tls and drop tls= from the DSN", "the DSN has a tls parameter too")
		}
	}
	return nil
}

// ConnDSN returns DSN with source.tls applied: the DSN every MySQL
// connection of the connector opens, the binlog dump connection included
// (it takes the *tls.Config that go-sql-driver's ParseDSN resolves). It
// reads the certificate files and registers the TLS configuration with
// go-sql-driver under a name derived from the settings, so calling it again
// registers the same name with freshly read files. c must be valid.
func (c Config) ConnDSN() (string, error) {
	mode := normalizeTLSMode(c.TLS.Mode)
	if mode == TLSDisabled {
		return c.DSN, nil
	}
	dc, err := mysqldriver.ParseDSN(c.DSN)
	if err != nil {
		return "", outboxcdc.KeyErrorf("dsn", "", "not a valid go-sql-driver DSN")
	}
	host := ""
	if dc.Net != "unix" {
		if h, _, err := net.SplitHostPort(dc.Addr); err == nil {
			host = h
		} else {
			host = dc.Addr
		}
	}
	if mode == TLSVerifyFull && host == "" && c.TLS.ServerName == "" {
		return "", outboxcdc.KeyErrorf("tls.server_name", "", "required with verify-full over a unix socket (there is no host name to check)")
	}
	verify := map[string]tlsconf.Verify{
		TLSPreferred: tlsconf.VerifyNone, TLSRequired: tlsconf.VerifyNone,
		TLSVerifyCA: tlsconf.VerifyCA, TLSVerifyFull: tlsconf.VerifyFull,
	}[mode]
	tc, err := c.TLS.Files.Build(verify, host)
	if err != nil {
		return "", outboxcdc.KeysUnder("tls", err)
	}
	sum := sha256.Sum256([]byte(strings.Join([]string{mode, c.TLS.CAFile, c.TLS.CertFile, c.TLS.KeyFile, c.TLS.ServerName, host}, "\x00")))
	name := "outbox-cdc-" + hex.EncodeToString(sum[:8])
	if err := mysqldriver.RegisterTLSConfig(name, tc); err != nil {
		return "", fmt.Errorf("tls: %w", err)
	}
	dc.TLSConfig, dc.TLS = name, nil
	dc.AllowFallbackToPlaintext = mode == TLSPreferred
	return dc.FormatDSN(), nil
}

// warnTLS logs the modes that encrypt without authenticating the server.
func (c Config) warnTLS(log zerolog.Logger) {
	switch mode := normalizeTLSMode(c.TLS.Mode); mode {
	case TLSPreferred, TLSRequired:
		log.Warn().Str("tls_mode", mode).Msg("source.tls.mode does not verify the server's certificate: the connection is encrypted but a man in the middle can read it; use verify-full with ca_file")
	}
}

// binlogTLS is the TLS configuration of the binlog dump connection. With
// preferred (the DSN's allowFallbackToPlaintext), go-mysql has no fallback
// of its own: use TLS only if the metadata connection got it.
func (s *Source) binlogTLS(ctx context.Context, db *sql.DB) *tls.Config {
	if s.dsn.TLS == nil || !s.dsn.AllowFallbackToPlaintext {
		return s.dsn.TLS
	}
	var name, cipher string
	if err := db.QueryRowContext(ctx, "SHOW SESSION STATUS LIKE 'Ssl_cipher'").Scan(&name, &cipher); err == nil && cipher == "" {
		s.log.Info().Msg("source.tls.mode preferred: the server offers no TLS; the binlog connection is plaintext")
		return nil
	}
	return s.dsn.TLS
}
