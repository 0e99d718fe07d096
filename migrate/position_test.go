package migrate

import (
	"errors"
	"testing"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
)

func TestParsePosition(t *testing.T) {
	tests := []struct {
		kind, in string
		want     outboxcdc.Position
	}{
		{"mysql", "mysql:file:mysql-bin.000003:4", "mysql:file:mysql-bin.000003:4"},
		{"mysql", "mysql-bin.000003:4", "mysql:file:mysql-bin.000003:4"},
		{"mysql", " file:mysql-bin.000003:120 ", "mysql:file:mysql-bin.000003:120"},
		{"mysql", uuidB + ":1-5:11-18," + uuidA + ":1-23", "mysql:gtid:" + uuidA + ":1-23," + uuidB + ":1-5:11-18"},
		{"mysql", "gtid:" + uuidA + ":1-23", "mysql:gtid:" + uuidA + ":1-23"},
		{"mysql", "0-1-42", "mysql:mariadb-gtid:0-1-42"},
		{"mysql", "1-7-9,0-1-42", "mysql:mariadb-gtid:0-1-42,1-7-9"},
		{"mysql", "mysql:mariadb-gtid:0-1-42", "mysql:mariadb-gtid:0-1-42"},
		{"postgres", "0/16B3748", "postgres:0/16B3748"},
		{"postgres", "postgres:0/16b3748", "postgres:0/16B3748"},
	}
	for _, tt := range tests {
		got, err := ParsePosition(tt.kind, tt.in)
		if err != nil {
			t.Errorf("ParsePosition(%s, %q): %v", tt.kind, tt.in, err)
			continue
		}
		if got != tt.want {
			t.Errorf("ParsePosition(%s, %q) = %q, want %q", tt.kind, tt.in, got, tt.want)
		}
	}
	bad := []struct{ kind, in string }{
		{"mysql", ""}, {"mysql", "mysql-bin.000003"}, {"mysql", "mysql-bin.000003:2"}, {"mysql", "0-1"},
		{"mysql", uuidA + ":x"}, {"postgres", "16B3748"}, {"postgres", "0/0"}, {"postgres", "mysql-bin.000003:4"},
	}
	for _, tt := range bad {
		if got, err := ParsePosition(tt.kind, tt.in); err == nil {
			t.Errorf("ParsePosition(%s, %q) = %q, want an error", tt.kind, tt.in, got)
		}
	}
	for _, tt := range []struct{ kind, in string }{{"mysql", "postgres:0/16B3748"}, {"postgres", "mysql:file:mysql-bin.000003:4"}} {
		if _, err := ParsePosition(tt.kind, tt.in); !errors.Is(err, outboxcdc.ErrForeignPosition) {
			t.Errorf("ParsePosition(%s, %q): %v, want ErrForeignPosition", tt.kind, tt.in, err)
		}
	}
}

func TestDescribe(t *testing.T) {
	tests := map[outboxcdc.Position]string{
		"mysql:file:mysql-bin.000003:4":   "binlog file mysql-bin.000003 offset 4",
		"mysql:mariadb-gtid:0-1-42":       "MariaDB GTID 0-1-42",
		"mysql:mariadb-gtid:0-1-42,1-7-9": "MariaDB GTID position 0-1-42,1-7-9 (2 domains)",
		"mysql:gtid:" + uuidA + ":1-23":   "MySQL GTID set " + uuidA + ":1-23",
		"postgres:0/16B3748":              "LSN 0/16B3748",
		"sqlserver:1":                     `position of an unknown source kind "sqlserver"`,
	}
	for p, want := range tests {
		if got := Describe(p); got != want {
			t.Errorf("Describe(%q) = %q, want %q", p, got, want)
		}
	}
}

func TestCompare(t *testing.T) {
	tests := []struct {
		old, new outboxcdc.Position
		want     Direction
	}{
		{"postgres:0/16B3748", "postgres:0/16B3748", Same},
		{"postgres:0/16B3748", "postgres:0/1000", Backward},
		{"postgres:0/16B3748", "postgres:1/0", Forward},
		{"mysql:file:mysql-bin.000003:400", "mysql:file:mysql-bin.000003:120", Backward},
		{"mysql:file:mysql-bin.000003:400", "mysql:file:mysql-bin.000010:4", Forward},
		{"mysql:file:mysql-bin.000010:4", "mysql:file:mysql-bin.000003:900", Backward},
		{"mysql:file:mysql-bin.000003:400", "mysql:file:other-bin.000004:4", NotComparable},
		{"mysql:gtid:" + uuidA + ":1-23", "mysql:gtid:" + uuidA + ":1-20", Backward},
		{"mysql:gtid:" + uuidA + ":1-23", "mysql:gtid:" + uuidA + ":1-23," + uuidB + ":1-2", Forward},
		{"mysql:gtid:" + uuidA + ":1-23", "mysql:gtid:" + uuidB + ":1-23", NotComparable},
		{"mysql:mariadb-gtid:0-1-42,1-7-9", "mysql:mariadb-gtid:0-2-50,1-7-9", Forward},
		{"mysql:mariadb-gtid:0-1-42,1-7-9", "mysql:mariadb-gtid:0-1-40,1-7-8", Backward},
		{"mysql:mariadb-gtid:0-1-42,1-7-9", "mysql:mariadb-gtid:0-1-40,1-7-10", NotComparable},
		{"mysql:mariadb-gtid:0-1-42", "mysql:mariadb-gtid:0-1-42,1-7-9", NotComparable},
		{"mysql:mariadb-gtid:0-1-42", "mysql:file:mysql-bin.000003:4", NotComparable},
		{"mysql:file:mysql-bin.000003:4", "postgres:0/1", NotComparable},
	}
	for _, tt := range tests {
		got, why := Compare(tt.old, tt.new)
		if got != tt.want {
			t.Errorf("Compare(%q, %q) = %v, want %v", tt.old, tt.new, got, tt.want)
		}
		if got == NotComparable && why == "" {
			t.Errorf("Compare(%q, %q): no reason given", tt.old, tt.new)
		}
	}
}
