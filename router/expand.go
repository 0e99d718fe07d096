package router

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// table.expand.json.payload, as Debezium's EventRouterDelegate and
// JsonSchemaData do it (debezium/debezium,
// debezium-connect-plugins/src/main/java/io/debezium/transforms/outbox/
// EventRouterDelegate.java and JsonSchemaData.java, read to learn the
// behaviour):
//
//   - Only a text payload that starts with '{' or '[' (no leading space) is
//     parsed, by Jackson: duplicate keys keep their first position and last
//     value, integers that fit 32 bits are ints, 64 bits longs, other
//     numbers doubles; text after the first value is ignored.
//   - The schema: an object is an optional struct named after its path
//     ("payload", "payload.customer"), its fields in document order; a
//     string, boolean, int, long, double an optional string, boolean,
//     int32, int64, float64; null and [] are left out (or optional bytes /
//     an array of optional strings with the null and empty-array
//     behaviours); an array takes its first non-null element's schema (for
//     objects, the fields of all elements).
//   - When parsing or schema inference fails (text that does not start
//     with '{' or '[', invalid JSON, an array mixing element types or
//     number types), Debezium logs "JSON expansion failed" and sends the
//     payload unchanged: so does this, and the record's Warning says why
//     (the pipeline logs it).
//   - When the schema is inferred but the document does not fit it (a
//     top-level array, elements of an array of objects whose fields have
//     different types, nested arrays whose elements mix objects and other
//     values), Debezium logs the same warning but keeps the inferred
//     schema with the text value, so its converter throws and the task
//     stops: here the row is bad (pipeline.on_error).
type expandOptions struct {
	nullsAsBytes         bool // table.json.payload.null.behavior=optional_bytes
	emptyArraysAsStrings bool // table.json.payload.empty.array.behavior=optional_string
}

// jnode is a parsed JSON value with Jackson's node kinds.
type jnode struct {
	kind  jkind
	str   string
	num   any // int64 for jInt/jLong, *big.Int for jBig, float64 for jDouble
	bool  bool
	keys  []string // jObject, first-seen order
	vals  []*jnode // jObject (aligned with keys), jArray
	depth int
}

type jkind uint8

const (
	jNull jkind = iota
	jBool
	jInt    // fits int32 (Jackson IntNode)
	jLong   // fits int64 (LongNode)
	jBig    // BigIntegerNode
	jDouble // DoubleNode
	jString
	jArray
	jObject
)

var errExpand = errors.New("JSON expansion failed")

// maxJSONDepth is Jackson's default StreamReadConstraints nesting limit.
const maxJSONDepth = 1000

type jparser struct {
	s string
	i int
}

func parseJackson(s string) (*jnode, error) {
	p := &jparser{s: s}
	return p.value(0)
}

