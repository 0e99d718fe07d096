package wal

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	outboxcdc "github.com/outbox-cdc/outbox-cdc"
)

// The publication: found, created or checked against the outbox table.

// ensurePublication verifies (or creates) the publication. checkpoint
// says the connector streamed before.
func (s *Source) ensurePublication(ctx context.Context, db *pgx.Conn, checkpoint bool) error {
	if s.pats != nil {
		return s.ensureTablesPublication(ctx, db, checkpoint)
	}
	pub := s.cfg.Publication
	tableIdent := pgx.Identifier{s.schema, s.table}.Sanitize()
	if s.table != "" {
		var exists bool
		if err := db.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, tableIdent).Scan(&exists); err != nil {
			return classify(fmt.Errorf("look up table %s: %w", s.cfg.Table, err))
		}
		if !exists {
			return outboxcdc.Permanent(fmt.Errorf("source.table: table %s does not exist in this database", tableIdent), "check the database in source.dsn and the schema in source.table")
		}
	}
	// route.on_update needs the UPDATEs of the outbox table in the stream.
	wantUpdates := s.cols.OnUpdate != "" && s.cols.OnUpdate != "skip"
	for attempt := 0; ; attempt++ {
		var pubInsert, pubUpdate bool
		err := db.QueryRow(ctx, `SELECT pubinsert, pubupdate FROM pg_publication WHERE pubname = $1`, pub).Scan(&pubInsert, &pubUpdate)
		if errors.Is(err, pgx.ErrNoRows) {
			create := "CREATE PUBLICATION " + pgx.Identifier{pub}.Sanitize()
			if s.table != "" {
				if wantUpdates {
					create += " FOR TABLE " + tableIdent + " WITH (publish = 'insert, update')"
				} else {
					create += " FOR TABLE " + tableIdent + " WITH (publish = 'insert')"
				}
			}
			if checkpoint {
				// A publication created now would not exist at the slot's
				// position: pgoutput would fail on the first transaction.
				if err := s.nameChanged(ctx, db, false, 0); err != nil {
					return err
				}
			}
			if !s.cfg.Create {
				return permanent(mark(ErrPublication, fmt.Errorf("publication %q does not exist and source.create is false: run %s; (as the table's owner) or set source.create: true", pub, create)))
			}
			if _, err := db.Exec(ctx, create); err != nil {
				if pgCode(err) == codeDuplicateObject && attempt == 0 {
					continue
				}
				return classify(fmt.Errorf("%s: %w (the role must own the table, or create the publication as its owner)", create, err))
			}
			s.log.Info().Str("publication", pub).Str("table", s.cfg.Table).Msg("created publication")
			continue
		}
		if err != nil {
			return classify(fmt.Errorf("look up publication %q: %w", pub, err))
		}
		if s.table == "" {
			return nil
		}
		if !pubInsert {
			return permanent(fmt.Errorf("publication %q does not publish inserts: run ALTER PUBLICATION %s SET (publish = 'insert');", pub, pgx.Identifier{pub}.Sanitize()))
		}
		if wantUpdates && !pubUpdate {
			return permanent(fmt.Errorf("route.on_update is %s but publication %q does not publish updates, so none would be seen: run ALTER PUBLICATION %s SET (publish = 'insert, update'); (the outbox table then needs a primary key or replica identity, or its UPDATEs fail), or set route.on_update: skip",
				s.cols.OnUpdate, pub, pgx.Identifier{pub}.Sanitize()))
		}
		var n int
		err = db.QueryRow(ctx, `SELECT count(*) FROM pg_publication_tables WHERE pubname = $1 AND schemaname = $2 AND tablename = $3`,
			pub, s.schema, s.table).Scan(&n)
		if err != nil {
			return classify(fmt.Errorf("look up publication %q tables: %w", pub, err))
		}
		if n == 0 {
			return permanent(mark(ErrPublication, fmt.Errorf("publication %q exists but does not include the outbox table %s, so its rows would never be streamed: run ALTER PUBLICATION %s ADD TABLE %s; or point source.publication at a publication that includes it",
				pub, tableIdent, pgx.Identifier{pub}.Sanitize(), tableIdent)))
		}
		return nil
	}
}
