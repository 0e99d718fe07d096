package binlog

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"
	outboxcdc "github.com/outbox-cdc/outbox-cdc"
)

// Column lists and schema changes.
//
// A row in the binlog is a list of values by position. Which value is the
// message id, the key, the payload depends on the column list the row was
// written with:
//
//   - binlog_row_metadata=FULL: every table map event carries the column
//     names (and signedness, character sets, ENUM/SET labels). The source
//     takes them from there; an ALTER TABLE, even one that swaps two
//     columns, is followed without asking the server anything.
//   - MINIMAL or NO_LOG (the defaults of MySQL 8 and MariaDB): the table map
//     has types but no names. The names come from information_schema, which
//     only knows the table as it is now. A column list read from it is used
//     for a row only when nothing that may change the table lies between
//     the row and the point in the binlog where the list was read:
//
//     1. At the first INSERT row of a session, and at the first after every
//     statement in the stream that may change the table (a boundary:
//     ALTER, RENAME, DROP, CREATE naming it; match.go), the list is read,
//     then the binlog's current end H.
//     2. The binlog between the row and H is scanned (SHOW BINLOG EVENTS)
//     for such statements. If there is one, its change is already in the
//     list, so the rows before it were written with another list that the
//     server can no longer tell: the source stops with ErrSchema naming
//     the statement and its position. It never guesses.
//     3. Otherwise the list describes every row up to the next boundary in
//     the stream: a statement after H changed the table after the list
//     was read (the server logs a DDL while it still holds the table's
//     metadata lock, and information_schema waits for that lock).
//     4. Each table map is checked against the list anyway: column count,
//     and per column type, length, precision, nullability and (MINIMAL)
//     signedness. A mismatch stops the source with ErrSchema.
//
// So a table changed while the connector is caught up is followed with
// any setting. A restart whose backlog holds rows written before such a
// statement stops without FULL: those rows cannot be mapped safely.

// ErrSchema: rows whose column list cannot be known, or does not fit the
// binlog, so mapping them would risk sending values under the wrong roles.
var ErrSchema = errors.New("cannot tell the outbox table's columns for these rows")

// schemaHint is the remedy ErrSchema errors name.
const schemaHint = "set binlog_row_metadata=FULL (MySQL 8.0.1+, MariaDB 10.5+) so the binlog names the columns; " +
	"for the rows already written, see README: MySQL / MariaDB setup"

// schemaColumn is one column as information_schema describes it.
type schemaColumn struct {
	Name       string
	DataType   string // DATA_TYPE, lower case
	ColumnType string // COLUMN_TYPE, e.g. "varchar(64)", "enum('a','b')"
	Nullable   bool
	Unsigned   bool
	OctetLen   sql.NullInt64 // CHARACTER_OCTET_LENGTH
	Precision  sql.NullInt64 // NUMERIC_PRECISION
	Scale      sql.NullInt64 // NUMERIC_SCALE
	FracDigits sql.NullInt64 // DATETIME_PRECISION
	Labels     []string      // ENUM / SET labels
}

