package binlog

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"strings"
	"unicode/utf8"
)

// Which table is the outbox.
//
// The binlog names a table as the server stores it: with
// lower_case_table_names=1 in lower case, with 0 and 2 as it was created.
// The server compares names by its own rule: case-sensitively with 0,
// case-insensitively with 1 and 2. The source and `check` both resolve
// source.table and the DSN's database with resolveTable, which follows that
// rule, and the stream matches table map events by the same rule; a table of
// the same name in another database never matches.

// tableMatcher tells whether a binlog table (schema, name) is an outbox
// table: the one table db.table, or, with pats set (source.tables), any
// table a pattern matches. It is fixed before a session's stream starts
// and only read afterwards (from go-mysql's decoding goroutine too).
type tableMatcher struct {
	db, table []byte
	fold      bool // the server compares names case-insensitively
	// pats replaces db and table when set.
	pats []tablePattern
}

func (m *tableMatcher) matches(schema, table []byte) bool {
	if m.pats != nil {
		for i := range m.pats {
			if m.pats[i].Matches(schema, table, m.fold) {
				return true
			}
		}
		return false
	}
	if m.fold {
		return bytes.EqualFold(table, m.table) && bytes.EqualFold(schema, m.db)
	}
	return bytes.Equal(table, m.table) && bytes.Equal(schema, m.db)
}

// resolvedTable is the outbox table as the server names it.
type resolvedTable struct {
	db, table string
	lctn      int // lower_case_table_names
}

func (r resolvedTable) matcher() *tableMatcher {
	return &tableMatcher{db: []byte(r.db), table: []byte(r.table), fold: r.lctn != 0}
}

// resolveTable finds the outbox table (the DSN's database, source.table) by
// the server's naming rule and returns its names as stored. A table that
// exists only under another letter case on a case-sensitive server is an
// ErrTable naming the one that exists, never a silent mismatch.
func (s *Source) resolveTable(ctx context.Context, db *sql.DB) (resolvedTable, error) {
	var lctn int
	if err := db.QueryRowContext(ctx, "SELECT @@lower_case_table_names").Scan(&lctn); err != nil {
		return resolvedTable{}, classifyConnErr(fmt.Errorf("read lower_case_table_names: %w", err))
	}
	return s.resolveNamed(ctx, db, lctn, s.db, s.table)
}

// resolveNamed is resolveTable for the table dbName.table.
func (s *Source) resolveNamed(ctx context.Context, db *sql.DB, lctn int, dbName, table string) (resolvedTable, error) {
	qualified := dbName + "." + table
	// The database as written and in lower case (how lower_case_table_names
	// 1 stores it), so the server reads one database's directory only.
	rows, err := db.QueryContext(ctx, "SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.TABLES "+
		"WHERE TABLE_SCHEMA IN (?, ?) AND LOWER(TABLE_NAME) = LOWER(?)", dbName, strings.ToLower(dbName), table)
	if err != nil {
		return resolvedTable{}, classifyConnErr(fmt.Errorf("look up %s: %w", qualified, err))
	}
	defer rows.Close()
	var found []resolvedTable
	for rows.Next() {
		var r resolvedTable
		if err := rows.Scan(&r.db, &r.table); err != nil {
			return resolvedTable{}, classifyConnErr(fmt.Errorf("look up %s: %w", qualified, err))
		}
		r.lctn = lctn
		found = append(found, r)
	}
	if err := rows.Err(); err != nil {
		return resolvedTable{}, classifyConnErr(fmt.Errorf("look up %s: %w", qualified, err))
	}
	want := resolvedTable{db: dbName, table: table, lctn: lctn}
	for _, r := range found {
		if want.matcher().matches([]byte(r.db), []byte(r.table)) {
			return r, nil
		}
	}
	if len(found) > 0 {
		return resolvedTable{}, joinSentinel(ErrTable, fmt.Errorf("table %s does not exist, but %s.%s does: this server compares table and database names case-sensitively "+
			"(lower_case_table_names=0)", qualified, found[0].db, found[0].table),
			"write source.table(s) and the database in source.dsn exactly as the server names them")
	}
	return resolvedTable{}, missingTable(qualified)
}

// DDL detection.
//
// A statement that may change the outbox table's columns is a boundary in
// the stream: rows before it were written with one column list, rows after
// it with another. isTableDDL over-approximates on purpose: a statement
// taken for a boundary that changed nothing costs one information_schema
// read; a boundary missed would map rows with the wrong columns.

// isTableDDL reports whether stmt, run with defaultDB as the session's
// database, may create, alter, rename or drop the table m names. Names are
// compared case-insensitively whatever the server's rule.
func (m *tableMatcher) isTableDDL(defaultDB, stmt string) bool {
	toks := sqlTokens(stmt, 64<<10)
	i := 0
	word := func() string {
		if i < len(toks) && toks[i].kind == tokWord {
			w := strings.ToUpper(toks[i].text)
			i++
			return w
		}
		return ""
	}
	switch first := word(); first {
	case "ALTER", "CREATE", "DROP", "RENAME":
		// Every form that can touch a table: ALTER [ONLINE] [IGNORE] TABLE,
		// CREATE [OR REPLACE] [TEMPORARY] TABLE ... [LIKE x], DROP
		// [TEMPORARY] TABLE[S], RENAME TABLE[S], ALTER TABLE x EXCHANGE
		// PARTITION ... WITH TABLE y, DROP DATABASE / SCHEMA.
		kind := ""
	scan:
		for _, t := range toks[1:] {
			if t.kind != tokWord {
				continue
			}
			switch strings.ToUpper(t.text) {
			case "TABLE", "TABLES":
				kind = "table"
				break scan
			case "DATABASE", "SCHEMA":
				kind = "database"
				break scan
			}
		}
		switch kind {
		case "table":
			return m.mentions(toks, defaultDB)
		case "database":
			return first == "DROP" && m.mentionsDB(toks)
		}
	}
	return false
}

