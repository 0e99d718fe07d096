package wal

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
	"github.com/outbox-cdc/outbox-cdc/source"
)

// Several outbox tables (source.tables).
//
// source.tables lists tables as "schema.table" or "table" (schema public);
// either part may hold the wildcards * or % (any run of characters; _ is an
// ordinary character). Names compare as Postgres stores them, with case.
// One slot and one walsender serve every table; the decoder keeps a
// relation per table with its own role columns (route.tables), and rows of
// all tables reach the pipeline in commit order, in their transactions,
// under one LSN.
//
// Which tables the publication covers decides which rows the walsender
// sends, evaluated as of each change, so a table must be in the
// publication before its first row is written: adding it when the
// connector notices the new table (ALTER PUBLICATION ... ADD TABLE) would
// lose the rows written in between. The publication is therefore:
//
//   - only literal entries: FOR TABLE a, b, ... (the role must own them);
//   - patterns whose schema is literal: FOR TABLES IN SCHEMA s (PostgreSQL
//     15+), plus the literal tables; every table created later in s is
//     published from its creation on;
//   - a pattern with a wildcard schema: FOR ALL TABLES.
//
// The last two need a superuser to create (PostgreSQL 15); with
// source.create: false, or a role that may not, an administrator creates
// the publication and the connector checks it covers the tables. They
// publish only inserts: a FOR ALL TABLES publication that also published
// UPDATEs would make every UPDATE of a table without a replica identity
// fail, so route.on_update other than skip is refused with patterns. The
// decoder drops rows of tables no pattern matches.

// tablePattern is one source.tables entry.
type tablePattern = source.TablePattern

func parseTables(entries []string) ([]tablePattern, error) {
	return source.ParseTables(entries, "public", "schema")
}

// tableMatcher is the decoder's test for an outbox relation.
type tableMatcher []tablePattern

func (m tableMatcher) matches(schema, table string) bool {
	for _, p := range m {
		if p.Matches([]byte(schema), []byte(table), false) {
			return true
		}
	}
	return false
}

// publicationTarget is what CREATE PUBLICATION names for source.tables:
// "TABLE a, TABLES IN SCHEMA s", or "ALL TABLES"; and the schemas whose
// future tables it must cover (all: every schema).
func (s *Source) publicationTarget() (target string, schemas []string, all bool) {
	var tables []string
	seen := map[string]bool{}
	for _, p := range s.pats {
		switch {
		case p.Literal():
			tables = append(tables, pgx.Identifier{p.Schema.Text, p.Table.Text}.Sanitize())
		case p.SchemaLiteral():
			if !seen[p.Schema.Text] {
				seen[p.Schema.Text] = true
				schemas = append(schemas, p.Schema.Text)
			}
		default:
			all = true
		}
	}
	if all {
		return "ALL TABLES", nil, true
	}
	var parts []string
	if len(tables) > 0 {
		parts = append(parts, "TABLE "+strings.Join(tables, ", "))
	}
	if len(schemas) > 0 {
		quoted := make([]string, len(schemas))
		for i, sc := range schemas {
			quoted[i] = pgx.Identifier{sc}.Sanitize()
		}
		parts = append(parts, "TABLES IN SCHEMA "+strings.Join(quoted, ", "))
	}
	return strings.Join(parts, ", "), schemas, false
}

