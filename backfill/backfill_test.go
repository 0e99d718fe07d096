package backfill

import (
	"strings"
	"testing"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
)

func TestPositionRoundTrip(t *testing.T) {
	for _, st := range []State{
		{Last: -1 << 63, High: 7, Stream: "mariadb-gtid:0-1-42,1-7-9"},
		{Last: 50, High: 6007, Stream: "file:mariadb-bin.000003:1234"},
		{Last: 3, High: 3, Stream: "1/11BA31E8"},
	} {
		p := st.Encode("mysql")
		if !IsPending(p) {
			t.Fatalf("%s not pending", p)
		}
		got, err := Parse(p, "mysql")
		if err != nil || got != st {
			t.Fatalf("Parse(%s) = %+v, %v; want %+v", p, got, err, st)
		}
		if sp := got.StreamPosition("mysql"); IsPending(sp) || sp.Body() != st.Stream {
			t.Fatalf("stream position %s", sp)
		}
	}
	if _, err := Parse("postgres:pending:1:2:0/1", "mysql"); err == nil {
		t.Fatal("foreign kind accepted")
	}
	for _, bad := range []string{"mysql:pending:", "mysql:pending:x:1:file:a:4", "mysql:pending:1:2:", "mysql:file:a:4"} {
		if _, err := Parse(outboxcdc.Position(bad), "mysql"); err == nil {
			t.Fatalf("%q accepted", bad)
		}
	}
}

func TestTxEnds(t *testing.T) {
	st := State{Last: 0, High: 9, Stream: "0/10"}
	rows := []Row{{Key: 4, Event: outboxcdc.Event{MessageID: "a"}}, {Key: 9, Event: outboxcdc.Event{MessageID: "b"}}}
	tx := Tx("postgres", st, rows, false)
	if tx.End != "postgres:pending:9:9:0/10" || len(tx.Events) != 2 || tx.Events[0].CommitTime.IsZero() {
		t.Fatalf("tx %+v", tx)
	}
	if done := Tx("postgres", st, nil, true); done.End != "postgres:0/10" || len(done.Events) != 0 {
		t.Fatalf("last tx %+v", done)
	}
}

func TestValidate(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatal(err)
	}
	c := Config{Where: "status = 0; DROP TABLE x", Key: "id; --", Batch: 0}
	err := c.Validate()
	for _, want := range []string{"where:", "key:", "batch:"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("%v does not name %s", err, want)
		}
	}
}