// mentions reports whether the tokens name the table, qualified with its
// database or unqualified while defaultDB is its database (or unknown).
func (m *tableMatcher) mentions(toks []sqlToken, defaultDB string) bool {
	if m.pats != nil {
		return m.mentionsPattern(toks, defaultDB)
	}
	for j, t := range toks {
		if !t.ident() || !strings.EqualFold(t.text, string(m.table)) {
			continue
		}
		if j >= 2 && toks[j-1].kind == tokDot && toks[j-2].ident() {
			if strings.EqualFold(toks[j-2].text, string(m.db)) {
				return true
			}
			continue
		}
		if defaultDB == "" || strings.EqualFold(defaultDB, string(m.db)) {
			return true
		}
	}
	return false
}

// mentionsPattern is mentions for a pattern set: whether a table any
// pattern matches is named, compared without case.
func (m *tableMatcher) mentionsPattern(toks []sqlToken, defaultDB string) bool {
	for j, t := range toks {
		if !t.ident() {
			continue
		}
		name := []byte(t.text)
		qualified := j >= 2 && toks[j-1].kind == tokDot && toks[j-2].ident()
		for i := range m.pats {
			p := &m.pats[i]
			if !p.Table.Matches(name, true) {
				continue
			}
			switch {
			case qualified:
				if p.Schema.Matches([]byte(toks[j-2].text), true) {
					return true
				}
			case defaultDB == "" || p.Schema.Matches([]byte(defaultDB), true):
				return true
			}
		}
	}
	return false
}

func (m *tableMatcher) mentionsDB(toks []sqlToken) bool {
	if m.pats != nil {
		for _, t := range toks {
			for i := range m.pats {
				if t.ident() && m.pats[i].Schema.Matches([]byte(t.text), true) {
					return true
				}
			}
		}
		return false
	}
	for _, t := range toks {
		if t.ident() && strings.EqualFold(t.text, string(m.db)) {
			return true
		}
	}
	return false
}

type tokKind int

const (
	tokWord   tokKind = iota // bare word: keyword or identifier
	tokQuoted                // `identifier` or "identifier" (ANSI_QUOTES)
	tokString                // 'string literal'
	tokDot
	tokOther
)

type sqlToken struct {
	kind tokKind
	text string
}

func (t sqlToken) ident() bool { return t.kind == tokWord || t.kind == tokQuoted }

// sqlTokens splits a statement into words, quoted identifiers, string
// literals and punctuation, dropping comments but keeping the text of
// executable comments (/*! ... */, /*M! ... */), which the server runs. It
// reads at most limit bytes.
func sqlTokens(s string, limit int) []sqlToken {
	if len(s) > limit {
		s = s[:limit]
	}
	var out []sqlToken
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f':
			i++
		case strings.HasPrefix(s[i:], "/*!") || strings.HasPrefix(s[i:], "/*M!"):
			i += 3
			if s[i-1] == 'M' {
				i++
			}
			for i < len(s) && s[i] >= '0' && s[i] <= '9' {
				i++ // version number
			}
		case strings.HasPrefix(s[i:], "*/"):
			i += 2 // end of an executable comment
		case strings.HasPrefix(s[i:], "/*"):
			end := strings.Index(s[i+2:], "*/")
			if end < 0 {
				return out
			}
			i += end + 4
		case c == '#' || strings.HasPrefix(s[i:], "-- "):
			end := strings.IndexByte(s[i:], '\n')
			if end < 0 {
				return out
			}
			i += end + 1
		case c == '`' || c == '"' || c == '\'':
			var b strings.Builder
			j := i + 1
			for j < len(s) {
				if s[j] == c {
					if j+1 < len(s) && s[j+1] == c {
						b.WriteByte(c)
						j += 2
						continue
					}
					break
				}
				if s[j] == '\\' && c != '`' && j+1 < len(s) {
					b.WriteByte(s[j+1])
					j += 2
					continue
				}
				b.WriteByte(s[j])
				j++
			}
			kind := tokQuoted
			if c == '\'' {
				kind = tokString
			}
			out = append(out, sqlToken{kind: kind, text: b.String()})
			i = j + 1
		case c == '.':
			out = append(out, sqlToken{kind: tokDot, text: "."})
			i++
		case isWordByte(c):
			j := i
			for j < len(s) && isWordByte(s[j]) {
				j++
			}
			out = append(out, sqlToken{kind: tokWord, text: s[i:j]})
			i = j
		default:
			_, n := utf8.DecodeRuneInString(s[i:])
			out = append(out, sqlToken{kind: tokOther, text: s[i : i+n]})
			i += n
		}
	}
	return out
}

func isWordByte(c byte) bool {
	return c == '_' || c == '$' || c >= 0x80 ||
		(c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
}
