package binlog

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	mysqldriver "github.com/go-sql-driver/mysql"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"
	outboxcdc "github.com/outbox-cdc/outbox-cdc"
	"github.com/rs/zerolog"
)

// rowImageColumn is a column of the every-type table: its definition, the
// SQL expression that takes its value, and a generator of values (nil:
// NULL).
type rowImageColumn struct {
	def  string
	expr string // "?" unless the value needs a function
	gen  func(r *rand.Rand, max bool) any
	text bool // delivered as stored (VARCHAR, CHAR, TEXT/BLOB): may be an extra column the stream reads itself
}

func randText(r *rand.Rand, runes []rune, n int) string {
	var b strings.Builder
	for range n {
		b.WriteRune(runes[r.IntN(len(runes))])
	}
	return b.String()
}

var (
	latin  = []rune("abcxyz XYZ0189,.'\"\\")
	multi  = []rune("aé€😀ßж中\u00a0") // 1- to 4-byte UTF-8
	labels = func(n int, prefix string) string {
		var l []string
		for i := range n {
			l = append(l, fmt.Sprintf("'%s%d'", prefix, i))
		}
		return strings.Join(l, ",")
	}
)

// strGen makes strings of up to maxChars characters of runes; the longest
// value is maxChars of the widest rune (the column's most bytes).
func strGen(runes []rune, maxChars int) func(*rand.Rand, bool) any {
	widest := runes[0]
	for _, c := range runes {
		if len(string(c)) > len(string(widest)) {
			widest = c
		}
	}
	return func(r *rand.Rand, max bool) any {
		if max {
			return strings.Repeat(string(widest), maxChars)
		}
		return randText(r, runes, r.IntN(min(maxChars, 2000)+1))
	}
}

func bytesGen(maxLen int) func(*rand.Rand, bool) any {
	return func(r *rand.Rand, max bool) any {
		n := maxLen
		if !max {
			n = r.IntN(min(maxLen, 5000) + 1)
		}
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(r.IntN(256))
		}
		return b
	}
}

func pick(vals ...any) func(*rand.Rand, bool) any {
	return func(r *rand.Rand, max bool) any {
		if max {
			return vals[len(vals)-1]
		}
		return vals[r.IntN(len(vals))]
	}
}

