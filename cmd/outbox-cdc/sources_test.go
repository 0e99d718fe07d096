package main

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
)

// Every source type has every part the commands use: a kind added to the
// registry without one would fail at run time, not here.
func TestSourceKindsComplete(t *testing.T) {
	for name, k := range sourceKinds {
		v := reflect.ValueOf(k)
		for i := 0; i < v.NumField(); i++ {
			if f := v.Type().Field(i).Name; f != "guardWrite" && v.Field(i).IsNil() {
				t.Errorf("source type %q: %s is not set", name, f)
			}
		}
		var cfg Config
		if k.config(&cfg.Source) == nil {
			t.Errorf("source type %q: no config struct", name)
		}
	}
}

func TestParsePositionByKind(t *testing.T) {
	for _, tt := range []struct{ kind, in, want string }{
		{"mysql", "mysql-bin.000003:4", "mysql:file:mysql-bin.000003:4"},
		{"mysql", "0-1-42", "mysql:mariadb-gtid:0-1-42"},
		{"postgres", "0/16b3748", "postgres:0/16B3748"},
		{"postgres", "postgres:0/16B3748", "postgres:0/16B3748"},
	} {
		if got, err := parsePosition(tt.kind, tt.in); err != nil || string(got) != tt.want {
			t.Errorf("parsePosition(%s, %q) = %q, %v; want %q", tt.kind, tt.in, got, err, tt.want)
		}
	}
	for _, tt := range []struct{ kind, in string }{{"mysql", "postgres:0/16B3748"}, {"postgres", "mysql:file:mysql-bin.000003:4"}} {
		if _, err := parsePosition(tt.kind, tt.in); !errors.Is(err, outboxcdc.ErrForeignPosition) {
			t.Errorf("parsePosition(%s, %q): %v, want ErrForeignPosition", tt.kind, tt.in, err)
		}
	}
	if _, err := parsePosition("postgres", "mysql-bin.000003:4"); err == nil {
		t.Error("a binlog short form parsed as a Postgres position")
	}
}

func TestDescribeAndComparePositions(t *testing.T) {
	if got := describePosition("sqlserver:1"); got != `position of an unknown source kind "sqlserver"` {
		t.Errorf("describePosition = %q", got)
	}
	if got := describePosition("postgres:0/16B3748"); got != "LSN 0/16B3748" {
		t.Errorf("describePosition = %q", got)
	}
	if positionForm("mysql:file:mysql-bin.000003:4") != "file" || positionForm("sqlserver:1") != "" {
		t.Error("positionForm")
	}
	if _, err := comparePositions("mysql:file:mysql-bin.000003:4", "postgres:0/1"); err == nil || !strings.Contains(err.Error(), "different sources") {
		t.Errorf("comparePositions across kinds: %v", err)
	}
	if d, err := comparePositions("postgres:0/2", "postgres:0/1"); err != nil || directionName(d) != "backward" {
		t.Errorf("comparePositions = %d, %v", d, err)
	}
}

// The Postgres source's recovery advice re-publishes every row, or with
// lifecycle.mark_sent the rows not marked delivered.
func TestPostgresConfigRepublishWhere(t *testing.T) {
	cfg := defaultConfig()
	if got := postgresConfig(cfg).RepublishWhere; got != "" {
		t.Errorf("without mark_sent: %q, want empty (every row)", got)
	}
	cfg.Lifecycle.MarkSent = true
	cfg.Lifecycle.Cleanup.Delivered = "state = 'sent'"
	if got := postgresConfig(cfg).RepublishWhere; got != "(state = 'sent') IS NOT TRUE" {
		t.Errorf("with mark_sent: %q", got)
	}
}
