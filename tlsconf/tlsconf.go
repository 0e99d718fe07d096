// Package tlsconf builds the *tls.Config of the connector's client
// connections (MySQL/MariaDB, Kafka) from certificate files, the same way
// for every connection: one place decides what "verify" means.
//
// PostgreSQL needs none of this: pgx/pgconn read sslmode, sslrootcert,
// sslcert and sslkey from the DSN for the replication connection and the
// query connections alike.
package tlsconf

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
)

// Files are the certificate settings shared by every TLS section. The keys
// end in _file because they hold paths; the configuration loader's generic
// "key_file reads key from a file" feature does not apply to them (there is
// no ca, cert or key key).
type Files struct {
	// CAFile is a PEM bundle of the CA certificates that sign the server's
	// certificate. Empty: the system's roots.
	CAFile string `yaml:"ca_file"`
	// CertFile is a PEM client certificate, for servers that require
	// client certificates; it needs KeyFile.
	CertFile string `yaml:"cert_file"`
	// KeyFile is the private key of CertFile (PEM); set both or neither.
	KeyFile string `yaml:"key_file"`
	// ServerName is the name the server's certificate must carry. Empty: the
	// host from the DSN or broker address.
	ServerName string `yaml:"server_name"`
}

// IsZero reports whether no file or name is set.
func (f Files) IsZero() bool { return f == Files{} }

// Validate checks the settings without reading the files. Errors are
// *outboxcdc.KeyError with the key relative to the TLS section.
func (f Files) Validate() error {
	if (f.CertFile == "") != (f.KeyFile == "") {
		return outboxcdc.KeyErrorf("cert_file", "set both (a client certificate and its key) or neither", "and key_file go together")
	}
	return nil
}

// Verify is how much of the server's certificate is checked.
type Verify int

const (
	// VerifyNone encrypts but accepts any certificate: it protects against
	// eavesdropping, not against a man in the middle.
	VerifyNone Verify = iota
	// VerifyCA checks that the certificate chains to CAFile (or the system
	// roots), but not the name in it.
	VerifyCA
	// VerifyFull checks the chain and that the certificate names the server
	// (ServerName, else the host dialled).
	VerifyFull
)

// Build reads the files and returns the client configuration. host is the
// name VerifyFull checks when ServerName is empty; pass "" to let the
// client fill it in per connection (Kafka clients dial several brokers and
// set it from each address).
func (f Files) Build(v Verify, host string) (*tls.Config, error) {
	if err := f.Validate(); err != nil {
		return nil, err
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12}
	if f.CAFile != "" {
		pem, err := os.ReadFile(f.CAFile)
		if err != nil {
			return nil, outboxcdc.KeyErrorf("ca_file", "", "%v", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, outboxcdc.KeyErrorf("ca_file", "", "%s holds no PEM certificate", f.CAFile)
		}
		c.RootCAs = pool
	}
	if f.CertFile != "" {
		pair, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
		if err != nil {
			// The error names the files, never their content.
			return nil, outboxcdc.KeyErrorf("cert_file", "", "with key_file: %v", err)
		}
		c.Certificates = []tls.Certificate{pair}
	}
	switch v {
	case VerifyNone:
		c.InsecureSkipVerify = true
	case VerifyCA:
		// crypto/tls verifies chain and name together; skip its check and
		// verify the chain alone.
		c.InsecureSkipVerify = true
		roots := c.RootCAs
		c.VerifyConnection = func(cs tls.ConnectionState) error {
			return verifyChain(cs, roots)
		}
	case VerifyFull:
		c.ServerName = f.ServerName
		if c.ServerName == "" {
			c.ServerName = host
		}
	default:
		return nil, errors.New("tlsconf: unknown verification level")
	}
	return c, nil
}

func verifyChain(cs tls.ConnectionState, roots *x509.CertPool) error {
	if len(cs.PeerCertificates) == 0 {
		return errors.New("tls: the server sent no certificate")
	}
	inter := x509.NewCertPool()
	for _, c := range cs.PeerCertificates[1:] {
		inter.AddCert(c)
	}
	_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter})
	if err != nil {
		return fmt.Errorf("tls: verify the server certificate against the CA: %w", err)
	}
	return nil
}

// IsCertificateError reports whether err is the server's certificate
// failing verification: an unknown authority (wrong CA), an invalid
// certificate (expired, not for this use, a broken chain) or the wrong
// name, in every form they come in: the values crypto/x509 returns, the
// same as pointers, inside crypto/tls's *CertificateVerificationError (a
// VerifyFull handshake), or wrapped with %w (VerifyCA's own check). A
// configuration problem: reconnecting cannot fix it.
func IsCertificateError(err error) bool {
	var (
		verify     *tls.CertificateVerificationError
		unknownCA  x509.UnknownAuthorityError
		unknownCAp *x509.UnknownAuthorityError
		invalid    x509.CertificateInvalidError
		invalidp   *x509.CertificateInvalidError
		hostname   x509.HostnameError
		hostnamep  *x509.HostnameError
	)
	return errors.As(err, &verify) ||
		errors.As(err, &unknownCA) || errors.As(err, &unknownCAp) ||
		errors.As(err, &invalid) || errors.As(err, &invalidp) ||
		errors.As(err, &hostname) || errors.As(err, &hostnamep)
}

// IsVerifyError reports whether err is the server failing TLS
// verification (IsCertificateError), a server that does not speak TLS, or
// the server refusing the TLS handshake (a TLS alert: the client's
// certificate refused, no common version or cipher). Reconnecting cannot
// fix it: sources treat it as permanent. Sinks classify with
// IsCertificateError alone and retry the rest.
func IsVerifyError(err error) bool {
	var (
		header tls.RecordHeaderError
		alert  tls.AlertError
	)
	return IsCertificateError(err) || errors.As(err, &header) || errors.As(err, &alert)
}
