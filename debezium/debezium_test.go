package debezium

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
)

// The fixtures in testdata carry the fields Debezium writes (names and
// value types from BinlogOffsetContext/MySqlOffsetContext.getOffset,
// MariaDbOffsetContext, PostgresOffsetContext.getOffset and
// TransactionContext.store); the *.offsets.dat files were written by the
// JDK's ObjectOutputStream with testdata/GenOffsets.java, which does what
// Kafka's FileOffsetBackingStore.save does.

func fixture(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

const (
	uuidA = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
	uuidB = "7c1de3f2-3fd2-11ee-8d2b-0242ac120002"
)

func TestFromDebezium(t *testing.T) {
	tests := []struct {
		file, kind  string
		opt         Options
		want        outboxcdc.Position
		resend      bool
		alternative outboxcdc.Position
		note        string // a substring of some note
	}{
		{file: "connect-mysql-gtid.json", kind: "mysql",
			want:        "mysql:gtid:" + uuidA + ":1-23," + uuidB + ":1-5:11-18",
			alternative: "mysql:file:mysql-bin.000003:1748", note: "transaction boundary"},
		{file: "connect-mysql-gtid.json", kind: "mysql", opt: Options{PreferFile: true},
			want:        "mysql:file:mysql-bin.000003:1748",
			alternative: "mysql:gtid:" + uuidA + ":1-23," + uuidB + ":1-5:11-18", note: "file form was chosen"},
		// Inside a transaction: gtids is the set before it, with its newline removed.
		{file: "connect-mysql-gtid-midtx.json", kind: "mysql",
			want:   "mysql:gtid:" + uuidA + ":1-23," + uuidB + ":1-5:11-18",
			resend: true, alternative: "mysql:file:mysql-bin.000003:1748", note: "sent 2 event(s) and 1 row(s)"},
		// The first transaction after a start without GTIDs: the set already
		// holds it, so the file form (its start) is used.
		{file: "connect-mysql-gtid-midtx-first.json", kind: "mysql",
			want: "mysql:file:mysql-bin.000003:1748", resend: true,
			alternative: "mysql:gtid:" + uuidA + ":1-24", note: "already includes the transaction in progress"},
		{file: "connect-mysql-file.json", kind: "mysql", want: "mysql:file:mysql-bin.000012:4711", note: "2024-06-10T14:53:41Z"},
		{file: "connect-mysql-file-midtx.json", kind: "mysql", want: "mysql:file:mysql-bin.000012:4711", resend: true, note: "re-sends that whole transaction"},
		{file: "connect-mariadb-gtid.json", kind: "mysql", want: "mysql:mariadb-gtid:0-1-42,1-7-9",
			alternative: "mysql:file:mariadb-bin.000002:8812"},
		{file: "connect-mariadb-failover-midtx.json", kind: "mysql", want: "mysql:mariadb-gtid:0-2-45,1-7-9",
			resend: true, alternative: "mysql:file:mariadb-bin.000007:365", note: "highest sequence number, 0-2-45"},
		{file: "connect-mysql-incremental.json", kind: "mysql", want: "mysql:gtid:" + uuidA + ":1-30",
			alternative: "mysql:file:mysql-bin.000003:9000", note: "incremental snapshot"},
		{file: "connect-postgres-boundary.json", kind: "postgres", want: "postgres:0/16DA5F0", note: "transaction boundary"},
		{file: "connect-postgres-midtx.json", kind: "postgres", want: "postgres:0/16DA5F0", resend: true, note: "inside transaction 768 (lsn_proc 0/16DA758"},
		{file: "connect-postgres-no-commit.json", kind: "postgres", want: "postgres:0/16DA758", resend: true, note: "no lsn_commit"},
		{file: "connect-postgres-lsn-only.json", kind: "postgres", want: "postgres:0/16DA758", resend: true, note: "neither lsn_commit nor lsn_proc"},
		{file: "offsets-topic.kcat.txt", kind: "mysql", opt: Options{Connector: "orders-outbox"},
			want: "mysql:gtid:" + uuidA + ":1-23," + uuidB + ":1-5:11-18", alternative: "mysql:file:mysql-bin.000003:1748"},
		{file: "offsets-topic.kcat.txt", kind: "mysql", opt: Options{Connector: `["orders-outbox",{"server":"orders"}]`},
			want: "mysql:gtid:" + uuidA + ":1-23," + uuidB + ":1-5:11-18", alternative: "mysql:file:mysql-bin.000003:1748"},
		{file: "offsets-topic.console.txt", kind: "postgres", opt: Options{Connector: "pg-outbox"}, want: "postgres:0/16DA5F0", resend: true},
		{file: "offsets-topic.kcat-json.txt", kind: "mysql", want: "mysql:file:mysql-bin.000012:4711"},
		{file: "server-mysql.offsets.dat", kind: "mysql", want: "mysql:gtid:" + uuidA + ":1-23," + uuidB + ":1-5:11-18",
			alternative: "mysql:file:mysql-bin.000003:1748"},
		{file: "server-postgres.offsets.dat", kind: "postgres", want: "postgres:0/16DA5F0", resend: true},
		{file: "server-two-engines.offsets.dat", kind: "mysql", opt: Options{Connector: "billing-engine"}, want: "mysql:mariadb-gtid:0-1-3",
			alternative: "mysql:file:mariadb-bin.000002:344"},
		{file: "server-two-engines.offsets.dat", kind: "mysql", opt: Options{Connector: "orders-engine"}, want: "mysql:mariadb-gtid:0-1-42,1-7-9",
			alternative: "mysql:file:mariadb-bin.000002:8812"},
	}
	for _, tt := range tests {
		t.Run(tt.file+"/"+tt.opt.Connector, func(t *testing.T) {
			got, n, err := Convert(tt.kind, fixture(t, tt.file), tt.opt)
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("position = %q, want %q", got, tt.want)
			}
			if n.Resend != tt.resend {
				t.Errorf("Resend = %v, want %v; notes %q", n.Resend, tt.resend, n.Lines)
			}
			if n.Alternative != tt.alternative {
				t.Errorf("Alternative = %q, want %q", n.Alternative, tt.alternative)
			}
			if tt.note != "" && !strings.Contains(strings.Join(n.Lines, "\n"), tt.note) {
				t.Errorf("notes %q lack %q", n.Lines, tt.note)
			}
		})
	}
}

