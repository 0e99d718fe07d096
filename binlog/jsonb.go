package binlog

import (
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/go-mysql-org/go-mysql/mysql"
)

// MySQL 8 binary JSON (the JSON column type; MariaDB's JSON is LONGTEXT
// and needs none of this).
//
// appendJSONText writes a binary JSON document as MySQL itself prints it
// (SELECT of a JSON column, which the start: pending backfill reads), so a
// payload has the same bytes whether it came from the binlog or from the
// table:
//
//   - members in the stored order (MySQL sorts keys by length, then bytes),
//     ", " between elements and ": " after keys;
//   - strings escaped as MySQL escapes them: \" \\ \b \f \n \r \t, other
//     control characters as \u00xx, everything else (UTF-8) as is;
//   - integers in decimal; DECIMAL exactly, with its scale; doubles as
//     MySQL's my_gcvt prints them, with ".0" when that has neither "." nor
//     "e";
//   - DATETIME, TIMESTAMP, TIME with six fractional digits and DATE, quoted;
//     other opaque values as "base64:typeNN:...".
//
// go-mysql's own MySQL-text mode (RenderJSONAsMySQLText, v1.16) is not
// this text: no space after "," and ":", "<", ">", "&", U+2028 and U+2029
// escaped as \u00xx/\u20xx, doubles that are whole numbers written out in
// full with ".0" (1e21 as 1000000000000000000000.0) and others in Go's
// %g form (-2.5e-07, 1e-05, -3.639739401573473e+09 where MySQL prints
// -0.00000025, 0.00001, -3639739401.573473), zero TIME and DATETIME
// without their fraction, base64 without line breaks
// (TestGoMySQLJSONTextIsNotMySQLs).

// Binary JSON value types.
const (
	jsonbSmallObject = 0x00
	jsonbLargeObject = 0x01
	jsonbSmallArray  = 0x02
	jsonbLargeArray  = 0x03
	jsonbLiteral     = 0x04
	jsonbInt16       = 0x05
	jsonbUint16      = 0x06
	jsonbInt32       = 0x07
	jsonbUint32      = 0x08
	jsonbInt64       = 0x09
	jsonbUint64      = 0x0a
	jsonbDouble      = 0x0b
	jsonbString      = 0x0c
	jsonbOpaque      = 0x0f

	jsonbNull  = 0x00
	jsonbTrue  = 0x01
	jsonbFalse = 0x02
)

// maxJSONDepth bounds nesting, as MySQL does (JSON_DOCUMENT_MAX_DEPTH).
const maxJSONDepth = 100

var errShortJSON = errors.New("binary JSON value is truncated")

// appendJSONText appends the text of the binary JSON document doc to dst.
// An empty document is JSON null, as MySQL reads it.
func appendJSONText(dst, doc []byte) ([]byte, error) {
	if len(doc) == 0 {
		return append(dst, "null"...), nil
	}
	return appendJSONValue(dst, doc[0], doc[1:], 0)
}

func appendJSONValue(dst []byte, typ byte, data []byte, depth int) ([]byte, error) {
	switch typ {
	case jsonbSmallObject, jsonbLargeObject, jsonbSmallArray, jsonbLargeArray:
		if depth >= maxJSONDepth {
			return nil, errors.New("binary JSON nested too deeply")
		}
		return appendJSONContainer(dst, typ, data, depth+1)
	case jsonbLiteral:
		if len(data) < 1 {
			return nil, errShortJSON
		}
		switch data[0] {
		case jsonbNull:
			return append(dst, "null"...), nil
		case jsonbTrue:
			return append(dst, "true"...), nil
		case jsonbFalse:
			return append(dst, "false"...), nil
		}
		return nil, fmt.Errorf("binary JSON literal %#x", data[0])
	case jsonbInt16:
		if len(data) < 2 {
			return nil, errShortJSON
		}
		return strconv.AppendInt(dst, int64(int16(binary.LittleEndian.Uint16(data))), 10), nil
	case jsonbUint16:
		if len(data) < 2 {
			return nil, errShortJSON
		}
		return strconv.AppendUint(dst, uint64(binary.LittleEndian.Uint16(data)), 10), nil
	case jsonbInt32:
		if len(data) < 4 {
			return nil, errShortJSON
		}
		return strconv.AppendInt(dst, int64(int32(binary.LittleEndian.Uint32(data))), 10), nil
	case jsonbUint32:
		if len(data) < 4 {
			return nil, errShortJSON
		}
		return strconv.AppendUint(dst, uint64(binary.LittleEndian.Uint32(data)), 10), nil
	case jsonbInt64:
		if len(data) < 8 {
			return nil, errShortJSON
		}
		return strconv.AppendInt(dst, int64(binary.LittleEndian.Uint64(data)), 10), nil
	case jsonbUint64:
		if len(data) < 8 {
			return nil, errShortJSON
		}
		return strconv.AppendUint(dst, binary.LittleEndian.Uint64(data), 10), nil
	case jsonbDouble:
		if len(data) < 8 {
			return nil, errShortJSON
		}
		return appendMySQLDouble(dst, math.Float64frombits(binary.LittleEndian.Uint64(data))), nil
	case jsonbString:
		s, err := jsonbVarData(data)
		if err != nil {
			return nil, err
		}
		return appendJSONString(dst, s), nil
	case jsonbOpaque:
		if len(data) < 1 {
			return nil, errShortJSON
		}
		ft := data[0]
		v, err := jsonbVarData(data[1:])
		if err != nil {
			return nil, err
		}
		return appendJSONOpaque(dst, ft, v)
	}
	return nil, fmt.Errorf("binary JSON type %#x", typ)
}

