package binlog

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/go-mysql-org/go-mysql/mysql"
	mysqldriver "github.com/go-sql-driver/mysql"
	outboxcdc "github.com/outbox-cdc/outbox-cdc"
	"github.com/outbox-cdc/outbox-cdc/test/testenv"
)

// TestSettingsResults: the server variables the source refuses, each with
// the exact setting to change. The source reads GLOBAL values, which only
// the server's administrator may change, so this is a table over the
// variables rather than a test that flips them on the shared server.
func TestSettingsResults(t *testing.T) {
	good := map[string]string{"log_bin": "ON", "binlog_format": "ROW", "binlog_row_image": "FULL", "binlog_row_metadata": "FULL"}
	with := func(k, v string) map[string]string {
		m := map[string]string{}
		for a, b := range good {
			m[a] = b
		}
		if v == "" {
			delete(m, k)
		} else {
			m[k] = v
		}
		return m
	}
	cases := []struct {
		name     string
		vars     map[string]string
		fail     string // the failing check, "" for none
		fix      string
		detailIn string
	}{
		{"all good", good, "", "", ""},
		{"statement format", with("binlog_format", "STATEMENT"), "mysql.binlog_format", "SET GLOBAL binlog_format=ROW", "binlog_format is STATEMENT"},
		{"mixed format", with("binlog_format", "MIXED"), "mysql.binlog_format", "SET GLOBAL binlog_format=ROW", "MIXED"},
		{"minimal image", with("binlog_row_image", "MINIMAL"), "mysql.binlog_row_image", "SET GLOBAL binlog_row_image=FULL", "binlog_row_image is MINIMAL"},
		{"noblob image", with("binlog_row_image", "NOBLOB"), "mysql.binlog_row_image", "binlog_row_image=FULL in the server configuration", "NOBLOB"},
		{"log_bin off", with("log_bin", "OFF"), "mysql.log_bin", "log_bin=<basename>", "log_bin is OFF"},
		{"log_bin missing", with("log_bin", ""), "mysql.log_bin", "log_bin=<basename>", "not set"},
		{"minimal metadata passes", with("binlog_row_metadata", "MINIMAL"), "", "", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var failed []outboxcdc.CheckResult
			for _, r := range settingsResults(tc.vars) {
				if !r.OK {
					failed = append(failed, r)
				}
			}
			if tc.fail == "" {
				if len(failed) > 0 {
					t.Fatalf("unexpected failures %+v", failed)
				}
				return
			}
			if len(failed) != 1 || failed[0].Name != tc.fail || !strings.Contains(failed[0].Fix, tc.fix) || !strings.Contains(failed[0].Detail, tc.detailIn) {
				t.Fatalf("failures %+v, want one %s with fix %q and detail %q", failed, tc.fail, tc.fix, tc.detailIn)
			}
		})
	}
}

func TestCheckFilePosition(t *testing.T) {
	files := []binlogFile{{"mariadb-bin.000007", 1000}, {"mariadb-bin.000008", 500}}
	if err := checkFilePosition(files, "mariadb-bin.000008", 400); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		file string
		off  uint32
		want string
	}{
		{"mariadb-bin.000003", 4, "purged"},
		{"mariadb-bin.000009", 4, "ahead of this server's binlog"},
		{"mariadb-bin.000008", 501, "beyond the end"},
	} {
		err := checkFilePosition(files, tc.file, tc.off)
		if !errors.Is(err, ErrPositionGone) || !strings.Contains(err.Error(), tc.want) ||
			!strings.Contains(err.Error(), tc.file) || !strings.Contains(err.Error(), "move the checkpoint file") {
			t.Errorf("%s:%d: %v, want ErrPositionGone naming the file, %q and the choices", tc.file, tc.off, err, tc.want)
		}
	}
}

