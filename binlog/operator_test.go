package binlog

import (
	"strings"
	"testing"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
)

const (
	opUUIDA = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
	opUUIDB = "7c1de3f2-3fd2-11ee-8d2b-0242ac120002"
)

func TestParseInput(t *testing.T) {
	for in, want := range map[string]outboxcdc.Position{
		"mysql:file:mysql-bin.000003:4":             "mysql:file:mysql-bin.000003:4",
		"mysql-bin.000003:4":                        "mysql:file:mysql-bin.000003:4",
		" file:mysql-bin.000003:120 ":               "mysql:file:mysql-bin.000003:120",
		opUUIDB + ":1-5:11-18," + opUUIDA + ":1-23": "mysql:gtid:" + opUUIDA + ":1-23," + opUUIDB + ":1-5:11-18",
		"gtid:" + opUUIDA + ":1-23":                 "mysql:gtid:" + opUUIDA + ":1-23",
		"0-1-42":                                    "mysql:mariadb-gtid:0-1-42",
		"1-7-9,0-1-42":                              "mysql:mariadb-gtid:0-1-42,1-7-9",
		"mysql:mariadb-gtid:0-1-42":                 "mysql:mariadb-gtid:0-1-42",
	} {
		got, err := ParseInput(in)
		if err != nil || got != want {
			t.Errorf("ParseInput(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"", "mysql-bin.000003", "mysql-bin.000003:2", "0-1", opUUIDA + ":x"} {
		if got, err := ParseInput(in); err == nil {
			t.Errorf("ParseInput(%q) = %q, want an error", in, got)
		}
	}
}

func TestDescribeAndForm(t *testing.T) {
	for p, want := range map[outboxcdc.Position][2]string{
		"mysql:file:mysql-bin.000003:4":   {"binlog file mysql-bin.000003 offset 4", FormFile},
		"mysql:mariadb-gtid:0-1-42":       {"MariaDB GTID 0-1-42", FormMariaDBGTID},
		"mysql:mariadb-gtid:0-1-42,1-7-9": {"MariaDB GTID position 0-1-42,1-7-9 (2 domains)", FormMariaDBGTID},
		"mysql:gtid:" + opUUIDA + ":1-23": {"MySQL GTID set " + opUUIDA + ":1-23", FormMySQLGTID},
	} {
		if got := Describe(p); got != want[0] {
			t.Errorf("Describe(%q) = %q, want %q", p, got, want[0])
		}
		if got := Form(p); got != want[1] {
			t.Errorf("Form(%q) = %q, want %q", p, got, want[1])
		}
	}
	p := outboxcdc.Position("mysql:pending:50:6007:mariadb-gtid:0-1-1106769")
	want := "rows up to key 50 published (pending rows go up to key 6007), then streaming from MariaDB GTID 0-1-1106769"
	if got := Describe(p); !strings.Contains(got, want) {
		t.Errorf("Describe(%s) = %q, want it to contain %q", p, got, want)
	}
	if Form(p) != FormPending {
		t.Errorf("Form(%s) = %q", p, Form(p))
	}
	if _, err := Compare(p, "mysql:mariadb-gtid:0-1-1"); err == nil {
		t.Errorf("Compare(%s, ...) ordered a pending position", p)
	}
}

func TestCompare(t *testing.T) {
	const no = 2 // not comparable
	for _, tt := range []struct {
		a, b outboxcdc.Position
		want int
	}{
		{"mysql:file:mysql-bin.000003:400", "mysql:file:mysql-bin.000003:400", 0},
		{"mysql:file:mysql-bin.000003:400", "mysql:file:mysql-bin.000003:120", 1},
		{"mysql:file:mysql-bin.000003:400", "mysql:file:mysql-bin.000010:4", -1},
		{"mysql:file:mysql-bin.000010:4", "mysql:file:mysql-bin.000003:900", 1},
		{"mysql:file:mysql-bin.000003:400", "mysql:file:other-bin.000004:4", no},
		{"mysql:gtid:" + opUUIDA + ":1-23", "mysql:gtid:" + opUUIDA + ":1-20", 1},
		{"mysql:gtid:" + opUUIDA + ":1-23", "mysql:gtid:" + opUUIDA + ":1-23," + opUUIDB + ":1-2", -1},
		{"mysql:gtid:" + opUUIDA + ":1-23", "mysql:gtid:" + opUUIDB + ":1-23", no},
		{"mysql:mariadb-gtid:0-1-42,1-7-9", "mysql:mariadb-gtid:0-2-50,1-7-9", -1},
		{"mysql:mariadb-gtid:0-1-42,1-7-9", "mysql:mariadb-gtid:0-1-40,1-7-8", 1},
		{"mysql:mariadb-gtid:0-1-42,1-7-9", "mysql:mariadb-gtid:0-1-40,1-7-10", no},
		{"mysql:mariadb-gtid:0-1-42", "mysql:mariadb-gtid:0-1-42,1-7-9", no},
		{"mysql:mariadb-gtid:0-1-42", "mysql:file:mysql-bin.000003:4", no},
		{"mysql:file:mysql-bin.000003:4", "postgres:0/1", no},
	} {
		got, err := Compare(tt.a, tt.b)
		switch {
		case tt.want == no && err == nil:
			t.Errorf("Compare(%q, %q) = %d, want not comparable", tt.a, tt.b, got)
		case tt.want != no && (err != nil || got != tt.want):
			t.Errorf("Compare(%q, %q) = %d, %v; want %d", tt.a, tt.b, got, err, tt.want)
		}
	}
}
