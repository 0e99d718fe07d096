package migrate

import (
	"strings"
	"testing"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
)

func TestPendingPositionsDescribed(t *testing.T) {
	for p, want := range map[outboxcdc.Position]string{
		"mysql:pending:50:6007:mariadb-gtid:0-1-1106769": "rows up to key 50 published (pending rows go up to key 6007), then streaming from MariaDB GTID 0-1-1106769",
		"postgres:pending:5:9:0/16B3748":                 "then streaming from LSN 0/16B3748",
	} {
		if got := Describe(p); !strings.Contains(got, want) {
			t.Errorf("Describe(%s) = %q, want it to contain %q", p, got, want)
		}
		if Form(p) != "pending" {
			t.Errorf("Form(%s) = %q", p, Form(p))
		}
		if d, _ := Compare(p, "postgres:0/1"); d != NotComparable {
			t.Errorf("Compare(%s, ...) = %v", p, d)
		}
	}
}