// TestJudgeMariaDBGTID: a checkpoint GTID is judged by its (domain,
// server_id) pair, as the server judges a replica's position: another
// server's higher sequence numbers in the domain do not contain it (the
// reported bug: check said PASS for a checkpoint from a primary that
// crashed ahead of the replica promoted in its place). Every refusal
// after a failover names the position that loses nothing.
func TestJudgeMariaDBGTID(t *testing.T) {
	history := func(state, slave, oldest string) *mariaDBHistory {
		h := &mariaDBHistory{stateText: state, oldestFile: "mariadb-bin.000004"}
		var err error
		if h.state, err = parseGTIDList(state); err != nil {
			t.Fatal(err)
		}
		if h.slavePos, err = ParseMariaDBGTIDs(slave); err != nil {
			t.Fatal(err)
		}
		if oldest != "-" {
			if h.oldest, err = parseGTIDList(oldest); err != nil {
				t.Fatal(err)
			}
		}
		return h
	}
	// A replica promoted after its primary (server 1) crashed: it had
	// server 1's transactions of domain 0 up to 100, then wrote its own
	// (server 2) from 101 to 900.
	promoted := history("0-1-100,0-2-900,1-1-7", "", "0-1-50")
	for _, pos := range []string{"0-1-100,1-1-7", "0-2-120,1-1-7", "0-1-60,1-1-7", "0-2-900,1-1-3"} {
		g, _ := ParseMariaDBGTIDs(pos)
		if err := judgeMariaDBGTID(g, promoted); err != nil {
			t.Errorf("%s: %v", pos, err)
		}
	}
	for _, tc := range []struct {
		name, pos string
		h         *mariaDBHistory
		want      []string
		recovery  string // the position the advice names, "" for none
	}{
		{"crash-behind", "0-1-150,1-1-7", promoted,
			[]string{"GTID 0-1-150 is not in this server's binlog", "server 1's transactions in replication domain 0 only up to 0-1-100", "failover to a replica that was behind"},
			"mysql:mariadb-gtid:0-1-100,1-1-7"},
		{"crash-behind-two-domains", "0-1-150,1-1-9", promoted,
			[]string{"0-1-150, 1-1-9"}, "mysql:mariadb-gtid:0-1-100,1-1-7"},
		{"server-never-seen", "0-3-150,1-1-7", promoted,
			[]string{"no transaction of server 3 in replication domain 0", "no position on this server can be computed"}, ""},
		{"unknown-domain", "0-1-100,5-1-10", promoted, []string{"replication domain 5, which this server's binlog never contained"}, ""},
		{"purged", "0-1-49,1-1-7", promoted, []string{"after the checkpoint's GTID 0-1-49 were purged", "mariadb-bin.000004"}, ""},
		// The oldest binlog starts after a domain-1 transaction, and the
		// checkpoint knows no domain 1: its start was purged.
		{"domain-start-purged", "0-1-60", history("0-1-100,1-1-7", "", "0-1-50,1-1-2"), []string{"replication domain 1", "purged before they were delivered"}, ""},
		// 0-1-50 is the oldest binlog's last of domain 0 but not the last
		// logged before it (0-2-51 is): 0-2-51 was purged.
		{"purged-other-server", "0-1-50", history("0-1-50,0-2-60", "", "0-1-50,0-2-51"), []string{"0-1-50 were purged"}, ""},
		// The recovery itself is purged on this server.
		{"recovery-purged", "0-1-150", history("0-1-100,0-2-900", "", "0-1-100,0-2-500"),
			[]string{"the position that would lose nothing (0-1-100) is no longer in this server's binlogs"}, ""},
		// A replica without log_slave_updates: server 1's transactions are
		// in its gtid_slave_pos, not its binlog.
		{"behind-no-log-slave-updates", "0-1-150", history("0-2-900", "0-1-100", "-"),
			[]string{"no transaction of server 1 in replication domain 0, which it applied only up to 0-1-100 as a replica"}, "mysql:mariadb-gtid:0-1-100"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, _ := ParseMariaDBGTIDs(tc.pos)
			err := judgeMariaDBGTID(g, tc.h)
			var ge *goneError
			if !errors.Is(err, ErrPositionGone) || !errors.As(err, &ge) {
				t.Fatalf("%v, want ErrPositionGone", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%v\nwant %q", err, w)
				}
			}
			if tc.recovery == "" {
				if ge.recovery != "" {
					t.Errorf("names a recovery although none loses nothing: %s", ge.recovery)
				}
				return
			}
			cmd := "`outbox-cdc position set --config FILE --to " + tc.recovery + " --force`"
			if !strings.Contains(ge.recovery, cmd) || !strings.HasPrefix(ge.advice(), "The lossless way back: ") ||
				!strings.Contains(err.Error(), "The lossless way back: if this server is a promoted replica") {
				t.Errorf("%v\nwant the lossless way first: %s", err, cmd)
			}
			rec, _ := ParsePosition(outboxcdc.Position(tc.recovery))
			if err := judgeMariaDBGTID(rec.MariaDB, tc.h); err != nil {
				t.Errorf("the recovery %s is refused itself: %v", tc.recovery, err)
			}
		})
	}
	// The server's own replica position (log_slave_updates off) is on its
	// history, as the server accepts it.
	g, _ := ParseMariaDBGTIDs("0-1-100")
	if err := judgeMariaDBGTID(g, history("0-2-900", "0-1-100", "-")); err != nil {
		t.Errorf("gtid_slave_pos: %v", err)
	}
	// Unrelated servers with the default server_id 1 and domain 0 look
	// alike: nothing in the GTIDs tells them apart (docs/operations.md).
	g, _ = ParseMariaDBGTIDs("0-1-40")
	if err := judgeMariaDBGTID(g, history("0-1-90", "", "")); err != nil {
		t.Errorf("a foreign server with the same ids: %v", err)
	}
}