// ensureTablesPublication is ensurePublication for source.tables.
func (s *Source) ensureTablesPublication(ctx context.Context, db *pgx.Conn, checkpoint bool) error {
	pub := s.cfg.Publication
	pubIdent := pgx.Identifier{pub}.Sanitize()
	if s.cols.OnUpdate != "" && s.cols.OnUpdate != "skip" {
		return permanent(fmt.Errorf("route.on_update is %s, but source.tables publishes inserts only (see wal/tables.go): set route.on_update: skip", s.cols.OnUpdate))
	}
	for _, p := range s.pats {
		if !p.Literal() {
			continue
		}
		var exists bool
		if err := db.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, pgx.Identifier{p.Schema.Text, p.Table.Text}.Sanitize()).Scan(&exists); err != nil {
			return classify(fmt.Errorf("look up table %s: %w", p, err))
		}
		if !exists {
			return outboxcdc.Permanent(fmt.Errorf("source.tables: table %s does not exist in this database", p), "check the database in source.dsn and the schemas in source.tables")
		}
	}
	target, schemas, all := s.publicationTarget()
	for attempt := 0; ; attempt++ {
		var pubInsert, allTables bool
		err := db.QueryRow(ctx, `SELECT pubinsert, puballtables FROM pg_publication WHERE pubname = $1`, pub).Scan(&pubInsert, &allTables)
		if errors.Is(err, pgx.ErrNoRows) {
			create := "CREATE PUBLICATION " + pubIdent + " FOR " + target + " WITH (publish = 'insert')"
			if checkpoint {
				if err := s.nameChanged(ctx, db, false, 0); err != nil {
					return err
				}
			}
			if !s.cfg.Create {
				return permanent(fmt.Errorf("publication %q does not exist and source.create is false: run %s;", pub, create))
			}
			if _, err := db.Exec(ctx, create); err != nil {
				if pgCode(err) == codeDuplicateObject && attempt == 0 {
					continue
				}
				return classify(fmt.Errorf("%s: %w (FOR TABLES IN SCHEMA and FOR ALL TABLES need a superuser: have one create the publication, FOR TABLE the tables' owner)", create, err))
			}
			s.log.Info().Str("publication", pub).Str("for", target).Msg("created publication")
			continue
		}
		if err != nil {
			return classify(fmt.Errorf("look up publication %q: %w", pub, err))
		}
		if !pubInsert {
			return permanent(fmt.Errorf("publication %q does not publish inserts: run ALTER PUBLICATION %s SET (publish = 'insert');", pub, pubIdent))
		}
		if allTables {
			return nil
		}
		if all {
			return permanent(fmt.Errorf("publication %q is not FOR ALL TABLES, so tables that source.tables matches in schemas created later would never be streamed: "+
				"drop it and run CREATE PUBLICATION %s FOR ALL TABLES WITH (publish = 'insert'); (as a superuser), or point source.publication at one that is", pub, pubIdent))
		}
		for _, sc := range schemas {
			var n int
			if err := db.QueryRow(ctx, `SELECT count(*) FROM pg_publication_namespace pn JOIN pg_publication p ON p.oid = pn.pnpubid
				JOIN pg_namespace n ON n.oid = pn.pnnspid WHERE p.pubname = $1 AND n.nspname = $2`, pub, sc).Scan(&n); err != nil {
				return classify(fmt.Errorf("look up publication %q schemas: %w", pub, err))
			}
			if n == 0 {
				return permanent(fmt.Errorf("publication %q does not cover schema %s, so tables source.tables matches there would never be streamed: run ALTER PUBLICATION %s ADD TABLES IN SCHEMA %s; (as a superuser)",
					pub, sc, pubIdent, pgx.Identifier{sc}.Sanitize()))
			}
		}
		for _, p := range s.pats {
			if !p.Literal() {
				continue
			}
			var n int
			if err := db.QueryRow(ctx, `SELECT count(*) FROM pg_publication_tables WHERE pubname = $1 AND schemaname = $2 AND tablename = $3`,
				pub, p.Schema.Text, p.Table.Text).Scan(&n); err != nil {
				return classify(fmt.Errorf("look up publication %q tables: %w", pub, err))
			}
			if n == 0 {
				ident := pgx.Identifier{p.Schema.Text, p.Table.Text}.Sanitize()
				return permanent(fmt.Errorf("publication %q exists but does not include the outbox table %s, so its rows would never be streamed: run ALTER PUBLICATION %s ADD TABLE %s;",
					pub, ident, pubIdent, ident))
			}
		}
		return nil
	}
}

func (s *Source) patternsText() string { return source.PatternsText(s.pats) }
