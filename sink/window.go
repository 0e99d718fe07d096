package sink

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
)

// Fault is why a connection became unusable: the first reason recorded
// wins, and Lost is closed at that moment. Every wait for an answer on
// the connection selects on Lost, so a failed connection (an answer
// overdue, the socket lost, a channel closed by the broker) releases all
// of them at once. The zero value is ready to use.
type Fault struct {
	mu   sync.Mutex
	err  error
	lost chan struct{}
}

// Fail records err as the connection's failure unless one is recorded
// already, and returns the recorded one.
func (f *Fault) Fail(err error) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err == nil {
		f.err = err
		if f.lost == nil {
			f.lost = make(chan struct{})
		}
		close(f.lost)
	}
	return f.err
}

// Err returns the recorded failure, nil while the connection is usable.
func (f *Fault) Err() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}

// Lost is closed once a failure is recorded.
func (f *Fault) Lost() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.lost == nil {
		f.lost = make(chan struct{})
	}
	return f.lost
}

// Pending is the broker's answer, still to come, to one published record.
type Pending interface {
	// Await waits for the answer and then sets the record's outcome (its
	// Msg's Err and Duplicate) and returns true. It returns false, leaving
	// the Msg alone, when stop is closed first; an answer already there by
	// then still counts.
	Await(stop <-chan struct{}) bool
}

// Publish sends one record without waiting for its answer. It returns
// the answer to await; or nil, nil after setting m.Err, for a record this
// connection can never send (a header it cannot carry); or the error that
// made the connection unusable, which becomes the outcome of m and of
// every record after it.
type Publish func(m *Msg) (Pending, error)

// SendWindow is Conn.Send for a client that publishes asynchronously
// (RabbitMQ's deferred confirms, JetStream's PubAck futures). It
// publishes msgs in order, keeping at most max_in_flight records and
// max_in_flight_bytes unanswered, and waits for the answers oldest first.
//
// The attempt has one deadline at a time: the oldest unanswered record's,
// ack_timeout after it was published. When it passes, the connection is
// failed through fault, and every record still unanswered gets that error
// at once: a silent path costs one ack_timeout per attempt, however many
// records are in flight. The deadline runs on a timer of its own, so it
// also passes while a publish is blocked on a full socket; a Conn that
// aborts its socket once fault.Lost is closed unblocks that publish too.
// A failure recorded any other way (the client saw the socket die, the
// broker closed the channel) releases the waits the same way. answer
// names what the broker sends, for the timeout's message ("publisher
// confirm", "PubAck"). SendWindow returns ctx's error when ctx ends
// first.
func SendWindow(ctx context.Context, cfg Config, fault *Fault, answer string, msgs []*Msg, publish Publish) error {
	type flight struct {
		m    *Msg
		p    Pending
		due  time.Time
		size int64
	}
	q := make([]flight, 0, min(len(msgs), cfg.MaxInFlight))
	head := 0
	var used int64
	// stop is closed when ctx ends or the connection fails.
	stop := make(chan struct{})
	var once sync.Once
	release := func() { once.Do(func() { close(stop) }) }
	defer release()
	go func() {
		select {
		case <-ctx.Done():
		case <-fault.Lost():
		case <-stop:
		}
		release()
	}()
	// overdue fails the connection when the oldest unanswered record's
	// deadline passes; it is set to the head's deadline whenever the head
	// changes.
	overdue := time.AfterFunc(time.Hour, func() {
		fault.Fail(outboxcdc.Transient(fmt.Errorf("no %s within sink.ack_timeout (%s)", answer, cfg.AckTimeout)))
	})
	overdue.Stop()
	defer overdue.Stop()
	settle := func() error {
		f := &q[head]
		if !f.p.Await(stop) {
			if err := ctx.Err(); err != nil {
				return err
			}
			f.m.Err = fault.Err()
		}
		used -= f.size
		*f = flight{}
		head++
		if head < len(q) {
			overdue.Reset(time.Until(q[head].due))
		} else {
			overdue.Stop()
		}
		return nil
	}
	for i, m := range msgs {
		size := int64(m.Rec.Size())
		for n := len(q) - head; n > 0 && (n >= cfg.MaxInFlight || used+size > cfg.MaxInFlightBytes); n-- {
			if err := settle(); err != nil {
				return err
			}
		}
		if err := fault.Err(); err != nil {
			for _, r := range msgs[i:] {
				r.Err = err
			}
			break
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		sent := time.Now()
		idle := head == len(q)
		if idle { // a publish that blocks (a full socket) is due too
			overdue.Reset(cfg.AckTimeout)
		}
		p, err := publish(m)
		if err != nil {
			err = fault.Fail(err)
			for _, r := range msgs[i:] {
				r.Err = err
			}
			break
		}
		if p == nil {
			if m.Err == nil {
				m.Err = outboxcdc.Permanent(errors.New("not sent (no reason given)"), "")
			}
			if idle {
				overdue.Stop()
			}
			continue
		}
		q = append(q, flight{m: m, p: p, due: sent.Add(cfg.AckTimeout), size: size})
		used += size
	}
	for head < len(q) {
		if err := settle(); err != nil {
			return err
		}
	}
	return nil
}
