package source

import (
	"bytes"
	"fmt"
	"strings"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
)

// Table patterns (source.tables).
//
// Each entry is "schema.table" (MySQL: "database.table") or "table" (in
// the source's default schema); either part may hold the wildcards * or %
// (any run of characters; _ is an ordinary character, as in table names).
// How a source finds and streams the tables a pattern names is its own
// (binlog/tables.go, wal/tables.go).

// NamePart is one side of a pattern: a literal name, or one with
// wildcards.
type NamePart struct {
	Text string
	Wild bool
}

// ParseNamePart reads one side of a pattern.
func ParseNamePart(s string) NamePart {
	return NamePart{Text: s, Wild: strings.ContainsAny(s, "*%")}
}

// Matches compares name with the part; fold compares letters without case
// (ASCII letters only in wildcard patterns).
func (p NamePart) Matches(name []byte, fold bool) bool {
	if !p.Wild {
		if fold {
			return bytes.EqualFold(name, []byte(p.Text))
		}
		return string(name) == p.Text
	}
	return outboxcdc.GlobMatch(p.Text, name, fold)
}

// TablePattern is one source.tables entry. Schema is the database on
// MySQL.
type TablePattern struct {
	Schema, Table NamePart
}

// LiteralTable is the pattern that names schema.table alone.
func LiteralTable(schema, table string) TablePattern {
	return TablePattern{Schema: NamePart{Text: schema}, Table: NamePart{Text: table}}
}

// Matches reports whether the pattern names schema.table.
func (p *TablePattern) Matches(schema, table []byte, fold bool) bool {
	return p.Table.Matches(table, fold) && p.Schema.Matches(schema, fold)
}

func (p TablePattern) String() string { return p.Schema.Text + "." + p.Table.Text }

// Literal reports whether the pattern names one table.
func (p TablePattern) Literal() bool { return !p.Schema.Wild && !p.Table.Wild }

// SchemaLiteral reports whether the pattern's schema has no wildcard.
func (p TablePattern) SchemaLiteral() bool { return !p.Schema.Wild }

// SplitTable splits "schema.table"; a bare "table" is in defaultSchema.
// schemaWord names the first part in the error ("schema", "database").
func SplitTable(s, defaultSchema, schemaWord string) (schema, table string, err error) {
	schema, table, ok := strings.Cut(s, ".")
	if !ok {
		schema, table = defaultSchema, s
	}
	if schema == "" || table == "" || strings.Contains(table, ".") {
		return "", "", fmt.Errorf("%q is not %s.table or table", s, schemaWord)
	}
	return schema, table, nil
}

// ParseTables parses source.tables (see SplitTable); its errors are keyed
// "tables[i]".
func ParseTables(entries []string, defaultSchema, schemaWord string) ([]TablePattern, error) {
	var out []TablePattern
	for i, e := range entries {
		schema, table, err := SplitTable(e, defaultSchema, schemaWord)
		if err != nil {
			return nil, outboxcdc.KeyErrorf(fmt.Sprintf("tables[%d]", i), "wildcards * and % are allowed in either part", "%v", err)
		}
		out = append(out, TablePattern{Schema: ParseNamePart(schema), Table: ParseNamePart(table)})
	}
	return out, nil
}

// PatternsText lists patterns for a log line: "a.b, c.d".
func PatternsText(pats []TablePattern) string {
	parts := make([]string, len(pats))
	for i, p := range pats {
		parts[i] = p.String()
	}
	return strings.Join(parts, ", ")
}
