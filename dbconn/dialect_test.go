package dbconn

import (
	"strings"
	"testing"
	"time"
)

// The statements the dialects build are the ones each database takes
// (the checkpoint table's and the HA readiness upserts, as written for
// each database before the dialect existed).
func TestDialectSQL(t *testing.T) {
	my, err := DialectOf(MySQL)
	if err != nil {
		t.Fatal(err)
	}
	pg, err := DialectOf(Postgres)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := DialectOf("sqlite"); err == nil {
		t.Fatal("sqlite accepted")
	}
	save := func(d *Dialect) string {
		return d.Upsert(d.QuoteQualified("t"), []string{"connector", "position", "checksum", "saved_at"},
			[]string{d.Param(1), d.Param(2), d.Param(3), d.UTCNow(6)}, []string{"connector"}, []string{"position", "checksum", "saved_at"})
	}
	prove := func(d *Dialect) string {
		return d.Upsert("r", []string{"lock_name", "replica", "proved_at"},
			[]string{d.Param(1), d.Param(2), d.MinusMicros(d.Now(3), d.Param(3))}, []string{"lock_name", "replica"}, []string{"proved_at"})
	}
	for _, c := range []struct{ got, want string }{
		{save(my), "INSERT INTO `t` (connector, position, checksum, saved_at) VALUES (?, ?, ?, UTC_TIMESTAMP(6)) " +
			"ON DUPLICATE KEY UPDATE position = VALUES(position), checksum = VALUES(checksum), saved_at = VALUES(saved_at)"},
		{save(pg), `INSERT INTO "t" (connector, position, checksum, saved_at) VALUES ($1, $2, $3, now()) ` +
			"ON CONFLICT (connector) DO UPDATE SET position = EXCLUDED.position, checksum = EXCLUDED.checksum, saved_at = EXCLUDED.saved_at"},
		{prove(my), "INSERT INTO r (lock_name, replica, proved_at) VALUES (?, ?, NOW(3) - INTERVAL ? MICROSECOND) ON DUPLICATE KEY UPDATE proved_at = VALUES(proved_at)"},
		{prove(pg), "INSERT INTO r (lock_name, replica, proved_at) VALUES ($1, $2, now() - make_interval(secs => $3::float8 / 1e6)) " +
			"ON CONFLICT (lock_name, replica) DO UPDATE SET proved_at = EXCLUDED.proved_at"},
		{my.Params(3), "?, ?, ?"},
		{pg.Params(3), "$1, $2, $3"},
		{my.QuoteQualified("shop.out`box"), "`shop`.`out``box`"},
		{pg.QuoteQualified(`public.out"box`), `"public"."out""box"`},
		{my.MinusSeconds(my.Now(0), time.Hour), "NOW(0) - INTERVAL 3600 SECOND"},
		{pg.MinusSeconds(pg.Now(0), time.Hour), "now() - interval '3600 seconds'"},
		{my.KeyText(64) + " " + my.DateTime(6) + " " + my.Timestamp(3), "VARCHAR(64) DATETIME(6) TIMESTAMP(3)"},
		{pg.KeyText(64) + " " + pg.DateTime(6) + " " + pg.Timestamp(3), "TEXT TIMESTAMPTZ TIMESTAMPTZ"},
		{my.SessionLock("outbox-cdc:a").String(), "GET_LOCK('outbox-cdc:a')"},
	} {
		if strings.Join(strings.Fields(c.got), " ") != c.want {
			t.Errorf("got  %s\nwant %s", c.got, c.want)
		}
	}
	if w := my.SessionLock("x").Wait(1500 * time.Millisecond); w != 2*time.Second {
		t.Errorf("MySQL lock wait %s, want whole seconds (2s)", w)
	}
	if w := pg.SessionLock("x").Wait(1500 * time.Millisecond); w != 1500*time.Millisecond {
		t.Errorf("PostgreSQL lock wait %s", w)
	}
}