func TestJudgeMySQLGTID(t *testing.T) {
	parse := func(s string) *mysql.MysqlGTIDSet {
		g, err := mysql.ParseMysqlGTIDSet(s)
		if err != nil {
			t.Fatal(err)
		}
		return g.(*mysql.MysqlGTIDSet)
	}
	const u = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
	const v = "4e11fa47-71ca-11e1-9e33-c80aa9429562"
	executed, purged := parse(u+":1-100"), parse(u+":1-20")
	if err := judgeMySQLGTID(parse(u+":1-50"), executed, purged); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ ckpt, want, recovery string }{
		{u + ":1-150", "never executed", "mysql:gtid:" + u + ":1-100"},
		{u + ":1-50," + v + ":1-3", v, "mysql:gtid:" + u + ":1-50"},
		{v + ":1-3", "it executed none of the checkpoint's transactions", ""},
		{u + ":1-10", "purged " + u + ":11-20", ""},
	} {
		err := judgeMySQLGTID(parse(tc.ckpt), executed, purged)
		if !errors.Is(err, ErrPositionGone) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want ErrPositionGone with %q", tc.ckpt, err, tc.want)
		}
		cmd := "The lossless way back: if this server is a promoted replica of the one the checkpoint was written against, `outbox-cdc position set --config FILE --to " + tc.recovery + " --force`"
		if got := strings.Contains(err.Error(), cmd); got != (tc.recovery != "") {
			t.Errorf("%s: %v\nwant the recovery %q: %v", tc.ckpt, err, tc.recovery, got)
		}
	}
	// After a failover to a replica that was behind and wrote its own
	// transactions (server v): the recovery is what it has of ours, and
	// from it the server sends exactly its own.
	promoted := parse(u + ":1-90," + v + ":1-40")
	err := judgeMySQLGTID(parse(u+":1-100"), promoted, parse(""))
	if err == nil || !strings.Contains(err.Error(), "--to mysql:gtid:"+u+":1-90 --force") || !strings.Contains(err.Error(), u+":91-100 never reached this server") {
		t.Fatalf("crash-behind: %v", err)
	}
}

// TestGTIDMinus: the difference of two MySQL GTID sets, per server uuid
// and tag, interval by interval, with nothing left for a server whose
// transactions are all taken away.
func TestGTIDMinus(t *testing.T) {
	const u = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
	const v = "4e11fa47-71ca-11e1-9e33-c80aa9429562"
	for _, tc := range []struct{ a, b, want string }{
		{u + ":1-100", u + ":1-100", ""},
		{u + ":1-100", "", u + ":1-100"},
		{u + ":1-100", u + ":1-20", u + ":21-100"},
		{u + ":1-100", u + ":90-200", u + ":1-89"},
		{u + ":1-100", u + ":5:10-20:30-40:100", u + ":1-4:6-9:21-29:41-99"},
		{u + ":1-10:20-30:40-50", u + ":5-45", u + ":1-4:46-50"},
		{u + ":1-10:20-30", u + ":11-19:31-39", u + ":1-10:20-30"},
		{u + ":1-100," + v + ":1-3", u + ":1-100", v + ":1-3"},
		{u + ":1-10:blue:1-5", u + ":blue:1-5", u + ":1-10"},
		{u + ":1-10:blue:1-5", u + ":1-10", u + ":blue:1-5"},
		{v + ":1-3", u + ":1-3", v + ":1-3"},
	} {
		a, err1 := mysql.ParseMysqlGTIDSet(tc.a)
		b, err2 := mysql.ParseMysqlGTIDSet(tc.b)
		if err1 != nil || err2 != nil {
			t.Fatal(err1, err2)
		}
		before := a.String()
		got := gtidMinus(a.(*mysql.MysqlGTIDSet), b.(*mysql.MysqlGTIDSet))
		if got.String() != tc.want || a.String() != before {
			t.Errorf("%s minus %s = %q (first set now %s), want %q", tc.a, tc.b, got, a, tc.want)
		}
	}
}

