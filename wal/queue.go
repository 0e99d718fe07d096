package wal

import (
	"context"
	"sync"

	"github.com/jackc/pglogrepl"
	outboxcdc "github.com/outbox-cdc/outbox-cdc"
)

// queue holds decoded transactions and fragments between the goroutine
// that reads the replication stream and the one that sends to the
// pipeline's channel. push never blocks: the reader checks full() before
// reading more and, while it is full, only services the connection (status
// updates), so the walsender is never timed out however long the pipeline
// blocks. Memory is bounded by limit plus one fragment (the one being
// decoded when the limit is crossed; at most MaxFragmentEvents events or
// about MaxFragmentBytes).
type queue struct {
	limit int

	mu     sync.Mutex
	items  []queued
	head   int
	bytes  int
	closed bool

	ready chan struct{} // an item was pushed or the queue was closed
	space chan struct{} // an item was popped
}

type queued struct {
	tx    outboxcdc.Tx
	bytes int
	final pglogrepl.LSN // commit LSN of tx's source transaction (0: none)
}

func newQueue(limit int) *queue {
	return &queue{limit: limit, ready: make(chan struct{}, 1), space: make(chan struct{}, 1)}
}

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

func (q *queue) push(it queued) {
	q.mu.Lock()
	if q.head > 0 && (q.head == len(q.items) || q.head >= 1024 && q.head*2 >= len(q.items)) {
		n := copy(q.items, q.items[q.head:])
		clear(q.items[n:])
		q.items, q.head = q.items[:n], 0
	}
	q.items = append(q.items, it)
	q.bytes += it.bytes
	q.mu.Unlock()
	signal(q.ready)
}

func (q *queue) full() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.bytes >= q.limit
}

func (q *queue) empty() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.head == len(q.items)
}

// close makes pop return false once the queue is drained.
func (q *queue) close() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	signal(q.ready)
}

// pop waits for the next item; false when ctx is done or the queue is
// closed and empty.
func (q *queue) pop(ctx context.Context) (queued, bool) {
	for {
		q.mu.Lock()
		if q.head < len(q.items) {
			it := q.items[q.head]
			q.items[q.head] = queued{}
			q.head++
			q.bytes -= it.bytes
			q.mu.Unlock()
			signal(q.space)
			return it, true
		}
		closed := q.closed
		q.mu.Unlock()
		if closed {
			return queued{}, false
		}
		select {
		case <-q.ready:
		case <-ctx.Done():
			return queued{}, false
		}
	}
}