func TestFromDebeziumKey(t *testing.T) {
	_, n, err := Convert("mysql", fixture(t, "offsets-topic.kcat.txt"), Options{Connector: "orders-outbox"})
	if err != nil {
		t.Fatal(err)
	}
	if n.Key != `["orders-outbox",{"server":"orders"}]` || !strings.Contains(n.Offset, `"pos":1748`) {
		t.Errorf("Key %q Offset %q: want the last record of orders-outbox", n.Key, n.Offset)
	}
}

func TestFromDebeziumRefuses(t *testing.T) {
	tests := []struct {
		name, kind string
		input      []byte
		opt        Options
		is         error
		msg        string
	}{
		{"mysql snapshot", "mysql", fixture(t, "connect-mysql-snapshot.json"), Options{}, ErrSnapshot, "snapshot=true"},
		{"mariadb initial snapshot", "mysql", fixture(t, "connect-mariadb-snapshot-initial.json"), Options{}, ErrSnapshot, "snapshot=INITIAL"},
		{"postgres snapshot", "postgres", fixture(t, "connect-postgres-snapshot.json"), Options{}, ErrSnapshot, "stream at least one transaction"},
		{"postgres last snapshot record", "postgres", fixture(t, "connect-postgres-snapshot-last.json"), Options{}, ErrSnapshot, "last snapshot record"},
		{"postgres offset, mysql source", "mysql", fixture(t, "connect-postgres-boundary.json"), Options{}, ErrBadOffset, "PostgreSQL offset, but the configured source is MySQL/MariaDB"},
		{"mysql offset, postgres source", "postgres", fixture(t, "connect-mysql-file.json"), Options{}, ErrBadOffset, "MySQL/MariaDB offset, but the configured source is PostgreSQL"},
		{"several connectors", "mysql", fixture(t, "offsets-topic.kcat.txt"), Options{}, ErrBadOffset, "offsets for 3 connectors"},
		{"unknown connector", "mysql", fixture(t, "offsets-topic.kcat.txt"), Options{Connector: "nope"}, ErrBadOffset, `no offset for connector "nope"`},
		{"deleted offset", "mysql", fixture(t, "offsets-topic.kcat.txt"), Options{Connector: "old-connector"}, ErrBadOffset, "tombstone"},
		{"console null", "postgres", fixture(t, "offsets-topic.console.txt"), Options{Connector: "gone"}, ErrBadOffset, "tombstone"},
		{"server file tombstone", "mysql", fixture(t, "server-tombstone.offsets.dat"), Options{}, ErrBadOffset, "tombstone"},
		{"two engines", "mysql", fixture(t, "server-two-engines.offsets.dat"), Options{}, ErrBadOffset, "billing-engine"},
		{"empty", "mysql", []byte(" \n"), Options{}, ErrBadOffset, "empty"},
		{"not json", "mysql", []byte("file=mysql-bin.000003 pos=4"), Options{}, ErrBadOffset, "line 1"},
		{"array value", "mysql", []byte("k\t[1,2]"), Options{}, ErrBadOffset, "want an object"},
		{"truncated json", "mysql", []byte(`k` + "\t" + `{"file":"mysql-bin.000003","pos":`), Options{}, ErrBadOffset, "not JSON"},
		{"no position fields", "mysql", []byte(`{"ts_sec":1,"server_id":2}`), Options{}, ErrBadOffset, "fields present: server_id, ts_sec"},
		{"sql server", "mysql", []byte(`{"commit_lsn":"00000025:00000d98:0003","change_lsn":"00000025:00000d98:0002"}`), Options{}, ErrBadOffset, "SQL Server"},
		{"file without pos", "mysql", []byte(`{"file":"mysql-bin.000003"}`), Options{}, ErrBadOffset, `"pos" is missing`},
		{"initial empty file", "mysql", []byte(`{"file":"","pos":0}`), Options{}, ErrBadOffset, `"file" is missing or empty`},
		{"pos below 4", "mysql", []byte(`{"file":"mysql-bin.000003","pos":2}`), Options{}, ErrBadOffset, "not a binlog offset"},
		{"pos too large", "mysql", []byte(`{"file":"mysql-bin.000003","pos":4294967296}`), Options{}, ErrBadOffset, "not a binlog offset"},
		{"negative pos", "mysql", []byte(`{"file":"mysql-bin.000003","pos":-1}`), Options{}, ErrBadOffset, "non-negative integer"},
		{"string event", "mysql", []byte(`{"file":"mysql-bin.000003","pos":4,"event":"two"}`), Options{}, ErrBadOffset, `"event"`},
		{"bad mysql gtid", "mysql", []byte(`{"file":"mysql-bin.000003","pos":4,"gtids":"3e11fa47:1-5"}`), Options{}, ErrBadOffset, "neither a MySQL GTID set"},
		{"bad mariadb gtid", "mysql", []byte(`{"file":"mysql-bin.000003","pos":4,"gtids":"0-1"}`), Options{}, ErrBadOffset, "not a MariaDB GTID"},
		{"postgres zero", "postgres", []byte(`{"lsn":0,"txId":1}`), Options{}, ErrBadOffset, "no non-zero"},
		{"postgres string lsn", "postgres", []byte(`{"lsn_commit":"0/16DA5F0"}`), Options{}, ErrBadOffset, "non-negative integer"},
		{"truncated java", "mysql", fixture(t, "server-mysql.offsets.dat")[:120], Options{}, ErrBadOffset, "file ends early"},
		{"other java object", "mysql", append(append([]byte{}, javaMagic...), 0x73, 0x72, 0x00, 0x13, 'j', 'a', 'v', 'a', '.', 'u', 't', 'i', 'l', '.', 'A', 'r', 'r', 'a', 'y', 'L', 'i', 's', 't'), Options{}, ErrBadOffset, "java.util.ArrayList"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, _, err := Convert(tt.kind, tt.input, tt.opt)
			if err == nil {
				t.Fatalf("converted to %q, want an error", p)
			}
			if !errors.Is(err, tt.is) {
				t.Errorf("error %v does not wrap %v", err, tt.is)
			}
			if !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("error %q lacks %q", err, tt.msg)
			}
		})
	}
}