func TestHasGlobalPrivilege(t *testing.T) {
	for _, tc := range []struct {
		grants []string
		want   bool
	}{
		{[]string{"GRANT ALL PRIVILEGES ON *.* TO `root`@`localhost` WITH GRANT OPTION"}, true},
		{[]string{"GRANT SELECT, REPLICATION SLAVE, BINLOG MONITOR ON *.* TO `cdc`@`%`"}, true},
		{[]string{"GRANT USAGE ON *.* TO `cdc`@`%`", "GRANT SELECT ON `shop`.* TO `cdc`@`%`"}, false},
		{[]string{"GRANT ALL PRIVILEGES ON `shop`.* TO `cdc`@`%`"}, false},
	} {
		if got := hasGlobalPrivilege(tc.grants, "REPLICATION SLAVE"); got != tc.want {
			t.Errorf("%v: %v, want %v", tc.grants, got, tc.want)
		}
	}
}

// TestCheckAgainstServer runs the preflight against the local server and
// against a private server whose old binlogs were purged, as any
// long-running server's are: a good table and no checkpoint pass; a
// missing role column, a purged file and a foreign GTID domain fail with
// the right check. The positions are built from the server's own binlog
// state, so the test does not depend on its history.
func TestCheckAgainstServer(t *testing.T) {
	t.Parallel()
	t.Run("shared", func(t *testing.T) {
		t.Parallel()
		checkAgainst(t, newFixture(t))
	})
	t.Run("purged binlogs", func(t *testing.T) {
		t.Parallel()
		f := newFixtureOn(t, testenv.PrivateMariaDB(t, testenv.MariaDBOptions{RowMetadata: "FULL", Instance: "purged"}))
		for i := range 3 {
			f.insertTx(fmt.Sprintf("old-%d", i))
			f.exec("FLUSH BINARY LOGS")
		}
		var last string
		rows, err := f.db.Query("SHOW BINARY LOGS")
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			cols, _ := rows.Columns()
			dest := make([]any, len(cols))
			dest[0] = &last
			for i := 1; i < len(dest); i++ {
				dest[i] = new(sql.RawBytes)
			}
			if err := rows.Scan(dest...); err != nil {
				t.Fatal(err)
			}
		}
		rows.Close()
		f.exec("PURGE BINARY LOGS TO '" + last + "'")
		checkAgainst(t, f)
	})
}

func checkAgainst(t *testing.T, f *fixture) {
	ctx := context.Background()
	byName := func(rs []outboxcdc.CheckResult) map[string]outboxcdc.CheckResult {
		m := map[string]outboxcdc.CheckResult{}
		for _, r := range rs {
			m[r.Name] = r
		}
		return m
	}
	rs := Check(ctx, f.config(), "check", seedColumns, "")
	for _, r := range rs {
		if !r.OK {
			t.Errorf("failed: %+v", r)
		}
	}
	// A file before the server's first binlog, and the server's current
	// GTID state plus a domain it never had.
	first, _ := binlogFiles(t, f.db)
	base, _, _ := strings.Cut(first, ".")
	var state string
	if err := f.db.QueryRow("SELECT @@GLOBAL.gtid_binlog_pos").Scan(&state); err != nil {
		t.Fatal(err)
	}
	foreign := "77-1-5"
	if state != "" {
		foreign = state + "," + foreign
	}
	cols := seedColumns
	cols.Payload = "body"
	for _, tc := range []struct {
		cols outboxcdc.Columns
		pos  outboxcdc.Position
		fail string
		want string
	}{
		{cols, "", "mysql.table", "has no column body"},
		{seedColumns, outboxcdc.Position("mysql:file:" + base + ".000000:4"), "mysql.position", "not on the server"},
		{seedColumns, outboxcdc.Position("mysql:mariadb-gtid:" + foreign), "mysql.position", "domain 77"},
	} {
		r := byName(Check(ctx, f.config(), "check", tc.cols, tc.pos))[tc.fail]
		if r.OK || !strings.Contains(r.Detail, tc.want) || r.Fix == "" {
			t.Errorf("%s: %+v, want a failure with %q and a fix", tc.fail, r, tc.want)
		}
	}
}