// rowImageColumns has every column type MariaDB writes to the binlog, with
// the widths that change a value's layout: 1- and 2-byte VARCHAR and CHAR
// lengths, every BLOB length size, every fractional-second precision,
// 1- and 2-byte ENUMs, 1- and 8-byte SETs, DECIMALs of every leftover
// digit count.
var rowImageColumns = []rowImageColumn{
	{"c_tiny TINYINT", "?", pick(-128, 0, 127), false},
	{"c_utiny TINYINT UNSIGNED", "?", pick(0, 255), false},
	{"c_small SMALLINT", "?", pick(-32768, 7, 32767), false},
	{"c_med MEDIUMINT UNSIGNED", "?", pick(0, 16777215), false},
	{"c_int INT", "?", pick(-2147483648, 2147483647), false},
	{"c_big BIGINT UNSIGNED", "?", pick(uint64(0), uint64(18446744073709551615)), false},
	{"c_dec1 DECIMAL(65,30)", "?", pick("-12345678901234567890123456789012345.123456789012345678901234567890", "0", "99999999999999999999999999999999999.999999999999999999999999999999"), false},
	{"c_dec2 DECIMAL(10,0)", "?", pick("-9999999999", "1", "9999999999"), false},
	{"c_dec3 DECIMAL(5,5)", "?", pick("-0.99999", "0.5", "0.99999"), false},
	{"c_dec4 DECIMAL(19,4)", "?", pick("-123456789012345.1234", "0.0001", "999999999999999.9999"), false},
	{"c_dec5 DECIMAL(1,0)", "?", pick("-9", "9"), false},
	{"c_float FLOAT", "?", pick(float32(-3.4e38), float32(0.1), float32(3.4e38)), false},
	{"c_double DOUBLE", "?", pick(-1.7e308, 0.1, 1.7e308), false},
	{"c_bit1 BIT(1)", "?", pick(0, 1), false},
	{"c_bit13 BIT(13)", "?", pick(0, 4097, 8191), false},
	{"c_bit64 BIT(64)", "?", pick(uint64(0), uint64(1<<63), uint64(18446744073709551615)), false},
	{"c_date DATE", "?", pick("0000-00-00", "1000-01-01", "2024-02-29", "9999-12-31"), false},
	{"c_time TIME", "?", pick("-838:59:59", "00:00:00", "838:59:59"), false},
	{"c_time3 TIME(3)", "?", pick("-12:34:56.5", "00:00:00.001", "838:59:58.999"), false},
	{"c_time6 TIME(6)", "?", pick("-00:00:00.000001", "23:59:59.999999"), false},
	{"c_dt DATETIME", "?", pick("0000-00-00 00:00:00", "1969-07-20 20:17:40", "9999-12-31 23:59:59"), false},
	{"c_dt1 DATETIME(1)", "?", pick("2024-03-05 06:07:08.1", "9999-12-31 23:59:59.9"), false},
	{"c_dt4 DATETIME(4)", "?", pick("1000-01-01 00:00:00.0001", "9999-12-31 23:59:59.9999"), false},
	{"c_dt6 DATETIME(6)", "?", pick("2024-03-05 06:07:08.000001", "9999-12-31 23:59:59.999999"), false},
	{"c_ts TIMESTAMP NULL", "?", pick("1970-01-01 00:00:01", "2038-01-19 03:14:07"), false},
	{"c_ts2 TIMESTAMP(2) NULL", "?", pick("2000-01-01 00:00:00.01", "2038-01-19 03:14:07.99"), false},
	{"c_ts6 TIMESTAMP(6) NULL", "?", pick("2024-03-05 06:07:08.5", "2038-01-19 03:14:07.999999"), false},
	{"c_year YEAR", "?", pick(0, 1901, 2155), false},
	{"c_enum ENUM('a','b','c')", "?", pick("a", "b", "c"), false},
	{"c_enum2 ENUM(" + labels(300, "e") + ")", "?", pick("e0", "e255", "e299"), false},
	{"c_set SET('x','y','z')", "?", pick("", "x,z", "x,y,z"), false},
	{"c_set64 SET(" + labels(64, "s") + ")", "?", pick("s0", "s1,s63", "s0,s7,s8,s62,s63"), false},
	{"c_bin BINARY(3)", "?", bytesGen(3), false},
	{"c_geo GEOMETRY", "ST_GeomFromText(?)", pick("POINT(1 2)", "LINESTRING(0 0,1 1,2 5)", "POLYGON((0 0,10 0,10 10,0 10,0 0))"), false},
	{"c_point POINT", "ST_GeomFromText(?)", pick("POINT(-1.5 2e10)"), false},
	{"c_uuid UUID", "?", pick("123e4567-e89b-12d3-a456-426614174000", "ffffffff-ffff-ffff-ffff-ffffffffffff"), false},
	{"c_inet6 INET6", "?", pick("::1", "2001:db8::ff00:42:8329"), false},
	{"c_char CHAR(10)", "?", strGen(multi, 10), true},
	{"c_char100 CHAR(100)", "?", strGen(multi, 100), true},                                            // 400 bytes: 2-byte length
	{"c_char255 CHAR(255) CHARACTER SET latin1", "?", strGen(latin, 255), true},                       // 1-byte length
	{"c_vc VARCHAR(20)", "?", strGen(multi, 20), true},                                                // 80 bytes
	{"c_vc300 VARCHAR(300)", "?", strGen(multi, 300), true},                                           // 1,200 bytes: 2-byte length
	{"c_vclat VARCHAR(255) CHARACTER SET latin1", "?", strGen(latin, 255), true},                      // 1-byte length
	{"c_vc256lat VARCHAR(256) CHARACTER SET latin1", "?", strGen(latin, 256), true},                   // 2-byte length
	{"c_varbin VARBINARY(500)", "?", bytesGen(500), true},                                             // 2-byte length
	{"c_vbsmall VARBINARY(3)", "?", bytesGen(3), true},                                                // 1-byte length
	{"c_tinytext TINYTEXT CHARACTER SET latin1", "?", strGen(latin, 255), true},                       // 1-byte length
	{"c_text TEXT", "?", strGen(multi, 16383), true},                                                  // 2-byte length
	{"c_medblob MEDIUMBLOB", "?", bytesGen(200_000), true},                                            // 3-byte length
	{"c_longtext LONGTEXT", "?", strGen(multi, 70_000), true},                                         // 4-byte length
	{"c_json JSON", "?", pick(`{"a": [1, 2.50, "é"]}`, `[]`, `"`+strings.Repeat("x", 300)+`"`), true}, // LONGTEXT
}

// rowImageRoles are the role columns, after every typed column: a value
// read at a wrong offset shows in them.
const rowImageRoles = `message_id VARCHAR(64) NOT NULL,
  aggregate_type VARCHAR(300) NOT NULL,
  aggregate_id CHAR(40) NOT NULL,
  event_type TINYTEXT NOT NULL,
  payload JSON NOT NULL`