// jsonbVarData reads a length (7 bits per byte, low bits first, high bit
// set on all but the last byte) and the bytes it counts.
func jsonbVarData(data []byte) ([]byte, error) {
	var n uint64
	for i := 0; i < 5; i++ {
		if i >= len(data) {
			return nil, errShortJSON
		}
		n |= uint64(data[i]&0x7f) << (7 * i)
		if data[i]&0x80 == 0 {
			data = data[i+1:]
			if n > uint64(len(data)) {
				return nil, errShortJSON
			}
			return data[:n], nil
		}
	}
	return nil, errors.New("binary JSON length is too long")
}

func appendJSONContainer(dst []byte, typ byte, data []byte, depth int) ([]byte, error) {
	large := typ == jsonbLargeObject || typ == jsonbLargeArray
	object := typ == jsonbSmallObject || typ == jsonbLargeObject
	offSize, inline32 := 2, false
	if large {
		offSize, inline32 = 4, true
	}
	read := func(b []byte) int {
		if large {
			return int(binary.LittleEndian.Uint32(b))
		}
		return int(binary.LittleEndian.Uint16(b))
	}
	if len(data) < 2*offSize {
		return nil, errShortJSON
	}
	count, size := read(data), read(data[offSize:])
	if size > len(data) {
		return nil, errShortJSON
	}
	data = data[:size]
	keyEntry, valueEntry := offSize+2, 1+offSize
	header := 2*offSize + count*valueEntry
	if object {
		header += count * keyEntry
	}
	if header > size || count < 0 {
		return nil, errShortJSON
	}
	open, closing := byte('['), byte(']')
	if object {
		open, closing = '{', '}'
	}
	dst = append(dst, open)
	for i := 0; i < count; i++ {
		if i > 0 {
			dst = append(dst, ", "...)
		}
		if object {
			e := 2*offSize + i*keyEntry
			off, n := read(data[e:]), int(binary.LittleEndian.Uint16(data[e+offSize:]))
			if off < header || off+n > size {
				return nil, errShortJSON
			}
			dst = appendJSONString(dst, data[off:off+n])
			dst = append(dst, ": "...)
		}
		e := 2*offSize + i*valueEntry
		if object {
			e += count * keyEntry
		}
		vt := data[e]
		switch {
		case vt == jsonbLiteral || vt == jsonbInt16 || vt == jsonbUint16 ||
			(inline32 && (vt == jsonbInt32 || vt == jsonbUint32)):
			var err error
			if dst, err = appendJSONValue(dst, vt, data[e+1:e+valueEntry], depth); err != nil {
				return nil, err
			}
		default:
			off := read(data[e+1:])
			if off < header || off >= size {
				return nil, errShortJSON
			}
			var err error
			if dst, err = appendJSONValue(dst, vt, data[off:], depth); err != nil {
				return nil, err
			}
		}
	}
	return append(dst, closing), nil
}

