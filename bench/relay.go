package main

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// The polling relays run as a child process of the bench (the bench's own
// binary with -relay-child), so /proc gives their CPU and memory alone, as
// for the connector. The child prints "ready" once connected, runs until
// SIGTERM, then prints its counters as one JSON line.

// Relay kinds.
const (
	relaySeed  = "seed"  // the article's OutboxRelay
	relayTuned = "tuned" // what a strong engineer would build on the same table
)

// Systems a live run measures.
const (
	sysCDC   = "outbox-cdc"
	sysSeed  = "seed relay"
	sysTuned = "tuned relay"
)

func relayOf(system string) string {
	switch system {
	case sysSeed:
		return relaySeed
	case sysTuned:
		return relayTuned
	}
	return ""
}

// relayCounts is what a relay reports about itself.
type relayCounts struct {
	// Queries is every statement it sent, COMMITs included.
	Queries, Polls, EmptyPolls int64
	// RowsRead are the rows its SELECTs returned, RowsUpdated the rows its
	// UPDATEs changed, Sent the records the broker acknowledged.
	RowsRead, RowsUpdated, Sent int64
	// SessionRowsRead and SessionRowsUpdated are MariaDB's own count for
	// the relay's connections (SHOW SESSION STATUS Rows_read,
	// Handler_update): rows the server read to answer, index entries
	// included. Zero on PostgreSQL, whose table statistics say the same.
	SessionRowsRead, SessionRowsUpdated int64
	Error                               string `json:",omitempty"`
}

// relayProc is a running relay child.
type relayProc struct {
	cmd    *exec.Cmd
	out    *bufio.Reader
	counts relayCounts
	done   chan struct{}
}

func startRelayProc(ctx context.Context, kind, relay, dsn string, br *broker, topic string) (*relayProc, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe, "-relay-child", relay, "-relay-db", kind, "-relay-dsn", dsn,
		"-relay-brokers", strings.Join(br.addrs, ","), "-relay-topic", topic)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start the relay child: %w", err)
	}
	p := &relayProc{cmd: cmd, out: bufio.NewReader(stdout), done: make(chan struct{})}
	ready := make(chan error, 1)
	go func() {
		line, err := p.out.ReadString('\n')
		if err == nil && strings.TrimSpace(line) != "ready" {
			err = fmt.Errorf("relay child said %q", line)
		}
		ready <- err
	}()
	select {
	case err := <-ready:
		if err != nil {
			cmd.Process.Kill()
			cmd.Wait()
			return nil, fmt.Errorf("relay child did not start: %w", err)
		}
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		cmd.Wait()
		return nil, errors.New("relay child not ready within 30s")
	case <-ctx.Done():
		cmd.Process.Kill()
		cmd.Wait()
		return nil, ctx.Err()
	}
	return p, nil
}

// stop ends the child and reads its counters.
func (p *relayProc) stop() error {
	p.cmd.Process.Signal(syscall.SIGTERM)
	line, rerr := p.out.ReadString('\n')
	werr := p.cmd.Wait()
	if rerr != nil && rerr != io.EOF {
		return rerr
	}
	if err := json.Unmarshal([]byte(line), &p.counts); err != nil {
		return fmt.Errorf("relay child counters %q: %w (exit: %v)", line, err, werr)
	}
	if p.counts.Error != "" {
		return errors.New(p.counts.Error)
	}
	return werr
}

// relayChildMain is main for the relay child process.
func relayChildMain(args []string) {
	fs := flag.NewFlagSet("relay-child", flag.ExitOnError)
	relay := fs.String("relay-child", "", "seed or tuned")
	kind := fs.String("relay-db", "", "mysql or postgres")
	dsn := fs.String("relay-dsn", "", "database DSN")
	brokers := fs.String("relay-brokers", "", "brokers, comma-separated")
	topic := fs.String("relay-topic", "", "topic")
	fs.Parse(args)
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer cancel()
	r, err := newRelay(ctx, *relay, *kind, *dsn, strings.Split(*brokers, ","), *topic)
	if err != nil {
		fmt.Fprintf(os.Stderr, "relay child: %v\n", err)
		os.Exit(1)
	}
	fmt.Println("ready")
	err = r.run(ctx)
	c := r.counts()
	if err != nil {
		c.Error = err.Error()
	}
	json.NewEncoder(os.Stdout).Encode(c)
}

// relayRunner is one polling relay in the child.
type relayRunner struct {
	kind, relay, topic string
	db                 *sql.DB
	conns              []*sql.Conn
	cl                 *kgo.Client
	ph                 func(int) string

	queries, polls, emptyPolls, rowsRead, rowsUpdated, sent atomic.Int64
	sessRead, sessUpdated                                   int64
}

// The seed relay's settings (the article); the tuned relay's.
const (
	seedBatch     = 100
	seedInterval  = time.Second
	tunedBatch    = 1000
	tunedInterval = 100 * time.Millisecond
	tunedWorkers  = 4
)