// TestRowImageSameAsGoMySQL writes rows of every column type through the
// real MariaDB (NULLs, zero values, maximum lengths, multi-byte strings,
// single- and multi-row INSERTs), reads the binlog events back and hands
// them to two streams: one whose INSERT rows are decoded by go-mysql (as
// before rowimage.go), one that reads them itself. Their transactions must
// be equal, Events and positions alike. With extra columns that need
// rendering (every typed column) the second stream leaves the events to
// go-mysql, and they are equal too.
func TestRowImageSameAsGoMySQL(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.exec("DROP TABLE " + f.table)
	var defs, names, exprs []string
	var textCols, allCols []string
	for _, c := range rowImageColumns {
		defs = append(defs, c.def)
		name := strings.Fields(c.def)[0]
		names = append(names, name)
		exprs = append(exprs, c.expr)
		allCols = append(allCols, name)
		if c.text {
			textCols = append(textCols, name)
		}
	}
	f.exec(fmt.Sprintf("CREATE TABLE %s (id BIGINT UNSIGNED AUTO_INCREMENT PRIMARY KEY,\n  %s,\n  %s\n) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4",
		f.table, strings.Join(defs, ",\n  "), rowImageRoles))

	ctx := t.Context()
	conn, err := f.db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, q := range []string{"SET SESSION sql_mode = ''", "SET SESSION time_zone = '+00:00'"} {
		if _, err := conn.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	startFile, startPos, err := binlogStatus(ctx, f.db)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(1, 2))
	rowN := 0
	rowValues := func(kind string) []any {
		rowN++
		var args []any
		for _, c := range rowImageColumns {
			switch {
			case kind == "null", kind == "mixed" && r.IntN(4) == 0:
				args = append(args, nil)
			case kind == "empty" && c.text && !strings.HasPrefix(c.def, "c_json"):
				args = append(args, "")
			default:
				args = append(args, c.gen(r, kind == "max"))
			}
		}
		id := fmt.Sprintf("m-%d-%s", rowN, kind)
		return append(args, id, randText(r, multi, 300), randText(r, multi, r.IntN(41)), randText(r, latin, r.IntN(256)),
			fmt.Sprintf(`{"n": %d, "s": "%s"}`, rowN, randText(r, multi, r.IntN(2000))))
	}
	insert := func(rows ...[]any) {
		t.Helper()
		var tuples []string
		var args []any
		for _, row := range rows {
			tuples = append(tuples, "("+strings.Join(exprs, ", ")+", ?, ?, ?, ?, ?)")
			args = append(args, row...)
		}
		q := fmt.Sprintf("INSERT INTO %s (%s, message_id, aggregate_type, aggregate_id, event_type, payload) VALUES %s",
			f.table, strings.Join(names, ", "), strings.Join(tuples, ", "))
		if _, err := conn.ExecContext(ctx, q, args...); err != nil {
			t.Fatalf("insert: %v", err)
		}
	}
	insert(rowValues("null"))
	insert(rowValues("max"))
	insert(rowValues("empty"), rowValues("mixed"))
	var many [][]any
	for range 40 {
		many = append(many, rowValues("mixed")) // several rows events in one statement
	}
	insert(many...)
	if _, err := conn.ExecContext(ctx, "BEGIN"); err != nil {
		t.Fatal(err)
	}
	for range 5 {
		insert(rowValues("mixed"))
	}
	if _, err := conn.ExecContext(ctx, "COMMIT"); err != nil {
		t.Fatal(err)
	}
	endFile, endPos, err := binlogStatus(ctx, f.db)
	if err != nil {
		t.Fatal(err)
	}
	raw := captureBinlog(t, f.dsn, startFile, startPos, endFile, endPos)

	db, table := f.dbName(t), f.table
	for _, tc := range []struct {
		name  string
		extra []string
		fast  bool
	}{
		{"text extra columns read from the row image", textCols, true},
		{"rendered extra columns left to go-mysql", allCols, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cols := seedColumns
			cols.Extra = tc.extra
			eager := newRawStream(t, db, table, cols, false)
			own := newRawStream(t, db, table, cols, true)
			for _, ev := range raw {
				eager.feed(ev)
				own.feed(ev)
			}
			var events int
			for _, tx := range eager.sent {
				events += len(tx.Events)
			}
			if events != rowN {
				t.Fatalf("go-mysql's stream delivered %d rows, want %d", events, rowN)
			}
			if !reflect.DeepEqual(eager.sent, own.sent) {
				for i := range min(len(eager.sent), len(own.sent)) {
					for j := range min(len(eager.sent[i].Events), len(own.sent[i].Events)) {
						if a, b := eager.sent[i].Events[j], own.sent[i].Events[j]; !reflect.DeepEqual(a, b) {
							t.Errorf("tx %d event %d:\ngo-mysql %+v\nown      %+v", i, j, a, b)
							break
						}
					}
				}
				t.Fatalf("the streams differ (%d and %d transactions)", len(eager.sent), len(own.sent))
			}
			if eager.st.fastEvents != 0 {
				t.Fatalf("the eager stream read %d events itself", eager.st.fastEvents)
			}
			if tc.fast && (own.st.fastEvents == 0 || own.st.slowEvents != 0) {
				t.Fatalf("read itself %d events, left %d to go-mysql; want all read itself", own.st.fastEvents, own.st.slowEvents)
			}
			if !tc.fast && (own.st.fastEvents != 0 || own.st.slowEvents == 0) {
				t.Fatalf("read itself %d events, left %d to go-mysql; want all left to go-mysql", own.st.fastEvents, own.st.slowEvents)
			}
			// The values are the ones written, not two equal misreadings.
			// (Transactions without rows: positions of other tests' ones.)
			var withRows []outboxcdc.Tx
			for _, tx := range own.sent {
				if len(tx.Events) > 0 {
					withRows = append(withRows, tx)
				}
			}
			first := withRows[0].Events[0]
			if first.MessageID != "m-1-null" || !strings.HasPrefix(string(first.Payload), `{"n": 1, `) {
				t.Fatalf("first event %q payload %q", first.MessageID, first.Payload)
			}
			if tc.fast {
				for _, c := range first.Extra {
					if !c.Null {
						t.Errorf("column %s of the all-NULL row: %q", c.Name, c.Value)
					}
				}
				second := withRows[1].Events[0]
				if c, _ := second.Column("c_vc300"); len([]rune(string(c.Value))) != 300 || len(c.Value) != 1200 {
					t.Errorf("c_vc300 of the longest row: %d bytes", len(c.Value))
				}
				if c, _ := second.Column("c_medblob"); len(c.Value) != 200_000 {
					t.Errorf("c_medblob of the longest row: %d bytes", len(c.Value))
				}
			}
		})
	}
}

