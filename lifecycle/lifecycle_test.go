package lifecycle

import (
	"strings"
	"testing"
	"time"
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
	my := &Lifecycle{dialect: MySQL}
	pg := &Lifecycle{dialect: Postgres}
	if got := my.placeholders(3); got != "?, ?, ?" {
		t.Fatal(got)
	}
	if got := pg.placeholders(3); got != "$1, $2, $3" {
		t.Fatal(got)
	}
	if got := quoteQualified(MySQL, "shop.outbox"); got != "`shop`.`outbox`" {
		t.Fatal(got)
	}
	if got := quoteQualified(Postgres, "public.outbox"); got != `"public"."outbox"` {
		t.Fatal(got)
	}
	if got := pg.ago(168 * time.Hour); got != "now() - interval '604800 seconds'" {
		t.Fatal(got)
	}
}
