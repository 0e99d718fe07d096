package outboxcdc

import (
	"math/bits"
	"sync"
)

// EventPool is a source's free list of Tx.Events slices. The source takes
// a slice with Get (or Grow), fills it, and sends it in a Tx whose Pool is
// set; the pipeline puts the slice back (Tx.Release) once nothing reads
// its Events any more, and the source fills it again for a later
// transaction. A drain of many transactions then allocates its Events
// slices once instead of once per transaction.
//
// Only the slice's array is reused, never what the Events point to: the
// payloads, strings and Extra columns a record shares stay as the source
// made them. Put zeroes the Events, so nothing a released Event held stays
// reachable from the pool.
//
// Slices are kept by capacity class (a power of two and up to twice it), so
// a slice handed out has at most twice the room asked for, as a fresh one
// sized by the previous transaction would. The pool holds at most
// MaxPooledEvents Events in all; beyond that, slices of other classes are
// dropped first, then the one being put.
//
// Get, Grow and Put may be called from any goroutine. A nil *EventPool is
// usable: it allocates and keeps nothing.
type EventPool struct {
	mu      sync.Mutex
	classes [poolClasses][][]Event
	held    int // Events (capacity) held in classes
	made    int64
	reused  int64
}

// MaxPooledEvents bounds the Events an EventPool keeps (about 1.6 MB): one
// batch of the pipeline's at its largest and a transaction more, which is
// what comes back at once while the source waits to fill them.
const MaxPooledEvents = 2 * MaxFragmentEvents

// poolClasses: class c holds capacities [2^c, 2^(c+1)); the largest class
// ends past MaxPooledEvents.
const poolClasses = 14

// poolSearch is how many slices of a class Get looks at for one large
// enough.
const poolSearch = 4

func poolClass(n int) int { return bits.Len(uint(n)) - 1 }

// Get returns an empty slice with room for at least n Events (at least 1).
func (p *EventPool) Get(n int) []Event {
	n = max(n, 1)
	if p == nil {
		return make([]Event, 0, n)
	}
	c := poolClass(n)
	p.mu.Lock()
	if c < poolClasses {
		free := p.classes[c]
		for i := len(free) - 1; i >= 0 && i >= len(free)-poolSearch; i-- {
			if s := free[i]; cap(s) >= n {
				last := len(free) - 1
				free[i] = free[last]
				free[last] = nil
				p.classes[c] = free[:last]
				p.held -= cap(s)
				p.reused++
				p.mu.Unlock()
				return s
			}
		}
	}
	p.made += int64(n)
	p.mu.Unlock()
	return make([]Event, 0, n)
}

// Grow returns evs with room for n more Events, like slices.Grow, but
// takes the larger array from the pool and puts the old one back.
func (p *EventPool) Grow(evs []Event, n int) []Event {
	if n <= cap(evs)-len(evs) {
		return evs
	}
	s := append(p.Get(len(evs)+n), evs...)
	p.Put(evs)
	return s
}

// Put zeroes evs (to its capacity) and keeps it for a later Get. The caller
// must hold the only reference to evs's Events: no Event of it may be read
// or written after Put, and a slice must be put once.
func (p *EventPool) Put(evs []Event) {
	n := cap(evs)
	if p == nil || n == 0 {
		return
	}
	c := poolClass(n)
	if c >= poolClasses || n > MaxPooledEvents {
		return
	}
	evs = evs[:n]
	clear(evs)
	evs = evs[:0]
	p.mu.Lock()
	defer p.mu.Unlock()
	// Make room by dropping slices of other classes, the largest first:
	// the transactions now flowing decide what the pool holds.
	for k := poolClasses - 1; k >= 0 && p.held+n > MaxPooledEvents; k-- {
		for k != c && len(p.classes[k]) > 0 && p.held+n > MaxPooledEvents {
			free := p.classes[k]
			last := len(free) - 1
			p.held -= cap(free[last])
			free[last] = nil
			p.classes[k] = free[:last]
		}
	}
	if p.held+n > MaxPooledEvents {
		return
	}
	p.classes[c] = append(p.classes[c], evs)
	p.held += n
}

// Allocated returns how many Events Get has allocated (the capacities of
// the slices it made) and how many slices it handed out again.
func (p *EventPool) Allocated() (events, reused int64) {
	if p == nil {
		return 0, 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.made, p.reused
}