// fits returns "" when a binlog column of type typ with metadata meta can
// hold this column's values, else what the binlog holds instead. Types this
// function does not know (plugin types such as UUID or INET6) fit anything.
func (c *schemaColumn) fits(typ byte, meta uint16) string {
	got := func() string { return fmt.Sprintf("binlog type %d (metadata %d)", typ, meta) }
	is := func(ok bool) string {
		if ok {
			return ""
		}
		return got()
	}
	octets := func() int64 { return c.OctetLen.Int64 }
	switch c.DataType {
	case "tinyint":
		return is(typ == mysql.MYSQL_TYPE_TINY)
	case "smallint":
		return is(typ == mysql.MYSQL_TYPE_SHORT)
	case "mediumint":
		return is(typ == mysql.MYSQL_TYPE_INT24)
	case "int", "integer":
		return is(typ == mysql.MYSQL_TYPE_LONG)
	case "bigint":
		return is(typ == mysql.MYSQL_TYPE_LONGLONG)
	case "float":
		return is(typ == mysql.MYSQL_TYPE_FLOAT)
	case "double", "real", "double precision":
		return is(typ == mysql.MYSQL_TYPE_DOUBLE)
	case "decimal", "numeric":
		return is(typ == mysql.MYSQL_TYPE_NEWDECIMAL && int64(meta>>8) == c.Precision.Int64 && int64(meta&0xff) == c.Scale.Int64)
	case "date":
		return is(typ == mysql.MYSQL_TYPE_DATE || typ == mysql.MYSQL_TYPE_NEWDATE)
	case "time":
		return is(typ == mysql.MYSQL_TYPE_TIME || (typ == mysql.MYSQL_TYPE_TIME2 && int64(meta) == c.FracDigits.Int64))
	case "datetime":
		return is(typ == mysql.MYSQL_TYPE_DATETIME || (typ == mysql.MYSQL_TYPE_DATETIME2 && int64(meta) == c.FracDigits.Int64))
	case "timestamp":
		return is(typ == mysql.MYSQL_TYPE_TIMESTAMP || (typ == mysql.MYSQL_TYPE_TIMESTAMP2 && int64(meta) == c.FracDigits.Int64))
	case "year":
		return is(typ == mysql.MYSQL_TYPE_YEAR)
	case "char", "binary":
		return is(realType(typ, meta) == mysql.MYSQL_TYPE_STRING && int64(stringLength(meta)) == octets())
	case "varchar", "varbinary":
		return is((typ == mysql.MYSQL_TYPE_VARCHAR || typ == mysql.MYSQL_TYPE_VAR_STRING) && int64(meta) == octets())
	case "tinytext", "tinyblob":
		return is(typ == mysql.MYSQL_TYPE_BLOB && meta == 1)
	case "text", "blob":
		return is(typ == mysql.MYSQL_TYPE_BLOB && meta == 2)
	case "mediumtext", "mediumblob":
		return is(typ == mysql.MYSQL_TYPE_BLOB && meta == 3)
	case "longtext", "longblob":
		return is(typ == mysql.MYSQL_TYPE_BLOB && meta == 4)
	case "json":
		return is(typ == mysql.MYSQL_TYPE_JSON || (typ == mysql.MYSQL_TYPE_BLOB && meta == 4))
	case "enum":
		return is(realType(typ, meta) == mysql.MYSQL_TYPE_ENUM)
	case "set":
		return is(realType(typ, meta) == mysql.MYSQL_TYPE_SET)
	case "bit":
		return is(typ == mysql.MYSQL_TYPE_BIT)
	case "geometry", "point", "linestring", "polygon", "multipoint", "multilinestring",
		"multipolygon", "geometrycollection", "geomcollection":
		return is(typ == mysql.MYSQL_TYPE_GEOMETRY)
	}
	return ""
}

// parseLabels reads the labels of an ENUM or SET COLUMN_TYPE, such as
// enum('a','b'): a quote inside a label is doubled, and backslash escapes
// are those of SQL strings.
func parseLabels(columnType string) []string {
	open := strings.IndexByte(columnType, '(')
	if open < 0 {
		return nil
	}
	s := columnType[open+1:]
	labels := []string{}
	for i := 0; i < len(s); i++ {
		if s[i] != '\'' {
			continue
		}
		var b strings.Builder
		i++
		for ; i < len(s); i++ {
			c := s[i]
			if c == '\'' {
				if i+1 < len(s) && s[i+1] == '\'' {
					b.WriteByte('\'')
					i++
					continue
				}
				break
			}
			if c == '\\' && i+1 < len(s) {
				i++
				switch s[i] {
				case '0':
					b.WriteByte(0)
				case 'n':
					b.WriteByte('\n')
				case 'r':
					b.WriteByte('\r')
				case 't':
					b.WriteByte('\t')
				case 'Z':
					b.WriteByte(0x1a)
				default:
					b.WriteByte(s[i])
				}
				continue
			}
			b.WriteByte(c)
		}
		labels = append(labels, b.String())
	}
	return labels
}

