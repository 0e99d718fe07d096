package outboxcdc

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// witnessStore is an in-memory Checkpointer for the witness.
type witnessStore struct {
	mu    sync.Mutex
	pos   Position
	saves int
}

func (w *witnessStore) Load(context.Context) (Position, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.pos, nil
}
func (w *witnessStore) Save(_ context.Context, p Position) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.pos = p
	w.saves++
	return nil
}
func (w *witnessStore) String() string { return "test witness" }
func (w *witnessStore) at() Position {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.pos
}

// TestPipelineWitnessRefusesMissingProgress: an exactly-once connector
// whose sink lost its committed position (progress topic deleted, record
// expired, or a switch from at-least-once) but whose witness shows it ran
// before refuses to start, naming the position and both ways out, and
// sends nothing; asked for a fresh start, it starts where the source says.
func TestPipelineWitnessRefusesMissingProgress(t *testing.T) {
	sink := &openAtomicSink{t: t, visible: map[string]int{}}
	w := &witnessStore{pos: fakePos(7)}
	p, err := NewPipeline(fragBatches(), &fakeSource{txCount: 20, perTx: 1}, idRouter{}, sink, nil, zerolog.Nop(), nil)
	if err != nil {
		t.Fatal(err)
	}
	p.Witness(w, false)
	err = p.Run(context.Background())
	if !errors.Is(err, ErrProgressMissing) || !strings.Contains(err.Error(), "fake:7") ||
		!strings.Contains(err.Error(), "position set --to fake:7") || !strings.Contains(err.Error(), "--fresh-start") {
		t.Fatalf("Run = %v; want a refusal naming the witness position and the ways out", err)
	}
	if len(sink.visible) != 0 {
		t.Fatalf("%d records sent although the start was refused", len(sink.visible))
	}

	p, err = NewPipeline(fragBatches(), &fakeSource{txCount: 20, perTx: 1}, idRouter{}, sink, nil, zerolog.Nop(), nil)
	if err != nil {
		t.Fatal(err)
	}
	p.Witness(w, true)
	if err := p.Run(context.Background()); !errors.Is(err, errExhausted) {
		t.Fatalf("fresh start: %v", err)
	}
	if sink.pos != fakePos(20) || len(sink.visible) != 20 {
		t.Fatalf("fresh start delivered %d records, position %s", len(sink.visible), sink.pos)
	}
}

// TestPipelineWitnessFollowsCommits: the witness is written at start when
// it lags the committed position, and after commits.
func TestPipelineWitnessFollowsCommits(t *testing.T) {
	sink := &openAtomicSink{t: t, visible: map[string]int{}, pos: fakePos(3)}
	w := &witnessStore{}
	src := &fakeSource{txCount: 30, perTx: 2, stayOpen: true}
	p, err := NewPipeline(fragBatches(), src, idRouter{}, sink, nil, zerolog.Nop(), nil)
	if err != nil {
		t.Fatal(err)
	}
	p.Witness(w, false)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	deadline := time.Now().Add(10 * time.Second)
	for w.at() != fakePos(30) && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if w.at() != fakePos(30) {
		t.Fatalf("witness at %s after the commits, want fake:30", w.at())
	}
	// A restart with the witness present and the progress in place runs.
	p, _ = NewPipeline(fragBatches(), &fakeSource{txCount: 30, perTx: 2, stayOpen: true}, idRouter{}, sink, nil, zerolog.Nop(), nil)
	p.Witness(w, false)
	ctx, cancel = context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := p.Run(ctx); err != nil {
		t.Fatalf("restart: %v", err)
	}
}
