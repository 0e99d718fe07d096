package kafka

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
)

// RFC 7677 section 3: the SCRAM-SHA-256 example exchange, through the
// adapter sarama calls.
func TestSCRAMRFC7677(t *testing.T) {
	nonce, err := base64.RawStdEncoding.DecodeString("rOprNGfwEbeRWgbNEkqO")
	if err != nil {
		t.Fatal(err)
	}
	c := &scramClient{nonce: nonce}
	if err := c.Begin("user", "pencil", ""); err != nil {
		t.Fatal(err)
	}
	first, _ := c.Step("")
	if first != "n,,n=user,r=rOprNGfwEbeRWgbNEkqO" {
		t.Fatalf("client-first %q", first)
	}
	final, err := c.Step("r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
	if err != nil {
		t.Fatal(err)
	}
	if want := "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="; final != want {
		t.Fatalf("client-final\n got %s\nwant %s", final, want)
	}
	if c.Done() {
		t.Fatal("done before the server's signature was checked")
	}
	if _, err := c.Step("v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="); err != nil || !c.Done() {
		t.Fatalf("server-final: %v, done %v", err, c.Done())
	}
	// A server that does not know the password cannot sign.
	c2 := &scramClient{nonce: nonce}
	_ = c2.Begin("user", "pencil", "")
	c2.Step("")
	c2.Step("r=rOprNGfwEbeRWgbNEkqOx,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
	if _, err := c2.Step("v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="); err == nil || c2.Done() {
		t.Fatal("a wrong server signature was accepted")
	}
	// A server error in the final message fails the exchange.
	c3 := &scramClient{sha512: true}
	_ = c3.Begin("a=b,c", "pw", "")
	first, _ = c3.Step("")
	if !strings.HasPrefix(first, "n,,n=a=3Db=2Cc,r=") {
		t.Fatalf("saslname not escaped: %q", first)
	}
	if _, err := c3.Step("e=invalid-proof"); err == nil {
		t.Fatal("a server error was accepted")
	}
}

// testPKI is a CA with a server certificate for 127.0.0.1 and a client
// certificate, as PEM files.
type testPKI struct {
	caFile, certFile, keyFile string // client side
	server                    *tls.Config
}

func newTestPKI(t *testing.T) testPKI {
	t.Helper()
	dir := t.TempDir()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "kafka test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	leaf := func(serial int64, usage x509.ExtKeyUsage, ips []net.IP) (tls.Certificate, []byte, []byte) {
		key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "leaf"},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			ExtKeyUsage: []x509.ExtKeyUsage{usage}, IPAddresses: ips, DNSNames: []string{"localhost"}}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		kder, _ := x509.MarshalECPrivateKey(key)
		certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
		keyPEM := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
		pair, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			t.Fatal(err)
		}
		return pair, certPEM, keyPEM
	}
	serverPair, _, _ := leaf(2, x509.ExtKeyUsageServerAuth, []net.IP{net.ParseIP("127.0.0.1")})
	_, clientCert, clientKey := leaf(3, x509.ExtKeyUsageClientAuth, nil)
	p := testPKI{caFile: filepath.Join(dir, "ca.pem"), certFile: filepath.Join(dir, "client.pem"), keyFile: filepath.Join(dir, "client.key")}
	for f, b := range map[string][]byte{p.caFile: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), p.certFile: clientCert, p.keyFile: clientKey} {
		if err := os.WriteFile(f, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	// Mutual TLS: the broker demands a client certificate from this CA.
	p.server = &tls.Config{Certificates: []tls.Certificate{serverPair}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert}
	return p
}

// secureCluster is a kfake broker with mutual TLS and SASL users for each
// mechanism.
func secureCluster(t *testing.T, pki testPKI) []string {
	t.Helper()
	c, err := kfake.NewCluster(
		kfake.NumBrokers(1), kfake.DefaultNumPartitions(1), kfake.AllowAutoTopicCreation(),
		kfake.TLS(pki.server), kfake.EnableSASL(),
		kfake.Superuser(SASLPlain, "plain-user", "plain-pw"),
		kfake.Superuser(SASLSCRAMSHA256, "scram256-user", "scram256-pw"),
		kfake.Superuser(SASLSCRAMSHA512, "scram512-user", "scram512-pw"),
	)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c.ListenAddrs()
}

func secureConfig(brokers []string, pki testPKI, mech, user, pass string) KafkaConfig {
	cfg := testConfig(brokers)
	cfg.TLS = TLSConfig{Enabled: true}
	cfg.TLS.CAFile, cfg.TLS.CertFile, cfg.TLS.KeyFile = pki.caFile, pki.certFile, pki.keyFile
	cfg.SASL = SASLConfig{Mechanism: mech, Username: user, Password: pass}
	return cfg
}

// TestKafkaTLSAndSASL: the idempotent producer, the transactional producer
// with its admin client and progress reader, and the preflight all speak
// mutual TLS and each SASL mechanism to kfake; a wrong password, an unknown
// CA and PLAIN without TLS fail clearly.
func TestKafkaTLSAndSASL(t *testing.T) {
	pki := newTestPKI(t)
	brokers := secureCluster(t, pki)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	users := map[string][2]string{
		SASLPlain:       {"plain-user", "plain-pw"},
		SASLSCRAMSHA256: {"scram256-user", "scram256-pw"},
		SASLSCRAMSHA512: {"scram512-user", "scram512-pw"},
	}
	for mech, up := range users {
		t.Run(mech, func(t *testing.T) {
			cfg := secureConfig(brokers, pki, mech, up[0], up[1])
			k, _ := newTestKafka(t, cfg)
			topic := "sec-" + strings.ToLower(mech)
			if err := k.Write(ctx, []outboxcdc.Record{{Topic: topic, Key: []byte("k"), Value: []byte("v")}}); err != nil {
				t.Fatalf("idempotent write: %v", err)
			}
			s, err := NewTransactional(cfg, TxnConfig{ProgressTopic: "progress-" + strings.ToLower(mech), TransactionTimeout: DefaultTxnConfig().TransactionTimeout},
				"sec-"+strings.ToLower(mech), "mysql", zerolog.Nop(), nil)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if _, err := s.Load(ctx); err != nil {
				t.Fatalf("transactional load (admin client, progress reader): %v", err)
			}
			if err := s.WriteAtomic(ctx, []outboxcdc.Record{{Topic: topic, Key: []byte("k"), Value: []byte("t")}}, "mysql:0-1-5"); err != nil {
				t.Fatalf("transactional write: %v", err)
			}
			if pos, err := s.Load(ctx); err != nil || pos != "mysql:0-1-5" {
				t.Fatalf("reload = %q, %v", pos, err)
			}
			for _, r := range CheckKafka(ctx, cfg) {
				if !r.OK {
					t.Fatalf("check: %+v", r)
				}
			}
			// The records are there for a consumer with the same credentials.
			opts, err := cfg.kgoSecurity()
			if err != nil {
				t.Fatal(err)
			}
			cl, err := kgo.NewClient(append(opts, kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic),
				kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))...)
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			var got []string
			for len(got) < 2 && ctx.Err() == nil {
				cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) { got = append(got, string(r.Value)) })
			}
			if strings.Join(got, ",") != "v,t" {
				t.Fatalf("read back %v", got)
			}
		})
	}

	t.Run("wrong password", func(t *testing.T) {
		cfg := secureConfig(brokers, pki, SASLSCRAMSHA512, "scram512-user", "not-the-password")
		// kfake closes the connection on a failed authentication instead of
		// answering SASL_AUTHENTICATION_FAILED, so the client sees EOF; a
		// real broker's message is more precise.
		res := CheckKafka(ctx, cfg)
		if res[0].OK {
			t.Fatalf("check with a wrong password: %+v", res)
		}
		if strings.Contains(res[0].Detail, "not-the-password") {
			t.Fatal("the password appears in the check output")
		}
	})
	t.Run("unknown CA", func(t *testing.T) {
		cfg := secureConfig(brokers, newTestPKI(t), SASLSCRAMSHA256, "scram256-user", "scram256-pw")
		res := CheckKafka(ctx, cfg)
		if res[0].OK || !strings.Contains(res[0].Detail, "unknown authority") {
			t.Fatalf("check against a broker from another CA: %+v", res)
		}
	})
	t.Run("kgo client", func(t *testing.T) {
		// franz-go's own SCRAM, as a cross-check that kfake's server side is real.
		cfg := secureConfig(brokers, pki, "", "", "")
		tc, err := cfg.tlsConfig()
		if err != nil {
			t.Fatal(err)
		}
		cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DialTLSConfig(tc),
			kgo.SASL(scram.Auth{User: "scram256-user", Pass: "wrong"}.AsSha256Mechanism()))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		if err := cl.Ping(ctx); err == nil {
			t.Fatal("kfake accepted a wrong SCRAM password")
		}
	})
}

func TestKafkaSecurityValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		mod  func(*KafkaConfig)
		want string // "" = valid
	}{
		{"plain without TLS", func(c *KafkaConfig) { c.SASL = SASLConfig{Mechanism: "PLAIN", Username: "u", Password: "p"} },
			"sasl.mechanism: PLAIN sends the password in clear text"},
		{"plain allowed in clear", func(c *KafkaConfig) {
			c.SASL = SASLConfig{Mechanism: "plain", Username: "u", Password: "p", AllowPlaintext: true}
		}, ""},
		{"scram without TLS", func(c *KafkaConfig) { c.SASL = SASLConfig{Mechanism: "scram-sha-512", Username: "u", Password: "p"} }, ""},
		{"unknown mechanism", func(c *KafkaConfig) { c.SASL = SASLConfig{Mechanism: "GSSAPI", Username: "u", Password: "p"} },
			`sasl.mechanism: "GSSAPI" is not one of`},
		{"no password", func(c *KafkaConfig) { c.SASL = SASLConfig{Mechanism: "SCRAM-SHA-256", Username: "u"} },
			"sasl.password: required"},
		{"files without tls.enabled", func(c *KafkaConfig) { c.TLS.CAFile = "/x" }, "tls.enabled: is false"},
		{"cert without key", func(c *KafkaConfig) { c.TLS = TLSConfig{Enabled: true}; c.TLS.CertFile = "/x" }, "tls.cert_file"},
		{"missing CA file", func(c *KafkaConfig) { c.TLS = TLSConfig{Enabled: true}; c.TLS.CAFile = "/nonexistent/ca.pem" },
			"tls.ca_file: open /nonexistent/ca.pem"},
		{"skip verify with CA", func(c *KafkaConfig) {
			c.TLS = TLSConfig{Enabled: true, InsecureSkipVerify: true}
			c.TLS.CAFile = "/x"
		}, "tls.insecure_skip_verify"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig([]string{"127.0.0.1:9092"})
			tc.mod(&cfg)
			err := cfg.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("error %v, want it to contain %q", err, tc.want)
			}
		})
	}
}
