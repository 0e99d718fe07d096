// Command orders-service is the writing end of the examples: an order
// service that changes its orders and records their events in the same
// transaction with outboxwriter. Each order is created, paid (a third of
// the payments are first declined: that transaction rolls back, and
// neither the change nor its event remains), then shipped or cancelled.
//
//	orders-service -db 'root:@tcp(127.0.0.1:3306)/shop' -orders 20
//
// It prints one line per transaction and, at the end, how many events it
// committed: the number a consumer must apply, each once.
package main

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"math/rand"
	"os"
	"time"

	_ "github.com/go-sql-driver/mysql" // database/sql driver "mysql"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"

	"github.com/outbox-cdc/outbox-cdc/examples/shop"
)

func main() {
	dialect := flag.String("dialect", "mysql", "mysql (MySQL/MariaDB) or postgres")
	dsn := flag.String("db", "root:@tcp(127.0.0.1:3306)/outbox_example", "the service's database DSN")
	prefix := flag.String("prefix", "", `table prefix ("schema." on PostgreSQL)`)
	orders := flag.Int("orders", 20, "how many orders to take through their lives")
	pause := flag.Duration("pause", 50*time.Millisecond, "pause between transactions")
	seed := flag.Int64("seed", 1, "random seed (which payments are declined, which orders cancelled)")
	flag.Parse()
	if err := run(*dialect, *dsn, *prefix, *orders, *pause, *seed); err != nil {
		fmt.Fprintf(os.Stderr, "orders-service: %v\n", err)
		os.Exit(1)
	}
}

func run(dialect, dsn, prefix string, orders int, pause time.Duration, seed int64) error {
	driver := "mysql"
	if dialect == "postgres" {
		driver = "pgx"
	}
	db, err := sql.Open(driver, dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	ctx := context.Background()
	svc, err := shop.NewService(db, dialect, prefix)
	if err != nil {
		return err
	}
	if err := svc.Setup(ctx); err != nil {
		return err
	}
	rnd := rand.New(rand.NewSource(seed))
	committed, rolledBack := 0, 0
	step := func(no, event string, amount int64, commit bool) error {
		id, err := svc.Step(ctx, no, event, amount, commit)
		if err != nil {
			return fmt.Errorf("%s %s: %w", no, event, err)
		}
		what := "committed"
		if commit {
			committed++
		} else {
			rolledBack++
			what = "rolled back"
		}
		fmt.Printf("%-11s %-15s %s  message id %s\n", what, event, no, id)
		time.Sleep(pause)
		return nil
	}
	run := time.Now().Unix()
	for i := 0; i < orders; i++ {
		no := fmt.Sprintf("SO-%d-%d", run%100000, i)
		if err := step(no, shop.Created, int64(1000+rnd.Intn(9000)), true); err != nil {
			return err
		}
		if rnd.Intn(3) == 0 {
			if err := step(no, shop.Paid, 0, false); err != nil { // declined
				return err
			}
		}
		if err := step(no, shop.Paid, 0, true); err != nil {
			return err
		}
		last := shop.Shipped
		if rnd.Intn(4) == 0 {
			last = shop.Cancelled
		}
		if err := step(no, last, 0, true); err != nil {
			return err
		}
	}
	fmt.Printf("committed %d events, rolled back %d\n", committed, rolledBack)
	return nil
}
