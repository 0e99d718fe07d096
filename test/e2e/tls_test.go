package e2e

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/outbox-cdc/outbox-cdc/test/testenv"
)

// The local servers serve TLS with a certificate that
// scripts/prepare-services.sh signed with a test CA (testenv.TLSCA). These
// tests run the binary with verify-full against it, prove the connections
// really use TLS, and check that a certificate from another CA stops the
// connector with a clear message instead of a reconnect loop.

// localServicesOnly skips when a DSN from the environment points elsewhere:
// the test CA signs only the local servers' certificates.
func localServicesOnly(t *testing.T, env string) {
	t.Helper()
	if os.Getenv(env) != "" {
		t.Skipf("%s is set: the test CA signs only the local servers", env)
	}
}

// otherCA writes a CA certificate that signed nothing the servers use.
func otherCA(t *testing.T) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "not the servers' CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "other-ca.pem")
	if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func tlsTestConfig(t *testing.T, name, source string, brokers []string) string {
	return writeConfig(t, fmt.Sprintf(`
name: %s
source:
%sroute:
  preset: seed
  topic: "outbox.event.{aggregate_type}"
sink:
  type: kafka
  brokers: [%q]
checkpoint:
  type: file
  path: %q
`, name, source, brokers[0], filepath.Join(t.TempDir(), "checkpoint")))
}

func TestSourceTLS(t *testing.T) {
	ca := testenv.TLSCA(t)
	wrong := otherCA(t)

	t.Run("mysql", func(t *testing.T) {
		localServicesOnly(t, testenv.EnvMySQLDSN)
		b := mysqlBackend(t)
		// A user the server lets in over TLS only: delivery proves that the
		// metadata connection and the binlog dump connection both use it.
		admin := testenv.MySQL(t)
		user := "e2e_tls_" + testSuffix(t)
		for _, q := range []string{
			"DROP USER IF EXISTS " + user,
			"CREATE USER " + user + " IDENTIFIED BY 'tls-pw' REQUIRE SSL",
			"GRANT ALL PRIVILEGES ON *.* TO " + user,
		} {
			if _, err := admin.Exec(q); err != nil {
				t.Fatal(err)
			}
		}
		t.Cleanup(func() { admin.Exec("DROP USER IF EXISTS " + user) })
		dc, err := mysql.ParseDSN(testenv.MySQLDSN(t))
		if err != nil {
			t.Fatal(err)
		}
		dc.User, dc.Passwd, dc.DBName = user, "tls-pw", testObjectName(t)
		source := func(tlsYAML string) string {
			return fmt.Sprintf("  type: mysql\n  dsn: %q\n  table: outbox_message\n  start: latest\n%s", dc.FormatDSN(), tlsYAML)
		}
		_, brokers := testenv.Kafka(t)

		// Without TLS the server refuses this user: the check above means something.
		code, out := testenv.Run(t, 30*time.Second, nil, "run", "--config", tlsTestConfig(t, connName(t, "e2e-tls-plain"), source(""), brokers))
		if code == 0 || !strings.Contains(out, "Access denied") {
			t.Fatalf("plaintext login of a REQUIRE SSL user: exit %d, want a failure with Access denied:\n%s", code, out)
		}

		// Another CA: a permanent, named failure.
		code, out = testenv.Run(t, 30*time.Second, nil, "run", "--config", tlsTestConfig(t, connName(t, "e2e-tls-wrong-ca"),
			source(fmt.Sprintf("  tls:\n    mode: verify-full\n    ca_file: %q\n", wrong)), brokers))
		if code == 0 || !strings.Contains(out, "certificate signed by unknown authority") || !strings.Contains(out, "source.tls") {
			t.Fatalf("wrong CA: exit %d, want a failure naming the unknown authority and source.tls:\n%s", code, out)
		}

		c := testenv.Start(t, tlsTestConfig(t, connName(t, "e2e-tls-mysql"),
			source(fmt.Sprintf("  tls:\n    mode: verify-full\n    ca_file: %q\n", ca)), brokers))
		cons := newConsumer(t, brokers, `outbox\.event\..*`)
		b.insertTx(t, []row{{"tls-1", "ORDER", "A-1", "ORDER_CREATED", `{"n": 1}`}}, true)
		checkDelivery(t, cons.waitFor(t, 1, 20*time.Second), []string{"tls-1"}, 3, true)
		var dumps int
		if err := admin.QueryRow("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE USER = ? AND COMMAND LIKE 'Binlog Dump%'", user).Scan(&dumps); err != nil {
			t.Fatal(err)
		}
		if dumps != 1 {
			t.Fatalf("%d binlog dump connections of the REQUIRE SSL user, want 1", dumps)
		}
		if err := c.Stop(10 * time.Second); err != nil {
			t.Fatalf("SIGTERM exit: %v", err)
		}
	})

	t.Run("postgres", func(t *testing.T) {
		localServicesOnly(t, testenv.EnvPostgresDSN)
		b := postgresBackend(t)
		withTLS := func(rootCert string) string {
			u, err := url.Parse(testenv.PostgresDSN(t))
			if err != nil {
				t.Fatal(err)
			}
			q := u.Query()
			q.Set("sslmode", "verify-full")
			q.Set("sslrootcert", rootCert)
			u.RawQuery = q.Encode()
			return u.String()
		}
		schema := testObjectName(t)
		source := func(dsn string) string {
			return fmt.Sprintf("  type: postgres\n  dsn: %q\n  table: %s.outbox_message\n  slot: %s\n  publication: %s\n", dsn, schema, schema, schema)
		}
		_, brokers := testenv.Kafka(t)

		code, out := testenv.Run(t, 30*time.Second, nil, "run", "--config", tlsTestConfig(t, connName(t, "e2e-tls-pg-wrong-ca"), source(withTLS(wrong)), brokers))
		if code == 0 || !strings.Contains(out, "certificate signed by unknown authority") || !strings.Contains(out, "sslrootcert") {
			t.Fatalf("wrong CA: exit %d, want a failure naming the unknown authority and sslrootcert:\n%s", code, out)
		}

		c := testenv.Start(t, tlsTestConfig(t, connName(t, "e2e-tls-pg"), source(withTLS(ca)), brokers))
		cons := newConsumer(t, brokers, `outbox\.event\..*`)
		b.insertTx(t, []row{{"tls-1", "ORDER", "A-1", "ORDER_CREATED", `{"n": 1}`}}, true)
		checkDelivery(t, cons.waitFor(t, 1, 20*time.Second), []string{"tls-1"}, 3, true)
		// The walsender streaming the slot serves a TLS connection.
		var ssl bool
		var version string
		err := b.db.QueryRow(`SELECT s.ssl, coalesce(s.version, '') FROM pg_replication_slots r
  JOIN pg_stat_ssl s ON s.pid = r.active_pid WHERE r.slot_name = $1`, schema).Scan(&ssl, &version)
		if err != nil || !ssl {
			t.Fatalf("replication connection TLS: ssl=%v version=%q err=%v", ssl, version, err)
		}
		t.Logf("walsender uses %s", version)
		if err := c.Stop(10 * time.Second); err != nil {
			t.Fatalf("SIGTERM exit: %v", err)
		}
	})
}
