package main

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"sync"
	"time"
)

// HTTPS and mutual TLS on the listener (http.tls.*).

const (
	clientAuthRequired = "required" // every request presents a verified client certificate
	clientAuthChanges  = "changes"  // only the management API's changes need one
)

func (c HTTPTLSConfig) enabled() bool { return c.CertFile != "" || c.KeyFile != "" }

// mode is client_auth with its default.
func (c HTTPTLSConfig) mode() string {
	if c.ClientCAFile == "" {
		return ""
	}
	if c.ClientAuth == "" {
		return clientAuthRequired
	}
	return c.ClientAuth
}

func (c HTTPTLSConfig) validate() error {
	if (c.CertFile == "") != (c.KeyFile == "") {
		return keyErrorf("http.tls.cert_file", "set both http.tls.cert_file and http.tls.key_file (the listener's certificate and its key), or neither")
	}
	if c.ClientCAFile != "" && !c.enabled() {
		return keyErrorf("http.tls.client_ca_file", "client certificates need HTTPS: set http.tls.cert_file and http.tls.key_file too")
	}
	switch c.ClientAuth {
	case "", clientAuthRequired, clientAuthChanges:
	default:
		return keyErrorf("http.tls.client_auth", "%q is not one of required, changes", c.ClientAuth)
	}
	if c.ClientAuth != "" && c.ClientCAFile == "" {
		return keyErrorf("http.tls.client_auth", "set http.tls.client_ca_file, the CAs that sign the client certificates")
	}
	return nil
}

// serverConfig reads the files once (so that a wrong path fails at start,
// naming the key) and returns the listener's TLS configuration.
func (c HTTPTLSConfig) serverConfig() (*tls.Config, error) {
	kp := &keyPair{cert: c.CertFile, key: c.KeyFile}
	if _, err := kp.get(nil); err != nil {
		return nil, err
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: kp.get}
	if c.ClientCAFile != "" {
		pem, err := os.ReadFile(c.ClientCAFile)
		if err != nil {
			return nil, keyErrorf("http.tls.client_ca_file", "%v", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, keyErrorf("http.tls.client_ca_file", "%s holds no PEM certificate", c.ClientCAFile)
		}
		tc.ClientCAs = pool
		tc.ClientAuth = tls.RequireAndVerifyClientCert
		if c.mode() == clientAuthChanges {
			tc.ClientAuth = tls.VerifyClientCertIfGiven
		}
	}
	return tc, nil
}

// keyPair serves the certificate in the files, read again when either
// file's modification time changes (a rotated Secret).
type keyPair struct {
	cert, key string

	mu       sync.Mutex
	loaded   *tls.Certificate
	certTime time.Time
	keyTime  time.Time
}

func (k *keyPair) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	ct, kt := modTime(k.cert), modTime(k.key)
	if k.loaded != nil && ct.Equal(k.certTime) && kt.Equal(k.keyTime) {
		return k.loaded, nil
	}
	pair, err := tls.LoadX509KeyPair(k.cert, k.key)
	if err != nil {
		if k.loaded != nil {
			// Half-written during a rotation: keep serving the old pair.
			return k.loaded, nil
		}
		// The error names the files, never their content.
		return nil, keyErrorf("http.tls.cert_file", "with http.tls.key_file: %v", err)
	}
	k.loaded, k.certTime, k.keyTime = &pair, ct, kt
	return k.loaded, nil
}

func modTime(path string) time.Time {
	fi, err := os.Stat(path)
	if err != nil {
		return time.Time{}
	}
	return fi.ModTime()
}

// clientCertified reports whether the request came with a client
// certificate the listener verified against http.tls.client_ca_file.
func clientCertified(r *http.Request) bool {
	return r.TLS != nil && len(r.TLS.VerifiedChains) > 0
}

// scheme is how the listener is reached, for the log line.
func (c HTTPTLSConfig) scheme() string {
	switch {
	case c.mode() != "":
		return fmt.Sprintf("https (client certificates: %s)", c.mode())
	case c.enabled():
		return "https"
	}
	return "http"
}
