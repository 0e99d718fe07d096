package binlog

import (
	"fmt"
	"strings"
	"testing"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
)

// valueColumns are typed extra columns whose values the stream and the
// start: pending backfill must render to the same bytes, as the server's
// text protocol gives them.
var valueColumns = []struct{ def, value, want string }{
	{"d DECIMAL(30,10)", "12345678901234567890.1234567890", "12345678901234567890.1234567890"},
	{"d2 DECIMAL(10,2)", "1.50", "1.50"},
	{"dn DECIMAL(10,2)", "-0.05", "-0.05"},
	{"big DECIMAL(65,0)", "123456789012345678901234567890123456789012345678901234567890", "123456789012345678901234567890123456789012345678901234567890"},
	{"e ENUM('x','y','z')", "'y'", "y"},
	{"s SET('a','b','c')", "'a,c'", "a,c"},
	{"s0 SET('a','b')", "''", ""},
	{"bt BIT(10)", "b'1000000101'", "517"},
	{"yr YEAR", "2024", "2024"},
	{"tm TIME(3)", "'-12:34:56.5'", "-12:34:56.500"},
	{"dt DATE", "'2024-02-29'", "2024-02-29"},
	{"bn BINARY(4)", "'ab'", "ab\x00\x00"},
	{"vb VARBINARY(8)", "x'00ff'", "\x00\xff"},
	{"ch CHAR(5)", "'hi'", "hi"},
	{"ts TIMESTAMP(6) NULL", "'2024-03-05 06:07:08.5'", "2024-03-05T06:07:08.5Z"},
	{"dtm DATETIME(6)", "'2024-03-05 06:07:08.000001'", "2024-03-05T06:07:08.000001"},
	{"dtold DATETIME", "'1969-07-20 20:17:40'", "1969-07-20T20:17:40"},
	{"dzero DATETIME", "'0000-00-00 00:00:00'", "0000-00-00T00:00:00"},
	{"u BIGINT UNSIGNED", "18446744073709551615", "18446744073709551615"},
	{"mi MEDIUMINT UNSIGNED", "16777215", "16777215"},
	{"ti TINYINT", "-128", "-128"},
	{"fl FLOAT", "3.14", "3.14"},
	{"db DOUBLE", "0.1", "0.1"},
	{"txt TEXT", "'Grüße \\\\ \"q\"'", `Grüße \ "q"`},
}

// TestValuesSameInStreamAndBackfill inserts the same typed row twice,
// once before a start: pending run (published by the backfill) and once
// after (published from the binlog), under FULL and MINIMAL metadata, and
// wants byte-identical role fields, payload and extra columns, equal to
// what the server's text protocol gives. aggregate_type is an ENUM: its
// label, not its index, is the topic's part.
func TestValuesSameInStreamAndBackfill(t *testing.T) {
	t.Parallel()
	for _, md := range []string{"FULL", "MINIMAL"} {
		t.Run(md, func(t *testing.T) {
			t.Parallel()
			f := newFixtureOn(t, metadataServer(t, md))
			f.exec("DROP TABLE " + f.table)
			var defs, names, values []string
			for _, c := range valueColumns {
				defs = append(defs, c.def+" NULL")
				name := strings.Fields(c.def)[0]
				names = append(names, name)
				values = append(values, c.value)
			}
			f.exec(fmt.Sprintf(`CREATE TABLE %s (
  id BIGINT UNSIGNED AUTO_INCREMENT PRIMARY KEY,
  message_id VARCHAR(64) NOT NULL,
  aggregate_type ENUM('ORDER','PAYMENT','SHIPMENT') NOT NULL,
  aggregate_id VARCHAR(64) NOT NULL,
  event_type VARCHAR(64) NOT NULL,
  payload JSON NOT NULL,
  status TINYINT NOT NULL DEFAULT 0,
  %s
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4`, f.table, strings.ReplaceAll(strings.Join(defs, ",\n  "), "TIMESTAMP(6) NULL NULL", "TIMESTAMP(6) NULL")))
			payload := `{"amount":  1.50, "big": 12345678901234567890, "s": "é\n\"x\"", "a": [1, {"b": null}]}`
			insert := func(id string) {
				conn, err := f.db.Conn(t.Context())
				if err != nil {
					t.Fatal(err)
				}
				defer conn.Close()
				for _, q := range []string{"SET SESSION sql_mode = ''", "SET SESSION time_zone = '+00:00'",
					fmt.Sprintf("INSERT INTO %s (message_id, aggregate_type, aggregate_id, event_type, payload, %s) VALUES ('%s', 'PAYMENT', '42', 'PAID', ?, %s)",
						f.table, strings.Join(names, ", "), id, strings.Join(values, ", "))} {
					args := []any{}
					if strings.HasPrefix(q, "INSERT") {
						args = append(args, payload)
					}
					if _, err := conn.ExecContext(t.Context(), q, args...); err != nil {
						t.Fatalf("%s: %v", q, err)
					}
				}
			}
			insert("backfilled")
			cols := seedColumns
			cols.Extra = names
			r := f.start(f.config(func(c *Config) { c.Start = StartPending }), cols, "")
			backfilled := r.next().Events[0]
			insert("streamed")
			streamed := r.next().Events[0]
			for _, e := range []outboxcdc.Event{backfilled, streamed} {
				if e.AggregateType != "PAYMENT" || e.AggregateID != "42" || e.EventType != "PAID" || string(e.Payload) != payload {
					t.Errorf("%s: role fields %q %q %q payload %q", e.MessageID, e.AggregateType, e.AggregateID, e.EventType, e.Payload)
				}
				for i, c := range valueColumns {
					got, ok := e.Column(names[i])
					if !ok || got.Null || string(got.Value) != c.want {
						t.Errorf("%s: column %s = %q (null %v), want %q", e.MessageID, c.def, got.Value, got.Null, c.want)
					}
				}
			}
		})
	}
}