// tableColumns reads the outbox table's columns in binlog order, finding
// the table by the server's naming rule (match.go), and checks that the
// role columns exist.
func (s *Source) tableColumns(ctx context.Context, db *sql.DB) (resolvedTable, []schemaColumn, error) {
	rt, err := s.resolveTable(ctx, db)
	if err != nil {
		return rt, nil, err
	}
	cols, err := s.readColumns(ctx, db, rt)
	return rt, cols, err
}

func (s *Source) readColumns(ctx context.Context, db *sql.DB, rt resolvedTable) ([]schemaColumn, error) {
	return s.readColumnsOf(ctx, db, rt, s.cols)
}

// readColumnsOf reads the columns of the table rt and checks that it has
// the role columns roles names.
func (s *Source) readColumnsOf(ctx context.Context, db *sql.DB, rt resolvedTable, roles outboxcdc.Columns) ([]schemaColumn, error) {
	qualified := rt.db + "." + rt.table
	rows, err := db.QueryContext(ctx, "SELECT TABLE_SCHEMA, TABLE_NAME, COLUMN_NAME, DATA_TYPE, COLUMN_TYPE, IS_NULLABLE, "+
		"CHARACTER_OCTET_LENGTH, NUMERIC_PRECISION, NUMERIC_SCALE, DATETIME_PRECISION FROM information_schema.COLUMNS "+
		"WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? ORDER BY ORDINAL_POSITION", rt.db, rt.table)
	if err != nil {
		return nil, classifyConnErr(fmt.Errorf("read columns of %s: %w", qualified, err))
	}
	defer rows.Close()
	var cols []schemaColumn
	for rows.Next() {
		var c schemaColumn
		var schema, table, nullable string
		if err := rows.Scan(&schema, &table, &c.Name, &c.DataType, &c.ColumnType, &nullable,
			&c.OctetLen, &c.Precision, &c.Scale, &c.FracDigits); err != nil {
			return nil, classifyConnErr(fmt.Errorf("read columns of %s: %w", qualified, err))
		}
		if schema != rt.db || table != rt.table {
			continue // another table whose name differs only in case
		}
		c.DataType = strings.ToLower(c.DataType)
		c.Nullable = nullable == "YES"
		c.Unsigned = strings.Contains(strings.ToLower(c.ColumnType), "unsigned")
		if c.DataType == "enum" || c.DataType == "set" {
			c.Labels = parseLabels(c.ColumnType)
		}
		cols = append(cols, c)
	}
	if err := rows.Err(); err != nil {
		return nil, classifyConnErr(fmt.Errorf("read columns of %s: %w", qualified, err))
	}
	if len(cols) == 0 {
		return nil, missingTable(qualified)
	}
	var missing, names []string
	for _, want := range []string{roles.MessageID, roles.AggregateType, roles.AggregateID, roles.EventType, roles.Payload} {
		found := false
		for _, c := range cols {
			if strings.EqualFold(c.Name, want) {
				found = true
				break
			}
		}
		if !found {
			missing = append(missing, want)
		}
	}
	if len(missing) > 0 {
		for _, c := range cols {
			names = append(names, c.Name)
		}
		return nil, missingColumns(qualified, missing, names)
	}
	return cols, nil
}

// binlogPoint is a place in the binlog: an offset in a file.
type binlogPoint struct {
	file   string
	offset uint32
}

func (p binlogPoint) String() string { return p.file + ":" + strconv.FormatUint(uint64(p.offset), 10) }

// before orders points; binlog file names share a base name and a
// zero-padded sequence number.
func (p binlogPoint) before(q binlogPoint) bool {
	if p.file != q.file {
		return p.file < q.file
	}
	return p.offset < q.offset
}

// ddlEvent is a statement in the binlog that may change the outbox table.
type ddlEvent struct {
	at   binlogPoint
	stmt string // shortened for messages
}

func (d *ddlEvent) String() string { return fmt.Sprintf("%q at %s", d.stmt, d.at) }

