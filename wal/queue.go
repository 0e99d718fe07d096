package wal

import (
	"context"
	"sync"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
)

// queue holds whole decoded transactions between the goroutine that reads
// the replication stream and the one that sends to the pipeline's channel.
// push never blocks: the reader checks full() before reading more and,
// while it is full, only services the connection (status updates), so the
// walsender is never timed out however long the pipeline blocks. Memory is
// bounded by limit plus one transaction (the one being decoded when the
// limit is crossed; a Tx is delivered whole, so it cannot be split).
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

func (q *queue) push(tx outboxcdc.Tx, bytes int) {
	q.mu.Lock()
	if q.head > 0 && (q.head == len(q.items) || q.head >= 1024 && q.head*2 >= len(q.items)) {
		n := copy(q.items, q.items[q.head:])
		clear(q.items[n:])
		q.items, q.head = q.items[:n], 0
	}
	q.items = append(q.items, queued{tx: tx, bytes: bytes})
	q.bytes += bytes
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

// pop waits for the next transaction; false when ctx is done or the queue
// is closed and empty.
func (q *queue) pop(ctx context.Context) (outboxcdc.Tx, bool) {
	for {
		q.mu.Lock()
		if q.head < len(q.items) {
			it := q.items[q.head]
			q.items[q.head] = queued{}
			q.head++
			q.bytes -= it.bytes
			q.mu.Unlock()
			signal(q.space)
			return it.tx, true
		}
		closed := q.closed
		q.mu.Unlock()
		if closed {
			return outboxcdc.Tx{}, false
		}
		select {
		case <-q.ready:
		case <-ctx.Done():
			return outboxcdc.Tx{}, false
		}
	}
}
