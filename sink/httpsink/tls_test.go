package httpsink

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/outbox-cdc/outbox-cdc/sink"
)

// pki is a throwaway CA with a server certificate (localhost, 127.0.0.1)
// and a client certificate, as PEM files.
type pki struct {
	ca, serverCert, serverKey, clientCert, clientKey string
	pool                                             *x509.CertPool
}

func newPKI(t *testing.T) pki {
	dir := t.TempDir()
	write := func(name, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "httpsink test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTpl, caTpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	leaf := func(serial int64, usage x509.ExtKeyUsage) ([]byte, []byte) {
		k, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		tpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "localhost"},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage}}
		der, err := x509.CreateCertificate(rand.Reader, tpl, caCert, &k.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		kd, _ := x509.MarshalECPrivateKey(k)
		return der, kd
	}
	p := pki{pool: x509.NewCertPool()}
	p.pool.AddCert(caCert)
	p.ca = write("ca.pem", "CERTIFICATE", caDER)
	sd, sk := leaf(2, x509.ExtKeyUsageServerAuth)
	p.serverCert, p.serverKey = write("server.pem", "CERTIFICATE", sd), write("server.key", "EC PRIVATE KEY", sk)
	cd, ck := leaf(3, x509.ExtKeyUsageClientAuth)
	p.clientCert, p.clientKey = write("client.pem", "CERTIFICATE", cd), write("client.key", "EC PRIVATE KEY", ck)
	return p
}

// TestHTTPMutualTLS: with sink.tls (ca_file, cert_file, key_file) the sink
// verifies the receiver's certificate and presents its own; without the
// client certificate the receiver refuses the handshake (retried, as a
// TLS alert may be passing), with a wrong CA the write fails permanently
// naming no record.
func TestHTTPMutualTLS(t *testing.T) {
	p := newPKI(t)
	rc := &receiver{perKey: map[string]int{}}
	rc.srv = httptest.NewUnstartedServer(http.HandlerFunc(rc.handle))
	cert, err := tls.LoadX509KeyPair(p.serverCert, p.serverKey)
	if err != nil {
		t.Fatal(err)
	}
	rc.srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshakes are the test
	rc.srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, ClientCAs: p.pool, ClientAuth: tls.RequireAndVerifyClientCert}
	rc.srv.StartTLS()
	t.Cleanup(rc.srv.Close)

	cfg := testConfig(t, rc.srv.URL+"/hooks/{aggregate_type}")
	cfg.TLS.Enabled = true
	cfg.TLS.CAFile, cfg.TLS.CertFile, cfg.TLS.KeyFile = p.ca, p.clientCert, p.clientKey
	s := newSink(t, cfg)
	rs := records(rc.srv.URL, 10, 3)
	if err := write(t, s, rs, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	checkArrivals(t, rc.arrivals(), rs)
	if got := rc.arrivals()[0]; got.header.Get(HeaderWebhookSignature) == "" {
		t.Fatal("unsigned request")
	}

	noClient := cfg
	noClient.TLS.CertFile, noClient.TLS.KeyFile = "", ""
	if err := write(t, newSink(t, noClient), rs, time.Second); err == nil {
		t.Fatal("write without a client certificate succeeded")
	}

	other := newPKI(t)
	wrongCA := cfg
	wrongCA.TLS.CAFile = other.ca
	err = write(t, newSink(t, wrongCA), rs, 10*time.Second)
	var be *sink.Error
	if !errors.As(err, &be) || !be.Permanent || be.Index != -1 {
		t.Fatalf("wrong CA: %v, want a permanent error naming no record", err)
	}
}