func shortStmt(q string) string {
	q = strings.Join(strings.Fields(q), " ")
	if len(q) > 160 {
		q = q[:160] + "..."
	}
	return q
}

// tableSchema is a column list read from information_schema, with what the
// stream proved about the binlog range it describes.
type tableSchema struct {
	cols   []schemaColumn
	readAt binlogPoint // the binlog's end right after the list was read
	from   binlogPoint // where the scan for changes started
	next   *ddlEvent   // the first statement in (from, readAt) that may change the table; nil: none
}

// loadSchema reads the column list and proves for which rows it holds
// (steps 1-3 above): from is the end of the rows event that needs it.
func (s *Source) loadSchema(ctx context.Context, db *sql.DB, m *tableMatcher, from binlogPoint) (*tableSchema, error) {
	s.schemaLoads.Add(1)
	qctx, cancel := context.WithTimeout(ctx, s.callTimeout())
	// m names one table, as the binlog names it (stream.go's tableState).
	rt := resolvedTable{db: string(m.db), table: string(m.table)}
	cols, err := s.readColumnsOf(qctx, db, rt, s.cols.For(rt.db, rt.table))
	if err != nil {
		cancel()
		return nil, err
	}
	file, off, err := binlogStatus(qctx, db)
	cancel()
	if err != nil {
		return nil, classifyConnErr(fmt.Errorf("read the binlog's end: %w", err))
	}
	head := binlogPoint{file, off}
	next, err := s.scanDDL(ctx, db, m, from, head)
	if err != nil {
		return nil, err
	}
	return &tableSchema{cols: cols, readAt: head, from: from, next: next}, nil
}

// scanPage is how many events one SHOW BINLOG EVENTS call reads.
const scanPage = 10000

// scanDDL returns the first statement in the binlog between from and to
// that may change the outbox table, or nil. It reads with SHOW BINLOG
// EVENTS (REPLICATION SLAVE on MySQL, BINLOG MONITOR / REPLICATION CLIENT
// on MariaDB), about 250 MB of binlog a second here (BenchmarkScanDDL).
func (s *Source) scanDDL(ctx context.Context, db *sql.DB, m *tableMatcher, from, to binlogPoint) (*ddlEvent, error) {
	if !from.before(to) {
		return nil, nil
	}
	if from.file == "" {
		return nil, joinSentinel(ErrSchema, errors.New("the binlog file of the stream is unknown, so changes to the table cannot be checked"), schemaHint)
	}
	lctx, cancel := context.WithTimeout(ctx, s.callTimeout())
	files, err := binaryLogs(lctx, db)
	cancel()
	if err != nil {
		return nil, classifyConnErr(fmt.Errorf("SHOW BINARY LOGS: %w", err))
	}
	for _, f := range files {
		if f.name < from.file || f.name > to.file {
			continue
		}
		pos := uint32(4)
		if f.name == from.file {
			pos = from.offset
		}
		for {
			hit, next, n, err := s.scanPage(ctx, db, m, f.name, pos, to)
			if err != nil || hit != nil {
				return hit, err
			}
			if n < scanPage || (f.name == to.file && next >= to.offset) {
				break
			}
			if next <= pos {
				return nil, joinSentinel(ErrSchema, fmt.Errorf("SHOW BINLOG EVENTS in %s made no progress at %d", f.name, pos), schemaHint)
			}
			pos = next
		}
	}
	return nil, nil
}

