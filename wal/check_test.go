package wal

import (
	"context"
	"net/url"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	outboxcdc "github.com/outbox-cdc/outbox-cdc"
	"github.com/rs/zerolog"
)

// TestCheckPublicationCreatable: with source.create and no publication,
// `check` proves on the real server that the role can create it as the
// connector will (CREATE on the database and ownership of the outbox
// table, or a superuser) and fails with the SQL that fixes it otherwise;
// an existing publication needs neither. Each verdict is then held
// against the server: the role's own CREATE PUBLICATION fails exactly
// when check failed.
func TestCheckPublicationCreatable(t *testing.T) {
	e := newPgEnv(t)
	ctx := context.Background()
	role := "chk_" + e.name
	if len(role) > 60 {
		role = role[:60]
	}
	roleIdent := pgx.Identifier{role}.Sanitize()
	var dbName string
	if err := e.db.QueryRow(ctx, `SELECT current_database()`).Scan(&dbName); err != nil {
		t.Fatal(err)
	}
	dbIdent := pgx.Identifier{dbName}.Sanitize()
	e.exec(`CREATE ROLE ` + roleIdent + ` LOGIN REPLICATION`)
	t.Cleanup(func() {
		ctx := context.Background()
		db, err := pgx.Connect(ctx, e.dsn)
		if err != nil {
			t.Errorf("cleanup: %v", err)
			return
		}
		defer db.Close(ctx)
		_, _ = db.Exec(ctx, `DROP PUBLICATION IF EXISTS `+pgx.Identifier{e.pub}.Sanitize())
		_, _ = db.Exec(ctx, `ALTER TABLE `+e.table+` OWNER TO current_user`)
		_, _ = db.Exec(ctx, `REVOKE ALL ON DATABASE `+dbIdent+` FROM `+roleIdent)
		_, _ = db.Exec(ctx, `DROP OWNED BY `+roleIdent)
		if _, err := db.Exec(ctx, `DROP ROLE IF EXISTS `+roleIdent); err != nil {
			t.Errorf("cleanup: drop role %s: %v", role, err)
		}
	})
	e.exec(`GRANT SELECT ON ` + e.table + ` TO ` + roleIdent)
	u, err := url.Parse(e.dsn)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(role)
	cfg := e.config()
	cfg.DSN = u.String()

	publication := func() outboxcdc.CheckResult {
		t.Helper()
		for _, r := range Check(ctx, cfg, "test", seedCols, "") {
			if r.Name == "postgres.publication" {
				return r
			}
		}
		t.Fatal("no postgres.publication result")
		return outboxcdc.CheckResult{}
	}
	// createAsRole runs the connector's CREATE PUBLICATION as the role,
	// and drops what it created.
	createAsRole := func() error {
		t.Helper()
		s, err := New(cfg, "test", seedCols, zerolog.Nop(), nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		db, err := pgx.Connect(ctx, cfg.DSN)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close(ctx)
		if _, err := db.Exec(ctx, s.createPublicationSQL()); err != nil {
			return err
		}
		e.exec(`DROP PUBLICATION ` + pgx.Identifier{e.pub}.Sanitize())
		return nil
	}
	mustFail := func(step string, r outboxcdc.CheckResult, fix []string, notFix ...string) {
		t.Helper()
		if r.OK || r.Status != outboxcdc.CheckFail {
			t.Fatalf("%s: %+v, want a failure", step, r)
		}
		for _, w := range fix {
			if !strings.Contains(r.Fix, w) {
				t.Errorf("%s: fix %q lacks %q", step, r.Fix, w)
			}
		}
		for _, w := range notFix {
			if strings.Contains(r.Fix, w) {
				t.Errorf("%s: fix %q names %q, which the role has", step, r.Fix, w)
			}
		}
		if err := createAsRole(); err == nil {
			t.Errorf("%s: check failed, but the role created the publication", step)
		}
	}

	// Neither CREATE on the database nor the table.
	mustFail("no privilege", publication(), []string{
		"GRANT CREATE ON DATABASE " + dbIdent + " TO " + roleIdent + ";",
		"ALTER TABLE " + pgx.Identifier{"public", e.table}.Sanitize() + " OWNER TO " + roleIdent + ";",
		"CREATE PUBLICATION " + pgx.Identifier{e.pub}.Sanitize() + " FOR TABLE",
		"superuser",
	})

	// CREATE on the database, but not the table's owner.
	e.exec(`GRANT CREATE ON DATABASE ` + dbIdent + ` TO ` + roleIdent)
	mustFail("CREATE only", publication(), []string{"ALTER TABLE", "OWNER TO"}, "GRANT CREATE")

	// Both: check passes, and the role can create it.
	e.exec(`ALTER TABLE ` + e.table + ` OWNER TO ` + roleIdent)
	if r := publication(); r.Status != outboxcdc.CheckPass {
		t.Fatalf("CREATE and owner: %+v, want a pass", r)
	}
	if err := createAsRole(); err != nil {
		t.Fatalf("check passed, but the role cannot create the publication: %v", err)
	}

	// The table's owner without CREATE on the database.
	e.exec(`REVOKE CREATE ON DATABASE ` + dbIdent + ` FROM ` + roleIdent)
	mustFail("owner only", publication(), []string{"GRANT CREATE ON DATABASE"}, "ALTER TABLE")

	// source.tables with a pattern: the publication covers the whole
	// schema, which only a superuser may create, whatever the role owns.
	tables := cfg
	tables.Table, tables.Tables = "", []string{"public." + e.table + "*"}
	var r outboxcdc.CheckResult
	for _, c := range Check(ctx, tables, "test", seedCols, "") {
		if c.Name == "postgres.publication" {
			r = c
		}
	}
	if r.Status != outboxcdc.CheckFail || !strings.Contains(r.Detail, "FOR TABLES IN SCHEMA needs a superuser") ||
		!strings.Contains(r.Fix, `FOR TABLES IN SCHEMA "public"`) {
		t.Fatalf("schema publication: %+v, want a failure naming the superuser", r)
	}
	func() {
		s, err := New(tables, "test", seedCols, zerolog.Nop(), nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		db, err := pgx.Connect(ctx, tables.DSN)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close(ctx)
		if _, err := db.Exec(ctx, s.createPublicationSQL()); err == nil {
			t.Fatal("check failed, but the role created the schema publication")
		}
	}()

	// A publication a superuser created: nothing to create.
	e.exec(`ALTER TABLE ` + e.table + ` OWNER TO current_user`)
	e.exec(`CREATE PUBLICATION ` + pgx.Identifier{e.pub}.Sanitize() + ` FOR TABLE ` + e.table + ` WITH (publish = 'insert')`)
	if r := publication(); r.Status != outboxcdc.CheckPass || !strings.Contains(r.Detail, "publishes inserts") {
		t.Fatalf("existing publication: %+v, want a pass", r)
	}
}
