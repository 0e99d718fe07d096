package outboxcdc

import (
	"context"
	"errors"
	"sync"
)

// ByteBudget bounds bytes held at once: the pipeline's queue of
// transactions, a sink's records sent and not yet answered. An amount
// larger than the limit is admitted when nothing else is held, so it
// cannot wait forever. Safe for concurrent use.
type ByteBudget struct {
	mu    sync.Mutex
	used  int64
	limit int64
	wake  chan struct{} // closed on release; made only while someone waits
}

// NewByteBudget returns a budget of limit bytes.
func NewByteBudget(limit int64) *ByteBudget { return &ByteBudget{limit: limit} }

// ErrBudgetStopped is what Acquire returns when its stop channel closed
// first.
var ErrBudgetStopped = errors.New("stopped while waiting for the byte budget")

// Acquire waits until n bytes fit and takes them. It returns ctx's error
// when ctx ends first, ErrBudgetStopped when stop (nil: never) is closed
// first; then nothing is taken.
func (b *ByteBudget) Acquire(ctx context.Context, stop <-chan struct{}, n int64) error {
	b.mu.Lock()
	for b.used > 0 && b.used+n > b.limit {
		if b.wake == nil {
			b.wake = make(chan struct{})
		}
		wake := b.wake
		b.mu.Unlock()
		select {
		case <-wake:
		case <-ctx.Done():
			return ctx.Err()
		case <-stop:
			return ErrBudgetStopped
		}
		b.mu.Lock()
	}
	b.used += n
	b.mu.Unlock()
	return nil
}

// TryAcquire takes n bytes if they fit now (as Acquire admits them: one
// larger than the limit when nothing is held) and reports whether it did.
func (b *ByteBudget) TryAcquire(n int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.used > 0 && b.used+n > b.limit {
		return false
	}
	b.used += n
	return true
}

// Release gives n bytes back.
func (b *ByteBudget) Release(n int64) {
	b.mu.Lock()
	b.used -= n
	if b.wake != nil {
		close(b.wake)
		b.wake = nil
	}
	b.mu.Unlock()
}

// InUse is the bytes held now.
func (b *ByteBudget) InUse() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}
