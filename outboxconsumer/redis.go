package outboxconsumer

import (
	"context"
	"database/sql"
	"errors"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
)

// RedisClient is what RedisFilter uses of a go-redis client
// (*redis.Client, *redis.ClusterClient, redis.UniversalClient).
type RedisClient interface {
	Get(ctx context.Context, key string) *redis.StringCmd
	SetNX(ctx context.Context, key string, value any, expiration time.Duration) *redis.BoolCmd
}

// RedisFilterConfig configures a RedisFilter.
type RedisFilterConfig struct {
	// Prefix of the keys; "" is "outbox:processed:<consumer>:".
	Prefix string
	// TTL of a key; zero is 24 hours. Keep it at most the dedupe table's
	// retention: a key outliving the table's row would still be right
	// (the id did commit), but the table is the record.
	TTL time.Duration
	// Timeout bounds each Redis call (default 200ms): a slow Redis costs
	// at most that before the database is asked.
	Timeout time.Duration
}

// RedisFilter answers duplicates from Redis before the database is asked.
// It sits in front of a Dedupe and is never trusted alone:
//
//   - A key is written only after the database committed the id (or
//     reported it a duplicate), with SET NX and a TTL. So a key means
//     "committed", and a message whose key exists is skipped.
//   - No key, an error or a timeout is never taken as "new": the database
//     decides (Dedupe), as it does for every message Redis has never seen
//     or has lost (a restart without persistence, an eviction, a TTL
//     that ran out). Redis saying "new" when the database says
//     "duplicate" is counted (RedisFilterStats.Misses) and costs nothing
//     else.
//   - A handler that fails leaves no key, because none was set before it
//     ran: its retry is applied. (Setting the key first, as a claim, would
//     lose the message for the TTL when the consumer dies between the SET
//     and the commit.)
//
// Safe for concurrent use.
type RedisFilter struct {
	r       RedisClient
	dd      *Dedupe
	prefix  string
	ttl     time.Duration
	timeout time.Duration
	stats   struct{ hits, misses, errors atomic.Int64 }
}

// RedisFilterStats are a RedisFilter's counters since New.
type RedisFilterStats struct {
	// Hits: duplicates skipped on Redis's word. Misses: messages Redis
	// did not know that the database found to be duplicates (Redis
	// restarted, evicted or expired the key). Errors: Redis calls that
	// failed or timed out (the database decided).
	Hits, Misses, Errors int64
}

// NewRedisFilter returns a filter in front of dedupe.
func NewRedisFilter(client RedisClient, dedupe *Dedupe, cfg RedisFilterConfig) *RedisFilter {
	f := &RedisFilter{r: client, dd: dedupe, prefix: cfg.Prefix, ttl: cfg.TTL, timeout: cfg.Timeout}
	if f.prefix == "" {
		f.prefix = "outbox:processed:" + dedupe.consumer + ":"
	}
	if f.ttl <= 0 {
		f.ttl = 24 * time.Hour
	}
	if f.timeout <= 0 {
		f.timeout = 200 * time.Millisecond
	}
	return f
}

// Stats returns the counters.
func (f *RedisFilter) Stats() RedisFilterStats {
	return RedisFilterStats{Hits: f.stats.hits.Load(), Misses: f.stats.misses.Load(), Errors: f.stats.errors.Load()}
}

// Process is Dedupe.Process behind the filter.
func (f *RedisFilter) Process(ctx context.Context, db SQLBeginner, msg Message, handle func(ctx context.Context, tx *sql.Tx) error) (Outcome, error) {
	return f.Do(ctx, msg, func(ctx context.Context) (Outcome, error) { return f.dd.Process(ctx, db, msg, handle) })
}

// ProcessPgx is Dedupe.ProcessPgx behind the filter.
func (f *RedisFilter) ProcessPgx(ctx context.Context, db PgxBeginner, msg Message, handle func(ctx context.Context, tx pgx.Tx) error) (Outcome, error) {
	return f.Do(ctx, msg, func(ctx context.Context) (Outcome, error) { return f.dd.ProcessPgx(ctx, db, msg, handle) })
}

// Do runs process (which must decide through the database, as
// Dedupe.Process does) unless Redis knows msg.ID as committed, and
// remembers the id once process returns Applied or Duplicate.
func (f *RedisFilter) Do(ctx context.Context, msg Message, process func(ctx context.Context) (Outcome, error)) (Outcome, error) {
	if msg.ID == "" {
		return 0, ErrNoID
	}
	key := f.prefix + msg.ID
	if f.known(ctx, key) {
		f.stats.hits.Add(1)
		return DuplicateCached, nil
	}
	o, err := process(ctx)
	if err != nil {
		return o, err
	}
	if o == Duplicate {
		f.stats.misses.Add(1)
	}
	if o == Applied || o == Duplicate {
		rctx, cancel := context.WithTimeout(ctx, f.timeout)
		defer cancel()
		if err := f.r.SetNX(rctx, key, "1", f.ttl).Err(); err != nil {
			f.stats.errors.Add(1)
		}
	}
	return o, nil
}

// known reports whether Redis holds key; any failure is "not known".
func (f *RedisFilter) known(ctx context.Context, key string) bool {
	rctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	err := f.r.Get(rctx, key).Err()
	switch {
	case err == nil:
		return true
	case errors.Is(err, redis.Nil):
		return false
	default:
		f.stats.errors.Add(1)
		return false
	}
}