func (p *jparser) ws() {
	for p.i < len(p.s) {
		switch p.s[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

func (p *jparser) fail(what string) error {
	return fmt.Errorf("%w: %s at offset %d", errExpand, what, p.i)
}

func (p *jparser) value(depth int) (*jnode, error) {
	if depth > maxJSONDepth {
		return nil, p.fail("nesting too deep")
	}
	p.ws()
	if p.i >= len(p.s) {
		return nil, p.fail("unexpected end")
	}
	switch c := p.s[p.i]; {
	case c == '{':
		p.i++
		n := &jnode{kind: jObject}
		p.ws()
		if p.i < len(p.s) && p.s[p.i] == '}' {
			p.i++
			return n, nil
		}
		for {
			p.ws()
			if p.i >= len(p.s) || p.s[p.i] != '"' {
				return nil, p.fail("expected a field name")
			}
			k, err := p.str()
			if err != nil {
				return nil, err
			}
			p.ws()
			if p.i >= len(p.s) || p.s[p.i] != ':' {
				return nil, p.fail("expected ':'")
			}
			p.i++
			v, err := p.value(depth + 1)
			if err != nil {
				return nil, err
			}
			found := false
			for j, ek := range n.keys {
				if ek == k {
					n.vals[j], found = v, true
				}
			}
			if !found {
				n.keys = append(n.keys, k)
				n.vals = append(n.vals, v)
			}
			p.ws()
			if p.i < len(p.s) && p.s[p.i] == ',' {
				p.i++
				continue
			}
			if p.i < len(p.s) && p.s[p.i] == '}' {
				p.i++
				return n, nil
			}
			return nil, p.fail("expected ',' or '}'")
		}
	case c == '[':
		p.i++
		n := &jnode{kind: jArray}
		p.ws()
		if p.i < len(p.s) && p.s[p.i] == ']' {
			p.i++
			return n, nil
		}
		for {
			v, err := p.value(depth + 1)
			if err != nil {
				return nil, err
			}
			n.vals = append(n.vals, v)
			p.ws()
			if p.i < len(p.s) && p.s[p.i] == ',' {
				p.i++
				continue
			}
			if p.i < len(p.s) && p.s[p.i] == ']' {
				p.i++
				return n, nil
			}
			return nil, p.fail("expected ',' or ']'")
		}
	case c == '"':
		s, err := p.str()
		if err != nil {
			return nil, err
		}
		return &jnode{kind: jString, str: s}, nil
	case c == 't' && strings.HasPrefix(p.s[p.i:], "true"):
		p.i += 4
		return &jnode{kind: jBool, bool: true}, nil
	case c == 'f' && strings.HasPrefix(p.s[p.i:], "false"):
		p.i += 5
		return &jnode{kind: jBool}, nil
	case c == 'n' && strings.HasPrefix(p.s[p.i:], "null"):
		p.i += 4
		return &jnode{kind: jNull}, nil
	case c == '-' || (c >= '0' && c <= '9'):
		return p.number()
	}
	return nil, p.fail("unexpected character")
}

func (p *jparser) number() (*jnode, error) {
	start := p.i
	if p.s[p.i] == '-' {
		p.i++
	}
	digits := p.i
	for p.i < len(p.s) && p.s[p.i] >= '0' && p.s[p.i] <= '9' {
		p.i++
	}
	if p.i == digits || (p.s[digits] == '0' && p.i-digits > 1) {
		return nil, p.fail("invalid number")
	}
	isFloat := false
	if p.i < len(p.s) && p.s[p.i] == '.' {
		isFloat = true
		p.i++
		f := p.i
		for p.i < len(p.s) && p.s[p.i] >= '0' && p.s[p.i] <= '9' {
			p.i++
		}
		if p.i == f {
			return nil, p.fail("invalid number")
		}
	}
	if p.i < len(p.s) && (p.s[p.i] == 'e' || p.s[p.i] == 'E') {
		isFloat = true
		p.i++
		if p.i < len(p.s) && (p.s[p.i] == '+' || p.s[p.i] == '-') {
			p.i++
		}
		e := p.i
		for p.i < len(p.s) && p.s[p.i] >= '0' && p.s[p.i] <= '9' {
			p.i++
		}
		if p.i == e {
			return nil, p.fail("invalid number")
		}
	}
	text := p.s[start:p.i]
	if isFloat {
		f, err := strconv.ParseFloat(text, 64)
		if err != nil && !errors.Is(err, strconv.ErrRange) {
			return nil, p.fail("invalid number")
		}
		return &jnode{kind: jDouble, num: f}, nil
	}
	if n, err := strconv.ParseInt(text, 10, 64); err == nil {
		if n >= math.MinInt32 && n <= math.MaxInt32 {
			return &jnode{kind: jInt, num: n}, nil
		}
		return &jnode{kind: jLong, num: n}, nil
	}
	b, _ := new(big.Int).SetString(text, 10)
	return &jnode{kind: jBig, num: b}, nil
}

func (p *jparser) str() (string, error) {
	p.i++ // opening quote
	var b strings.Builder
	for {
		if p.i >= len(p.s) {
			return "", p.fail("unterminated string")
		}
		c := p.s[p.i]
		switch {
		case c == '"':
			p.i++
			return b.String(), nil
		case c < 0x20:
			return "", p.fail("unescaped control character in a string")
		case c == '\\':
			p.i++
			if p.i >= len(p.s) {
				return "", p.fail("unterminated escape")
			}
			e := p.s[p.i]
			p.i++
			switch e {
			case '"', '\\', '/':
				b.WriteByte(e)
			case 'b':
				b.WriteByte('\b')
			case 'f':
				b.WriteByte('\f')
			case 'n':
				b.WriteByte('\n')
			case 'r':
				b.WriteByte('\r')
			case 't':
				b.WriteByte('\t')
			case 'u':
				r, err := p.hex4()
				if err != nil {
					return "", err
				}
				if utf16.IsSurrogate(r) && strings.HasPrefix(p.s[p.i:], `\u`) {
					p.i += 2
					r2, err := p.hex4()
					if err != nil {
						return "", err
					}
					r = utf16.DecodeRune(r, r2)
				}
				if !utf8.ValidRune(r) {
					r = utf8.RuneError
				}
				b.WriteRune(r)
			default:
				return "", p.fail("invalid escape")
			}
		default:
			b.WriteByte(c)
			p.i++
		}
	}
}

func (p *jparser) hex4() (rune, error) {
	if p.i+4 > len(p.s) {
		return 0, p.fail("short \\u escape")
	}
	v, err := strconv.ParseUint(p.s[p.i:p.i+4], 16, 32)
	if err != nil {
		return 0, p.fail("invalid \\u escape")
	}
	p.i += 4
	return rune(v), nil
}

// Schemas JsonSchemaData gives leaves; shared, never mutated.
var (
	optString  = (&cschema{typ: tString, optional: true}).render()
	optBool    = (&cschema{typ: tBoolean, optional: true}).render()
	optInt32   = (&cschema{typ: tInt32, optional: true}).render()
	optInt64   = (&cschema{typ: tInt64, optional: true}).render()
	optFloat64 = (&cschema{typ: tFloat64, optional: true}).render()
	optBytes   = (&cschema{typ: tBytes, optional: true}).render()
)

// schemaOf is JsonSchemaData.toConnectSchema; nil means "no field".
func (o *expandOptions) schemaOf(key string, n *jnode) (*cschema, error) {
	switch n.kind {
	case jString:
		return optString, nil
	case jBool:
		return optBool, nil
	case jInt:
		return optInt32, nil
	case jLong:
		return optInt64, nil
	case jBig, jDouble:
		return optFloat64, nil
	case jNull:
		if o.nullsAsBytes {
			return optBytes, nil
		}
		return nil, nil
	case jArray:
		if len(n.vals) == 0 {
			if o.emptyArraysAsStrings {
				return &cschema{typ: tArray, elem: optString, optional: true}, nil
			}
			return nil, nil
		}
		elem, err := o.arrayElemSchema(key, n)
		if err != nil {
			return nil, err
		}
		return &cschema{typ: tArray, elem: elem, optional: true}, nil
	case jObject:
		s := &cschema{typ: tStruct, name: key, optional: true}
		for i, k := range n.keys {
			fk := k
			if key != "" {
				fk = key + "." + k
			}
			fs, err := o.schemaOf(fk, n.vals[i])
			if err != nil {
				return nil, err
			}
			if fs != nil {
				s.fields = append(s.fields, cfield{name: k, schema: fs})
			}
		}
		return s, nil
	}
	return nil, nil
}

// arrayElemSchema is toConnectSchemaWithCycles with getFirstArrayElement.
func (o *expandOptions) arrayElemSchema(key string, n *jnode) (*cschema, error) {
	var ref *jnode
	var refSchema *cschema
	for _, e := range n.vals {
		if e.kind == jNull {
			continue
		}
		if ref == nil {
			ref = e
		}
		if sameNodeType(e.kind) != sameNodeType(ref.kind) {
			return nil, fmt.Errorf("%w: field is not a homogeneous array", errExpand)
		}
		if isNumber(ref.kind) {
			if refSchema == nil {
				refSchema, _ = o.schemaOf("", ref)
			}
			if es, _ := o.schemaOf("", e); es != refSchema {
				return nil, fmt.Errorf("%w: array mixes number types", errExpand)
			}
		}
	}
	if ref == nil {
		ref = &jnode{kind: jNull}
	}
	if ref.kind != jObject {
		s, err := o.schemaOf("", ref)
		if err != nil {
			return nil, err
		}
		if s == nil {
			return nil, fmt.Errorf("%w: array has an unrecognized member schema", errExpand)
		}
		return s, nil
	}
	// Objects: the union of every element's fields. Debezium merges the
	// distinct element schemas in the order of a Java HashSet; here they
	// merge in document order, which gives the same result whenever the
	// elements agree (see the README's list of differences).
	var merged *cschema
	for _, e := range n.vals {
		if e.kind != jObject {
			continue
		}
		s, err := o.schemaOf(key, e)
		if err != nil {
			return nil, err
		}
		if merged == nil {
			merged = s
			continue
		}
		for _, f := range s.fields {
			i := merged.field(f.name)
			switch {
			case i < 0:
				merged.fields = append(merged.fields, f)
			case merged.fields[i].schema.typ == tBytes && f.schema.typ != tBytes:
				merged.fields[i] = f
			}
		}
	}
	return merged, nil
}

// sameNodeType is Jackson's JsonNodeType: all numbers are NUMBER.
func sameNodeType(k jkind) jkind {
	if isNumber(k) {
		return jInt
	}
	return k
}

func isNumber(k jkind) bool { return k == jInt || k == jLong || k == jBig || k == jDouble }

// errExpandMismatch is a document that does not fit the schema inferred
// from it: Debezium's converter throws on it.
var errExpandMismatch = errors.New("the expanded payload does not fit the schema inferred from it")

// valueOf is JsonSchemaData.toConnectData for a value of schema s, with
// the validation Connect's Struct.put does.
func valueOf(n *jnode, s *cschema) (any, error) {
	if n.kind == jNull {
		return nil, nil
	}
	switch s.typ {
	case tStruct:
		if n.kind != jObject {
			return nil, fmt.Errorf("%w: %s where %q expects an object", errExpandMismatch, n.kindName(), s.name)
		}
		st := &cstruct{schema: s, values: make([]any, len(s.fields))}
		for i, f := range s.fields {
			for j, k := range n.keys {
				if k == f.name {
					v, err := valueOf(n.vals[j], f.schema)
					if err != nil {
						return nil, err
					}
					st.values[i] = v
				}
			}
		}
		return st, nil
	case tArray:
		if n.kind != jArray {
			return nil, fmt.Errorf("%w: %s where an array is expected", errExpandMismatch, n.kindName())
		}
		out := make([]any, len(n.vals))
		for i, e := range n.vals {
			v, err := valueOf(e, s.elem)
			if err != nil {
				return nil, err
			}
			out[i] = v
		}
		return out, nil
	case tString:
		if n.kind == jString {
			return n.str, nil
		}
	case tBoolean:
		if n.kind == jBool {
			return n.bool, nil
		}
	case tInt32:
		if n.kind == jInt {
			return n.num.(int64), nil
		}
	case tInt64:
		if n.kind == jLong {
			return n.num.(int64), nil
		}
	case tFloat64:
		if n.kind == jDouble {
			return n.num.(float64), nil
		}
	}
	return nil, fmt.Errorf("%w: %s where %s is expected", errExpandMismatch, n.kindName(), s.typ)
}

func (n *jnode) kindName() string {
	switch n.kind {
	case jBool:
		return "a boolean"
	case jInt:
		return "an int"
	case jLong:
		return "a long"
	case jBig:
		return "an integer beyond 64 bits"
	case jDouble:
		return "a double"
	case jString:
		return "a string"
	case jArray:
		return "an array"
	case jObject:
		return "an object"
	}
	return "null"
}

// expand expands a text payload. fallback is set when Debezium would send
// the payload unchanged, and says why (without the payload's content);
// err is a document Debezium's converter would reject.
func (o *expandOptions) expand(payloadColumn string, text string) (s *cschema, v any, fallback string, err error) {
	switch {
	case text == "":
		return nil, nil, "the payload is empty", nil
	case !strings.HasPrefix(text, "{") && !strings.HasPrefix(text, "["):
		return nil, nil, "the payload does not start with '{' or '['", nil
	}
	n, perr := parseJackson(text)
	if perr != nil {
		return nil, nil, expandReason(perr), nil
	}
	s, serr := o.schemaOf(payloadColumn, n)
	if serr != nil {
		return nil, nil, expandReason(serr), nil
	}
	if n.kind != jObject {
		return nil, nil, "", fmt.Errorf("%w: a top-level JSON array expands to an array schema but Debezium builds a struct from it (the connector would stop)", errExpandMismatch)
	}
	v, err = valueOf(n, s)
	if err != nil {
		return nil, nil, "", err
	}
	return s.render(), v, "", nil
}

// expandReason is an errExpand error's text without its prefix.
func expandReason(err error) string {
	return strings.TrimPrefix(err.Error(), errExpand.Error()+": ")
}
