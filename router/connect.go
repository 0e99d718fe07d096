package router

import (
	"encoding/base64"
	"math"
	"math/big"
	"strconv"
	"strings"
	"unicode/utf8"
)

// This file is a small model of Kafka Connect's data API (Schema, Struct)
// and of how Kafka Connect's converters turn it into bytes, so records can
// be written exactly as a Debezium connector under Kafka Connect (or
// Debezium Server) writes them. The references, read to learn the formats
// (no code was taken from them):
//
//   - JsonConverter.asJsonSchema / convertToJson (apache/kafka,
//     connect/json/src/main/java/org/apache/kafka/connect/json/JsonConverter.java)
//     and JsonSchema.java beside it: schema objects are {"type", then
//     "items" | "fields", "optional", "name", "version", "doc",
//     "parameters", "default"}, a struct field's schema ends with "field";
//     the envelope is {"schema":...,"payload":...}.
//   - Jackson's generator (FasterXML/jackson-core, io/CharTypes.java
//     sOutputEscapes128, json/UTF8JsonGenerator.java): only '"', '\\' and
//     control characters are escaped, with \b \t \n \f \r short forms and
//     \u00XX (upper-case hex) otherwise; non-ASCII is written as UTF-8;
//     doubles and floats as Java's Double/Float.toString, non-finite ones
//     quoted; BigDecimal as BigDecimal.toString; binary as standard base64.
//   - Values.convertToString (connect/api/.../data/Values.java), used by
//     SimpleHeaderConverter for header values.

// ctype is a Connect schema type.
type ctype uint8

const (
	tInt8 ctype = iota + 1
	tInt16
	tInt32
	tInt64
	tFloat32
	tFloat64
	tBoolean
	tString
	tBytes
	tArray
	tStruct
)

func (t ctype) String() string {
	switch t {
	case tInt8:
		return "int8"
	case tInt16:
		return "int16"
	case tInt32:
		return "int32"
	case tInt64:
		return "int64"
	case tFloat32:
		return "float"
	case tFloat64:
		return "double"
	case tBoolean:
		return "boolean"
	case tString:
		return "string"
	case tBytes:
		return "bytes"
	case tArray:
		return "array"
	case tStruct:
		return "struct"
	}
	return "?"
}

// Logical type names the model knows; JsonConverter treats Decimal
// specially, the io.debezium ones are plain names.
const (
	nameDecimal        = "org.apache.kafka.connect.data.Decimal"
	nameJSON           = "io.debezium.data.Json"
	nameUUID           = "io.debezium.data.Uuid"
	nameEnum           = "io.debezium.data.Enum"
	nameTimestamp      = "io.debezium.time.Timestamp"
	nameMicroTimestamp = "io.debezium.time.MicroTimestamp"
	nameNanoTimestamp  = "io.debezium.time.NanoTimestamp"
	nameZonedTimestamp = "io.debezium.time.ZonedTimestamp"
	nameDate           = "io.debezium.time.Date"
)

// param is one schema parameter; Connect keeps them in insertion order.
type param struct{ key, value string }

// cschema is a Connect schema. It is immutable once built.
type cschema struct {
	typ      ctype
	name     string
	version  int // 0: none
	optional bool
	params   []param
	def      any // default value in the value model below; nil: none
	fields   []cfield
	elem     *cschema

	json []byte // asJsonSchema, rendered once by render()
}

type cfield struct {
	name   string
	schema *cschema
}

// Values of the model: nil, int64 (every integer type), float64 (float32
// values are stored widened and printed as float32), bool, string, []byte,
// decimal, *cstruct, []any (array).
type decimal struct {
	unscaled *big.Int
	scale    int32
}

// cstruct is a Struct: values aligned with the schema's fields.
type cstruct struct {
	schema *cschema
	values []any
}

// field returns the struct schema's field index, or -1.
func (s *cschema) field(name string) int {
	for i := range s.fields {
		if s.fields[i].name == name {
			return i
		}
	}
	return -1
}

// render fills the cached JSON form of s and its children.
func (s *cschema) render() *cschema { return s.renderWith(decimalBase64) }