// TestAccessHintsMatchCause: `check` (and run, through the same
// classification) gives each refused connection the remedy of its own
// cause on the real server: a wrong password, a database the user may not
// use, a database that does not exist and a certificate source.tls does
// not accept each get their own fix, and none of them is told to grant
// replication privileges.
func TestAccessHintsMatchCause(t *testing.T) {
	f := newFixture(t)
	base, err := mysqldriver.ParseDSN(f.dsn)
	if err != nil {
		t.Fatal(err)
	}
	user := uniqueName("hint")
	f.exec("CREATE USER '" + user + "'@'%' IDENTIFIED BY 'right-pw'")
	t.Cleanup(func() { f.db.Exec("DROP USER IF EXISTS '" + user + "'@'%'") })
	as := func(u, pw, db string) string {
		c := base.Clone()
		c.User, c.Passwd, c.DBName = u, pw, db
		return c.FormatDSN()
	}
	cases := []struct {
		name   string
		mutate func(*Config)
		want   []string // in the fix
		detail string   // in the detail
	}{
		{"wrong password (1045)", func(c *Config) { c.DSN = as(user, "wrong-pw", base.DBName) },
			[]string{"user and password in source.dsn"}, "1045"},
		{"no access to the database (1044)", func(c *Config) { c.DSN = as(user, "right-pw", base.DBName) },
			[]string{"no access to the database", "GRANT SELECT ON"}, "1044"},
		{"unknown database (1049)", func(c *Config) { c.DSN = as(base.User, base.Passwd, uniqueName("nodb")) },
			[]string{"does not exist", "database in source.dsn"}, "1049"},
		{"certificate not verified", func(c *Config) {
			c.TLS = TLSConfig{Mode: TLSVerifyFull}
			c.TLS.CAFile = testenv.NewCerts(t).CA
		}, []string{"source.tls"}, "certificate"},
		{"certificate not verified (verify-ca)", func(c *Config) {
			c.TLS = TLSConfig{Mode: TLSVerifyCA}
			c.TLS.CAFile = testenv.NewCerts(t).CA
		}, []string{"source.tls"}, "certificate"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res := Check(context.Background(), f.config(tc.mutate), "hints", seedColumns, "")
			if len(res) != 1 || res[0].Name != "mysql.connect" || res[0].OK {
				t.Fatalf("want one failed mysql.connect, got %+v", res)
			}
			r := res[0]
			for _, w := range tc.want {
				if !strings.Contains(r.Fix, w) {
					t.Errorf("fix %q does not contain %q", r.Fix, w)
				}
			}
			if strings.Contains(r.Fix, "REPLICATION") || strings.Contains(r.Fix, "(host, port, user, password)") {
				t.Errorf("fix %q names another cause", r.Fix)
			}
			if !strings.Contains(r.Detail, tc.detail) {
				t.Errorf("detail %q does not contain %q", r.Detail, tc.detail)
			}
			// run classifies the same refusal with the same remedy.
			cfg := f.config(tc.mutate)
			dsn, err := cfg.ConnDSN()
			if err != nil {
				t.Fatal(err)
			}
			db, err := sql.Open("mysql", dsn)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			cerr := classifyConnErr(db.PingContext(context.Background()))
			if h := outboxcdc.Hint(cerr); h != r.Fix || outboxcdc.IsTransient(cerr) {
				t.Errorf("run's classification: hint %q (transient %v), want the permanent %q", h, outboxcdc.IsTransient(cerr), r.Fix)
			}
		})
	}
}
