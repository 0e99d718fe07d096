package testenv

import (
	"os"
	"path/filepath"
	"testing"
)

// EnvTLSDir points tests at the directory where scripts/prepare-services.sh
// keeps the test CA (ca.pem) that signed the local servers' certificates.
const EnvTLSDir = "OUTBOX_CDC_TEST_TLS_DIR"

// DefaultTLSDir is where scripts/prepare-services.sh writes them.
const DefaultTLSDir = "/etc/outbox-cdc-test-tls"

// TLSCA returns the path of the CA certificate the local MariaDB and
// PostgreSQL serve TLS with, or skips (fails in CI) when it is missing.
// It belongs to the local services only: a DSN from the environment or a
// container is not signed by it.
func TLSCA(t testing.TB) string {
	t.Helper()
	dir := os.Getenv(EnvTLSDir)
	if dir == "" {
		dir = DefaultTLSDir
	}
	p := filepath.Join(dir, "ca.pem")
	if _, err := os.Stat(p); err != nil {
		Unavailable(t, "test CA %s: %v", p, err)
	}
	return p
}