// renderWith renders with JsonConverter's decimal.format for defaults.
func (s *cschema) renderWith(decFormat int) *cschema {
	s.json = appendJSONSchema(nil, s, "", decFormat)
	return s
}

// appendJSONSchema writes JsonConverter.asJsonSchema(s) compactly; field is
// the struct field name to append, "" for none.
func appendJSONSchema(b []byte, s *cschema, field string, decFormat int) []byte {
	b = append(b, `{"type":"`...)
	b = append(b, s.typ.String()...)
	b = append(b, '"')
	switch s.typ {
	case tArray:
		b = append(b, `,"items":`...)
		b = appendJSONSchema(b, s.elem, "", decFormat)
	case tStruct:
		b = append(b, `,"fields":[`...)
		for i, f := range s.fields {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendJSONSchema(b, f.schema, f.name, decFormat)
		}
		b = append(b, ']')
	}
	b = append(b, `,"optional":`...)
	b = strconv.AppendBool(b, s.optional)
	if s.name != "" {
		b = append(b, `,"name":`...)
		b = appendJSONString(b, s.name)
	}
	if s.version != 0 {
		b = append(b, `,"version":`...)
		b = strconv.AppendInt(b, int64(s.version), 10)
	}
	if s.params != nil {
		b = append(b, `,"parameters":{`...)
		for i, p := range s.params {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendJSONString(b, p.key)
			b = append(b, ':')
			b = appendJSONString(b, p.value)
		}
		b = append(b, '}')
	}
	if s.def != nil {
		b = append(b, `,"default":`...)
		b, _ = appendJSONValue(b, s, s.def, false, decFormat)
	}
	if field != "" {
		b = append(b, `,"field":`...)
		b = appendJSONString(b, field)
	}
	return append(b, '}')
}

// Decimal formats of JsonConverter's decimal.format.
const (
	decimalBase64 = iota
	decimalNumeric
)

// appendJSONValue writes JsonConverter.convertToJson(s, v). A nil v becomes
// the schema's default when replaceNull is on and it has one, else null if
// the schema is optional; ok is false for a null in a required field with
// no default (Connect throws a DataException there).
func appendJSONValue(b []byte, s *cschema, v any, replaceNull bool, decFormat int) ([]byte, bool) {
	if v == nil {
		switch {
		case s == nil:
			return append(b, "null"...), true
		case s.def != nil && replaceNull:
			return appendJSONValue(b, s, s.def, false, decFormat)
		case s.optional:
			return append(b, "null"...), true
		}
		return b, false
	}
	if s != nil && s.name == nameDecimal {
		d := v.(decimal)
		if decFormat == decimalNumeric {
			return append(b, javaBigDecimal(d)...), true
		}
		return appendBase64(b, twosComplement(d.unscaled)), true
	}
	switch x := v.(type) {
	case int64:
		return strconv.AppendInt(b, x, 10), true
	case float64:
		var f string
		if s != nil && s.typ == tFloat32 {
			f = javaFloat(float32(x))
		} else {
			f = javaDouble(x)
		}
		if math.IsInf(x, 0) || math.IsNaN(x) {
			return appendJSONString(b, f), true
		}
		return append(b, f...), true
	case bool:
		return strconv.AppendBool(b, x), true
	case string:
		return appendJSONString(b, x), true
	case []byte:
		return appendBase64(b, x), true
	case []any:
		var elem *cschema
		if s != nil {
			elem = s.elem
		}
		b = append(b, '[')
		for i, e := range x {
			if i > 0 {
				b = append(b, ',')
			}
			var ok bool
			if b, ok = appendJSONValue(b, elem, e, replaceNull, decFormat); !ok {
				return b, false
			}
		}
		return append(b, ']'), true
	case *cstruct:
		b = append(b, '{')
		for i, f := range x.schema.fields {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendJSONString(b, f.name)
			b = append(b, ':')
			var ok bool
			if b, ok = appendJSONValue(b, f.schema, x.values[i], replaceNull, decFormat); !ok {
				return b, false
			}
		}
		return append(b, '}'), true
	}
	return b, false
}

func appendBase64(b []byte, raw []byte) []byte {
	b = append(b, '"')
	n := base64.StdEncoding.EncodedLen(len(raw))
	b = append(b, make([]byte, n)...)
	base64.StdEncoding.Encode(b[len(b)-n:], raw)
	return append(b, '"')
}

