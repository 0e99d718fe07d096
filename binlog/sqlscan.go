package binlog

// The SQL the stream reads from query events: identifiers of SAVEPOINT
// statements and the table an INSERT, REPLACE or LOAD DATA statement writes.

import (
	"bytes"
	"strings"
)

// insertTarget returns the table an INSERT, REPLACE or LOAD DATA statement
// writes, with its database when the statement names one.
func insertTarget(q []byte) (db, table string, ok bool) {
	t := sqlScanner{b: q}
	switch strings.ToUpper(t.word()) {
	case "INSERT", "REPLACE":
	modifiers:
		for {
			switch strings.ToUpper(t.peekWord()) {
			case "LOW_PRIORITY", "DELAYED", "HIGH_PRIORITY", "IGNORE", "INTO":
				t.word()
			default:
				break modifiers
			}
		}
	case "LOAD":
		for {
			w := strings.ToUpper(t.word())
			if w == "" {
				return "", "", false
			}
			if w == "INTO" && strings.EqualFold(t.peekWord(), "TABLE") {
				t.word()
				break
			}
		}
	default:
		return "", "", false
	}
	first, ok := t.ident()
	if !ok {
		return "", "", false
	}
	if t.skipSpace(); t.i < len(t.b) && t.b[t.i] == '.' {
		t.i++
		second, ok := t.ident()
		if !ok {
			return "", "", false
		}
		return first, second, true
	}
	return "", first, true
}

// sqlScanner reads words and identifiers lazily, skipping whitespace and
// comments (match.go's sqlTokens splits a whole statement).
type sqlScanner struct {
	b []byte
	i int
}

func (t *sqlScanner) skipSpace() {
	for t.i < len(t.b) {
		switch c := t.b[t.i]; {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			t.i++
		case c == '#', c == '-' && t.i+2 < len(t.b) && t.b[t.i+1] == '-' && (t.b[t.i+2] == ' ' || t.b[t.i+2] == '\t'):
			for t.i < len(t.b) && t.b[t.i] != '\n' {
				t.i++
			}
		case c == '/' && t.i+1 < len(t.b) && t.b[t.i+1] == '*':
			end := bytes.Index(t.b[t.i+2:], []byte("*/"))
			if end < 0 {
				t.i = len(t.b)
				return
			}
			t.i += 2 + end + 2
		default:
			return
		}
	}
}

func (t *sqlScanner) word() string {
	t.skipSpace()
	start := t.i
	for t.i < len(t.b) && identByte(t.b[t.i]) {
		t.i++
	}
	if t.i == start && t.i < len(t.b) {
		t.i++ // punctuation, literals: one byte at a time
	}
	return string(t.b[start:t.i])
}

func (t *sqlScanner) peekWord() string {
	i := t.i
	w := t.word()
	t.i = i
	return w
}

func (t *sqlScanner) ident() (string, bool) {
	t.skipSpace()
	if t.i >= len(t.b) {
		return "", false
	}
	if q := t.b[t.i]; q == '`' || q == '"' {
		for j := t.i + 1; j < len(t.b); j++ {
			if t.b[j] != q {
				continue
			}
			if j+1 < len(t.b) && t.b[j+1] == q {
				j++
				continue
			}
			name, ok := parseIdent(t.b[t.i : j+1])
			t.i = j + 1
			return name, ok
		}
		return "", false
	}
	start := t.i
	for t.i < len(t.b) && identByte(t.b[t.i]) {
		t.i++
	}
	return string(t.b[start:t.i]), t.i > start
}

// parseIdent reads one identifier: `quoted` (with “ for a backtick),
// "quoted" (ANSI_QUOTES), or bare.
func parseIdent(b []byte) (string, bool) {
	b = bytes.TrimSpace(b)
	if len(b) == 0 {
		return "", false
	}
	if q := b[0]; q == '`' || q == '"' {
		var out []byte
		for i := 1; i < len(b); i++ {
			if b[i] != q {
				out = append(out, b[i])
				continue
			}
			if i+1 < len(b) && b[i+1] == q {
				out = append(out, q)
				i++
				continue
			}
			return string(out), true
		}
		return "", false
	}
	end := 0
	for end < len(b) && identByte(b[end]) {
		end++
	}
	if end == 0 {
		return "", false
	}
	return string(b[:end]), true
}

func identByte(c byte) bool {
	return c == '_' || c == '$' || c >= 0x80 || (c >= '0' && c <= '9') || (c|0x20 >= 'a' && c|0x20 <= 'z')
}