// scanPage reads up to scanPage events of file from pos. It returns a
// statement that may change the table (before to), the offset to go on
// from and the number of events read. A page is bounded by the work it
// asks of the server (large events take a while to read), not by
// read_timeout; a silent server is still found by the pool's keepalives
// and TCP_USER_TIMEOUT (netconn.go).
func (s *Source) scanPage(ctx context.Context, db *sql.DB, m *tableMatcher, file string, pos uint32, to binlogPoint) (*ddlEvent, uint32, int, error) {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	q := fmt.Sprintf("SHOW BINLOG EVENTS IN '%s' FROM %d LIMIT %d", strings.NewReplacer(`\`, `\\`, `'`, `''`).Replace(file), pos, scanPage)
	rows, err := db.QueryContext(ctx, q)
	if err != nil {
		return nil, 0, 0, classifyConnErr(fmt.Errorf("%s: %w", q, err))
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil || len(cols) < 6 {
		return nil, 0, 0, classifyConnErr(fmt.Errorf("%s: unexpected result (%v)", q, err))
	}
	var (
		logName, evType, info string
		start, end            uint64
		serverID              sql.RawBytes
		n                     int
		next                  = pos
	)
	dest := make([]any, len(cols))
	dest[0], dest[1], dest[2], dest[3], dest[4], dest[5] = &logName, &start, &evType, &serverID, &end, &info
	for i := 6; i < len(dest); i++ {
		dest[i] = new(sql.RawBytes)
	}
	for rows.Next() {
		if err := rows.Scan(dest...); err != nil {
			return nil, 0, 0, classifyConnErr(fmt.Errorf("%s: %w", q, err))
		}
		n++
		at := binlogPoint{file, uint32(start)}
		if !at.before(to) {
			return nil, next, n, nil
		}
		if uint32(end) > next {
			next = uint32(end)
		}
		if !strings.HasPrefix(evType, "Query") {
			continue
		}
		schema, stmt := splitUse(info)
		if m.isTableDDL(schema, stmt) {
			return &ddlEvent{at: at, stmt: shortStmt(stmt)}, next, n, nil
		}
	}
	if err := rows.Err(); err != nil {
		return nil, 0, 0, classifyConnErr(fmt.Errorf("%s: %w", q, err))
	}
	return nil, next, n, nil
}

// splitUse splits SHOW BINLOG EVENTS' Info of a Query event,
// "use `db`; STATEMENT", into the session's database and the statement.
func splitUse(info string) (string, string) {
	if !strings.HasPrefix(info, "use `") {
		return "", info
	}
	var db strings.Builder
	i := len("use `")
	for ; i < len(info); i++ {
		if info[i] == '`' {
			if i+1 < len(info) && info[i+1] == '`' {
				db.WriteByte('`')
				i++
				continue
			}
			break
		}
		db.WriteByte(info[i])
	}
	rest := strings.TrimPrefix(info[min(i+1, len(info)):], ";")
	return db.String(), strings.TrimLeft(rest, " ")
}

// provenSchema is a column list proven for every row from validFrom on,
// up to the next boundary: no boundary lies between validFrom and the row
// where it was read (the stream saw every event in between), and none
// between that row and the binlog's end when it was read (the scan). The
// Source keeps the last one across reconnects, so a session that starts
// at or after validFrom does not scan the binlog again: a scan of a large
// backlog can outlast the server's patience with the blocked dump
// connection (net_write_timeout), and repeating it after every reconnect
// would never end.
type provenSchema struct {
	schema    *tableSchema
	validFrom binlogPoint
}

// markScope notes where the session's stream really starts: the first
// event of a transaction or statement (the artificial rotate and format
// description events at the start of a dump do not count).
func (st *stream) markScope(ev *replication.BinlogEvent, endPos uint32) {
	if st.scope != nil {
		return
	}
	switch ev.Event.(type) {
	case *replication.MariadbGTIDEvent, *replication.GTIDEvent, *replication.QueryEvent, *replication.TableMapEvent,
		*replication.RowsEvent, *replication.XIDEvent, *replication.TransactionPayloadEvent:
		at := binlogPoint{st.file, startOf(ev)}
		if ev.Header.LogPos == 0 || ev.Header.LogPos != endPos {
			at.offset = endPos
		}
		st.scope = &at
	}
}

// ddl marks a boundary when a query event may change an outbox table:
// the column list in use for each table it may change ends here, and is
// read again at that table's next row. A proof kept on the Source ends
// here too, unless it starts after this statement: a stream reading part
// of the binlog again (a reconnect, a second read of a large transaction,
// a restart point; txn.go) meets the statements the proof was made after,
// and they do not touch it. A table with no rows in this stream yet takes
// the point after the last such statement of any outbox table as the
// start of what the stream saw of it (stream.table): later than the truth
// at worst, which only narrows what a proof covers.
func (st *stream) ddl(ev *replication.BinlogEvent, e *replication.QueryEvent) {
	schema, q := string(e.Schema), string(e.Query)
	if !st.match.isTableDDL(schema, q) {
		return
	}
	at := binlogPoint{st.file, startOf(ev)}
	after := binlogPoint{st.file, ev.Header.LogPos}
	d := &ddlEvent{at: at, stmt: shortStmt(q)}
	touches := func(k tableKey) bool {
		return st.match.pats == nil || tableKeyMatcher(k).isTableDDL(schema, q)
	}
	for k, ts := range st.tables {
		if touches(k) {
			a := after
			ts.layout, ts.schema, ts.scope, ts.lastDDL = nil, nil, &a, d
		}
	}
	for k, p := range st.src.proven {
		if !at.before(p.validFrom) && touches(k) {
			delete(st.src.proven, k)
		}
	}
	st.ddlScope, st.lastDDL = &after, d
	st.src.log.Info().Str("statement", d.stmt).Str("position", d.at.String()).
		Msg("an outbox table may have changed; its columns are read again for its next row")
}

// ensureLayout makes ts.layout describe the rows of tm, which end at at.
func (st *stream) ensureLayout(ts *tableState, tm *replication.TableMapEvent, at binlogPoint) error {
	if ts.layout != nil && ts.layout.sameMap(tm) {
		return nil
	}
	table := ts.key.String()
	if len(tm.ColumnName) > 0 {
		if len(tm.ColumnName) != int(tm.ColumnCount) {
			return fmt.Errorf("%w: the table map at %s names %d of %d columns", ErrUnsupported, at, len(tm.ColumnName), tm.ColumnCount)
		}
		l, err := resolveLayout(tm, columnsFromBinlog(tm), ts.cols, table, true)
		if err != nil {
			return fmt.Errorf("at %s: %w", at, err)
		}
		ts.layout = l
		return nil
	}
	if ts.schema == nil {
		if p := st.src.proven[ts.key]; p != nil && ts.scope != nil && !ts.scope.before(p.validFrom) && !at.before(p.validFrom) {
			ts.schema = p.schema // proven by an earlier session for rows from here on
		}
	}
	if ts.schema == nil {
		if st.db == nil {
			return joinSentinel(ErrSchema, fmt.Errorf("the binlog has no column names at %s and no connection to read them", at), schemaHint)
		}
		sc, err := st.src.loadSchema(st.ctx, st.db, ts.match, at)
		if err != nil {
			return err
		}
		ts.schema = sc
		if sc.next == nil {
			st.src.log.Info().Str("table", table).Str("from", at.String()).Str("to", sc.readAt.String()).Int("columns", len(sc.cols)).
				Msg("read the outbox table's columns from information_schema (the binlog carries no column names); no change to the table in between")
			if ts.scope != nil {
				if st.src.proven == nil {
					st.src.proven = map[tableKey]*provenSchema{}
				}
				st.src.proven[ts.key] = &provenSchema{schema: sc, validFrom: *ts.scope}
			}
		}
	}
	if n := ts.schema.next; n != nil && !n.at.before(at) {
		return joinSentinel(ErrSchema, fmt.Errorf("rows of %s up to %s were written before %s, which may have changed the table, "+
			"and the binlog has no column names (binlog_row_metadata is not FULL)", table, at, n), schemaHint)
	}
	cols, err := columnsFromSchema(tm, ts.schema.cols)
	if err != nil {
		since := "information_schema's columns"
		if ts.lastDDL != nil {
			since += " after " + ts.lastDDL.String()
		}
		return joinSentinel(ErrSchema, fmt.Errorf("rows of %s up to %s do not fit %s: %v", table, at, since, err), schemaHint)
	}
	l, err := resolveLayout(tm, cols, ts.cols, table, false)
	if err != nil {
		return fmt.Errorf("at %s: %w", at, err)
	}
	ts.layout = l
	return nil
}
