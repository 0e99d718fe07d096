// Command multirss measures the resident memory of one outbox-cdc process
// running several connectors: 1, 10 and 50 idle ones, and 10 busy ones
// (each fed by its own writer). It is a measurement, not a test: run it by
// hand and copy its table into docs/multi-connectors.md.
//
//	make build && go run ./bench/multirss -mysql 'root:@tcp(127.0.0.1:3306)/'
//
// Every connector reads its own MariaDB database (created and dropped
// here, named mrss_<run>_<i>) and writes to an in-process Kafka (kfake),
// so the broker's memory is not the connector's. RSS is the process's
// VmRSS after the idle period, and VmHWM (the peak) over the whole run,
// from /proc/<pid>/status.
package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/outbox-cdc/outbox-cdc/test/testenv"
)

func main() {
	bin := flag.String("bin", "bin/outbox-cdc", "connector binary")
	dsn := flag.String("mysql", "root:@tcp(127.0.0.1:3306)/", "MariaDB DSN without a database (binlog ROW/FULL)")
	idle := flag.String("idle", "1,10,50", "idle connector counts to measure")
	busy := flag.Int("busy", 10, "connectors in the busy run (0: skip)")
	rate := flag.Int("rate", 500, "rows per second per busy connector (transactions of 10 rows)")
	idleFor := flag.Duration("idle-for", 15*time.Second, "how long the idle process runs before its RSS is read")
	busyFor := flag.Duration("busy-for", 30*time.Second, "how long the writers write in the busy run")
	flag.Parse()

	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3), kfake.AllowAutoTopicCreation())
	if err != nil {
		fatal(err)
	}
	defer c.Close()
	broker := c.ListenAddrs()[0]
	var id [3]byte
	rand.Read(id[:])
	run := hex.EncodeToString(id[:])
	work, err := os.MkdirTemp("", "multirss")
	if err != nil {
		fatal(err)
	}
	defer os.RemoveAll(work)

	fmt.Printf("| connectors | load | RSS after | peak RSS (VmHWM) | rows delivered |\n|---|---|---|---|---|\n")
	for _, s := range strings.Split(*idle, ",") {
		n, err := strconv.Atoi(s)
		if err != nil {
			fatal(err)
		}
		r, err := measure(*bin, *dsn, broker, work, fmt.Sprintf("%s_i%d", run, n), n, 0, *idleFor)
		if err != nil {
			fatal(err)
		}
		fmt.Printf("| %d | idle %s | %.1f MiB | %.1f MiB | %d |\n", n, *idleFor, r.rss, r.peak, r.delivered)
	}
	if *busy > 0 {
		r, err := measure(*bin, *dsn, broker, work, run+"_busy", *busy, *rate, *busyFor)
		if err != nil {
			fatal(err)
		}
		fmt.Printf("| %d | %d rows/s each for %s | %.1f MiB | %.1f MiB | %d |\n", *busy, *rate, *busyFor, r.rss, r.peak, r.delivered)
	}
}

type result struct {
	rss, peak float64
	delivered int64
}