func newRelay(ctx context.Context, relay, kind, dsn string, brokers []string, topic string) (*relayRunner, error) {
	r := &relayRunner{kind: kind, relay: relay, topic: topic, ph: func(int) string { return "?" }}
	if kind == "postgres" {
		r.ph = func(i int) string { return "$" + strconv.Itoa(i) }
	}
	opts := []kgo.Opt{kgo.SeedBrokers(brokers...), kgo.AllowAutoTopicCreation(), kgo.ProducerLinger(0)}
	var err error
	if r.cl, err = kgo.NewClient(opts...); err != nil {
		return nil, err
	}
	if r.db, err = sql.Open(driverName(kind), dsn); err != nil {
		return nil, err
	}
	workers := 1 // the article: a small separate pool
	if relay == relayTuned {
		workers = tunedWorkers
	}
	for range workers {
		c, err := r.db.Conn(ctx)
		if err != nil {
			return nil, err
		}
		r.conns = append(r.conns, c)
	}
	if err := r.cl.Ping(ctx); err != nil {
		return nil, err
	}
	return r, nil
}

func (r *relayRunner) counts() relayCounts {
	return relayCounts{
		Queries: r.queries.Load(), Polls: r.polls.Load(), EmptyPolls: r.emptyPolls.Load(),
		RowsRead: r.rowsRead.Load(), RowsUpdated: r.rowsUpdated.Load(), Sent: r.sent.Load(),
		SessionRowsRead: r.sessRead, SessionRowsUpdated: r.sessUpdated,
	}
}

// run polls until ctx is done, then reads the sessions' counters.
func (r *relayRunner) run(ctx context.Context) error {
	defer r.cl.Close()
	defer r.db.Close()
	var wg sync.WaitGroup
	errs := make(chan error, len(r.conns))
	for i, c := range r.conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var err error
			if r.relay == relaySeed {
				err = r.seedLoop(ctx, c)
			} else {
				// Stagger the workers over the interval.
				select {
				case <-time.After(time.Duration(i) * tunedInterval / tunedWorkers):
				case <-ctx.Done():
				}
				err = r.tunedLoop(ctx, c)
			}
			if err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	err := <-errs
	if r.kind == "mysql" {
		for _, c := range r.conns {
			rows, qerr := c.QueryContext(context.Background(), "SHOW SESSION STATUS WHERE Variable_name IN ('Rows_read','Handler_update')")
			if qerr != nil {
				continue
			}
			for rows.Next() {
				var k string
				var v int64
				rows.Scan(&k, &v)
				if k == "Rows_read" {
					r.sessRead += v
				} else {
					r.sessUpdated += v
				}
			}
			rows.Close()
		}
	}
	for _, c := range r.conns {
		c.Close()
	}
	return err
}

type relayMsg struct {
	id                             int64
	messageID, aggType, aggID, evt string
	payload                        []byte
}

func (m *relayMsg) record(topic string) *kgo.Record {
	return &kgo.Record{Topic: topic, Key: []byte(m.aggID), Value: m.payload, Headers: []kgo.RecordHeader{
		{Key: "id", Value: []byte(m.messageID)}, {Key: "event_type", Value: []byte(m.evt)}, {Key: "aggregate_type", Value: []byte(m.aggType)}}}
}

// selectBatch runs the poll query in tx and returns its rows.
func (r *relayRunner) selectBatch(ctx context.Context, tx *sql.Tx, q string) ([]relayMsg, error) {
	rows, err := tx.QueryContext(ctx, q)
	r.queries.Add(1)
	r.polls.Add(1)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var batch []relayMsg
	for rows.Next() {
		var m relayMsg
		if err := rows.Scan(&m.id, &m.messageID, &m.aggType, &m.aggID, &m.evt, &m.payload); err != nil {
			return nil, err
		}
		batch = append(batch, m)
	}
	r.rowsRead.Add(int64(len(batch)))
	if len(batch) == 0 {
		r.emptyPolls.Add(1)
	}
	return batch, rows.Err()
}

// seedLoop is the article's OutboxRelay: every second after the previous
// run ends (fixedDelay), in one transaction, SELECT up to 100 pending rows
// FOR UPDATE SKIP LOCKED in id order, send each synchronously (3 s
// timeout), UPDATE it to status 1, COMMIT.
func (r *relayRunner) seedLoop(ctx context.Context, c *sql.Conn) error {
	stop := ctx
	// A stop ends the loop between polls, never inside one, so the
	// session survives for its counters.
	ctx = context.WithoutCancel(ctx)
	sel := "SELECT id, message_id, aggregate_type, aggregate_id, event_type, payload FROM outbox_message " +
		"WHERE status = 0 AND (next_retry_at IS NULL OR next_retry_at <= NOW()) ORDER BY id ASC LIMIT " + strconv.Itoa(seedBatch) + " FOR UPDATE SKIP LOCKED"
	upd := "UPDATE outbox_message SET status = 1, updated_at = NOW() WHERE id = " + r.ph(1)
	poll := func() error {
		tx, err := c.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		batch, err := r.selectBatch(ctx, tx, sel)
		if err != nil {
			return err
		}
		for i := range batch {
			sctx, cancel := context.WithTimeout(ctx, 3*time.Second) // send().get(3, SECONDS)
			err := r.cl.ProduceSync(sctx, batch[i].record(r.topic)).FirstErr()
			cancel()
			if err != nil {
				return err
			}
			r.sent.Add(1)
			res, err := tx.ExecContext(ctx, upd, batch[i].id)
			r.queries.Add(1)
			if err != nil {
				return err
			}
			n, _ := res.RowsAffected()
			r.rowsUpdated.Add(n)
		}
		r.queries.Add(1) // COMMIT
		return tx.Commit()
	}
	for stop.Err() == nil {
		if err := poll(); err != nil {
			return err
		}
		select { // @Scheduled(fixedDelay = 1000)
		case <-time.After(seedInterval):
		case <-stop.Done():
		}
	}
	return nil
}

