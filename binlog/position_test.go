package binlog

import (
	"errors"
	"strings"
	"testing"

	"github.com/go-mysql-org/go-mysql/mysql"
	outboxcdc "github.com/outbox-cdc/outbox-cdc"
)

func TestPositionRoundTrip(t *testing.T) {
	for _, body := range []string{
		"file:mariadb-bin.000003:1234",
		"file:binlog.000001:4",
		"file:/var/lib/mysql/odd:name.000002:4294967295",
		"gtid:",
		"gtid:3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5",
		"gtid:3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5:7-9,4e11fa47-71ca-11e1-9e33-c80aa9429562:1",
		"mariadb-gtid:",
		"mariadb-gtid:0-1-3",
		"mariadb-gtid:0-1-3,1-2-99,7-4294967295-18446744073709551615",
	} {
		p := outboxcdc.MakePosition(Kind, body)
		got, err := ParsePosition(p)
		if err != nil {
			t.Errorf("ParsePosition(%q): %v", p, err)
			continue
		}
		if enc := got.Encode(); enc != p {
			t.Errorf("round trip of %q gave %q", p, enc)
		}
	}
}

func TestPositionForms(t *testing.T) {
	p, err := ParsePosition("mysql:file:mariadb-bin.000003:1234")
	if err != nil || p.File != "mariadb-bin.000003" || p.Offset != 1234 || p.IsGTID() {
		t.Fatalf("file form: %+v %v", p, err)
	}
	p, err = ParsePosition("mysql:mariadb-gtid:1-2-3,0-1-9")
	if err != nil || !p.IsMariaDB || len(p.MariaDB) != 2 || p.MariaDB[0].DomainID != 0 {
		t.Fatalf("mariadb form: %+v %v", p, err)
	}
	if got := p.String(); got != "mariadb-gtid:0-1-9,1-2-3" {
		t.Errorf("domains not sorted: %s", got)
	}
	p, err = ParsePosition("mysql:gtid:3E11FA47-71CA-11E1-9E33-C80AA9429562:1-5")
	if err != nil || p.MySQLGTID == nil {
		t.Fatalf("mysql gtid form: %+v %v", p, err)
	}
	if got := p.String(); got != "gtid:3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5" {
		t.Errorf("mysql gtid not normalised: %s", got)
	}
}

func TestPositionRejects(t *testing.T) {
	for _, p := range []outboxcdc.Position{
		"mysql:",
		"mysql:file:",
		"mysql:file:name",
		"mysql:file:name:",
		"mysql:file::4",
		"mysql:file:name:3",
		"mysql:file:name:x",
		"mysql:file:name:4294967296",
		"mysql:gtid:nonsense",
		"mysql:mariadb-gtid:0-1",
		"mysql:mariadb-gtid:0-1-x",
		"mysql:mariadb-gtid:0-1-2,0-2-3",
		"mysql:mariadb-bin.000003:1234",
	} {
		if _, err := ParsePosition(p); err == nil {
			t.Errorf("ParsePosition(%q) accepted", p)
		}
	}
	_, err := ParsePosition("postgres:0/16B3748")
	if !errors.Is(err, outboxcdc.ErrForeignPosition) {
		t.Errorf("foreign position: %v, want ErrForeignPosition", err)
	}
}

func TestMariaDBGTIDsSet(t *testing.T) {
	g, _ := ParseMariaDBGTIDs("")
	g.Set(mustGTID(t, "1-1-5"))
	g.Set(mustGTID(t, "0-1-7"))
	g.Set(mustGTID(t, "1-2-6")) // failover: one GTID per domain, the newest
	if got := g.String(); got != "0-1-7,1-2-6" {
		t.Errorf("got %s", got)
	}
}

func mustGTID(t *testing.T, s string) (g mysql.MariadbGTID) {
	t.Helper()
	l, err := ParseMariaDBGTIDs(s)
	if err != nil || len(l) != 1 {
		t.Fatalf("%s: %v", s, err)
	}
	return l[0]
}

func TestDeriveServerID(t *testing.T) {
	seen := map[uint32]string{}
	for _, name := range []string{"", "a", "b", "outbox-cdc", "orders-relay", "payments-relay", strings.Repeat("x", 300)} {
		id := DeriveServerID(name)
		if id == 0 || id < 1<<31 {
			t.Errorf("DeriveServerID(%q) = %d, want in [2^31, 2^32)", name, id)
		}
		if id != DeriveServerID(name) {
			t.Errorf("DeriveServerID(%q) not stable", name)
		}
		if other, dup := seen[id]; dup {
			t.Errorf("%q and %q collide", name, other)
		}
		seen[id] = name
	}
	if got := DeriveServerID("outbox-cdc"); got != 2746806481 {
		// The value is part of the contract: changing it gives restarted
		// connectors a new replica identity.
		t.Errorf("DeriveServerID(outbox-cdc) = %d, changed", got)
	}
}

func TestConfigValidate(t *testing.T) {
	good := DefaultConfig()
	good.DSN = "root:@tcp(127.0.0.1:3306)/shop"
	if err := good.Validate(); err != nil {
		t.Fatalf("defaults + dsn: %v", err)
	}
	for _, tc := range []struct {
		mutate func(*Config)
		key    string
	}{
		{func(c *Config) { c.DSN = "" }, "dsn:"},
		{func(c *Config) { c.DSN = "root:@tcp(127.0.0.1:3306)/" }, "dsn:"},
		{func(c *Config) { c.DSN = "::::" }, "dsn:"},
		{func(c *Config) { c.Table = "" }, "table:"},
		{func(c *Config) { c.Start = "now" }, "start:"},
		{func(c *Config) { c.GTID = "yes" }, "gtid:"},
		{func(c *Config) { c.HeartbeatPeriod = 0 }, "heartbeat_period:"},
		{func(c *Config) { c.ReadTimeout = c.HeartbeatPeriod }, "read_timeout:"},
		{func(c *Config) { c.Reconnect.Min = 0 }, "reconnect.min:"},
		{func(c *Config) { c.Reconnect.Max = c.Reconnect.Min / 2 }, "reconnect.max:"},
	} {
		c := good
		tc.mutate(&c)
		err := c.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.key) {
			t.Errorf("want an error naming %s, got %v", tc.key, err)
		}
	}
	c := good
	c.DSN = "root:secret@tcp(127.0.0.1:3306)/"
	if err := c.Validate(); err == nil || strings.Contains(err.Error(), "secret") {
		t.Errorf("password leaked or no error: %v", err)
	}
}
