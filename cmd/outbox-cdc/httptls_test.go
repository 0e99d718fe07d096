package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/outbox-cdc/outbox-cdc/test/testenv"
)

// tlsClient trusts the test CA and, with withCert, presents the test
// client certificate.
func tlsClient(t *testing.T, c testenv.Certs, withCert bool) *http.Client {
	t.Helper()
	pem, err := os.ReadFile(c.CA)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(pem)
	tc := &tls.Config{RootCAs: roots}
	if withCert {
		pair, err := tls.LoadX509KeyPair(c.ClientCert, c.ClientKey)
		if err != nil {
			t.Fatal(err)
		}
		tc.Certificates = []tls.Certificate{pair}
	}
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: tc, DisableKeepAlives: true}}
}

func send(t *testing.T, cl *http.Client, method, url string) (int, string, error) {
	t.Helper()
	req, _ := http.NewRequest(method, url, nil)
	resp, err := cl.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), nil
}

// TestHTTPMutualTLS: http.tls serves HTTPS; with client_ca_file and
// client_auth required a client without a certificate is refused at the
// handshake and one with a certificate the CA signed is served; with
// client_auth changes the probes stay open without a certificate while a
// change needs one (401, nothing changed).
func TestHTTPMutualTLS(t *testing.T) {
	certs := testenv.NewCerts(t)
	cfg := defaultConfig()
	cfg.Name = "mtls"
	cfg.Checkpoint.Path = filepath.Join(t.TempDir(), "cp")
	sup := newSupervisor(context.Background(), []Config{cfg}, runOptions{}, zerolog.Nop())
	start := func(tc HTTPTLSConfig) string {
		t.Helper()
		if err := tc.validate(); err != nil {
			t.Fatal(err)
		}
		srv, err := serveHTTP(HTTPConfig{Listen: "127.0.0.1:0", TLS: tc}, prometheus.NewRegistry(), sup, zerolog.Nop())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { srv.Close() })
		return "https://" + srv.Addr
	}

	plain := start(HTTPTLSConfig{CertFile: certs.Cert, KeyFile: certs.Key})
	if code, _, err := send(t, tlsClient(t, certs, false), "GET", plain+"/healthz"); err != nil || code != 200 {
		t.Fatalf("HTTPS without client CA: %d %v", code, err)
	}
	// Plain HTTP on the HTTPS port is not served (Go answers 400).
	if code, _, _ := send(t, &http.Client{Timeout: 5 * time.Second}, "GET", strings.Replace(plain, "https", "http", 1)+"/healthz"); code == 200 {
		t.Fatal("plain HTTP served on the HTTPS listener")
	}

	required := start(HTTPTLSConfig{CertFile: certs.Cert, KeyFile: certs.Key, ClientCAFile: certs.CA})
	if _, _, err := send(t, tlsClient(t, certs, false), "GET", required+"/healthz"); err == nil {
		t.Fatal("client_auth required: a client without a certificate was served")
	}
	if code, _, err := send(t, tlsClient(t, certs, true), "GET", required+"/healthz"); err != nil || code != 200 {
		t.Fatalf("client_auth required, with a certificate: %d %v", code, err)
	}

	changes := start(HTTPTLSConfig{CertFile: certs.Cert, KeyFile: certs.Key, ClientCAFile: certs.CA, ClientAuth: clientAuthChanges})
	if code, _, err := send(t, tlsClient(t, certs, false), "GET", changes+"/readyz"); err != nil || code != 200 {
		t.Fatalf("client_auth changes: probe without a certificate: %d %v", code, err)
	}
	code, body, err := send(t, tlsClient(t, certs, false), "PUT", changes+"/connectors/mtls/pause")
	if err != nil {
		t.Fatal(err)
	}
	wantError(t, "pause without a client certificate", code, body, 401, "client certificate")
	if sup.conns["mtls"].gate.Paused() {
		t.Fatal("a refused pause paused the connector")
	}
	if code, body, err := send(t, tlsClient(t, certs, true), "PUT", changes+"/connectors/mtls/pause"); err != nil || code != 202 || !sup.conns["mtls"].gate.Paused() {
		t.Fatalf("pause with a client certificate: %d %s %v", code, body, err)
	}
}

// TestHTTPTLSRotation: a certificate rewritten in place (a rotated
// Secret) is served on the next connection without a restart.
func TestHTTPTLSRotation(t *testing.T) {
	first, second := testenv.NewCerts(t), testenv.NewCerts(t)
	dir := t.TempDir()
	cert, key := dir+"/tls.crt", dir+"/tls.key"
	copyFile := func(from, to string) {
		b, err := os.ReadFile(from)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(to, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	copyFile(first.Cert, cert)
	copyFile(first.Key, key)
	cfg := defaultConfig()
	sup := newSupervisor(context.Background(), []Config{cfg}, runOptions{}, zerolog.Nop())
	srv, err := serveHTTP(HTTPConfig{Listen: "127.0.0.1:0", TLS: HTTPTLSConfig{CertFile: cert, KeyFile: key}}, prometheus.NewRegistry(), sup, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	url := "https://" + srv.Addr + "/healthz"
	if code, _, err := send(t, tlsClient(t, first, false), "GET", url); err != nil || code != 200 {
		t.Fatalf("first certificate: %d %v", code, err)
	}
	// A new modification time, even within the file system's resolution.
	copyFile(second.Cert, cert)
	copyFile(second.Key, key)
	later := time.Now().Add(2 * time.Second)
	os.Chtimes(cert, later, later)
	os.Chtimes(key, later, later)
	if code, _, err := send(t, tlsClient(t, second, false), "GET", url); err != nil || code != 200 {
		t.Fatalf("after rotation, the new CA's client: %d %v", code, err)
	}
	if _, _, err := send(t, tlsClient(t, first, false), "GET", url); err == nil {
		t.Fatal("after rotation the old certificate is still served")
	}
}

// TestHTTPTLSValidate: the settings that cannot work are refused naming the key.
func TestHTTPTLSValidate(t *testing.T) {
	for _, c := range []struct {
		tc   HTTPTLSConfig
		want string
	}{
		{HTTPTLSConfig{CertFile: "a"}, "http.tls.cert_file"},
		{HTTPTLSConfig{ClientCAFile: "ca"}, "http.tls.client_ca_file"},
		{HTTPTLSConfig{CertFile: "a", KeyFile: "b", ClientCAFile: "ca", ClientAuth: "sometimes"}, "http.tls.client_auth"},
		{HTTPTLSConfig{CertFile: "a", KeyFile: "b", ClientAuth: "changes"}, "client_ca_file"},
	} {
		err := c.tc.validate()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want an error naming %s", c.tc, err, c.want)
		}
	}
	if _, err := (HTTPTLSConfig{CertFile: "/nonexistent.pem", KeyFile: "/nonexistent.key"}).serverConfig(); err == nil || !strings.Contains(err.Error(), "http.tls.cert_file") {
		t.Errorf("missing files: %v", err)
	}
}
