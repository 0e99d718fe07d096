package kafka

import (
	"context"
	"errors"
	"sync"
)

// byteSem bounds the bytes of records handed to the producer and not yet
// answered. A record larger than the limit is admitted when nothing else is
// in flight, so it cannot block forever.
type byteSem struct {
	mu    sync.Mutex
	used  int64
	limit int64
	wake  chan struct{} // closed on release; made only while someone waits
}

var errAborted = errors.New("aborted")

// acquire waits until n bytes fit, ctx is done (ctx.Err()), abort is
// closed (errAborted) or stop is closed (errClosed).
func (s *byteSem) acquire(ctx context.Context, abort, stop <-chan struct{}, n int64) error {
	s.mu.Lock()
	for s.used > 0 && s.used+n > s.limit {
		if s.wake == nil {
			s.wake = make(chan struct{})
		}
		wake := s.wake
		s.mu.Unlock()
		select {
		case <-wake:
		case <-ctx.Done():
			return ctx.Err()
		case <-abort:
			return errAborted
		case <-stop:
			return errClosed
		}
		s.mu.Lock()
	}
	s.used += n
	s.mu.Unlock()
	return nil
}

func (s *byteSem) release(n int64) {
	s.mu.Lock()
	s.used -= n
	if s.wake != nil {
		close(s.wake)
		s.wake = nil
	}
	s.mu.Unlock()
}

func (s *byteSem) inUse() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.used
}