const hexUpper = "0123456789ABCDEF"

// appendJSONString writes s as Jackson does: '"' and '\\' escaped, control
// characters as \b \t \n \f \r or \u00XX, everything else (DEL and
// non-ASCII included) as is. Invalid UTF-8 becomes U+FFFD, as Java's
// decoding of the column bytes would make it.
func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c >= 0x80 {
			r, size := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && size == 1 {
				b = append(b, s[start:i]...)
				b = append(b, "\uFFFD"...)
				i++
				start = i
				continue
			}
			i += size
			continue
		}
		if c >= 0x20 && c != '"' && c != '\\' {
			i++
			continue
		}
		b = append(b, s[start:i]...)
		switch c {
		case '"', '\\':
			b = append(b, '\\', c)
		case '\b':
			b = append(b, '\\', 'b')
		case '\t':
			b = append(b, '\\', 't')
		case '\n':
			b = append(b, '\\', 'n')
		case '\f':
			b = append(b, '\\', 'f')
		case '\r':
			b = append(b, '\\', 'r')
		default:
			b = append(b, '\\', 'u', '0', '0', hexUpper[c>>4], hexUpper[c&0xF])
		}
		i++
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// javaString returns s with invalid UTF-8 replaced by U+FFFD, as a Java
// String decoded from the column bytes would hold it.
func javaString(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}

// javaDouble formats f as Java's Double.toString (JDK 19 and later: the
// shortest decimal that reads back as f): plain notation with at least one
// fractional digit for 1e-3 <= |f| < 1e7, otherwise d.dddE<exp>.
func javaDouble(f float64) string { return javaFloating(f, 64) }

// javaFloat formats f as Java's Float.toString.
func javaFloat(f float32) string { return javaFloating(float64(f), 32) }

func javaFloating(f float64, bits int) string {
	switch {
	case math.IsNaN(f):
		return "NaN"
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	case f == 0:
		if math.Signbit(f) {
			return "-0.0"
		}
		return "0.0"
	}
	// Shortest digits and decimal exponent: d.ddde±x.
	e := strconv.FormatFloat(f, 'e', -1, bits)
	neg := e[0] == '-'
	if neg {
		e = e[1:]
	}
	mant, expStr, _ := strings.Cut(e, "e")
	exp, _ := strconv.Atoi(expStr)
	digits := strings.Replace(mant, ".", "", 1)
	var sb strings.Builder
	if neg {
		sb.WriteByte('-')
	}
	abs := math.Abs(f)
	if abs >= 1e-3 && abs < 1e7 {
		if exp >= 0 {
			intLen := exp + 1
			if len(digits) <= intLen {
				sb.WriteString(digits)
				sb.WriteString(strings.Repeat("0", intLen-len(digits)))
				sb.WriteString(".0")
			} else {
				sb.WriteString(digits[:intLen])
				sb.WriteByte('.')
				sb.WriteString(digits[intLen:])
			}
		} else {
			sb.WriteString("0.")
			sb.WriteString(strings.Repeat("0", -exp-1))
			sb.WriteString(digits)
		}
		return sb.String()
	}
	sb.WriteByte(digits[0])
	sb.WriteByte('.')
	if len(digits) > 1 {
		sb.WriteString(digits[1:])
	} else {
		sb.WriteByte('0')
	}
	sb.WriteByte('E')
	sb.WriteString(strconv.Itoa(exp))
	return sb.String()
}

// javaBigDecimal formats d as Java's BigDecimal.toString: plain when the
// scale is not negative and the adjusted exponent is at least -6,
// scientific ("1.23E+5", "1E-7") otherwise.
func javaBigDecimal(d decimal) string {
	u := d.unscaled.String()
	neg := strings.HasPrefix(u, "-")
	if neg {
		u = u[1:]
	}
	scale := int(d.scale)
	adjusted := -scale + (len(u) - 1)
	var sb strings.Builder
	if neg {
		sb.WriteByte('-')
	}
	switch {
	case scale == 0:
		sb.WriteString(u)
	case scale > 0 && adjusted >= -6:
		if len(u) > scale {
			sb.WriteString(u[:len(u)-scale])
			sb.WriteByte('.')
			sb.WriteString(u[len(u)-scale:])
		} else {
			sb.WriteString("0.")
			sb.WriteString(strings.Repeat("0", scale-len(u)))
			sb.WriteString(u)
		}
	default:
		sb.WriteByte(u[0])
		if len(u) > 1 {
			sb.WriteByte('.')
			sb.WriteString(u[1:])
		}
		sb.WriteByte('E')
		if adjusted >= 0 {
			sb.WriteByte('+')
		}
		sb.WriteString(strconv.Itoa(adjusted))
	}
	return sb.String()
}