// javaOffsetFile assembles, independently of the reader, the bytes
// FileOffsetBackingStore writes for a one-entry map.
func javaOffsetFile(key, value string) []byte {
	var b bytes.Buffer
	u16 := func(n int) { b.Write(binary.BigEndian.AppendUint16(nil, uint16(n))) }
	u32 := func(n int) { b.Write(binary.BigEndian.AppendUint32(nil, uint32(n))) }
	str := func(s string) { u16(len(s)); b.WriteString(s) }
	b.Write([]byte{0xAC, 0xED, 0x00, 0x05, 0x73, 0x72})
	str("java.util.HashMap")
	b.Write([]byte{0x05, 0x07, 0xDA, 0xC1, 0xC3, 0x16, 0x60, 0xD1, 0x03})
	u16(2)
	b.WriteByte('F')
	str("loadFactor")
	b.WriteByte('I')
	str("threshold")
	b.Write([]byte{0x78, 0x70, 0x3F, 0x40, 0x00, 0x00})
	u32(12)
	b.Write([]byte{0x77, 0x08})
	u32(16)
	u32(1)
	b.Write([]byte{0x75, 0x72})
	str("[B")
	b.Write([]byte{0xAC, 0xF3, 0x17, 0xF8, 0x06, 0x08, 0x54, 0xE0, 0x02})
	u16(0)
	b.Write([]byte{0x78, 0x70})
	u32(len(key))
	b.WriteString(key)
	b.Write([]byte{0x75, 0x71, 0x00, 0x7E, 0x00, 0x02})
	u32(len(value))
	b.WriteString(value)
	b.WriteByte(0x78)
	return b.Bytes()
}