// appendJSONString appends s quoted and escaped as MySQL does.
func appendJSONString(dst, s []byte) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	for _, c := range s {
		switch c {
		case '"', '\\':
			dst = append(dst, '\\', c)
		case '\b':
			dst = append(dst, '\\', 'b')
		case '\f':
			dst = append(dst, '\\', 'f')
		case '\n':
			dst = append(dst, '\\', 'n')
		case '\r':
			dst = append(dst, '\\', 'r')
		case '\t':
			dst = append(dst, '\\', 't')
		default:
			if c <= 0x1f {
				dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			} else {
				dst = append(dst, c)
			}
		}
	}
	return append(dst, '"')
}

func appendJSONOpaque(dst []byte, fieldType byte, v []byte) ([]byte, error) {
	switch fieldType {
	case mysql.MYSQL_TYPE_NEWDECIMAL:
		if len(v) < 2 {
			return nil, errShortJSON
		}
		return appendDecimal(dst, v[2:], int(v[0]), int(v[1]))
	case mysql.MYSQL_TYPE_DATETIME, mysql.MYSQL_TYPE_TIMESTAMP, mysql.MYSQL_TYPE_DATE, mysql.MYSQL_TYPE_TIME:
		if len(v) < 8 {
			return nil, errShortJSON
		}
		dst = append(dst, '"')
		dst = appendPackedTime(dst, fieldType, int64(binary.LittleEndian.Uint64(v)))
		return append(dst, '"'), nil
	case mysql.MYSQL_TYPE_VAR_STRING:
		return appendJSONString(dst, v), nil
	}
	enc := base64.StdEncoding.EncodeToString(v)
	text := make([]byte, 0, len("base64:type")+4+len(enc)+len(enc)/76)
	text = append(text, "base64:type"...)
	text = strconv.AppendUint(text, uint64(fieldType), 10)
	text = append(text, ':')
	for i := 0; i < len(enc); i += 76 {
		if i > 0 {
			text = append(text, '\n') // MySQL's base64 breaks lines at 76
		}
		text = append(text, enc[i:min(i+76, len(enc))]...)
	}
	return appendJSONString(dst, text), nil
}

// appendPackedTime writes a temporal value in MySQL's packed int64 form
// as MySQL prints it in JSON: dates as 2006-01-02, times and date-times
// with six fractional digits.
func appendPackedTime(dst []byte, fieldType byte, v int64) []byte {
	neg := v < 0
	if neg {
		v = -v
	}
	frac := v % (1 << 24)
	ymdhms := v >> 24
	if fieldType == mysql.MYSQL_TYPE_TIME {
		hour := (ymdhms >> 12) % (1 << 10)
		if neg {
			dst = append(dst, '-')
		}
		return fmt.Appendf(dst, "%02d:%02d:%02d.%06d", hour, (ymdhms>>6)%64, ymdhms%64, frac)
	}
	ymd, hms := ymdhms>>17, ymdhms%(1<<17)
	ym := ymd >> 5
	dst = fmt.Appendf(dst, "%04d-%02d-%02d", ym/13, ym%13, ymd%32)
	if fieldType == mysql.MYSQL_TYPE_DATE {
		return dst
	}
	return fmt.Appendf(dst, " %02d:%02d:%02d.%06d", hms>>12, (hms>>6)%64, hms%64, frac)
}

// appendDecimal writes a DECIMAL(precision, scale) in MySQL's binary form
// exactly, with scale fractional digits. In that form each group of nine
// digits takes four big-endian bytes and a shorter leading (integer) or
// trailing (fraction) group the fewest bytes that hold it; the first bit
// is flipped, and a negative number has every bit inverted.
func appendDecimal(dst, b []byte, precision, scale int) ([]byte, error) {
	digBytes := [10]int{0, 1, 1, 2, 2, 3, 3, 4, 4, 4}
	if scale < 0 || precision < scale || precision > 81 {
		return nil, fmt.Errorf("binary JSON decimal(%d,%d)", precision, scale)
	}
	intg := precision - scale
	intFull, intRest := intg/9, intg%9
	fracFull, fracRest := scale/9, scale%9
	size := intFull*4 + digBytes[intRest] + fracFull*4 + digBytes[fracRest]
	if len(b) < size {
		return nil, errShortJSON
	}
	buf := append([]byte(nil), b[:size]...)
	neg := buf[0]&0x80 == 0
	buf[0] ^= 0x80
	if neg {
		for i := range buf {
			buf[i] = ^buf[i]
		}
	}
	group := func(p []byte) uint64 {
		var x uint64
		for _, c := range p {
			x = x<<8 | uint64(c)
		}
		return x
	}
	var digits []byte // integer part, leading zeros dropped
	pos := 0
	if n := digBytes[intRest]; n > 0 {
		if x := group(buf[pos : pos+n]); x != 0 {
			digits = strconv.AppendUint(digits, x, 10)
		}
		pos += n
	}
	for i := 0; i < intFull; i++ {
		x := group(buf[pos : pos+4])
		pos += 4
		if len(digits) == 0 {
			if x != 0 {
				digits = strconv.AppendUint(digits, x, 10)
			}
			continue
		}
		digits = appendPadded(digits, x, 9)
	}
	if neg {
		dst = append(dst, '-')
	}
	if len(digits) == 0 {
		digits = append(digits, '0')
	}
	dst = append(dst, digits...)
	if scale == 0 {
		return dst, nil
	}
	dst = append(dst, '.')
	for i := 0; i < fracFull; i++ {
		dst = appendPadded(dst, group(buf[pos:pos+4]), 9)
		pos += 4
	}
	if n := digBytes[fracRest]; n > 0 {
		dst = appendPadded(dst, group(buf[pos:pos+n]), fracRest)
	}
	return dst, nil
}

