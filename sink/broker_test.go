package sink

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
)

// script is a Conn whose broker answers as a test says: fail(attempt,
// index) returns the outcome of a record in an attempt. It keeps what the
// "broker" stored, in order, to check the order of the last copies.
type script struct {
	mu      sync.Mutex
	attempt int
	fail    func(attempt, index int) error
	stored  []stored
}

type stored struct {
	index, again int
	key          string
}

type scriptConn struct {
	s   *script
	err error
}

func (c *scriptConn) Send(_ context.Context, msgs []*Msg) error {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	c.s.attempt++
	for _, m := range msgs {
		m.Err = c.s.fail(c.s.attempt, m.Index)
		if m.Err == nil {
			c.s.stored = append(c.s.stored, stored{m.Index, m.Again, string(m.Rec.Key)})
		} else if outboxcdc.IsTransient(m.Err) {
			c.err = m.Err
		}
	}
	return nil
}
func (c *scriptConn) Err() error                  { return c.err }
func (c *scriptConn) Probe(context.Context) error { return nil }
func (c *scriptConn) Close() error                { return nil }

func newWriter(t *testing.T, s *script) *Writer {
	cfg := DefaultConfig()
	cfg.RetryBackoffMin, cfg.RetryBackoffMax = time.Millisecond, 5*time.Millisecond
	w, err := New("test", cfg, func(context.Context) (Conn, error) { return &scriptConn{s: s}, nil }, zerolog.Nop(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	return w
}

func recs(n, keys int) []outboxcdc.Record {
	rs := make([]outboxcdc.Record, n)
	for i := range rs {
		rs[i] = outboxcdc.Record{Topic: "t", Key: []byte(fmt.Sprintf("k%d", i%keys)), Value: []byte("v"), MessageID: fmt.Sprint(i)}
	}
	return rs
}

// TestLastCopiesKeepKeyOrder: when a record fails transiently while later
// records of its key were acknowledged, those are sent again after it
// (with Again set), so each key's copies stored last are in commit order;
// records of other keys are not sent again.
func TestLastCopiesKeepKeyOrder(t *testing.T) {
	s := &script{fail: func(attempt, i int) error {
		if attempt == 1 && (i == 3 || i == 10) {
			return outboxcdc.Transient(errors.New("nack"))
		}
		return nil
	}}
	w := newWriter(t, s)
	rs := recs(20, 3)
	if err := w.Write(context.Background(), rs); err != nil {
		t.Fatal(err)
	}
	// Key k0 (3, 6, ...) failed at 3, key k1 (1, 4, 7, 10, ...) at 10.
	last := map[string]int{}
	resent := map[int]int{}
	for _, st := range s.stored {
		if prev, ok := last[st.key]; ok && st.index < prev {
			// An earlier record after a later one: allowed only if the
			// later one is stored again after it.
			last[st.key] = st.index
			continue
		}
		last[st.key] = st.index
		if st.again > 0 {
			resent[st.index] = st.again
		}
	}
	for k, i := range last {
		want := map[string]int{"k0": 18, "k1": 19, "k2": 17}[k]
		if i != want {
			t.Fatalf("key %s: last copy is record %d, want %d (stored %v)", k, i, want, s.stored)
		}
	}
	// Records of k0 after 3 and of k1 after 10 were acknowledged once and
	// sent again marked; k2 was never sent again.
	for _, i := range []int{6, 9, 12, 13, 16, 19} {
		if resent[i] != 1 {
			t.Errorf("record %d: again %d, want 1", i, resent[i])
		}
	}
	for _, st := range s.stored {
		if st.key == "k2" && st.again > 0 {
			t.Fatalf("k2 record %d sent again", st.index)
		}
	}
}

// TestPermanentNamesTheRecord: a permanent failure ends the Write at once
// with the record's index, also when transient failures came before it;
// NoRecord failures name none.
func TestPermanentNamesTheRecord(t *testing.T) {
	s := &script{fail: func(attempt, i int) error {
		switch i {
		case 2:
			return outboxcdc.Transient(errors.New("nack"))
		case 5:
			return outboxcdc.Permanent(errors.New("unroutable"), "bind a queue")
		}
		return nil
	}}
	err := newWriter(t, s).Write(context.Background(), recs(10, 3))
	var re outboxcdc.RecordError
	if !errors.As(err, &re) {
		t.Fatalf("Write = %v", err)
	}
	if i, perm := re.FailedRecord(); i != 5 || !perm {
		t.Fatalf("FailedRecord = %d, %v", i, perm)
	}
	s = &script{fail: func(int, int) error { return NoRecord(outboxcdc.Permanent(errors.New("channel closed: 404"), "")) }}
	err = newWriter(t, s).Write(context.Background(), recs(3, 3))
	if !errors.As(err, &re) {
		t.Fatalf("Write = %v", err)
	}
	if i, perm := re.FailedRecord(); i != -1 || !perm {
		t.Fatalf("FailedRecord = %d, %v", i, perm)
	}
}

// TestTooLarge: a record above max_message_bytes fails before any send.
func TestTooLarge(t *testing.T) {
	s := &script{fail: func(int, int) error { return nil }}
	w := newWriter(t, s)
	rs := recs(5, 1)
	rs[3].Value = make([]byte, 2<<20)
	err := w.Write(context.Background(), rs)
	var re outboxcdc.RecordError
	if !errors.As(err, &re) {
		t.Fatalf("Write = %v", err)
	}
	if i, perm := re.FailedRecord(); i != 3 || !perm || len(s.stored) != 0 {
		t.Fatalf("FailedRecord = %d, %v; stored %d", i, perm, len(s.stored))
	}
}

// TestCloseEndsWrite: Close makes a Write that keeps failing return a
// permanent error at once.
func TestCloseEndsWrite(t *testing.T) {
	s := &script{fail: func(int, int) error { return outboxcdc.Transient(errors.New("down")) }}
	w := newWriter(t, s)
	done := make(chan error, 1)
	go func() { done <- w.Write(context.Background(), recs(3, 1)) }()
	time.Sleep(50 * time.Millisecond)
	w.Close()
	select {
	case err := <-done:
		if !errors.Is(err, ErrClosed) {
			t.Fatalf("Write = %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Write did not return after Close")
	}
}