// measure runs n connectors in one process for d, with writers at rate
// rows/s per connector (0: idle), and reads its memory.
func measure(bin, dsn, broker, work, run string, n, rate int, d time.Duration) (result, error) {
	base, err := mysql.ParseDSN(dsn)
	if err != nil {
		return result{}, err
	}
	admin, err := sql.Open("mysql", base.FormatDSN())
	if err != nil {
		return result{}, err
	}
	defer admin.Close()
	var cfg strings.Builder
	cfg.WriteString("log:\n  level: warn\n  format: json\nconnectors:\n")
	dbs := make([]*sql.DB, n)
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("mrss_%s_%d", run, i)
		if _, err := admin.Exec("CREATE DATABASE " + name); err != nil {
			return result{}, err
		}
		defer admin.Exec("DROP DATABASE IF EXISTS " + name)
		c := *base
		c.DBName = name
		db, err := sql.Open("mysql", c.FormatDSN())
		if err != nil {
			return result{}, err
		}
		defer db.Close()
		if _, err := db.Exec(testenv.SeedTableMySQL("outbox_message")); err != nil {
			return result{}, err
		}
		dbs[i] = db
		fmt.Fprintf(&cfg, `  - name: mrss-%s-%d
    source:
      type: mysql
      dsn: %q
      table: outbox_message
      start: latest
    route:
      preset: seed
      topic: "mrss.%s.%d"
    sink:
      brokers: [%q]
    checkpoint:
      path: %q
`, run, i, c.FormatDSN(), run, i, broker, filepath.Join(work, fmt.Sprintf("%s-%d.checkpoint", run, i)))
	}
	path := filepath.Join(work, run+".yaml")
	if err := os.WriteFile(path, []byte(cfg.String()), 0o600); err != nil {
		return result{}, err
	}
	addr, err := freeAddr()
	if err != nil {
		return result{}, err
	}
	var logs bytes.Buffer
	cmd := exec.Command(bin, "run", "--config", path)
	cmd.Env = append(os.Environ(), "OUTBOX_CDC_HTTP_LISTEN="+addr)
	cmd.Stdout, cmd.Stderr = &logs, &logs
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return result{}, err
	}
	defer func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
	}()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if resp, err := http.Get("http://" + addr + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		if time.Now().After(deadline) {
			return result{}, fmt.Errorf("%d connectors not ready within 2 minutes:\n%s", n, logs.String())
		}
		time.Sleep(100 * time.Millisecond)
	}

	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var wg sync.WaitGroup
	var written atomic.Int64
	if rate > 0 {
		for i, db := range dbs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				write(ctx, db, i, rate, &written)
			}()
		}
	}
	<-ctx.Done()
	wg.Wait()
	want := written.Load()
	var delivered int64
	for wait := time.Now().Add(time.Minute); ; {
		delivered = scrapeDelivered(addr)
		if delivered >= want || time.Now().After(wait) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if delivered < want {
		return result{}, fmt.Errorf("%d rows written, %d delivered", want, delivered)
	}
	rss, peak, err := memory(cmd.Process.Pid)
	return result{rss: rss, peak: peak, delivered: delivered}, err
}

// write commits transactions of 10 outbox rows at rate rows/s until ctx ends.
func write(ctx context.Context, db *sql.DB, conn, rate int, written *atomic.Int64) {
	const perTx = 10
	tick := time.NewTicker(time.Second * perTx / time.Duration(rate))
	defer tick.Stop()
	payload := `{"pad": "` + strings.Repeat("x", 200) + `"}`
	for k := 0; ; k++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		tx, err := db.Begin()
		if err != nil {
			return
		}
		for j := 0; j < perTx; j++ {
			if _, err := tx.Exec("INSERT INTO outbox_message (message_id, aggregate_type, aggregate_id, event_type, payload) VALUES (?, 'ORDER', ?, 'E', ?)",
				fmt.Sprintf("%d-%d-%d", conn, k, j), fmt.Sprintf("agg-%d", j), payload); err != nil {
				tx.Rollback()
				return
			}
		}
		if tx.Commit() == nil {
			written.Add(perTx)
		}
	}
}

var deliveredLine = regexp.MustCompile(`^outbox_cdc_records_delivered_total\{[^}]*\} (\S+)$`)

// scrapeDelivered sums outbox_cdc_records_delivered_total over the connectors.
func scrapeDelivered(addr string) int64 {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	var sum float64
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if m := deliveredLine.FindStringSubmatch(sc.Text()); m != nil {
			v, _ := strconv.ParseFloat(m[1], 64)
			sum += v
		}
	}
	return int64(sum)
}

// memory reads VmRSS and VmHWM in MiB.
func memory(pid int) (rss, peak float64, err error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	for _, line := range strings.Split(string(raw), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		kb, _ := strconv.ParseFloat(f[1], 64)
		switch f[0] {
		case "VmRSS:":
			rss = kb / 1024
		case "VmHWM:":
			peak = kb / 1024
		}
	}
	return rss, peak, nil
}

func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

func fatal(err error) {
	fmt.Fprintf(os.Stderr, "multirss: %v\n", err)
	os.Exit(1)
}
