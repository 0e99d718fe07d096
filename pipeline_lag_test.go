package outboxcdc

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// chanSource sends what the test puts on txs.
type chanSource struct {
	txs   chan Tx
	mu    sync.Mutex
	acked Position
}

func (s *chanSource) Run(ctx context.Context, _ Position, out chan<- Tx) error {
	for {
		select {
		case tx := <-s.txs:
			select {
			case out <- tx:
			case <-ctx.Done():
				return ctx.Err()
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
func (s *chanSource) Ack(p Position) { s.mu.Lock(); s.acked = p; s.mu.Unlock() }
func (s *chanSource) Ready() error   { return nil }
func (s *chanSource) ackedPos() Position {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.acked
}

// gateSink acknowledges writes while open, and blocks them while closed.
type gateSink struct{ open chan struct{} }

func (s *gateSink) Write(ctx context.Context, _ []Record) error {
	select {
	case <-s.open:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
func (s *gateSink) Ready() error { return nil }
func (s *gateSink) Close() error { return nil }

type lagCheckpointer struct{}

func (lagCheckpointer) Load(context.Context) (Position, error) { return "", nil }
func (lagCheckpointer) Save(context.Context, Position) error   { return nil }

func regGauge(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("%s not exported", name)
	return 0
}

func lagRow(i int, commit time.Time) Tx {
	return Tx{End: fakePos(i), CommitTime: commit, Events: []Event{{MessageID: strconv.Itoa(i), AggregateID: "a", Payload: []byte(`{}`), Origin: "o"}}}
}

func waitLag(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// outbox_cdc_lag_seconds reads 0 once the source says nothing is pending
// (an end without a commit time), instead of the delay of the last row
// (MySQL) or the time since it (Postgres), and a row the sink does not
// acknowledge makes it grow, from its commit time: a stuck or halted
// connector never reads 0.
func TestPipelineLagZeroWhenNothingPending(t *testing.T) {
	src := &chanSource{txs: make(chan Tx)}
	sink := &gateSink{open: make(chan struct{})}
	close(sink.open)
	reg := prometheus.NewRegistry()
	cfg := DefaultPipelineConfig()
	cfg.CheckpointInterval = 0
	p, err := NewPipeline(cfg, src, idRouter{}, sink, lagCheckpointer{}, zerolog.Nop(), reg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	defer func() { cancel(); <-done }()

	lag := func() float64 { return regGauge(t, reg, "outbox_cdc_lag_seconds") }
	src.txs <- lagRow(1, time.Now().Add(-30*time.Second))
	waitLag(t, "checkpoint 1", func() bool { return src.ackedPos() == fakePos(1) })
	if v := lag(); v < 30 || v > 40 {
		t.Fatalf("lag %v after a row committed 30s ago, want about 30", v)
	}
	// Nothing pending any more (Postgres idle advance, MySQL heartbeat).
	src.txs <- Tx{End: fakePos(2)}
	waitLag(t, "checkpoint 2", func() bool { return src.ackedPos() == fakePos(2) })
	if v := lag(); v != 0 {
		t.Fatalf("lag %v once the source reported nothing pending, want 0", v)
	}
	time.Sleep(1100 * time.Millisecond)
	if v := lag(); v != 0 {
		t.Fatalf("idle lag grew to %v, want 0", v)
	}

	// A row the sink does not acknowledge: the lag is its age, growing.
	sink.open = make(chan struct{})
	src.txs <- lagRow(3, time.Now().Add(-90*time.Second))
	waitLag(t, "lag of the undelivered row", func() bool { return lag() >= 90 })
	src.txs <- Tx{End: fakePos(4)} // a marker behind it changes nothing
	time.Sleep(200 * time.Millisecond)
	if v := lag(); v < 90 {
		t.Fatalf("lag %v with a row committed 90s ago still undelivered, want at least 90", v)
	}
	close(sink.open)
	waitLag(t, "checkpoint 4", func() bool { return src.ackedPos() == fakePos(4) })
	if v := lag(); v != 0 {
		t.Fatalf("lag %v once everything was delivered and the source has nothing pending, want 0", v)
	}
}

// haltSink rejects every record permanently.
type haltSink struct{}

func (haltSink) Write(context.Context, []Record) error { return errors.New("refused for good") }
func (haltSink) Ready() error                          { return nil }
func (haltSink) Close() error                          { return nil }

// A connector that halted with a row undelivered reports that row's age,
// not 0 (the gauge started at 0 and nothing was ever checkpointed).
func TestPipelineHaltedLagNotZero(t *testing.T) {
	src := &chanSource{txs: make(chan Tx, 2)}
	reg := prometheus.NewRegistry()
	p, err := NewPipeline(DefaultPipelineConfig(), src, idRouter{}, haltSink{}, lagCheckpointer{}, zerolog.Nop(), reg)
	if err != nil {
		t.Fatal(err)
	}
	src.txs <- lagRow(1, time.Now().Add(-120*time.Second))
	src.txs <- Tx{End: fakePos(2)}
	if err := p.Run(context.Background()); err == nil {
		t.Fatal("Run returned nil with a sink that refuses everything")
	}
	if v := regGauge(t, reg, "outbox_cdc_lag_seconds"); v < 120 {
		t.Fatalf("lag %v after halting on a row committed 120s ago, want at least 120", v)
	}
}
