package main

import (
	"github.com/outbox-cdc/outbox-cdc/test/testenv"

	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/google/uuid"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"
)

// backend is one source database with a fresh outbox table.
type backend struct {
	kind    string
	version string
	// name is the database the bench creates and drops: outbox_bench_
	// and a random suffix, so runs by several people on one server do not
	// meet. Slots and topics carry the same suffix.
	name  string
	oid   int64   // PostgreSQL: the database's oid, for pg_walinspect
	admin *sql.DB // no database (MySQL) or the maintenance database (PostgreSQL)
	db    *sql.DB // the bench database
	dsn   string  // the bench database, for the connector
	// ph returns the i-th (1-based) placeholder.
	ph func(i int) string
}

func openBackend(ctx context.Context, o *options, kind string) (*backend, error) {
	be := &backend{kind: kind, name: "outbox_bench_" + o.runID}
	var err error
	switch kind {
	case "mysql":
		cfg, err := mysql.ParseDSN(o.mysqlAddr)
		if err != nil {
			return nil, fmt.Errorf("-mysql: %w", err)
		}
		cfg.DBName = ""
		if be.admin, err = sql.Open("mysql", cfg.FormatDSN()); err != nil {
			return nil, err
		}
		for _, q := range []string{"CREATE DATABASE " + be.name} {
			if _, err := be.admin.ExecContext(ctx, q); err != nil {
				return nil, fmt.Errorf("%s: %w", q, err)
			}
		}
		cfg.DBName = be.name
		be.dsn = cfg.FormatDSN()
		be.ph = func(int) string { return "?" }
	case "postgres":
		if be.admin, err = sql.Open("pgx", o.pgDSN); err != nil {
			return nil, err
		}
		if _, err := be.admin.ExecContext(ctx, "CREATE DATABASE "+be.name); err != nil {
			return nil, fmt.Errorf("create database: %w", err)
		}
		be.dsn = replaceDBName(o.pgDSN, be.name)
		be.ph = func(i int) string { return "$" + strconv.Itoa(i) }
	default:
		return nil, fmt.Errorf("unknown database %q (want mysql or postgres)", kind)
	}
	if be.db, err = sql.Open(driverName(kind), be.dsn); err != nil {
		return nil, err
	}
	be.db.SetMaxIdleConns(16)
	if err := be.db.QueryRowContext(ctx, "SELECT version()").Scan(&be.version); err != nil {
		return nil, err
	}
	if kind == "postgres" {
		be.version, _, _ = strings.Cut(be.version, " on ")
	}
	return be, nil
}

func driverName(kind string) string {
	if kind == "mysql" {
		return "mysql"
	}
	return "pgx"
}

// replaceDBName swaps the database in a postgres:// URL.
func replaceDBName(dsn, name string) string {
	rest, query, _ := strings.Cut(dsn, "?")
	if i := strings.LastIndex(rest, "/"); i > len("postgres://") {
		rest = rest[:i]
	}
	s := rest + "/" + name
	if query != "" {
		s += "?" + query
	}
	return s
}

// recreateTable drops and creates the outbox table.
func (be *backend) recreateTable(ctx context.Context) error {
	return be.recreateTableNamed(ctx, "outbox_message")
}

// recreateTableNamed drops and creates an outbox table of the seed's shape
// (DIGEST.md); PostgreSQL gets the same indexes so the polling relay is not
// handicapped.
func (be *backend) recreateTableNamed(ctx context.Context, table string) error {
	qs := append([]string{"DROP TABLE IF EXISTS " + table}, testenv.SeedTablePostgres(table)...)
	if be.kind == "mysql" {
		qs = []string{"DROP TABLE IF EXISTS " + table, testenv.SeedTableMySQL(table)}
	}
	for _, q := range qs {
		if _, err := be.db.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("%s: %w", q, err)
		}
	}
	return nil
}

// dropPostgres removes the bench database and every slot on it.
func (be *backend) dropPostgres(ctx context.Context) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 20*time.Second)
	defer cancel()
	for range 50 {
		_, err := be.admin.ExecContext(ctx, "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE database = $1", be.name)
		if err == nil {
			break
		}
		time.Sleep(200 * time.Millisecond) // a walsender may still be exiting
	}
	if _, err := be.admin.ExecContext(ctx, "DROP DATABASE IF EXISTS "+be.name+" WITH (FORCE)"); err != nil {
		logf("could not drop the PostgreSQL database %s: %v; drop it by hand", be.name, err)
	}
}

func (be *backend) close() {
	if be.db != nil {
		be.db.Close()
	}
	ctx := context.Background()
	if be.kind == "mysql" {
		if _, err := be.admin.ExecContext(ctx, "DROP DATABASE IF EXISTS "+be.name); err != nil {
			logf("could not drop the MariaDB database %s: %v; drop it by hand", be.name, err)
		}
	} else {
		be.dropPostgres(ctx)
	}
	be.admin.Close()
}