// tunedLoop is one of the tuned relay's four workers: in one transaction,
// SELECT up to 1,000 pending rows FOR UPDATE SKIP LOCKED in id order (an
// index serves exactly that: (status, id) on MariaDB, a partial index on
// id WHERE status = 0 on PostgreSQL), produce them all asynchronously and
// wait for every ack, mark them sent with one UPDATE … WHERE id IN (…),
// COMMIT, at READ COMMITTED. A full batch polls again at once; otherwise the worker waits for
// its next 100 ms tick (the four are staggered by 25 ms). Sends that fail roll the transaction back, so the rows are
// picked up again (at-least-once). With four workers, rows of one
// aggregate taken by two workers may be sent out of order.
func (r *relayRunner) tunedLoop(ctx context.Context, c *sql.Conn) error {
	stop := ctx
	ctx = context.WithoutCancel(ctx)
	from := "outbox_message"
	if r.kind == "mysql" {
		// A fresh table has no statistics yet, and the optimizer then
		// walks the primary key through every sent row; pin the plan.
		from += " FORCE INDEX (idx_pending)"
	}
	sel := "SELECT id, message_id, aggregate_type, aggregate_id, event_type, payload FROM " + from +
		" WHERE status = 0 ORDER BY id ASC LIMIT " + strconv.Itoa(tunedBatch) + " FOR UPDATE SKIP LOCKED"
	ids := make([]int64, 0, tunedBatch)
	// READ COMMITTED: on InnoDB a locking read at REPEATABLE READ also
	// locks the gap after the last pending row, where the application's
	// next INSERT goes, and the two deadlock.
	opts := &sql.TxOptions{Isolation: sql.LevelReadCommitted}
	poll := func() (int, error) {
		tx, err := c.BeginTx(ctx, opts)
		if err != nil {
			return 0, err
		}
		defer tx.Rollback()
		batch, err := r.selectBatch(ctx, tx, sel)
		if err != nil || len(batch) == 0 {
			return 0, err
		}
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		var wg sync.WaitGroup
		var failed atomic.Pointer[error]
		wg.Add(len(batch))
		for i := range batch {
			r.cl.Produce(sctx, batch[i].record(r.topic), func(_ *kgo.Record, err error) {
				if err != nil {
					failed.CompareAndSwap(nil, &err)
				}
				wg.Done()
			})
		}
		wg.Wait()
		if e := failed.Load(); e != nil {
			return 0, *e
		}
		r.sent.Add(int64(len(batch)))
		ids = ids[:0]
		for i := range batch {
			ids = append(ids, batch[i].id)
		}
		q, args := r.markSQL(ids)
		res, err := tx.ExecContext(ctx, q, args...)
		r.queries.Add(1)
		if err != nil {
			return 0, err
		}
		n, _ := res.RowsAffected()
		r.rowsUpdated.Add(n)
		r.queries.Add(1) // COMMIT
		return len(batch), tx.Commit()
	}
	// Fixed rate, not fixed delay: the workers stay staggered, so the
	// table is polled every interval/workers.
	tick := time.NewTicker(tunedInterval)
	defer tick.Stop()
	for stop.Err() == nil {
		n, err := poll()
		if err != nil {
			return err
		}
		if n == tunedBatch {
			continue
		}
		select {
		case <-tick.C:
		case <-stop.Done():
		}
	}
	return nil
}

// markSQL is one UPDATE marking ids sent.
func (r *relayRunner) markSQL(ids []int64) (string, []any) {
	if r.kind == "postgres" {
		return "UPDATE outbox_message SET status = 1, updated_at = now() WHERE id = ANY($1)", []any{ids}
	}
	var b strings.Builder
	b.WriteString("UPDATE outbox_message SET status = 1, updated_at = NOW() WHERE id IN (")
	args := make([]any, len(ids))
	for i, id := range ids {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteByte('?')
		args[i] = id
	}
	b.WriteByte(')')
	return b.String(), args
}

// tunedIndex is the index the tuned relay's poll needs, created before its
// run (not timed).
func tunedIndex(kind string) string {
	if kind == "postgres" {
		return "CREATE INDEX outbox_message_pending ON outbox_message (id) WHERE status = 0"
	}
	return "CREATE INDEX idx_pending ON outbox_message (status, id)"
}
