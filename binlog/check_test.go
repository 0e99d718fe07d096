package binlog

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/go-mysql-org/go-mysql/mysql"
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

func TestJudgeMariaDBGTID(t *testing.T) {
	state, _ := parseGTIDState("0-1-100,0-2-120,1-1-7")
	oldest, _ := parseGTIDState("0-1-50")
	ok := []string{"0-1-100", "0-2-120", "0-2-50", "0-1-60,1-1-7", "1-1-3"}
	for _, s := range ok {
		g, _ := ParseMariaDBGTIDs(s)
		if err := judgeMariaDBGTID(g, state, oldest, "0-1-100,0-2-120,1-1-7", "mariadb-bin.000004"); err != nil {
			t.Errorf("%s: %v", s, err)
		}
	}
	for _, tc := range []struct{ pos, want string }{
		{"5-1-10", "replication domain 5, which this server's binlog never contained"},
		{"0-1-100,5-1-10", "replication domain 5"},
		{"0-1-121", "ahead of this server's binlog"},
		{"0-1-49", "were purged"},
	} {
		g, _ := ParseMariaDBGTIDs(tc.pos)
		err := judgeMariaDBGTID(g, state, oldest, "0-1-100,0-2-120,1-1-7", "mariadb-bin.000004")
		if !errors.Is(err, ErrPositionGone) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want ErrPositionGone with %q", tc.pos, err, tc.want)
		}
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
	for _, tc := range []struct{ ckpt, want string }{
		{u + ":1-150", "never executed"},
		{u + ":1-50," + v + ":1-3", v},
		{u + ":1-10", "purged " + u + ":11-20"},
	} {
		err := judgeMySQLGTID(parse(tc.ckpt), executed, purged)
		if !errors.Is(err, ErrPositionGone) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want ErrPositionGone with %q", tc.ckpt, err, tc.want)
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