func appendPadded(dst []byte, x uint64, width int) []byte {
	s := strconv.FormatUint(x, 10)
	for i := len(s); i < width; i++ {
		dst = append(dst, '0')
	}
	return append(dst, s...)
}

// appendMySQLDouble writes d as MySQL prints a JSON double: my_gcvt with
// the widest field (MY_GCVT_MAX_FIELD_WIDTH), which gives the shortest
// digits that read back as d, in fixed notation for 1e-15 <= |d| < 1e15
// (and integers up to 1e15), in "e" notation otherwise (1e21, 1.5e-16,
// no "+", no leading zeros in the exponent), then ".0" when the text has
// neither "." nor "e".
func appendMySQLDouble(dst []byte, d float64) []byte {
	start := len(dst)
	neg := math.Signbit(d)
	e := strconv.FormatFloat(math.Abs(d), 'e', -1, 64) // d.ddde±XX
	mant, exp, _ := strings.Cut(e, "e")
	digits := mant[:1]
	if len(mant) > 2 {
		digits += mant[2:]
	}
	x, _ := strconv.Atoi(exp)
	decpt := x + 1 // the value is 0.DIGITS × 10^decpt
	const maxField, maxDecptF = 15 + 4 + 15, 15
	width := maxField
	if neg {
		width--
	}
	n := len(digits)
	var fixedLen int
	switch {
	case decpt <= 0:
		fixedLen = n - decpt + 2
	case decpt < n:
		fixedLen = n + 1
	default:
		fixedLen = decpt
	}
	haveSpace := fixedLen <= width
	expLen := 1
	if decpt >= 101 || decpt <= -99 {
		expLen++
	}
	if decpt >= 11 || decpt <= -9 {
		expLen++
	}
	forceE := decpt <= 0 && width <= 2-decpt && width >= 3+expLen
	fixed := (haveSpace || (decpt <= width && (decpt >= -1 || (decpt == -2 && (n > 1 || !forceE))) && !forceE)) &&
		(!haveSpace || (decpt >= -maxDecptF+1 && (decpt <= maxDecptF || n > decpt)))
	if neg {
		dst = append(dst, '-')
	}
	if fixed {
		if decpt <= 0 {
			dst = append(dst, '0', '.')
			for i := decpt; i < 0; i++ {
				dst = append(dst, '0')
			}
			dst = append(dst, digits...)
		} else {
			for i := 0; i < n; i++ {
				dst = append(dst, digits[i])
				if i+1 == decpt && i+1 < n {
					dst = append(dst, '.')
				}
			}
			for i := n; i < decpt; i++ {
				dst = append(dst, '0')
			}
		}
	} else {
		dst = append(dst, digits[0])
		if n > 1 {
			dst = append(dst, '.')
			dst = append(dst, digits[1:]...)
		}
		dst = append(dst, 'e')
		ex := decpt - 1
		if ex < 0 {
			dst = append(dst, '-')
			ex = -ex
		}
		dst = strconv.AppendInt(dst, int64(ex), 10)
	}
	for _, c := range dst[start:] {
		if c == '.' || c == 'e' {
			return dst
		}
	}
	return append(dst, '.', '0')
}