// createSlot makes a publication (once per name) and a pgoutput slot for
// the outbox table; the slot's start is the current WAL position.
func (be *backend) createSlot(ctx context.Context, pub, slot string) error {
	var n int
	be.db.QueryRowContext(ctx, "SELECT count(*) FROM pg_publication WHERE pubname = $1", pub).Scan(&n)
	if n == 0 {
		if _, err := be.db.ExecContext(ctx, "CREATE PUBLICATION "+pub+" FOR TABLE outbox_message"); err != nil {
			return fmt.Errorf("create publication: %w", err)
		}
	}
	if _, err := be.db.ExecContext(ctx, "SELECT pg_create_logical_replication_slot($1, 'pgoutput')", slot); err != nil {
		return fmt.Errorf("create slot %s: %w (max_replication_slots reached? the bench needs two free slots)", slot, err)
	}
	return nil
}

// slotName is a replication slot or publication name for tag, unique to
// this run (slot names are server-wide).
func (be *backend) slotName(tag string) string {
	b := []byte("bench_" + be.name[len("outbox_bench_"):] + "_" + strings.ToLower(tag))
	for i, c := range b {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') {
			b[i] = '_'
		}
	}
	return string(b[:min(len(b), 63)])
}

// copySlot makes dst a copy of the (unused) slot src: same plugin, same
// start. One slot created before a load is thus read by several consumers
// in turn, each from the beginning, while at most two slots exist at a
// time (the server's max_replication_slots is shared with everyone).
func (be *backend) copySlot(ctx context.Context, src, dst string) error {
	if _, err := be.db.ExecContext(ctx, "SELECT pg_copy_logical_replication_slot($1, $2)", src, dst); err != nil {
		return fmt.Errorf("copy slot %s to %s: %w (max_replication_slots reached? the bench needs two free slots)", src, dst, err)
	}
	return nil
}

// dropSlot drops a slot, waiting for its walsender to let go.
func (be *backend) dropSlot(ctx context.Context, slot string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 20*time.Second)
	defer cancel()
	for range 100 {
		_, err := be.db.ExecContext(ctx, "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1", slot)
		if err == nil {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	logf("could not drop replication slot %s: drop it by hand", slot)
}

// sourceYAML is the source: section of a connector configuration.
func (be *backend) sourceYAML(slot, pub string) string {
	return be.sourceYAMLTable("outbox_message", slot, pub)
}

// sourceYAMLTable is sourceYAML for another table of the bench database.
func (be *backend) sourceYAMLTable(table, slot, pub string) string {
	if be.kind == "mysql" {
		return fmt.Sprintf("  type: mysql\n  dsn: %q\n  table: %s\n  start: latest\n", be.dsn, table)
	}
	return fmt.Sprintf("  type: postgres\n  dsn: %q\n  table: public.%s\n  slot: %s\n  publication: %s\n  start: earliest\n  create: false\n", be.dsn, table, slot, pub)
}

// row is one outbox row as written.
type row struct {
	messageID, aggType, aggID, evType string
	payload                           []byte
}

// payloadPad makes the JSON payload about 200 bytes.
var payloadPad = strings.Repeat("x", 80)

// makeRow builds row seq with a ~200-byte JSON payload carrying ts, the
// writer's clock in microseconds (0 for the backlog).
func makeRow(seq int64, aggregates int, ts int64) row {
	return makeRowPad(seq, aggregates, ts, payloadPad)
}

// padFor returns the note that makes a payload about n bytes (at least the
// ~120 bytes of the other fields).
func padFor(n int) string {
	return strings.Repeat("x", max(0, n-120))
}

// makeRowPad builds row seq with pad as its note.
func makeRowPad(seq int64, aggregates int, ts int64, pad string) row {
	agg := seq % int64(aggregates)
	p := make([]byte, 0, 144+len(pad))
	p = append(p, `{"ts":`...)
	p = strconv.AppendInt(p, ts, 10)
	p = append(p, `,"seq":`...)
	p = strconv.AppendInt(p, seq, 10)
	p = append(p, `,"order_no":"A-`...)
	p = strconv.AppendInt(p, agg, 10)
	p = append(p, `","amount":`...)
	p = strconv.AppendInt(p, 100+seq%9900, 10)
	p = append(p, `.25,"currency":"EUR","items":3,"customer":"c-`...)
	p = strconv.AppendInt(p, seq%997, 10)
	p = append(p, `","note":"`...)
	p = append(p, pad...)
	p = append(p, `"}`...)
	return row{
		messageID: uuid.NewString(),
		aggType:   "ORDER",
		aggID:     "agg-" + strconv.FormatInt(agg, 10),
		evType:    "ORDER_CREATED",
		payload:   p,
	}
}

// insertSQL is a multi-row INSERT for n rows.
func (be *backend) insertSQL(n int) string { return be.insertSQLInto("outbox_message", n) }

// insertSQLInto is a multi-row INSERT of n rows into table.
func (be *backend) insertSQLInto(table string, n int) string {
	var b strings.Builder
	b.WriteString("INSERT INTO " + table + " (message_id, aggregate_type, aggregate_id, event_type, payload) VALUES ")
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		k := i * 5
		fmt.Fprintf(&b, "(%s,%s,%s,%s,%s)", be.ph(k+1), be.ph(k+2), be.ph(k+3), be.ph(k+4), be.ph(k+5))
	}
	return b.String()
}

func rowArgs(rows []row) []any {
	args := make([]any, 0, len(rows)*5)
	for _, r := range rows {
		args = append(args, r.messageID, r.aggType, r.aggID, r.evType, string(r.payload))
	}
	return args
}
