package tlsconf

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"testing"

	"github.com/outbox-cdc/outbox-cdc/test/testenv"
)

// testCert is a real certificate (the errors' messages read it).
func testCert(t *testing.T) *x509.Certificate {
	t.Helper()
	c := testenv.NewCerts(t)
	pair, err := tls.LoadX509KeyPair(c.Cert, c.Key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	return cert
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
	certs := testenv.NewCerts(t)
	pair, err := tls.LoadX509KeyPair(certs.Cert, certs.Key)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{pair}})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_ = c.(*tls.Conn).Handshake()
			}()
		}
	}()
	addr := ln.Addr().String()
	other := testenv.NewCerts(t).CA // a CA that did not sign the server's certificate
	for _, c := range []struct {
		name  string
		files Files
		v     Verify
	}{
		{"verify_ca, wrong CA", Files{CAFile: other}, VerifyCA},
		{"verify_full, wrong CA", Files{CAFile: other}, VerifyFull},
		{"verify_full, wrong name", Files{CAFile: certs.CA, ServerName: "wrong.test"}, VerifyFull},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := c.files.Build(c.v, "127.0.0.1")
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
	// The right CA and name verify.
	for _, v := range []Verify{VerifyCA, VerifyFull} {
		cfg, err := Files{CAFile: certs.CA}.Build(v, "127.0.0.1")
		if err != nil {
			t.Fatal(err)
		}
		conn, err := tls.Dial("tcp", addr, cfg)
		if err != nil {
			t.Fatal(err)
		}
		conn.Close()
	}
}
