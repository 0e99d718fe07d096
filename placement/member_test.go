package placement

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"
	"github.com/rs/zerolog"

	"github.com/outbox-cdc/outbox-cdc/ha"
)

// The 3-replica tests run each replica as a child process of the test
// binary (so kill -9 and SIGSTOP are real). A child is this binary started
// with memberEnv set: TestMain then runs runMember instead of the tests.
const memberEnv = "OUTBOX_CDC_PLACEMENT_MEMBER"

func TestMain(m *testing.M) {
	if os.Getenv(memberEnv) != "" {
		os.Exit(runMember())
	}
	os.Exit(m.Run())
}

// memberSpec is what the test hands a child, as JSON in memberEnv.
type memberSpec struct {
	Name       string        `json:"name"`
	Brokers    []string      `json:"brokers"`
	Deployment string        `json:"deployment"`
	Connectors []string      `json:"connectors"`
	DSN        string        `json:"dsn"`
	Activity   string        `json:"activity"` // db.table of the fenced writes
	Session    time.Duration `json:"session"`
	HACheck    time.Duration `json:"ha_check"`
}

// event is one line a child prints on stdout.
type event struct {
	Member    string `json:"member"`
	Kind      string `json:"kind"` // start, active, lostlock, stopped, fenced
	Connector string `json:"connector"`
	Conn      int64  `json:"conn"` // the lock session's connection id
	At        int64  `json:"at"`   // unix nanoseconds
}

type emitter struct {
	mu   sync.Mutex
	name string
	enc  *json.Encoder
}

func (e *emitter) emit(kind, connector string, conn int64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	_ = e.enc.Encode(event{Member: e.name, Kind: kind, Connector: connector, Conn: conn, At: time.Now().UnixNano()})
}

func runMember() int {
	var spec memberSpec
	if err := json.Unmarshal([]byte(os.Getenv(memberEnv)), &spec); err != nil {
		fmt.Fprintln(os.Stderr, "member spec:", err)
		return 2
	}
	log := zerolog.New(os.Stderr).With().Timestamp().Str("member", spec.Name).Logger()
	db, err := sql.Open("mysql", spec.DSN)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer db.Close()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	cfg := DefaultConfig()
	cfg.Enabled = true
	cfg.Deployment = spec.Deployment
	cfg.Brokers = spec.Brokers
	cfg.SessionTimeout = spec.Session
	cfg.RebalanceTimeout = 10 * time.Second
	hacfg := ha.DefaultConfig()
	hacfg.Enabled = true
	hacfg.SessionTimeout = spec.Session
	hacfg.CheckInterval = spec.HACheck
	fc := &fakeConnectors{spec: spec, db: db, ha: hacfg, log: log,
		out: &emitter{name: spec.Name, enc: json.NewEncoder(os.Stdout)}, running: map[string]*fakeRun{}}
	if err := Run(ctx, cfg, spec.Connectors, fc, log); err != nil {
		log.Error().Err(err).Msg("placement.Run")
		return 1
	}
	return 0
}

// fakeConnectors stands in for the supervisor: a started connector takes
// its real HA lock in MariaDB (package ha), then, until stopped or the
// lock is lost, writes a row every 20ms to the activity table. Each write
// is fenced the way a real connector's checkpoint save is: it lands only
// if the lock is at that moment held by the session that took it.
type fakeConnectors struct {
	spec    memberSpec
	db      *sql.DB
	ha      ha.Config
	log     zerolog.Logger
	out     *emitter
	mu      sync.Mutex
	running map[string]*fakeRun
}

type fakeRun struct {
	cancel context.CancelFunc
	done   chan struct{}
}

func (f *fakeConnectors) Start(name string) error {
	ctx, cancel := context.WithCancel(context.Background())
	r := &fakeRun{cancel: cancel, done: make(chan struct{})}
	f.mu.Lock()
	f.running[name] = r
	f.mu.Unlock()
	f.out.emit("start", name, 0)
	go func() {
		defer close(r.done)
		f.run(ctx, name)
	}()
	return nil
}

func (f *fakeConnectors) Stop(name string) error {
	f.mu.Lock()
	r := f.running[name]
	delete(f.running, name)
	f.mu.Unlock()
	if r == nil {
		return nil
	}
	r.cancel()
	<-r.done
	f.out.emit("stopped", name, 0)
	return nil
}

// Abort is Stop: the fake writes nothing it would have to drain.
func (f *fakeConnectors) Abort(name string) error { return f.Stop(name) }

func (f *fakeConnectors) run(ctx context.Context, name string) {
	l, err := ha.New("mysql", f.spec.DSN, name, f.ha, f.log)
	if err != nil {
		f.log.Error().Err(err).Msg("ha.New")
		return
	}
	lost, release, err := l.Lock(ctx)
	if err != nil {
		return
	}
	defer release()
	var conn sql.NullInt64
	if err := f.db.QueryRowContext(ctx, "SELECT IS_USED_LOCK(?)", ha.LockName(name)).Scan(&conn); err != nil || !conn.Valid {
		f.log.Error().Err(err).Msg("reading the lock holder")
		return
	}
	f.out.emit("active", name, conn.Int64)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	q := fmt.Sprintf("INSERT INTO %s (connector, member, conn, at) SELECT ?, ?, ?, NOW(6) FROM DUAL WHERE IS_USED_LOCK(?) = ?", f.spec.Activity)
	for {
		select {
		case <-ctx.Done():
			return
		case <-lost:
			f.out.emit("lostlock", name, conn.Int64)
			return
		case <-tick.C:
		}
		res, err := f.db.ExecContext(ctx, q, name, f.spec.Name, conn.Int64, ha.LockName(name), conn.Int64)
		if err != nil {
			continue
		}
		if n, _ := res.RowsAffected(); n == 0 {
			f.out.emit("fenced", name, conn.Int64)
		}
	}
}
