package outboxcdc

import (
	"context"
	"sync"
)

// Gate pauses a pipeline between transactions (PUT /connectors/NAME/pause).
// While it is closed the pipeline takes no further transaction from its
// source: what it had taken is still written and checkpointed, then
// nothing is read from the source's channel, written or checkpointed, and
// the position stays where it is. The source keeps its connection (and
// with it a Postgres slot's retained WAL grows); a source blocked on its
// channel is back-pressured as by a slow sink. A transaction split in
// fragments (Tx.More) is taken whole before the gate holds, so a pause
// never stops inside a transaction.
//
// Pause, Resume and Paused may be called from any goroutine; the pipeline
// waits on the gate from its intake goroutine. A Gate outlives pipeline
// runs: the supervisor keeps one per connector, so a paused connector
// that restarts (POST .../restart, a lost HA lock) stays paused.
type Gate struct {
	mu     sync.Mutex
	paused bool
	open   chan struct{} // closed while not paused
}

// NewGate returns an open gate.
func NewGate() *Gate {
	g := &Gate{open: make(chan struct{})}
	close(g.open)
	return g
}

// Pause closes the gate; it reports whether it was open.
func (g *Gate) Pause() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.paused {
		return false
	}
	g.paused, g.open = true, make(chan struct{})
	return true
}

// Resume opens the gate; it reports whether it was closed.
func (g *Gate) Resume() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.paused {
		return false
	}
	g.paused = false
	close(g.open)
	return true
}

// Paused reports whether the gate is closed.
func (g *Gate) Paused() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.paused
}

// wait blocks while the gate is closed; false when ctx ended first.
func (g *Gate) wait(ctx context.Context) bool {
	if g == nil {
		return true
	}
	g.mu.Lock()
	open := g.open
	g.mu.Unlock()
	select {
	case <-open:
		return true
	case <-ctx.Done():
		return false
	}
}

// SetGate makes the pipeline wait on g between transactions. Call it
// before Run.
func (p *Pipeline) SetGate(g *Gate) { p.gate = g }
