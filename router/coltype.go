package router

import (
	"errors"
	"fmt"
	"math/big"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Database flavours a Table can come from.
const (
	FlavorMySQL    = "mysql"
	FlavorMariaDB  = "mariadb"
	FlavorPostgres = "postgres"
)

// Table is the outbox table as the database's catalog describes it. The
// command reads it at start-up when a Kafka Connect converter needs column
// types (Config.NeedsTable) and hands it to NewForTable.
type Table struct {
	Flavor string
	// Schema is the MySQL database or the Postgres schema; Name the table.
	Schema, Name string
	Columns      []TableColumn
}

// TableColumn is one column as the catalog shows it.
type TableColumn struct {
	Name string
	// Type is MySQL's information_schema COLUMN_TYPE ("varchar(255)",
	// "int(10) unsigned", "enum('a','b')", "datetime(3)") or Postgres'
	// format_type ("character varying(255)", "timestamp(3) without time
	// zone", "jsonb"); for a Postgres enum, its type name.
	Type     string
	Nullable bool
	// Default is the catalog's default: MySQL/MariaDB COLUMN_DEFAULT,
	// Postgres pg_get_expr of the default; nil when the column has none.
	Default *string
	// DefaultGenerated is MySQL's EXTRA DEFAULT_GENERATED: Default is an
	// expression, not a literal.
	DefaultGenerated bool
	// EnumValues are a Postgres enum type's labels, in order.
	EnumValues []string
}

// Column returns the named column (MySQL names compare case-insensitively).
func (t *Table) Column(name string) (*TableColumn, bool) {
	for i := range t.Columns {
		c := &t.Columns[i]
		if c.Name == name || (t.Flavor != FlavorPostgres && strings.EqualFold(c.Name, name)) {
			return c, true
		}
	}
	return nil, false
}

// kind is how a column's text value turns into a Connect value.
type kind uint8

const (
	kString kind = iota + 1 // string, json, uuid, enum
	kInt                    // int8..int64
	kBool
	kBytes
	kFloat
	kDecimal
	kTimestamp // without time zone: epoch ms/us/ns by unit
	kZoned     // with time zone: ISO-8601 string
	kDate      // epoch days
)

// colType is a column's Connect schema (as Debezium builds it with its
// default settings: decimal.handling.mode=precise,
// time.precision.mode=adaptive, binary.handling.mode=bytes) and how to
// read its values.
type colType struct {
	kind   kind
	schema *cschema
	scale  int32         // kDecimal
	unit   time.Duration // kTimestamp: time.Millisecond, Microsecond, Nanosecond
	// defaultErr says why the catalog's default could not be rendered as
	// Debezium does; it matters only where the default reaches the bytes.
	defaultErr string
}

// errColumnType is wrapped by every "this column cannot be converted" error.
var errColumnType = errors.New("unsupported column type")

var typeRE = regexp.MustCompile(`^([a-z ]+?)\s*(?:\(([^)]*)\))?((?:\s+(?:unsigned|zerofill|signed))*)\s*(with(?:out)? time zone)?$`)

// columnType maps one catalog column to its Connect schema. Types that a
// Debezium connector would render in a way this package does not model
// are an error naming the column and the type.
func columnType(flavor string, c *TableColumn, decimalHandling string) (*colType, error) {
	raw := strings.ToLower(strings.TrimSpace(c.Type))
	if c.EnumValues != nil {
		return newColType(kString, &cschema{typ: tString, name: nameEnum, version: 1,
			params: []param{{"allowed", strings.Join(c.EnumValues, ",")}}}, c, flavor), nil
	}
	if strings.HasPrefix(raw, "enum(") && flavor != FlavorPostgres {
		vals, err := mysqlEnumValues(c.Type)
		if err != nil {
			return nil, fmt.Errorf("%w: column %q: %v", errColumnType, c.Name, err)
		}
		return newColType(kString, &cschema{typ: tString, name: nameEnum, version: 1,
			params: []param{{"allowed", strings.Join(vals, ",")}}}, c, flavor), nil
	}
	m := typeRE.FindStringSubmatch(raw)
	if m == nil {
		return nil, unsupported(c)
	}
	base, args, mods, tz := m[1], m[2], m[3], m[4]
	unsigned := strings.Contains(mods, "unsigned")
	precision := func(def int) int {
		if args == "" {
			return def
		}
		p, err := strconv.Atoi(strings.TrimSpace(args))
		if err != nil {
			return def
		}
		return p
	}
	prim := func(k kind, t ctype) (*colType, error) {
		return newColType(k, &cschema{typ: t}, c, flavor), nil
	}
	named := func(k kind, t ctype, name string) (*colType, error) {
		return newColType(k, &cschema{typ: t, name: name, version: 1}, c, flavor), nil
	}
	timestamp := func(p int) (*colType, error) {
		var ct *colType
		switch {
		case p <= 3:
			ct = newColType(kTimestamp, &cschema{typ: tInt64, name: nameTimestamp, version: 1}, c, flavor)
			ct.unit = time.Millisecond
		case p <= 6:
			ct = newColType(kTimestamp, &cschema{typ: tInt64, name: nameMicroTimestamp, version: 1}, c, flavor)
			ct.unit = time.Microsecond
		default:
			ct = newColType(kTimestamp, &cschema{typ: tInt64, name: nameNanoTimestamp, version: 1}, c, flavor)
			ct.unit = time.Nanosecond
		}
		ct.resolveDefault(c, flavor)
		return ct, nil
	}
	decimalType := func(prec, scale int) (*colType, error) {
		switch decimalHandling {
		case "double":
			return prim(kFloat, tFloat64)
		case "string":
			ct := newColType(kDecimal, &cschema{typ: tString}, c, flavor)
			ct.scale = int32(scale)
			ct.resolveDefault(c, flavor)
			return ct, nil
		}
		ct := &colType{kind: kDecimal, scale: int32(scale), schema: &cschema{typ: tBytes, name: nameDecimal, version: 1,
			params: []param{{"scale", strconv.Itoa(scale)}, {"connect.decimal.precision", strconv.Itoa(prec)}}}}
		ct.schema.optional = c.Nullable
		ct.resolveDefault(c, flavor)
		return ct, nil
	}
	if flavor == FlavorPostgres {
		switch base {
		case "text", "character varying", "varchar", "character", "char", "bpchar", "name", "citext":
			return prim(kString, tString)
		case "json", "jsonb":
			return named(kString, tString, nameJSON)
		case "uuid":
			return named(kString, tString, nameUUID)
		case "smallint", "int2":
			return prim(kInt, tInt16)
		case "integer", "int", "int4":
			return prim(kInt, tInt32)
		case "bigint", "int8":
			return prim(kInt, tInt64)
		case "boolean", "bool":
			return prim(kBool, tBoolean)
		case "bytea":
			return prim(kBytes, tBytes)
		case "real", "float4":
			return prim(kFloat, tFloat32)
		case "double precision", "float8":
			return prim(kFloat, tFloat64)
		case "numeric", "decimal":
			p, s, ok := precisionScale(args)
			if !ok {
				return nil, fmt.Errorf("%w: column %q is %s without a declared scale, which Debezium renders as a variable-scale struct; declare numeric(p,s)",
					errColumnType, c.Name, c.Type)
			}
			return decimalType(p, s)
		case "timestamp":
			if tz == "with time zone" {
				return prim(kZoned, tString)
			}
			return timestamp(precision(6))
		case "timestamptz":
			return named(kZoned, tString, nameZonedTimestamp)
		case "date":
			return named(kDate, tInt32, nameDate)
		}
		return nil, unsupported(c)
	}
	switch base {
	case "char", "varchar", "tinytext", "text", "mediumtext", "longtext":
		return prim(kString, tString)
	case "json":
		return named(kString, tString, nameJSON)
	case "tinyint":
		if unsigned {
			return prim(kInt, tInt16)
		}
		return prim(kInt, tInt8)
	case "smallint":
		if unsigned {
			return prim(kInt, tInt32)
		}
		return prim(kInt, tInt16)
	case "mediumint":
		return prim(kInt, tInt32)
	case "int", "integer":
		if unsigned {
			return prim(kInt, tInt64)
		}
		return prim(kInt, tInt32)
	case "bigint":
		return prim(kInt, tInt64) // bigint.unsigned.handling.mode=long
	case "binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob":
		return prim(kBytes, tBytes)
	case "float":
		return prim(kFloat, tFloat32)
	case "double", "real":
		return prim(kFloat, tFloat64)
	case "decimal", "numeric":
		p, s, ok := precisionScale(args)
		if !ok {
			p, s = precision(10), 0
		}
		return decimalType(p, s)
	case "datetime":
		return timestamp(precision(0))
	case "timestamp":
		return named(kZoned, tString, nameZonedTimestamp)
	case "date":
		return named(kDate, tInt32, nameDate)
	}
	return nil, unsupported(c)
}

func unsupported(c *TableColumn) error {
	return fmt.Errorf("%w: column %q has type %s, which outbox-cdc does not render as Debezium does "+
		"(supported: character and text types, JSON, UUID, ENUM, integers, booleans, binary, float, decimal, date, datetime/timestamp); "+
		"leave it out of the record, or give its Connect type in route.converters.column_types",
		errColumnType, c.Name, c.Type)
}

// newColType finishes a schema: optional from the column's nullability
// (Debezium makes a nullable column's field optional), the zoned-timestamp
// name, and the default.
func newColType(k kind, s *cschema, c *TableColumn, flavor string) *colType {
	if k == kZoned && s.name == "" {
		s.name, s.version = nameZonedTimestamp, 1
	}
	s.optional = c.Nullable
	ct := &colType{kind: k, schema: s}
	if k != kTimestamp && k != kDecimal {
		ct.resolveDefault(c, flavor)
	}
	return ct
}

func precisionScale(args string) (p, s int, ok bool) {
	a, b, found := strings.Cut(args, ",")
	if !found {
		return 0, 0, false
	}
	p, err1 := strconv.Atoi(strings.TrimSpace(a))
	s, err2 := strconv.Atoi(strings.TrimSpace(b))
	return p, s, err1 == nil && err2 == nil
}

// mysqlEnumValues parses "enum('a','b”c')".
func mysqlEnumValues(t string) ([]string, error) {
	open, close := strings.IndexByte(t, '('), strings.LastIndexByte(t, ')')
	if open < 0 || close < open {
		return nil, fmt.Errorf("cannot read the values of %s", t)
	}
	s := t[open+1 : close]
	var vals []string
	for len(s) > 0 {
		if s[0] != '\'' {
			return nil, fmt.Errorf("cannot read the values of %s", t)
		}
		var b strings.Builder
		i := 1
		for ; i < len(s); i++ {
			if s[i] == '\'' {
				if i+1 < len(s) && s[i+1] == '\'' {
					b.WriteByte('\'')
					i++
					continue
				}
				break
			}
			b.WriteByte(s[i])
		}
		vals = append(vals, b.String())
		s = strings.TrimPrefix(s[min(i+1, len(s)):], ",")
	}
	return vals, nil
}

// Debezium's default value rules (read, not copied, from
// debezium-connector-mysql .../antlr/listener/DefaultValueParserListener.java,
// debezium-connector-binlog .../jdbc/BinlogDefaultValueConverter.java and
// debezium-connector-postgres .../PostgresDefaultValueConverter.java):
//   - MySQL/MariaDB: a literal is the default; NOW()/CURRENT_TIMESTAMP is
//     "1970-01-01 00:00:00" (for a nullable TIMESTAMP: no default).
//   - Postgres: 'literal'::type is the literal; a function call (now(),
//     nextval(...), gen_random_uuid()) or CURRENT_TIMESTAMP is a fixed
//     placeholder per type: "" for text, "{}" for json, 0 for numbers,
//     false, the zero UUID, the epoch.
var (
	pgFunctionDefault = regexp.MustCompile(`^[(]?[A-Za-z0-9_.]+\((?:.+(?:, ?.+)*)?\)`)
	pgLiteralDefault  = regexp.MustCompile(`^'((?:[^']|'')*)'(?:::.*)?$`)
	mysqlNow          = regexp.MustCompile(`^(?i)(current_timestamp|now|localtime|localtimestamp)(\(\d*\))?$`)
	pgCurrentDateTime = map[string]bool{"current_timestamp": true, "current_time": true, "current_date": true, "localtime": true, "localtimestamp": true}
)

// resolveDefault sets the schema's default from the catalog, or
// defaultErr when it cannot be reproduced.
func (ct *colType) resolveDefault(c *TableColumn, flavor string) {
	if c.Default == nil {
		return
	}
	expr := *c.Default
	var lit string
	generated := false // a function: Debezium's placeholder or NOW()
	switch flavor {
	case FlavorPostgres:
		expr = strings.TrimSpace(expr)
		switch {
		case strings.HasPrefix(expr, "NULL::") || strings.EqualFold(expr, "null"):
			return
		case pgFunctionDefault.MatchString(expr) || pgCurrentDateTime[strings.ToLower(expr)]:
			generated = true
		case pgLiteralDefault.MatchString(expr):
			lit = strings.ReplaceAll(pgLiteralDefault.FindStringSubmatch(expr)[1], "''", "'")
		default:
			lit = expr // a bare number or true/false
			if i := strings.Index(lit, "::"); i >= 0 {
				lit = lit[:i]
			}
			lit = strings.Trim(lit, "()")
		}
	case FlavorMariaDB:
		switch {
		case expr == "NULL":
			return
		case len(expr) >= 2 && expr[0] == '\'' && expr[len(expr)-1] == '\'':
			lit = strings.ReplaceAll(expr[1:len(expr)-1], "''", "'")
			lit = strings.ReplaceAll(lit, `\\`, `\`)
		case mysqlNow.MatchString(expr):
			generated = true
		default:
			if _, err := strconv.ParseFloat(expr, 64); err != nil {
				ct.defaultErr = fmt.Sprintf("the default %s is an expression", expr)
				return
			}
			lit = expr
		}
	default: // MySQL: COLUMN_DEFAULT holds the literal's text, or an expression (DEFAULT_GENERATED)
		switch {
		case mysqlNow.MatchString(expr):
			generated = true
		case c.DefaultGenerated:
			ct.defaultErr = fmt.Sprintf("the default %s is an expression", expr)
			return
		default:
			lit = expr
		}
	}
	if generated {
		if flavor == FlavorPostgres {
			lit = pgPlaceholder(ct)
		} else {
			if ct.kind != kTimestamp && ct.kind != kZoned {
				ct.defaultErr = fmt.Sprintf("the default %s is an expression", expr)
				return
			}
			if ct.kind == kZoned && c.Nullable {
				return
			}
			lit = "1970-01-01 00:00:00"
		}
	}
	v, err := ct.parseText([]byte(lit))
	if err != nil {
		ct.defaultErr = fmt.Sprintf("the default %q: %v", lit, err)
		return
	}
	ct.schema.def = v
}

func pgPlaceholder(ct *colType) string {
	switch ct.kind {
	case kString:
		switch ct.schema.name {
		case nameJSON:
			return "{}"
		case nameUUID:
			return "00000000-0000-0000-0000-000000000000"
		}
		return ""
	case kInt, kFloat, kDecimal:
		return "0"
	case kBool:
		return "false"
	case kTimestamp, kZoned:
		return "1970-01-01 00:00:00+00"
	case kDate:
		return "1970-01-01"
	}
	return ""
}

// parseText turns a column's text, as the sources deliver it, into the
// Connect value Debezium would put in the record.
func (ct *colType) parseText(v []byte) (any, error) {
	switch ct.kind {
	case kString:
		return javaString(string(v)), nil
	case kBytes:
		return v, nil
	case kInt:
		s := strings.TrimSpace(string(v))
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			u, uerr := strconv.ParseUint(s, 10, 64)
			if uerr != nil {
				return nil, fmt.Errorf("%q is not an integer", s)
			}
			n = int64(u) // BIGINT UNSIGNED under bigint.unsigned.handling.mode=long wraps, as Debezium's does
		}
		if !fits(n, ct.schema.typ) {
			return nil, fmt.Errorf("%d does not fit the column's %s", n, ct.schema.typ)
		}
		return n, nil
	case kBool:
		switch strings.ToLower(strings.TrimSpace(string(v))) {
		case "t", "true", "1", "y", "yes", "on":
			return true, nil
		case "f", "false", "0", "n", "no", "off":
			return false, nil
		}
		return nil, fmt.Errorf("%q is not a boolean", v)
	case kFloat:
		f, err := strconv.ParseFloat(strings.TrimSpace(string(v)), 64)
		if err != nil {
			return nil, fmt.Errorf("%q is not a number", v)
		}
		if ct.schema.typ == tFloat32 {
			f = float64(float32(f))
		}
		return f, nil
	case kDecimal:
		d, err := parseDecimal(string(v), ct.scale)
		if err != nil {
			return nil, err
		}
		if ct.schema.typ == tString {
			return javaBigDecimalPlain(d), nil
		}
		return d, nil
	case kTimestamp:
		t, err := parseTime(string(v), false)
		if err != nil {
			return nil, err
		}
		switch ct.unit {
		case time.Millisecond:
			return t.UnixMilli(), nil
		case time.Microsecond:
			return t.UnixMicro(), nil
		}
		return t.UnixNano(), nil
	case kZoned:
		t, err := parseTime(string(v), true)
		if err != nil {
			return nil, err
		}
		return isoOffsetDateTime(t), nil
	case kDate:
		t, err := time.Parse("2006-01-02", strings.TrimSpace(string(v)))
		if err != nil {
			return nil, fmt.Errorf("%q is not a date", v)
		}
		return t.Unix() / 86400, nil
	}
	return nil, fmt.Errorf("no conversion for this column")
}

func fits(n int64, t ctype) bool {
	switch t {
	case tInt8:
		return n >= -1<<7 && n < 1<<7
	case tInt16:
		return n >= -1<<15 && n < 1<<15
	case tInt32:
		return n >= -1<<31 && n < 1<<31
	}
	return true
}

// parseDecimal reads "-123.45" into an unscaled integer at the given scale
// (padding zeros; more fractional digits than the scale is an error).
func parseDecimal(s string, scale int32) (decimal, error) {
	s = strings.TrimSpace(s)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(strings.TrimPrefix(s, "-"), "+")
	ip, fp, _ := strings.Cut(s, ".")
	if ip == "" {
		ip = "0"
	}
	fp = strings.TrimRight(fp, "0")
	if len(fp) > int(scale) {
		return decimal{}, fmt.Errorf("%q has more than %d fractional digits", s, scale)
	}
	fp += strings.Repeat("0", int(scale)-len(fp))
	u, ok := new(big.Int).SetString(ip+fp, 10)
	if !ok {
		return decimal{}, fmt.Errorf("%q is not a decimal number", s)
	}
	if neg {
		u.Neg(u)
	}
	return decimal{unscaled: u, scale: scale}, nil
}

// parseTime reads a DATETIME/TIMESTAMP as the sources render it
// ("2006-01-02 15:04:05.999999", with 'T' or ' ', with or without an
// offset). A value without an offset is taken as UTC, as Debezium takes a
// column without a time zone.
func parseTime(s string, zoned bool) (time.Time, error) {
	s = strings.TrimSpace(s)
	for _, layout := range []string{
		"2006-01-02T15:04:05.999999999Z07:00",
		"2006-01-02 15:04:05.999999999Z07:00",
		"2006-01-02 15:04:05.999999999Z07",
		"2006-01-02T15:04:05.999999999Z07",
		"2006-01-02T15:04:05.999999999",
		"2006-01-02 15:04:05.999999999",
	} {
		if t, err := time.Parse(layout, s); err == nil {
			return t.UTC(), nil
		}
	}
	return time.Time{}, fmt.Errorf("%q is not a date and time", s)
}

// isoOffsetDateTime is Java's DateTimeFormatter.ISO_OFFSET_DATE_TIME in
// UTC, as Debezium's ZonedTimestamp writes it: seconds always, the
// fraction with as few digits as needed, "Z".
func isoOffsetDateTime(t time.Time) string {
	b := t.UTC().AppendFormat(nil, "2006-01-02T15:04:05")
	if ns := t.Nanosecond(); ns != 0 {
		frac := strings.TrimRight(fmt.Sprintf("%09d", ns), "0")
		b = append(b, '.')
		b = append(b, frac...)
	}
	return string(append(b, 'Z'))
}

// Override types for route.converters.column_types: the Connect schema a
// column gets when the catalog is not the right source (MariaDB's JSON is
// a LONGTEXT; a table-less outbox has no catalog).
var overrideTypes = map[string]func() *colType{
	"string": func() *colType { return &colType{kind: kString, schema: &cschema{typ: tString}} },
	"json": func() *colType {
		return &colType{kind: kString, schema: &cschema{typ: tString, name: nameJSON, version: 1}}
	},
	"uuid": func() *colType {
		return &colType{kind: kString, schema: &cschema{typ: tString, name: nameUUID, version: 1}}
	},
	"int8":    func() *colType { return &colType{kind: kInt, schema: &cschema{typ: tInt8}} },
	"int16":   func() *colType { return &colType{kind: kInt, schema: &cschema{typ: tInt16}} },
	"int32":   func() *colType { return &colType{kind: kInt, schema: &cschema{typ: tInt32}} },
	"int64":   func() *colType { return &colType{kind: kInt, schema: &cschema{typ: tInt64}} },
	"boolean": func() *colType { return &colType{kind: kBool, schema: &cschema{typ: tBoolean}} },
	"bytes":   func() *colType { return &colType{kind: kBytes, schema: &cschema{typ: tBytes}} },
	"float32": func() *colType { return &colType{kind: kFloat, schema: &cschema{typ: tFloat32}} },
	"float64": func() *colType { return &colType{kind: kFloat, schema: &cschema{typ: tFloat64}} },
	"timestamp": func() *colType {
		return &colType{kind: kTimestamp, unit: time.Millisecond, schema: &cschema{typ: tInt64, name: nameTimestamp, version: 1}}
	},
	"micro-timestamp": func() *colType {
		return &colType{kind: kTimestamp, unit: time.Microsecond, schema: &cschema{typ: tInt64, name: nameMicroTimestamp, version: 1}}
	},
	"zoned-timestamp": func() *colType {
		return &colType{kind: kZoned, schema: &cschema{typ: tString, name: nameZonedTimestamp, version: 1}}
	},
}

// parseOverride reads one route.converters.column_types entry,
// "column=type" or "column=type?" (? makes it optional, i.e. nullable).
func parseOverride(entry string) (col string, ct *colType, err error) {
	col, typ, ok := strings.Cut(entry, "=")
	col, typ = strings.TrimSpace(col), strings.TrimSpace(typ)
	if !ok || col == "" || typ == "" {
		return "", nil, fmt.Errorf("%q: want column=type (e.g. payload=json, aggregateid=string?)", entry)
	}
	optional := strings.HasSuffix(typ, "?")
	typ = strings.TrimSuffix(typ, "?")
	mk, ok := overrideTypes[typ]
	if !ok {
		names := make([]string, 0, len(overrideTypes))
		for n := range overrideTypes {
			names = append(names, n)
		}
		sort.Strings(names)
		return "", nil, fmt.Errorf("%q: unknown type %q (known: %s; append ? for a nullable column)", entry, typ, strings.Join(names, ", "))
	}
	ct = mk()
	ct.schema.optional = optional
	return col, ct, nil
}
