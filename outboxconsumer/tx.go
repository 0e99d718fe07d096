package outboxconsumer

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Dialect is the SQL dialect of the consumer's database.
type Dialect int

const (
	// MySQL is MySQL or MariaDB (go-sql-driver/mysql).
	MySQL Dialect = iota + 1
	// Postgres is PostgreSQL (pgx, or pgx's database/sql driver).
	Postgres
)

func (d Dialect) valid() error {
	if d != MySQL && d != Postgres {
		return errors.New("outboxconsumer: Dialect must be MySQL or Postgres")
	}
	return nil
}

// quoteIdent quotes a possibly qualified name part by part.
func (d Dialect) quoteIdent(name string) string {
	q := `"`
	if d == MySQL {
		q = "`"
	}
	parts := strings.Split(name, ".")
	for i, p := range parts {
		parts[i] = q + strings.ReplaceAll(p, q, q+q) + q
	}
	return strings.Join(parts, ".")
}

// bind rewrites the ? markers of q as $1, $2... for PostgreSQL. The kit's
// statements hold no ? other than markers.
func (d Dialect) bind(q string) string {
	if d == MySQL {
		return q
	}
	var b strings.Builder
	n := 0
	for _, c := range q {
		if c == '?' {
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteRune(c)
	}
	return b.String()
}

// Tx is the consumer's transaction as the kit's pieces use it: SQL for a
// database/sql transaction, Pgx for a pgx one.
type Tx interface {
	// Exec runs a statement and returns the rows it affected.
	Exec(ctx context.Context, query string, args ...any) (int64, error)
	// QueryRow runs a query returning at most one row and scans it;
	// found is false when there was none.
	QueryRow(ctx context.Context, query string, args []any, dest ...any) (found bool, err error)
}

// SQL adapts a database/sql transaction.
func SQL(tx *sql.Tx) Tx { return sqlTx{tx} }

// Pgx adapts a pgx transaction.
func Pgx(tx pgx.Tx) Tx { return pgxTx{tx} }

type sqlTx struct{ tx *sql.Tx }

func (t sqlTx) Exec(ctx context.Context, q string, args ...any) (int64, error) {
	res, err := t.tx.ExecContext(ctx, q, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

func (t sqlTx) QueryRow(ctx context.Context, q string, args []any, dest ...any) (bool, error) {
	err := t.tx.QueryRowContext(ctx, q, args...).Scan(dest...)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	return err == nil, err
}

type pgxTx struct{ tx pgx.Tx }

func (t pgxTx) Exec(ctx context.Context, q string, args ...any) (int64, error) {
	tag, err := t.tx.Exec(ctx, q, args...)
	return tag.RowsAffected(), err
}

func (t pgxTx) QueryRow(ctx context.Context, q string, args []any, dest ...any) (bool, error) {
	err := t.tx.QueryRow(ctx, q, args...).Scan(dest...)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	return err == nil, err
}

// PgxBeginner starts pgx transactions: a *pgxpool.Pool or a *pgx.Conn.
type PgxBeginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

func wrapf(err error, format string, args ...any) error {
	return fmt.Errorf("outboxconsumer: "+format+": %w", append(args, err)...)
}
