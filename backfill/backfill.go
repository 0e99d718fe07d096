// Package backfill holds what both sources share for `source.start:
// pending`: publishing the rows a polling relay had not sent before
// streaming, on the first start. It has the configuration, the position
// form that says "backfill in progress", the grouping of rows into
// synthetic transactions, and the loop that publishes them and retries
// (Loop). The seam itself (taking a stream position consistent with the
// snapshot the rows are read in) is database specific and lives in
// binlog/pending.go and wal/pending.go, each a Snapshot.
//
// # Position form
//
// While the backfill runs, each synthetic transaction ends at
//
//	<kind>:pending:<last>:<high>:<stream body>
//
// <last> is the key (primary key, an integer) of the last row published,
// <high> the highest key of a pending row in the first snapshot, and the
// stream body the source's ordinary position (mysql "mariadb-gtid:0-1-42",
// postgres "0/16B3748") where streaming starts once the backfill is done.
// The last synthetic transaction of a backfill ends at the plain stream
// position. A checkpoint in the pending form therefore means "rows with
// key in (last, high] that match the WHERE still have to be published,
// then stream from the stream position"; a restart resumes exactly there.
package backfill

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
)

// StartPending is the source.start value that runs a backfill on the first
// start (no checkpoint).
const StartPending = "pending"

// Config is source.pending.
type Config struct {
	// Where selects the rows the polling relay had not sent. It is SQL,
	// written by the operator, ANDed with the key range: "status = 0".
	Where string `yaml:"where"`
	// Key is the table's integer primary key column; rows are published in
	// its order and the backfill resumes after the last one published.
	Key string `yaml:"key"`
	// Batch is the number of rows per synthetic transaction (one read, one
	// checkpoint at most).
	Batch int `yaml:"batch"`
}

// DefaultConfig is the seed polling relay's: status 0 is pending.
func DefaultConfig() Config {
	return Config{Where: "status = 0", Key: "id", Batch: 1000}
}

// Validate checks the keys; messages name them relative to source.
func (c Config) Validate() error {
	var errs []error
	if strings.TrimSpace(c.Where) == "" {
		errs = append(errs, outboxcdc.KeyErrorf("where", `e.g. "status = 0"; use "1 = 1" to publish every row`, "required"))
	}
	if strings.Contains(c.Where, ";") {
		errs = append(errs, outboxcdc.KeyErrorf("where", "", "one condition, no ';'"))
	}
	if !identifier(c.Key) {
		errs = append(errs, outboxcdc.KeyErrorf("key", "", "%q is not a plain column name", c.Key))
	}
	if c.Batch < 1 || c.Batch > 100000 {
		errs = append(errs, outboxcdc.KeyErrorf("batch", "", "%d is not between 1 and 100000", c.Batch))
	}
	return errors.Join(errs...)
}

func identifier(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

const bodyPrefix = "pending:"

// State is a decoded pending position.
type State struct {
	Last   int64 // key of the last row published; rows after it remain
	High   int64 // highest pending key in the first snapshot
	Stream string
}

// IsPending reports whether p is in the pending form.
func IsPending(p outboxcdc.Position) bool { return strings.HasPrefix(p.Body(), bodyPrefix) }

// Encode returns the position of kind for s.
func (s State) Encode(kind string) outboxcdc.Position {
	return outboxcdc.MakePosition(kind, bodyPrefix+strconv.FormatInt(s.Last, 10)+":"+strconv.FormatInt(s.High, 10)+":"+s.Stream)
}

// Parse decodes a pending position of kind.
func Parse(p outboxcdc.Position, kind string) (State, error) {
	if err := p.CheckKind(kind); err != nil {
		return State{}, err
	}
	rest, ok := strings.CutPrefix(p.Body(), bodyPrefix)
	if !ok {
		return State{}, fmt.Errorf("position %q is not a pending-backfill position", string(p))
	}
	f := strings.SplitN(rest, ":", 3)
	if len(f) != 3 || f[2] == "" {
		return State{}, fmt.Errorf("pending position %q: want pending:<last>:<high>:<stream position>", string(p))
	}
	last, err1 := strconv.ParseInt(f[0], 10, 64)
	high, err2 := strconv.ParseInt(f[1], 10, 64)
	if err1 != nil || err2 != nil {
		return State{}, fmt.Errorf("pending position %q: last and high must be integers", string(p))
	}
	return State{Last: last, High: high, Stream: f[2]}, nil
}

// StreamPosition is where streaming starts after the backfill.
func (s State) StreamPosition(kind string) outboxcdc.Position {
	return outboxcdc.MakePosition(kind, s.Stream)
}

// Row is one pending row read from the table.
type Row struct {
	Key   int64
	Event outboxcdc.Event
}

// Tx makes the synthetic transaction for one batch of rows. done says the
// batch is the backfill's last: it then ends at the plain stream position.
// The commit time is the time of the read (the rows' real commit times are
// unknown).
func Tx(kind string, st State, rows []Row, done bool) outboxcdc.Tx {
	now := time.Now()
	events := make([]outboxcdc.Event, len(rows))
	for i := range rows {
		events[i] = rows[i].Event
		events[i].CommitTime = now
		if events[i].Origin == "" {
			events[i].Origin = "pending backfill " + strconv.FormatInt(rows[i].Key, 10)
		}
	}
	if len(rows) > 0 {
		st.Last = rows[len(rows)-1].Key
	}
	end := st.Encode(kind)
	if done {
		end = st.StreamPosition(kind)
	}
	return outboxcdc.Tx{Events: events, End: end, CommitTime: now}
}

// Describe says in words what the pending position p of kind means;
// stream describes the stream position the source resumes at afterwards.
func Describe(p outboxcdc.Position, kind string, stream func(outboxcdc.Position) string) string {
	st, err := Parse(p, kind)
	if err != nil {
		return "unreadable pending-backfill position (" + err.Error() + ")"
	}
	return fmt.Sprintf("pending backfill in progress: rows up to key %d published (pending rows go up to key %d), then streaming from %s",
		st.Last, st.High, stream(st.StreamPosition(kind)))
}

// ComparePending answers a comparison of two positions one of which is in
// the pending form: none is possible. ok is false when neither is.
func ComparePending(a, b outboxcdc.Position) (ok bool, err error) {
	if !IsPending(a) && !IsPending(b) {
		return false, nil
	}
	return true, errors.New("a pending backfill was in progress; replacing its position abandons the backfill")
}