// javaBigDecimalPlain is BigDecimal.toPlainString.
func javaBigDecimalPlain(d decimal) string {
	u := d.unscaled.String()
	neg := strings.HasPrefix(u, "-")
	if neg {
		u = u[1:]
	}
	var sb strings.Builder
	if neg {
		sb.WriteByte('-')
	}
	scale := int(d.scale)
	switch {
	case scale <= 0:
		sb.WriteString(u)
		sb.WriteString(strings.Repeat("0", -scale))
	case len(u) > scale:
		sb.WriteString(u[:len(u)-scale])
		sb.WriteByte('.')
		sb.WriteString(u[len(u)-scale:])
	default:
		sb.WriteString("0.")
		sb.WriteString(strings.Repeat("0", scale-len(u)))
		sb.WriteString(u)
	}
	return sb.String()
}

// twosComplement is Java's BigInteger.toByteArray: the shortest big-endian
// two's-complement form (at least one byte).
func twosComplement(x *big.Int) []byte {
	if x.Sign() >= 0 {
		b := x.Bytes()
		if len(b) == 0 || b[0]&0x80 != 0 {
			b = append([]byte{0}, b...)
		}
		return b
	}
	// -x - 1, inverted, is the two's complement of x.
	m := new(big.Int).Neg(x)
	m.Sub(m, big.NewInt(1))
	b := m.Bytes()
	if len(b) == 0 || b[0]&0x80 != 0 {
		b = append([]byte{0}, b...)
	}
	for i := range b {
		b[i] = ^b[i]
	}
	return b
}

// simpleHeaderText is SimpleHeaderConverter's value: Values.convertToString,
// which writes strings as they are, numbers and booleans as Java's
// toString, bytes as standard base64, structs as {"field":value,...} with
// embedded strings quoted (only '\\' and '"' escaped). ok is false for a
// value it cannot render.
func simpleHeaderText(b []byte, s *cschema, v any, embedded bool) ([]byte, bool) {
	switch x := v.(type) {
	case nil:
		return append(b, "null"...), true
	case int64:
		return strconv.AppendInt(b, x, 10), true
	case float64:
		if s != nil && s.typ == tFloat32 {
			return append(b, javaFloat(float32(x))...), true
		}
		return append(b, javaDouble(x)...), true
	case bool:
		return strconv.AppendBool(b, x), true
	case decimal:
		return append(b, javaBigDecimal(x)...), true
	case string:
		if !embedded {
			return append(b, x...), true
		}
		b = append(b, '"')
		b = append(b, strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(x)...)
		return append(b, '"'), true
	case []byte:
		if embedded {
			b = append(b, '"')
		}
		b = append(b, base64.StdEncoding.EncodeToString(x)...)
		if embedded {
			b = append(b, '"')
		}
		return b, true
	case []any:
		b = append(b, '[')
		for i, e := range x {
			if i > 0 {
				b = append(b, ',')
			}
			var es *cschema
			if s != nil {
				es = s.elem
			}
			var ok bool
			if b, ok = simpleHeaderText(b, es, e, true); !ok {
				return b, false
			}
		}
		return append(b, ']'), true
	case *cstruct:
		b = append(b, '{')
		for i, f := range x.schema.fields {
			if i > 0 {
				b = append(b, ',')
			}
			b, _ = simpleHeaderText(b, nil, f.name, true)
			b = append(b, ':')
			var ok bool
			if b, ok = simpleHeaderText(b, f.schema, x.values[i], true); !ok {
				return b, false
			}
		}
		return append(b, '}'), true
	}
	return b, false
}
