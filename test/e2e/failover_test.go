package e2e

// Failover on MariaDB (issue 23 part 4): a checkpoint written against a
// primary that crashed ahead of the replica promoted in its place is
// refused by run and by check, and the refusal names the position that
// loses nothing; following it delivers every row the new primary has that
// was not delivered, and none twice.

import (
	"database/sql"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/outbox-cdc/outbox-cdc/test/testenv"
)

// TestMariaDBFailoverBehindReplica: primary and replica (private servers,
// GTID replication, log_slave_updates on the replica). 20 rows reach both,
// the replica stops replicating, 10 more rows reach only the primary; the
// connector delivers all 30 from the primary. The primary is abandoned (a
// crash: nothing talks to it any more), the replica is promoted and takes
// 15 new rows. Pointed at it, `run` exits 1 and `check` fails
// mysql.position, both naming `position set --to` the last GTID of the
// old primary's server id in the replica's gtid_binlog_state; after that
// command the connector delivers exactly the 15 new rows: 0 lost, 0
// duplicated. Before, check said PASS (it compared only the highest
// sequence of the domain, which the replica's own writes had passed) and
// the refusal offered start: latest (losing the 15) or earliest
// (re-sending the 20).
func TestMariaDBFailoverBehindReplica(t *testing.T) {
	suffix := testSuffix(t)
	primaryDSN := testenv.PrivateMariaDB(t, testenv.MariaDBOptions{Instance: "failover-primary-" + suffix})
	replicaDSN := testenv.PrivateMariaDB(t, testenv.MariaDBOptions{Instance: "failover-replica-" + suffix, LogSlaveUpdates: true})
	replicaAdmin := openDB(t, replicaDSN)
	pc, err := mysql.ParseDSN(primaryDSN)
	if err != nil {
		t.Fatal(err)
	}
	host, port, _ := strings.Cut(pc.Addr, ":")
	replicaExec(t, replicaAdmin,
		fmt.Sprintf("CHANGE MASTER TO MASTER_HOST='%s', MASTER_PORT=%s, MASTER_USER='%s', MASTER_USE_GTID=slave_pos", host, port, pc.User),
		"START SLAVE")
	name := testObjectName(t)
	primary := mysqlBackendOn(t, primaryDSN, name) // the database and its tables replicate
	var primaryID uint32
	if err := primary.db.QueryRow("SELECT @@server_id").Scan(&primaryID); err != nil {
		t.Fatal(err)
	}
	rc, _ := mysql.ParseDSN(replicaDSN)
	rc.DBName = name
	replica := *primary
	replica.db = openDB(t, rc.FormatDSN())
	replica.sourceYAML = func(string) string {
		return fmt.Sprintf("  type: mysql\n  dsn: %q\n  table: outbox_message\n  start: latest\n", rc.FormatDSN())
	}

	_, brokers := testenv.Kafka(t)
	conn := connName(t, "e2e-failover")
	env := []string{"OUTBOX_CDC_CHECKPOINT_PATH=" + t.TempDir() + "/checkpoint"}
	onPrimary := primary.config(t, conn, brokers)
	c := testenv.Start(t, onPrimary, env...)
	both, lost, after := ids("both", 1, 20), ids("lost", 1, 10), ids("after", 1, 15)
	primary.insertRows(t, both, 100)
	testenv.Eventually(t, 30*time.Second, "the replica has the first 20 rows", func() bool {
		var n int
		return replica.db.QueryRow("SELECT count(*) FROM outbox_message").Scan(&n) == nil && n == len(both)
	})
	replicaExec(t, replicaAdmin, "STOP SLAVE")
	var behindAt string
	if err := replicaAdmin.QueryRow("SELECT @@GLOBAL.gtid_binlog_pos").Scan(&behindAt); err != nil {
		t.Fatal(err)
	}
	primary.insertRows(t, lost, 100) // only the primary has them: lost in its crash
	cons := newConsumer(t, brokers, `outbox\.event\..*`)
	got := cons.waitFor(t, len(both)+len(lost), 30*time.Second)
	checkDelivery(t, got, append(append([]string{}, both...), lost...), 3, true)
	if err := c.Stop(30 * time.Second); err != nil {
		t.Fatalf("SIGTERM: %v\n%s", err, c.Log())
	}

	// The primary crashes; the replica is promoted and written to.
	replicaExec(t, replicaAdmin, "RESET SLAVE ALL")
	replica.insertRows(t, after, 100)
	onReplica := replica.config(t, conn, brokers)
	want := fmt.Sprintf("mysql:mariadb-gtid:0-%d-", primaryID)
	if !strings.HasPrefix(behindAt, want[len("mysql:mariadb-gtid:"):]) {
		t.Fatalf("the replica stopped at %q, want a GTID of server %d", behindAt, primaryID)
	}
	recovery := "mysql:mariadb-gtid:" + behindAt
	command := "outbox-cdc position set --config FILE --to " + recovery + " --force"

	code, out := testenv.Run(t, 60*time.Second, env, "run", "--config", onReplica)
	if code != 1 || !strings.Contains(out, "is not in this server's binlog") || !strings.Contains(out, "The lossless way back: if this server is a promoted replica") ||
		!strings.Contains(out, command) {
		t.Errorf("run against the promoted replica: exit %d, want 1 naming %q first:\n%s", code, command, out)
	}
	code, out = testenv.Run(t, 60*time.Second, env, "check", "--config", onReplica)
	if code != 1 || !regexp.MustCompile(`FAIL\s+mysql\.position`).MatchString(out) || !strings.Contains(out, command) {
		t.Fatalf("check against the promoted replica: exit %d, want 1 with FAIL mysql.position naming %q:\n%s", code, command, out)
	}
	if t.Failed() {
		t.FailNow()
	}

	// Follow the advice.
	to := regexp.MustCompile(`--to (\S+) --force`).FindStringSubmatch(out)
	if to == nil || to[1] != recovery {
		t.Fatalf("check names %v, want %s", to, recovery)
	}
	code, out = testenv.Run(t, 60*time.Second, env, "position", "set", "--config", onReplica, "--to", to[1], "--force")
	if code != 0 {
		t.Fatalf("position set: exit %d:\n%s", code, out)
	}
	if code, out := testenv.Run(t, 60*time.Second, env, "check", "--config", onReplica); code != 0 {
		t.Fatalf("check after position set: exit %d:\n%s", code, out)
	}
	testenv.Start(t, onReplica, env...)
	all := append(append(append([]string{}, both...), lost...), after...)
	got = cons.waitFor(t, len(all), 30*time.Second)
	got = append(got, cons.quiet(t, 2*time.Second)[len(got):]...)
	checkDelivery(t, got, all, 3, true) // every row once: 0 lost, 0 duplicated
}

func openDB(t *testing.T, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func replicaExec(t *testing.T, db *sql.DB, qs ...string) {
	t.Helper()
	for _, q := range qs {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}
