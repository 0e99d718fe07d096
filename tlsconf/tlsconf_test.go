package tlsconf

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func testCert(t *testing.T) *x509.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "server"}, DNSNames: []string{"server.test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Every form a certificate verification failure comes in is recognised
// by both classifiers; what is not one is not.
func TestCertificateErrorForms(t *testing.T) {
	cert := testCert(t)
	unknownCA := x509.UnknownAuthorityError{Cert: cert}
	invalid := x509.CertificateInvalidError{Cert: cert, Reason: x509.Expired}
	hostname := x509.HostnameError{Certificate: cert, Host: "other.test"}
	type form struct {
		name string
		err  error
		cert bool // IsCertificateError
		tls  bool // IsVerifyError
	}
	var forms []form
	for _, base := range []struct {
		name         string
		value, point error
	}{
		{"UnknownAuthorityError", unknownCA, &unknownCA},
		{"CertificateInvalidError", invalid, &invalid},
		{"HostnameError", hostname, &hostname},
	} {
		forms = append(forms,
			form{base.name + " value", base.value, true, true},
			form{base.name + " pointer", base.point, true, true},
			form{base.name + " value wrapped", fmt.Errorf("tls: verify the server certificate against the CA: %w", base.value), true, true},
			form{base.name + " pointer wrapped", fmt.Errorf("dial: %w", base.point), true, true},
			form{base.name + " value in *tls.CertificateVerificationError", &tls.CertificateVerificationError{Err: base.value}, true, true},
			form{base.name + " pointer in *tls.CertificateVerificationError, wrapped", fmt.Errorf("connect: %w", &tls.CertificateVerificationError{Err: base.point}), true, true},
		)
	}
	forms = append(forms,
		form{"*tls.CertificateVerificationError", &tls.CertificateVerificationError{Err: errors.New("x509: other")}, true, true},
		form{"tls.RecordHeaderError (not TLS)", fmt.Errorf("handshake: %w", tls.RecordHeaderError{Msg: "first record does not look like a TLS handshake"}), false, true},
		form{"tls.AlertError (client certificate refused)", tls.AlertError(42), false, true},
		form{"EOF", fmt.Errorf("read: %w", io.EOF), false, false},
		form{"connection refused", &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}, false, false},
		form{"nil", nil, false, false},
	)
	for _, f := range forms {
		if got := IsCertificateError(f.err); got != f.cert {
			t.Errorf("IsCertificateError(%s) = %v, want %v", f.name, got, f.cert)
		}
		if got := IsVerifyError(f.err); got != f.tls {
			t.Errorf("IsVerifyError(%s) = %v, want %v", f.name, got, f.tls)
		}
	}
}

// The errors of real handshakes with a server whose certificate does not
// verify, at each verification level, are recognised: verify_ca's own
// chain check returns x509's value error wrapped, verify_full crypto/tls's
// *CertificateVerificationError.
func TestHandshakeErrorsAreVerifyErrors(t *testing.T) {
	srv := httptest.NewTLSServer(nil)
	defer srv.Close()
	addr := srv.Listener.Addr().String()
	host, _, _ := net.SplitHostPort(addr)
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(t.TempDir(), "other.pem")
	if err := os.WriteFile(other, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: testCert(t).Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		files Files
		v     Verify
	}{
		{"verify_ca, wrong CA", Files{CAFile: other}, VerifyCA},
		{"verify_full, wrong CA", Files{CAFile: other}, VerifyFull},
		{"verify_full, wrong name", Files{CAFile: caFile, ServerName: "wrong.test"}, VerifyFull},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := c.files.Build(c.v, host)
			if err != nil {
				t.Fatal(err)
			}
			conn, err := tls.Dial("tcp", addr, cfg)
			if err == nil {
				conn.Close()
				t.Fatal("handshake succeeded")
			}
			if !IsCertificateError(err) || !IsVerifyError(err) {
				t.Fatalf("%T %v: IsCertificateError %v, IsVerifyError %v", err, err, IsCertificateError(err), IsVerifyError(err))
			}
		})
	}
	// The right CA and name verify: the classifiers are not asked.
	cfg, err := Files{CAFile: caFile}.Build(VerifyCA, host)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := tls.Dial("tcp", addr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	conn.Close()
}