func TestJavaLayoutMatchesJDK(t *testing.T) {
	want := fixture(t, "server-mysql.offsets.dat")
	got := javaOffsetFile(`["kafka",{"server":"dbserver1"}]`,
		`{"transaction_id":null,"ts_sec":1718031221,"file":"mysql-bin.000003","pos":1748,"gtids":"`+uuidA+`:1-23,`+uuidB+`:1-5:11-18","server_id":223344}`)
	if !bytes.Equal(got, want) {
		t.Fatalf("hand-built layout differs from the JDK's:\n got %x\nwant %x", got, want)
	}
	recs, err := readJavaOffsets(got)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 1 || recs[0].key != `["kafka",{"server":"dbserver1"}]` || !bytes.HasPrefix(recs[0].value, []byte(`{"transaction_id"`)) {
		t.Fatalf("records %q", recs)
	}
}

func TestJavaTrailingBytes(t *testing.T) {
	b := append(fixture(t, "server-postgres.offsets.dat"), 0x00)
	if _, err := readJavaOffsets(b); err == nil || !strings.Contains(err.Error(), "unexpected bytes after the map") {
		t.Fatalf("err = %v", err)
	}
}

func FuzzReadRecords(f *testing.F) {
	for _, name := range []string{"server-mysql.offsets.dat", "server-two-engines.offsets.dat", "offsets-topic.kcat.txt", "connect-mysql-gtid.json"} {
		b, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _, _ = Convert("mysql", b, Options{})
		_, _, _ = Convert("postgres", b, Options{})
	})
}
