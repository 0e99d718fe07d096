package lifecycle

import (
	"strings"
	"testing"
	"time"

	"github.com/outbox-cdc/outbox-cdc/dbconn"
)

func TestValidate(t *testing.T) {
	c := DefaultConfig()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	c.Cleanup.Enabled = true
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "needs mark_sent") {
		t.Fatalf("cleanup without mark_sent: %v", err)
	}
	c.MarkSent = true
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	c.Cleanup.Retention = time.Second
	c.Cleanup.ArchiveTable = "a.b.c"
	c.MarkSentSet = "status = 1; DELETE"
	c.MarkTimeout = 0
	c.MarkRetryTimeout = -time.Second
	err := c.Validate()
	for _, want := range []string{"retention", "archive_table", "mark_sent_set", "mark_timeout", "mark_retry_timeout"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("%v does not name %s", err, want)
		}
	}
}

func TestSQL(t *testing.T) {
	my := &Lifecycle{d: dialect(t, dbconn.MySQL)}
	pg := &Lifecycle{d: dialect(t, dbconn.Postgres)}
	if got := my.d.Params(3); got != "?, ?, ?" {
		t.Fatal(got)
	}
	if got := pg.d.Params(3); got != "$1, $2, $3" {
		t.Fatal(got)
	}
	if got := my.d.QuoteQualified("shop.outbox"); got != "`shop`.`outbox`" {
		t.Fatal(got)
	}
	if got := pg.d.QuoteQualified("public.outbox"); got != `"public"."outbox"` {
		t.Fatal(got)
	}
	if got := pg.d.MinusSeconds(pg.d.Now(0), 168*time.Hour); got != "now() - interval '604800 seconds'" {
		t.Fatal(got)
	}
}

func dialect(t *testing.T, kind string) *dbconn.Dialect {
	t.Helper()
	d, err := dbconn.DialectOf(kind)
	if err != nil {
		t.Fatal(err)
	}
	return d
}