// dbName is the fixture's database.
func (f *fixture) dbName(t *testing.T) string {
	cfg, err := mysqldriver.ParseDSN(f.dsn)
	if err != nil {
		t.Fatal(err)
	}
	return cfg.DBName
}

// captureBinlog returns the raw events (header, body, checksum) the server
// sends from start to end.
func captureBinlog(t *testing.T, dsn, startFile string, startPos uint32, endFile string, endPos uint32) [][]byte {
	t.Helper()
	cfg, err := mysqldriver.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	host, portText, err := net.SplitHostPort(cfg.Addr)
	if err != nil {
		t.Fatal(err)
	}
	port, _ := strconv.Atoi(portText)
	syncer := replication.NewBinlogSyncer(replication.BinlogSyncerConfig{
		ServerID: 0x7d000000 | uint32(time.Now().UnixNano()&0xffffff), Flavor: mysql.MariaDBFlavor,
		Host: host, Port: uint16(port), User: cfg.User, Password: cfg.Passwd, RawModeEnabled: true,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	defer syncer.Close()
	s, err := syncer.StartSync(mysql.Position{Name: startFile, Pos: startPos})
	if err != nil {
		t.Fatal(err)
	}
	var raw [][]byte
	cur := startFile
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		ev, err := s.GetEvent(ctx)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		raw = append(raw, ev.RawData)
		if ev.Header.EventType == replication.ROTATE_EVENT {
			re := &replication.RotateEvent{}
			if err := re.Decode(ev.RawData[replication.EventHeaderSize:]); err == nil {
				cur = string(re.NextLogName)
			}
			continue
		}
		if cur == endFile && ev.Header.LogPos >= endPos {
			return raw
		}
	}
}

// rawStream runs raw events from the server through a parser set up as
// the source's syncer and a source's stream.
type rawStream struct {
	t      *testing.T
	st     *stream
	parser *replication.BinlogParser
	sent   []outboxcdc.Tx
}

// newRawStream: deferring selects the syncer's decoder (INSERT rows read
// by the stream); otherwise go-mysql decodes them as before.
func newRawStream(t *testing.T, db, table string, cols outboxcdc.Columns, deferring bool) *rawStream {
	t.Helper()
	cfg := DefaultConfig()
	cfg.DSN = "u:p@tcp(127.0.0.1:1)/" + db
	cfg.Table = table
	src, err := New(cfg, "rowimage", cols, zerolog.Nop(), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	match := resolvedTable{db: db, table: table}.matcher()
	dec := &rowDecoder{match: match}
	env := streamEnv{ctx: context.Background(), match: match}
	if deferring {
		dec = newDeferringDecoder(match)
		env.rowsDec = dec
	}
	p := replication.NewBinlogParser()
	p.SetFlavor(mysql.MariaDBFlavor)
	p.SetParseTime(true)
	p.SetUseDecimal(false)
	p.SetVerifyChecksum(true)
	p.SetRowsEventDecodeFunc(dec.decode)
	rs := &rawStream{t: t, parser: p}
	rs.st = newStream(src, Pos{File: "unknown", Offset: 4}, env, func(tx outboxcdc.Tx) error { rs.sent = append(rs.sent, tx); return nil })
	return rs
}

func (rs *rawStream) feed(raw []byte) {
	rs.t.Helper()
	ev, err := rs.parser.Parse(raw)
	if err != nil {
		var missing = "no corresponding table map"
		if strings.Contains(err.Error(), missing) || strings.Contains(err.Error(), "missing table map") {
			return // rows of another test whose table map came before the capture
		}
		rs.t.Fatalf("parse %v: %v", replication.EventType(raw[4]), err)
	}
	if err := rs.st.handle(ev, ev.Header.LogPos); err != nil {
		rs.t.Fatalf("stream: %v", err)
	}
}

// allTypesCols is a built table map with every column width the reader
// knows, and its text role columns last.
var allTypesCols = []testCol{
	{"c_tiny", mysql.MYSQL_TYPE_TINY, nil},
	{"c_short", mysql.MYSQL_TYPE_SHORT, nil},
	{"c_int24", mysql.MYSQL_TYPE_INT24, nil},
	{"c_long", mysql.MYSQL_TYPE_LONG, nil},
	{"c_longlong", mysql.MYSQL_TYPE_LONGLONG, nil},
	{"c_float", mysql.MYSQL_TYPE_FLOAT, []byte{4}},
	{"c_double", mysql.MYSQL_TYPE_DOUBLE, []byte{8}},
	{"c_ts", mysql.MYSQL_TYPE_TIMESTAMP, nil},
	{"c_dt", mysql.MYSQL_TYPE_DATETIME, nil},
	{"c_date", mysql.MYSQL_TYPE_DATE, nil},
	{"c_time", mysql.MYSQL_TYPE_TIME, nil},
	{"c_year", mysql.MYSQL_TYPE_YEAR, nil},
	{"c_ts2", mysql.MYSQL_TYPE_TIMESTAMP2, []byte{3}},
	{"c_dt2", mysql.MYSQL_TYPE_DATETIME2, []byte{6}},
	{"c_time2", mysql.MYSQL_TYPE_TIME2, []byte{1}},
	{"c_dec", mysql.MYSQL_TYPE_NEWDECIMAL, []byte{20, 7}},
	{"c_bit", mysql.MYSQL_TYPE_BIT, []byte{5, 1}},
	{"c_enum", mysql.MYSQL_TYPE_STRING, []byte{0xf7, 2}},
	{"c_set", mysql.MYSQL_TYPE_STRING, []byte{0xf8, 3}},
	{"c_char400", mysql.MYSQL_TYPE_STRING, []byte{0xee, 0x90}}, // CHAR, 400 bytes: 2-byte length
	{"c_blob3", mysql.MYSQL_TYPE_BLOB, []byte{3}},
	{"c_geo", mysql.MYSQL_TYPE_GEOMETRY, []byte{4}},
	{"message_id", mysql.MYSQL_TYPE_VARCHAR, []byte{64, 0}},
	{"aggregate_type", mysql.MYSQL_TYPE_STRING, []byte{0xfe, 40}},  // CHAR, 1-byte length
	{"aggregate_id", mysql.MYSQL_TYPE_VARCHAR, []byte{0x2c, 0x01}}, // 300 bytes: 2-byte length
	{"event_type", mysql.MYSQL_TYPE_BLOB, []byte{1}},
	{"payload", mysql.MYSQL_TYPE_BLOB, []byte{4}},
}

// allTypesRow encodes one row of allTypesCols (none NULL), with role
// values derived from i.
func allTypesRow(i int) [][]byte {
	when := time.Date(2024, 3, 5, 6, 7, 8, 500000000, time.UTC)
	dt := datetime2Value(when)
	blob := func(n int, s string) []byte {
		b := make([]byte, n, n+len(s))
		for k := range n {
			b[k] = byte(len(s) >> (8 * k))
		}
		return append(b, s...)
	}
	return [][]byte{
		{1}, {1, 2}, {1, 2, 3}, {1, 2, 3, 4}, {1, 2, 3, 4, 5, 6, 7, 8}, {0, 0, 0x80, 0x3f}, {0, 0, 0, 0, 0, 0, 0xf0, 0x3f},
		{1, 0, 0, 0}, {1, 2, 3, 4, 5, 6, 7, 8}, {1, 2, 3}, {1, 2, 3}, {124}, {0x65, 0xe6, 0xd4, 0x00, 0x01, 0x02}, dt,
		{0x80, 0x10, 0x20, 0x30}, decimalBinary("1234567890123.1234567", 20, 7), {0x10, 0x01}, {2, 0}, {5, 0, 0}, blob(2, strings.Repeat("é", 150)),
		blob(3, "blob"), blob(4, "\x00\x00\x00\x00\x01\x01\x00\x00\x00"),
		varcharValue(fmt.Sprintf("m%d", i)), varcharValue("ORDER"), blob(2, strings.Repeat("x", 260+i)), blob(1, "CREATED"),
		blob(4, fmt.Sprintf(`{"i": %d}`, i)),
	}
}

// rowsData is the rows part of a rows event for rows of values (nil
// value: NULL).
func rowsData(rows ...[][]byte) []byte {
	var b []byte
	for _, row := range rows {
		nulls := make([]byte, (len(row)+7)/8)
		for i, v := range row {
			if v == nil {
				nulls[i/8] |= 1 << (i % 8)
			}
		}
		b = append(b, nulls...)
		for _, v := range row {
			b = append(b, v...)
		}
	}
	return b
}

// writeRowsEvent is a WRITE_ROWS_EVENTv2 of every column with data as its
// rows.
func writeRowsEvent(id uint64, ncols int, data []byte) []byte {
	b := binary.LittleEndian.AppendUint64(nil, id)[:6]
	b = binary.LittleEndian.AppendUint16(b, 1) // STMT_END_F
	b = binary.LittleEndian.AppendUint16(b, 2) // no extra data
	b = append(b, lenenc(ncols)...)
	for i := 0; i < ncols; i += 8 {
		b = append(b, byte(1<<min(8, ncols-i)-1))
	}
	return eventBytes(replication.WRITE_ROWS_EVENTv2, append(b, data...))
}

func allTypesWidths(t testing.TB) []colWidth {
	types := make([]byte, len(allTypesCols))
	var metas []uint16
	tm := &replication.TableMapEvent{}
	_ = tm
	p := testParser(t.(*testing.T), &rowDecoder{match: resolvedTable{db: "shop", table: "outbox"}.matcher()})
	ev, err := p.Parse(eventBytes(replication.TABLE_MAP_EVENT, tableMapBody(95, "shop", "outbox", allTypesCols)))
	if err != nil {
		t.Fatal(err)
	}
	m := ev.Event.(*replication.TableMapEvent)
	copy(types, m.ColumnType)
	metas = m.ColumnMeta
	ws, why := colWidths(types, metas)
	if why != "" {
		t.Fatal(why)
	}
	return ws
}

// TestRowImageBuiltEvents: built rows events with every column width,
// through a stream that reads them itself and one whose rows go-mysql
// decodes: equal Events. Then the cases left to go-mysql, each explicit:
// an extra column that needs rendering, a row image without every column
// (refused as before, naming the column), a table with binary JSON, a
// compressed rows event.
func TestRowImageBuiltEvents(t *testing.T) {
	tableMap := eventBytes(replication.TABLE_MAP_EVENT, tableMapBody(95, "shop", "outbox", allTypesCols))
	rows := writeRowsEvent(95, len(allTypesCols), rowsData(allTypesRow(1), allTypesRow(2), allTypesRow(3)))
	xid := eventBytes(replication.XID_EVENT, xidBody())
	run := func(t *testing.T, deferring bool, extra ...string) (*eventStream, *outboxcdc.Tx) {
		roles := seedColumns
		roles.Extra = extra
		es := newEventStream(t, roles)
		if !deferring {
			es.st.rowsDec = nil
			es.parser = testParser(t, &rowDecoder{match: es.st.match})
		}
		es.feed(tableMap)
		es.feed(rows)
		return es, es.feed(xid)
	}
	for _, tc := range []struct {
		name  string
		extra []string
		fast  bool
	}{
		{"text columns", []string{"c_char400", "c_blob3", "c_geo"}, false}, // GEOMETRY: not a text type
		{"text columns only", []string{"c_char400", "c_blob3"}, true},
		{"rendered extra column", []string{"c_dt2"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			eager, want := run(t, false, tc.extra...)
			own, got := run(t, true, tc.extra...)
			if want == nil || got == nil || len(want.Events) != 3 || !reflect.DeepEqual(want, got) {
				t.Fatalf("go-mysql %+v\nown %+v", want, got)
			}
			if want.Events[2].MessageID != "m3" || string(want.Events[2].Payload) != `{"i": 3}` || len(want.Events[2].AggregateID) != 263 {
				t.Fatalf("third event %+v", want.Events[2])
			}
			if eager.st.fastEvents != 0 || (own.st.fastEvents == 1) != tc.fast || (own.st.slowEvents == 1) == tc.fast {
				t.Fatalf("read itself %d, left to go-mysql %d; want read itself: %v", own.st.fastEvents, own.st.slowEvents, tc.fast)
			}
		})
	}

	t.Run("partial row image", func(t *testing.T) {
		values := allTypesRow(1)
		values[0] = nil // left out of the image
		for _, deferring := range []bool{false, true} {
			roles := seedColumns
			roles.Extra = []string{"c_tiny"}
			es := newEventStream(t, roles)
			if !deferring {
				es.st.rowsDec = nil
				es.parser = testParser(t, &rowDecoder{match: es.st.match})
			}
			es.feed(tableMap)
			ev, err := es.parser.Parse(eventBytes(replication.WRITE_ROWS_EVENTv2, writeRowsBody(95, values)))
			if err != nil {
				t.Fatal(err)
			}
			err = es.st.handle(ev, 500)
			if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "c_tiny") || !strings.Contains(err.Error(), "binlog_row_image=FULL") {
				t.Fatalf("deferring %v: got %v, want ErrUnsupported naming c_tiny and binlog_row_image=FULL", deferring, err)
			}
		}
		// Also when no column the route takes is missing: go-mysql decodes it.
		es := newEventStream(t, seedColumns)
		es.feed(tableMap)
		es.feed(eventBytes(replication.WRITE_ROWS_EVENTv2, writeRowsBody(95, values)))
		if tx := es.feed(xid); tx == nil || len(tx.Events) != 1 || tx.Events[0].MessageID != "m1" || es.st.slowEvents != 1 {
			t.Fatalf("partial image: %+v, left to go-mysql %d", tx, es.st.slowEvents)
		}
	})

	t.Run("binary JSON", func(t *testing.T) {
		cols := append([]testCol{{"doc", mysql.MYSQL_TYPE_JSON, []byte{4}}}, allTypesCols...)
		es := newEventStream(t, seedColumns)
		es.feed(eventBytes(replication.TABLE_MAP_EVENT, tableMapBody(96, "shop", "outbox", cols)))
		es.feed(writeRowsEvent(96, len(cols), rowsData(append([][]byte{jsonValue(encodeJSON(jInt(5)))}, allTypesRow(1)...))))
		if tx := es.feed(xid); tx == nil || len(tx.Events) != 1 || es.st.slowEvents != 1 || es.st.fastEvents != 0 {
			t.Fatalf("JSON table: %+v, read itself %d", tx, es.st.fastEvents)
		}
		if l := es.st.lastTS.layout; l.fast != nil || !strings.Contains(l.fastWhy, "binary JSON") {
			t.Fatalf("JSON table read by the stream (%q)", l.fastWhy)
		}
	})

	t.Run("compressed rows event", func(t *testing.T) {
		es := newEventStream(t, seedColumns)
		es.feed(tableMap)
		ev, err := es.parser.Parse(rows)
		if err != nil {
			t.Fatal(err)
		}
		l := es.st.table(ev.Event.(*replication.RowsEvent).Table)
		if err := es.st.ensureLayout(l, ev.Event.(*replication.RowsEvent).Table, binlogPoint{}); err != nil {
			t.Fatal(err)
		}
		if !fastEvent(ev, ev.Event.(*replication.RowsEvent), l.layout) {
			t.Fatal("plain rows event not read by the stream")
		}
		ev.Header.EventType = replication.MARIADB_WRITE_ROWS_COMPRESSED_EVENT_V1
		if fastEvent(ev, ev.Event.(*replication.RowsEvent), l.layout) {
			t.Fatal("compressed rows event read by the stream")
		}
	})
}

// TestRowImageTruncated: rows data cut anywhere but at a row's end is an
// error naming the row, the column and the byte where the value runs past
// the end, through the stream with the binlog position too; cut at a
// row's end it is that many rows.
func TestRowImageTruncated(t *testing.T) {
	ws := allTypesWidths(t)
	present := []byte{0xff, 0xff, 0xff, 0x07}
	full := rowsData(allTypesRow(1), allTypesRow(2))
	firstEnd := len(rowsData(allTypesRow(1)))
	for cut := 1; cut < len(full); cut++ {
		n, err := countRows(ws, present, full[:cut])
		if cut == firstEnd {
			if err != nil || n != 1 {
				t.Fatalf("cut at the first row's end: %d rows, %v", n, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), "run past the end of the rows data") || !strings.Contains(err.Error(), " at byte ") {
			t.Fatalf("cut at %d of %d: %d rows, %v", cut, len(full), n, err)
		}
	}
	if n, err := countRows(ws, present, full); err != nil || n != 2 {
		t.Fatalf("whole: %d rows, %v", n, err)
	}

	// Through the stream: the error names the event's position.
	es := newEventStream(t, seedColumns)
	es.feed(eventBytes(replication.TABLE_MAP_EVENT, tableMapBody(95, "shop", "outbox", allTypesCols)))
	ev, err := es.parser.Parse(writeRowsEvent(95, len(allTypesCols), full[:len(full)-3]))
	if err != nil {
		t.Fatal(err)
	}
	err = es.st.handle(ev, 4321)
	if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "binlog.000001:4321") || !strings.Contains(err.Error(), "row 2, column 27") {
		t.Fatalf("got %v", err)
	}
	// A length beyond the column's size is an error too, not a read.
	bad := allTypesRow(1)
	bad[22] = append([]byte{65}, strings.Repeat("m", 65)...) // VARCHAR(64 bytes)
	if _, err := countRows(ws, present, rowsData(bad)); err == nil || !strings.Contains(err.Error(), "more than the column's 64 bytes") {
		t.Fatalf("overlong VARCHAR: %v", err)
	}
}

// fuzzCols is allTypesCols without TIME2 and DECIMAL, whose content
// go-mysql's decoder may refuse (a negative fraction, a digit group out of
// range) where the reader, which skips them by width, reads on.
var fuzzCols = func() []testCol {
	var cols []testCol
	for _, c := range allTypesCols {
		if c.typ != mysql.MYSQL_TYPE_TIME2 && c.typ != mysql.MYSQL_TYPE_NEWDECIMAL {
			cols = append(cols, c)
		}
	}
	return cols
}()

func fuzzRow(i int) [][]byte {
	var row [][]byte
	for k, v := range allTypesRow(i) {
		if t := allTypesCols[k].typ; t != mysql.MYSQL_TYPE_TIME2 && t != mysql.MYSQL_TYPE_NEWDECIMAL {
			row = append(row, v)
		}
	}
	return row
}

// FuzzRowImage: any rows data is read without a panic, and an error names
// the row; when it reads, go-mysql reads the same rows from it, the text
// columns with the same bytes.
func FuzzRowImage(f *testing.F) {
	f.Add(rowsData(fuzzRow(1)))
	f.Add(rowsData(fuzzRow(1), fuzzRow(2)))
	withNulls := fuzzRow(3)
	for i := 0; i < len(withNulls); i += 3 {
		withNulls[i] = nil
	}
	f.Add(rowsData(withNulls))
	f.Add([]byte{})
	f.Add([]byte{0xff, 0xff, 0xff, 0x07})
	p := testParser(&testing.T{}, &rowDecoder{match: resolvedTable{db: "shop", table: "outbox"}.matcher()})
	ev, err := p.Parse(eventBytes(replication.TABLE_MAP_EVENT, tableMapBody(95, "shop", "outbox", fuzzCols)))
	if err != nil {
		f.Fatal(err)
	}
	tm := ev.Event.(*replication.TableMapEvent)
	ws, why := colWidths(tm.ColumnType, tm.ColumnMeta)
	if why != "" {
		f.Fatal(why)
	}
	var text []int // CHAR(400), BLOB, the roles
	for i, c := range fuzzCols {
		if c.typ == mysql.MYSQL_TYPE_VARCHAR || c.typ == mysql.MYSQL_TYPE_BLOB || (c.typ == mysql.MYSQL_TYPE_STRING && c.meta[0] != 0xf7 && c.meta[0] != 0xf8) {
			text = append(text, i)
		}
	}
	present := []byte{0xff, 0xff, 0xff, 0x01} // 25 columns
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := newRowReader(ws, present, data)
		if err != nil {
			t.Fatal(err)
		}
		take := make([]int8, len(ws))
		for i := range take {
			take[i] = -1
		}
		for slot, i := range text {
			take[i] = int8(slot)
		}
		spans := make([]fieldSpan, len(text))
		var ours [][]any
		for {
			ok, err := r.next(take, spans)
			if err != nil {
				if !strings.Contains(err.Error(), "row ") {
					t.Fatalf("error without the row: %v", err)
				}
				return
			}
			if !ok {
				break
			}
			row := make([]any, len(text))
			for k, s := range spans {
				if !s.null {
					row[k] = string(spanBytes(data, s))
				}
			}
			ours = append(ours, row)
		}
		p := testParser(t, &rowDecoder{match: resolvedTable{db: "shop", table: "outbox"}.matcher()})
		if _, err := p.Parse(eventBytes(replication.TABLE_MAP_EVENT, tableMapBody(95, "shop", "outbox", fuzzCols))); err != nil {
			t.Fatal(err)
		}
		ev, err := p.Parse(writeRowsEvent(95, len(fuzzCols), data))
		if err != nil {
			t.Fatalf("read %d rows, go-mysql: %.300v", len(ours), err)
		}
		theirs := ev.Event.(*replication.RowsEvent).Rows
		if len(theirs) != len(ours) {
			t.Fatalf("read %d rows, go-mysql %d", len(ours), len(theirs))
		}
		for j, row := range theirs {
			for k, i := range text {
				var v any
				switch x := row[i].(type) {
				case string:
					v = x
				case []byte:
					v = string(x)
				}
				if v != ours[j][k] {
					t.Fatalf("row %d column %d: %q, go-mysql %q", j+1, i+1, ours[j][k], v)
				}
			}
		}
	})
}

