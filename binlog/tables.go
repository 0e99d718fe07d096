package binlog

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/go-mysql-org/go-mysql/replication"
	outboxcdc "github.com/outbox-cdc/outbox-cdc"
	"github.com/outbox-cdc/outbox-cdc/source"
)

// Several outbox tables (source.tables).
//
// source.tables lists tables as "database.table" or "table" (in the DSN's
// database); either part may hold the wildcards * or % (any run of
// characters; _ is an ordinary character, as in table names). One binlog
// stream serves every table that matches: a table created after the start
// is an outbox table from its first row on, since matching is by name and
// the binlog names the table in every table map event. Each table keeps
// its own column layout and its own schema proof (schema.go, stream.go's
// tableState); rows of all tables reach the pipeline in commit order, in
// the transactions they were written in, under one position.

// matchesFold reports whether a pattern matches db.table, compared
// without case (statements name tables as written, not as stored).
func (m *tableMatcher) matchesFold(db, table string) bool {
	for i := range m.pats {
		if m.pats[i].Matches([]byte(db), []byte(table), true) {
			return true
		}
	}
	return false
}

// tablePattern is one source.tables entry; its Schema is the database.
type tablePattern = source.TablePattern

// parseTables parses source.tables; unqualified entries are in dsnDB.
func parseTables(entries []string, dsnDB string) ([]tablePattern, error) {
	return source.ParseTables(entries, dsnDB, "database")
}

// multi reports whether the source reads source.tables rather than the
// one source.table.
func (s *Source) multi() bool { return len(s.pats) > 0 }

// resolveTables finds the tables source.tables names now: each literal
// entry must exist (as resolveTable requires of source.table), a pattern
// may match none yet. The matcher it returns matches the literal entries
// by their names as stored and the patterns as written.
func (s *Source) resolveTables(ctx context.Context, db *sql.DB) ([]resolvedTable, *tableMatcher, error) {
	var lctn int
	if err := db.QueryRowContext(ctx, "SELECT @@lower_case_table_names").Scan(&lctn); err != nil {
		return nil, nil, classifyConnErr(fmt.Errorf("read lower_case_table_names: %w", err))
	}
	m := &tableMatcher{fold: lctn != 0}
	var found []resolvedTable
	seen := map[resolvedTable]bool{}
	add := func(r resolvedTable) {
		if !seen[r] {
			seen[r] = true
			found = append(found, r)
		}
	}
	wild := false
	for _, p := range s.pats {
		if !p.Literal() {
			wild = true
			m.pats = append(m.pats, p)
			continue
		}
		r, err := s.resolveNamed(ctx, db, lctn, p.Schema.Text, p.Table.Text)
		if err != nil {
			return nil, nil, err
		}
		add(r)
		m.pats = append(m.pats, source.LiteralTable(r.db, r.table))
	}
	if wild {
		rows, err := db.QueryContext(ctx, "SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.TABLES WHERE TABLE_TYPE = 'BASE TABLE'")
		if err != nil {
			return nil, nil, classifyConnErr(fmt.Errorf("list tables: %w", err))
		}
		defer rows.Close()
		for rows.Next() {
			r := resolvedTable{lctn: lctn}
			if err := rows.Scan(&r.db, &r.table); err != nil {
				return nil, nil, classifyConnErr(fmt.Errorf("list tables: %w", err))
			}
			if m.matches([]byte(r.db), []byte(r.table)) {
				add(r)
			}
		}
		if err := rows.Err(); err != nil {
			return nil, nil, classifyConnErr(fmt.Errorf("list tables: %w", err))
		}
	}
	return found, m, nil
}

// tablesColumns resolves source.tables and checks that every table found
// has the role columns its route names (route.tables), so a table whose
// layout does not fit stops the source at the start with ErrTable.
func (s *Source) tablesColumns(ctx context.Context, db *sql.DB) ([]resolvedTable, *tableMatcher, error) {
	found, m, err := s.resolveTables(ctx, db)
	if err != nil {
		return nil, nil, err
	}
	for _, r := range found {
		if _, err := s.readColumnsOf(ctx, db, r, s.cols.For(r.db, r.table)); err != nil {
			return nil, nil, err
		}
	}
	names := make([]string, len(found))
	for i, r := range found {
		names[i] = r.db + "." + r.table
	}
	s.log.Info().Strs("tables", names).Str("patterns", s.patternsText()).Msg("outbox tables found; tables created later that match are read too")
	return found, m, nil
}

func (s *Source) patternsText() string { return source.PatternsText(s.pats) }

// tableKey is an outbox table as the binlog names it.
type tableKey struct{ db, table string }

func (k tableKey) String() string { return k.db + "." + k.table }

// tableKeyMatcher matches the one table k.
func tableKeyMatcher(k tableKey) *tableMatcher {
	return &tableMatcher{db: []byte(k.db), table: []byte(k.table)}
}

// tableState is what a stream knows of one outbox table's columns
// (schema.go): every table keeps its own layout, column list and proof,
// and a statement changing one table leaves the others' alone.
type tableState struct {
	key     tableKey
	cols    outboxcdc.Columns // its role columns (route.tables)
	match   *tableMatcher     // this table alone, for the DDL scan
	layout  *layout
	schema  *tableSchema // information_schema's list and its proof; nil: read at the next row
	scope   *binlogPoint // the stream has seen every event from here on, with no boundary of this table
	lastDDL *ddlEvent    // the last statement that may have changed the table
}

// table returns the state of tm's table, making it at its first rows.
func (st *stream) table(tm *replication.TableMapEvent) *tableState {
	if tm == st.lastTM && st.lastTS != nil {
		return st.lastTS
	}
	k := tableKey{string(tm.Schema), string(tm.Table)}
	ts := st.tables[k]
	if ts == nil {
		ts = &tableState{key: k, cols: st.src.cols.For(k.db, k.table), match: tableKeyMatcher(k), lastDDL: st.lastDDL}
		scope := st.scope
		if st.ddlScope != nil {
			scope = st.ddlScope
		}
		if scope != nil {
			sc := *scope
			ts.scope = &sc
		}
		if st.tables == nil {
			st.tables = map[tableKey]*tableState{}
		}
		st.tables[k] = ts
	}
	st.lastTM, st.lastTS = tm, ts
	return ts
}
