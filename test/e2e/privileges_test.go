package e2e

import (
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/outbox-cdc/outbox-cdc/test/testenv"
)

// The README's "Least privilege" grants: the connector delivers with
// exactly them, and with one missing it exits non-zero naming what is
// missing.

func TestLeastPrivilege(t *testing.T) {
	t.Run("mysql", func(t *testing.T) {
		b := mysqlBackend(t)
		admin := testenv.MySQL(t)
		db := testObjectName(t)
		user := "e2e_priv_" + testSuffix(t)
		exec := func(qs ...string) {
			t.Helper()
			for _, q := range qs {
				if _, err := admin.Exec(q); err != nil {
					t.Fatalf("%s: %v", q, err)
				}
			}
		}
		exec("DROP USER IF EXISTS "+user, "CREATE USER "+user+" IDENTIFIED BY 'priv-pw'",
			// The README's grants.
			"GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO "+user,
			"GRANT SELECT ON "+db+".outbox_message TO "+user)
		t.Cleanup(func() { admin.Exec("DROP USER IF EXISTS " + user) })
		dc, err := mysql.ParseDSN(testenv.MySQLDSN(t))
		if err != nil {
			t.Fatal(err)
		}
		dc.User, dc.Passwd, dc.DBName = user, "priv-pw", db
		source := fmt.Sprintf("  type: mysql\n  dsn: %q\n  table: outbox_message\n  start: latest\n", dc.FormatDSN())
		_, brokers := testenv.Kafka(t)

		c := testenv.Start(t, tlsTestConfig(t, connName(t, "e2e-priv-mysql"), source, brokers))
		cons := newConsumer(t, brokers, `outbox\.event\..*`)
		b.insertTx(t, []row{{"priv-1", "ORDER", "A-1", "ORDER_CREATED", `{}`}}, true)
		checkDelivery(t, cons.waitFor(t, 1, 20*time.Second), []string{"priv-1"}, 3, true)
		if err := c.Stop(10 * time.Second); err != nil {
			t.Fatalf("SIGTERM exit: %v", err)
		}

		for _, tc := range []struct{ revoke, restore, want string }{
			{"REVOKE REPLICATION SLAVE ON *.* FROM " + user, "GRANT REPLICATION SLAVE ON *.* TO " + user, "REPLICATION SLAVE"},
			{"REVOKE SELECT ON " + db + ".outbox_message FROM " + user, "GRANT SELECT ON " + db + ".outbox_message TO " + user, "SELECT"},
		} {
			exec(tc.revoke)
			code, out := testenv.Run(t, 30*time.Second, nil, "run", "--config", tlsTestConfig(t, connName(t, "e2e-priv-mysql-less"), source, brokers))
			if code == 0 || !strings.Contains(out, tc.want) {
				t.Fatalf("after %s: exit %d, want a failure naming %s:\n%s", tc.revoke, code, tc.want, out)
			}
			exec(tc.restore)
		}
	})

	t.Run("postgres", func(t *testing.T) {
		b := postgresBackend(t)
		schema := testObjectName(t)
		role := "e2e_priv_" + testSuffix(t)
		exec := func(qs ...string) {
			t.Helper()
			for _, q := range qs {
				if _, err := b.db.Exec(q); err != nil {
					t.Fatalf("%s: %v", q, err)
				}
			}
		}
		exec("DROP ROLE IF EXISTS "+role,
			// The README's setup: a replication login role that reads the
			// table, and a publication the table's owner created.
			"CREATE ROLE "+role+" LOGIN REPLICATION PASSWORD 'priv-pw'",
			"GRANT USAGE ON SCHEMA "+schema+" TO "+role,
			"GRANT SELECT ON "+schema+".outbox_message TO "+role,
			"CREATE PUBLICATION "+schema+" FOR TABLE "+schema+".outbox_message WITH (publish = 'insert')")
		t.Cleanup(func() {
			b.db.Exec("DROP OWNED BY " + role)
			b.db.Exec("DROP ROLE IF EXISTS " + role)
		})
		u, err := url.Parse(testenv.PostgresDSN(t))
		if err != nil {
			t.Fatal(err)
		}
		u.User = url.UserPassword(role, "priv-pw")
		// create: true only creates the slot (REPLICATION suffices); the
		// publication exists.
		source := fmt.Sprintf("  type: postgres\n  dsn: %q\n  table: %s.outbox_message\n  slot: %s\n  publication: %s\n",
			u.String(), schema, schema, schema)
		_, brokers := testenv.Kafka(t)

		exec("ALTER ROLE " + role + " NOREPLICATION")
		code, out := testenv.Run(t, 30*time.Second, nil, "run", "--config", tlsTestConfig(t, connName(t, "e2e-priv-pg-less"), source, brokers))
		if code == 0 || !strings.Contains(strings.ToLower(out), "replication") {
			t.Fatalf("without REPLICATION: exit %d, want a failure naming replication:\n%s", code, out)
		}
		exec("ALTER ROLE " + role + " REPLICATION")

		c := testenv.Start(t, tlsTestConfig(t, connName(t, "e2e-priv-pg"), source, brokers))
		cons := newConsumer(t, brokers, `outbox\.event\..*`)
		b.insertTx(t, []row{{"priv-1", "ORDER", "A-1", "ORDER_CREATED", `{}`}}, true)
		checkDelivery(t, cons.waitFor(t, 1, 20*time.Second), []string{"priv-1"}, 3, true)
		if err := c.Stop(10 * time.Second); err != nil {
			t.Fatalf("SIGTERM exit: %v", err)
		}
	})
}