// TestReadRowsOnePass: readRows gives every row's spans as reading row by
// row does, and the same error for data cut inside a row; over
// maxReadRows rows it gives the count alone (the stream reads them again).
func TestReadRowsOnePass(t *testing.T) {
	ws := allTypesWidths(t)
	present := []byte{0xff, 0xff, 0xff, 0x07}
	f := &fastLayout{widths: ws, take: make([]int8, len(ws)), spans: make([]fieldSpan, 3)}
	for i := range f.take {
		f.take[i] = -1
	}
	f.take[22], f.take[23], f.take[26] = 0, 1, 2
	rowByRow := func(data []byte) ([]fieldSpan, error) {
		r, err := newRowReader(ws, present, data)
		if err != nil {
			return nil, err
		}
		var all []fieldSpan
		for {
			ok, err := r.next(f.take, f.spans)
			if err != nil || !ok {
				return all, err
			}
			all = append(all, f.spans...)
		}
	}
	var rows [][][]byte
	for i := range 5 {
		rows = append(rows, allTypesRow(i+1))
	}
	data := rowsData(rows...)
	want, _ := rowByRow(data)
	n, got, err := f.readRows(present, data)
	if err != nil || n != 5 || !slices.Equal(got, want) {
		t.Fatalf("5 rows: %d rows, %v; spans\n%v\nwant\n%v", n, err, got, want)
	}
	_, wantErr := rowByRow(data[:len(data)-3])
	if _, _, err := f.readRows(present, data[:len(data)-3]); err == nil || wantErr == nil || err.Error() != wantErr.Error() {
		t.Fatalf("cut: %v, row by row %v", err, wantErr)
	}
	many := make([][][]byte, maxReadRows+1)
	for i := range many {
		many[i] = rows[i%5]
	}
	n, got, err = f.readRows(present, rowsData(many...))
	if err != nil || n != maxReadRows+1 || got != nil {
		t.Fatalf("%d rows: %d rows, %d spans, %v", maxReadRows+1, n, len(got), err)
	}
}

// BenchmarkFastRows: the stream reading INSERT rows events of 30 rows of
// allTypesCols from their row images, one transaction per event.
func BenchmarkFastRows(b *testing.B) {
	es := newEventStream(&testing.T{}, seedColumns)
	tm := eventBytes(replication.TABLE_MAP_EVENT, tableMapBody(95, "shop", "outbox", allTypesCols))
	rows := make([][][]byte, 30)
	for i := range rows {
		rows[i] = allTypesRow(i)
	}
	ev := writeRowsEvent(95, len(allTypesCols), rowsData(rows...))
	xid := eventBytes(replication.XID_EVENT, xidBody())
	b.ReportAllocs()
	b.ResetTimer()
	handle := func(raw []byte) {
		e, err := es.parser.Parse(raw)
		if err != nil {
			b.Fatalf("%.200v", err)
		}
		es.offset += uint32(len(raw))
		e.Header.LogPos = es.offset
		if err := es.st.handle(e, es.offset); err != nil {
			b.Fatalf("%.200v", err)
		}
	}
	for range b.N {
		handle(tm)
		handle(ev)
		handle(xid)
		for i := range es.sent {
			es.sent[i].Release()
		}
		es.sent = es.sent[:0]
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(30*b.N), "ns/row")
}
