package outboxcdc

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

func TestByteBudgetBounds(t *testing.T) {
	s := NewByteBudget(100)
	ctx := context.Background()
	if err := s.Acquire(ctx, nil, 500); err != nil { // larger than the limit, alone
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	acquired := make(chan struct{})
	go func() {
		defer wg.Done()
		if err := s.Acquire(ctx, nil, 10); err != nil {
			t.Error(err)
		}
		close(acquired)
	}()
	select {
	case <-acquired:
		t.Fatal("acquired past the limit")
	case <-time.After(50 * time.Millisecond):
	}
	s.Release(500)
	wg.Wait()
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := s.Acquire(cctx, nil, 95); !errors.Is(err, context.Canceled) {
		t.Fatalf("want Canceled, got %v", err)
	}
}
