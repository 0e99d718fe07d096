package shop

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	_ "github.com/go-sql-driver/mysql" // database/sql driver "mysql"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"
	"github.com/redis/go-redis/v9"

	"github.com/outbox-cdc/outbox-cdc/outboxconsumer"
)

// ConsumerFlags are the flags every example consumer takes.
type ConsumerFlags struct {
	Dialect, DSN, Prefix, Name, Mode, Redis string
	Idle, Timeout                           time.Duration
}

// Register adds the flags to fs.
func (f *ConsumerFlags) Register(fs *flag.FlagSet) {
	fs.StringVar(&f.Dialect, "dialect", "mysql", "the consumer's database: mysql (MySQL/MariaDB) or postgres")
	fs.StringVar(&f.DSN, "db", "root:@tcp(127.0.0.1:3306)/outbox_example_consumer", "the consumer's database DSN")
	fs.StringVar(&f.Prefix, "prefix", "", `table prefix ("schema." on PostgreSQL)`)
	fs.StringVar(&f.Name, "name", "example", "the consumer's name (its tables and its dedupe key space)")
	fs.StringVar(&f.Mode, "mode", "dedupe", "dedupe (processed-messages table), redis (Redis pre-filter + table) or machine (state machine alone)")
	fs.StringVar(&f.Redis, "redis", "127.0.0.1:6379", "the Redis of -mode redis")
	fs.DurationVar(&f.Idle, "idle", 5*time.Second, "exit after this long without a message (once one arrived)")
	fs.DurationVar(&f.Timeout, "timeout", 2*time.Minute, "exit after this long in any case")
}

// Run opens the consumer and calls consume, which reads the broker and
// hands each message to handle (which applies it, retrying until it is
// applied, and must return before the message is acknowledged). It stops
// consume after Idle without a message, prints a summary and exits.
func (f *ConsumerFlags) Run(consume func(ctx context.Context, handle func(outboxconsumer.Message) error) error) {
	if err := f.run(consume); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", os.Args[0], err)
		os.Exit(1)
	}
}

func (f *ConsumerFlags) run(consume func(ctx context.Context, handle func(outboxconsumer.Message) error) error) error {
	driver := "mysql"
	if f.Dialect == "postgres" {
		driver = "pgx"
	}
	db, err := sql.Open(driver, f.DSN)
	if err != nil {
		return err
	}
	defer db.Close()
	var rc *redis.Client
	if Mode(f.Mode) == ModeRedis {
		rc = redis.NewClient(&redis.Options{Addr: f.Redis, MaxRetries: -1})
		defer rc.Close()
	}
	c, err := NewConsumer(db, f.Dialect, f.Prefix, f.Name, Mode(f.Mode), rc)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), f.Timeout)
	defer cancel()
	if err := c.Setup(ctx); err != nil {
		return err
	}
	fmt.Fprintln(os.Stderr, "ready")
	var last atomic.Int64
	go func() {
		for ctx.Err() == nil {
			time.Sleep(100 * time.Millisecond)
			if l := last.Load(); l > 0 && time.Since(time.Unix(0, l)) > f.Idle {
				cancel()
			}
		}
	}()
	err = consume(ctx, func(m outboxconsumer.Message) error {
		last.Store(time.Now().UnixNano())
		return c.HandleRetrying(ctx, m, func(err error) { fmt.Fprintf(os.Stderr, "retrying %s: %v\n", m, err) })
	})
	if err != nil && ctx.Err() == nil {
		return err
	}
	return f.summary(c)
}

// summary prints what the consumer applied, from its own tables.
func (f *ConsumerFlags) summary(c *Consumer) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := c.Ledger(ctx)
	if err != nil {
		return err
	}
	twice := 0
	for _, n := range l {
		if n > 1 {
			twice++
		}
	}
	states, err := c.States(ctx)
	if err != nil {
		return err
	}
	byState := map[string]int{}
	for _, s := range states {
		byState[s]++
	}
	var parts []string
	for s, n := range byState {
		parts = append(parts, fmt.Sprintf("%d %s", n, s))
	}
	sort.Strings(parts)
	s := c.Stats()
	fmt.Printf("applied %d events (%d of them more than once), skipped %d duplicates; orders: %s\n",
		len(l), twice, s.Duplicates, strings.Join(parts, ", "))
	switch Mode(f.Mode) {
	case ModeMachine:
		fmt.Printf("state machine: %+v\n", s.Machine)
	default:
		fmt.Printf("dedupe table: %+v; order check: %+v\n", s.Dedupe, s.Order)
		if Mode(f.Mode) == ModeRedis {
			fmt.Printf("redis filter: %+v\n", s.Redis)
		}
	}
	if twice > 0 {
		return fmt.Errorf("%d events applied more than once", twice)
	}
	return nil
}
