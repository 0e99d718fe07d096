package binlog

import (
	"fmt"
	"testing"
	"time"
)

func TestFilesAfter(t *testing.T) {
	files := []binlogFile{{name: "b.000007"}, {name: "b.000008"}, {name: "b.000009"}}
	for cur, want := range map[string]int{"b.000009": 0, "b.000008": 1, "b.000007": 2, "b.000003": 3} {
		if got := filesAfter(files, cur); got != want {
			t.Errorf("filesAfter(%s) = %d, want %d", cur, got, want)
		}
	}
}

func TestBytesAfter(t *testing.T) {
	files := []binlogFile{{name: "b.000007", size: 1000}, {name: "b.000008", size: 500}, {name: "b.000009", size: 300}}
	for _, c := range []struct {
		cur    string
		offset uint64
		want   uint64
	}{
		{"b.000009", 300, 0},   // at the end
		{"b.000009", 100, 200}, // in the last file
		{"b.000008", 400, 100 + 300},
		{"b.000007", 4, 996 + 500 + 300},
		{"b.000003", 4, 1000 + 500 + 300}, // purged: everything listed
		{"b.000009", 400, 0},              // read past the size listed a moment ago
	} {
		if got := bytesAfter(files, c.cur, c.offset); got != c.want {
			t.Errorf("bytesAfter(%s, %d) = %d, want %d", c.cur, c.offset, got, c.want)
		}
	}
}

// A stream held back (the pipeline does not take its transactions) reads
// behind the server's binlog end: outbox_cdc_mysql_binlog_bytes_behind
// says by how much, soon after the start.
func TestBytesBehindWhileHeldBack(t *testing.T) {
	f := newFixture(t)
	r := f.start(f.config(), seedColumns, "")
	r.waitReady()
	for i := 0; i < 60; i++ {
		f.insertTx(fmt.Sprintf("held-%d", i))
	}
	deadline := time.Now().Add(20 * time.Second)
	for counter(t, r.src.behind.bytes) <= 0 {
		if time.Now().After(deadline) {
			t.Fatal("outbox_cdc_mysql_binlog_bytes_behind still 0 with 60 transactions not taken")
		}
		time.Sleep(100 * time.Millisecond)
	}
}
