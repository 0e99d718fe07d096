package main

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	gomysql "github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"
)

// BenchmarkBinlogDecode measures the floor of the MariaDB source's per-row
// cost: go-mysql parsing the real binlog events (table map + write rows) of
// 1,000-row outbox transactions, as the binlog source receives them. It
// needs the local MariaDB (make services) and skips without it.
//
//	go test -run - -bench BinlogDecode -benchmem ./bench/
func BenchmarkBinlogDecode(b *testing.B) {
	const rows, txRows = 10_000, 1000
	dbName := fmt.Sprintf("outbox_bench_decode_%d", time.Now().UnixNano()%1_000_000)
	admin, err := sql.Open("mysql", "root:@tcp(127.0.0.1:3306)/")
	if err == nil {
		err = admin.Ping()
	}
	if err != nil {
		b.Skipf("no MariaDB on 127.0.0.1:3306: %v", err)
	}
	defer admin.Close()
	for _, q := range []string{"DROP DATABASE IF EXISTS " + dbName, "CREATE DATABASE " + dbName} {
		if _, err := admin.Exec(q); err != nil {
			b.Fatal(err)
		}
	}
	defer admin.Exec("DROP DATABASE IF EXISTS " + dbName)
	be := &backend{kind: "mysql", ph: func(int) string { return "?" }}
	if be.db, err = sql.Open("mysql", "root:@tcp(127.0.0.1:3306)/"+dbName); err != nil {
		b.Fatal(err)
	}
	defer be.db.Close()
	if err := be.recreateTable(context.Background()); err != nil {
		b.Fatal(err)
	}
	file, pos, err := masterStatus(context.Background(), be)
	if err != nil {
		b.Fatal(err)
	}
	stmt := be.insertSQL(txRows)
	for i := 0; i < rows; i += txRows {
		batch := make([]row, txRows)
		for j := range batch {
			batch[j] = makeRow(int64(i+j), 10_000, time.Now().UnixMicro())
		}
		if _, err := be.db.Exec(stmt, rowArgs(batch)...); err != nil {
			b.Fatal(err)
		}
	}
	endFile, endPos, err := masterStatus(context.Background(), be)
	if err != nil {
		b.Fatal(err)
	}

	// Capture the raw events (header + body) of that range.
	syncer := replication.NewBinlogSyncer(replication.BinlogSyncerConfig{
		ServerID: 0x7e000000 | uint32(time.Now().UnixNano()&0xffff), Flavor: "mariadb",
		Host: "127.0.0.1", Port: 3306, User: "root", RawModeEnabled: true,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	defer syncer.Close()
	st, err := syncer.StartSync(gomysql.Position{Name: file, Pos: pos})
	if err != nil {
		b.Fatal(err)
	}
	var raw [][]byte
	cur := file
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		ev, err := st.GetEvent(ctx)
		cancel()
		if err != nil {
			b.Fatal(err)
		}
		raw = append(raw, ev.RawData)
		if ev.Header.EventType == replication.ROTATE_EVENT && ev.Header.Timestamp != 0 {
			break // a real rotation: stop at the end of this file
		}
		if cur == endFile && ev.Header.LogPos >= endPos {
			break
		}
	}
	syncer.Close()

	b.ReportAllocs()
	b.ResetTimer()
	decoded := 0
	for range b.N {
		p := replication.NewBinlogParser()
		p.SetFlavor("mariadb")
		decoded = 0
		for _, data := range raw {
			ev, err := p.Parse(data)
			if err != nil {
				continue // format description and friends before the first table map
			}
			if re, ok := ev.Event.(*replication.RowsEvent); ok && string(re.Table.Schema) == dbName {
				decoded += len(re.Rows)
			}
		}
	}
	b.StopTimer()
	if decoded < rows {
		b.Fatalf("decoded %d rows, want %d", decoded, rows)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*decoded), "ns/row")
	b.ReportMetric(float64(b.N*decoded)/b.Elapsed().Seconds(), "rows/s")
}
