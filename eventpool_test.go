package outboxcdc

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// TestEventPoolReusesZeroedSlicesWithinBounds: a slice put back is handed
// out again, zeroed to its capacity, for a request of its class it fits;
// a slice has at most twice the room asked for; the pool keeps at most
// MaxPooledEvents Events, dropping other classes before the newest.
func TestEventPoolReusesZeroedSlicesWithinBounds(t *testing.T) {
	p := new(EventPool)
	s := p.Get(100)
	if len(s) != 0 || cap(s) < 100 {
		t.Fatalf("Get(100): len %d cap %d", len(s), cap(s))
	}
	for i := 0; i < 90; i++ {
		s = append(s, Event{MessageID: fmt.Sprint(i), Payload: []byte("x"), Extra: []Column{{Name: "c"}}})
	}
	s[:cap(s)][99].Origin = "past len" // the pool clears to the capacity
	p.Put(s)
	r := p.Get(80) // same class ([64, 128)), fits
	if &r[:1][0] != &s[:1][0] {
		t.Fatal("Get(80) after Put of a 100-Event slice allocated instead of reusing it")
	}
	for i, e := range r[:cap(r)] {
		if e.MessageID != "" || e.Payload != nil || e.Extra != nil || e.Origin != "" {
			t.Fatalf("reused Event %d not zeroed: %+v", i, e)
		}
	}
	if events, reused := p.Allocated(); events != 100 || reused != 1 {
		t.Fatalf("Allocated() = %d events, %d reused; want 100, 1", events, reused)
	}
	p.Put(r)
	if g := p.Get(120); cap(g) < 120 {
		t.Fatalf("Get(120) cap %d", cap(g))
	} else if &g[:1][0] == &r[:1][0] {
		t.Fatal("Get(120) returned a slice with room for 100")
	}
	if g := p.Get(40); cap(g) >= 80 {
		t.Fatalf("Get(40) returned cap %d: more than twice the room asked for", cap(g))
	}

	// Bounds: one class fills the pool, another takes it over.
	p = new(EventPool)
	var small [][]Event
	for i := 0; i < MaxPooledEvents/64+10; i++ {
		small = append(small, p.Get(64))
	}
	for _, s := range small {
		p.Put(s)
	}
	if p.held > MaxPooledEvents {
		t.Fatalf("pool holds %d Events, bound %d", p.held, MaxPooledEvents)
	}
	big := p.Get(1000)
	p.Put(big)
	if n := len(p.classes[poolClass(1000)]); n != 1 {
		t.Fatalf("a full pool of another class did not make room for the slice put: %d kept", n)
	}
	if p.held > MaxPooledEvents {
		t.Fatalf("pool holds %d Events, bound %d", p.held, MaxPooledEvents)
	}
	p.Put(make([]Event, 0, MaxPooledEvents+1)) // too large to keep
	if p.held > MaxPooledEvents {
		t.Fatalf("pool holds %d Events, bound %d", p.held, MaxPooledEvents)
	}

	var nilPool *EventPool // allocates, keeps nothing
	nilPool.Put(nilPool.Grow(nilPool.Get(3), 10))
}

// pooledSource sends txCount transactions of varying sizes whose Events
// come from its pool, as the binlog and wal sources do: message ids
// "i.j", a fresh payload and origin per row.
type pooledSource struct {
	txCount int
	pool    EventPool
}

func pooledSize(i int) int { return 1 + (i*7)%23 }

func (s *pooledSource) Run(ctx context.Context, _ Position, out chan<- Tx) error {
	for i := 1; i <= s.txCount; i++ {
		n := pooledSize(i)
		tx := Tx{End: fakePos(i), CommitTime: time.Now(), Pool: &s.pool, Events: s.pool.Get(n)}
		for j := 0; j < n; j++ {
			id := fmt.Sprintf("%d.%d", i, j)
			tx.Events = append(tx.Events, Event{
				MessageID: id, AggregateID: strconv3(j), Payload: []byte(`{"m":"` + id + `"}`),
				Origin: "tx " + id,
			})
		}
		select {
		case out <- tx:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return errExhausted
}
func (s *pooledSource) Ack(Position) {}
func (s *pooledSource) Ready() error { return nil }

func strconv3(j int) string { return fmt.Sprint(j % 3) }

// TestPipelineReleasesEventsOnlyWhenWritten: the pipeline gives a Tx's
// Events back to its source's pool, so a drain allocates Events for what is
// in flight only, and it does so only once nothing reads them: the
// dead-letter records (built from the Events while the batch is written),
// the observer's message ids (read after the write) and every record carry
// their own row, although the source refills released slices meanwhile.
func TestPipelineReleasesEventsOnlyWhenWritten(t *testing.T) {
	const txCount = 600
	var ids, rejected, bad []string
	for i := 1; i <= txCount; i++ {
		for j := 0; j < pooledSize(i); j++ {
			id := fmt.Sprintf("%d.%d", i, j)
			ids = append(ids, id)
			switch {
			case i%37 == 0 && j == 0:
				rejected = append(rejected, id) // refused by the sink: diverted while written
			case i%41 == 0 && j == 0:
				bad = append(bad, id) // refused by the router
			}
		}
	}
	src := &pooledSource{txCount: txCount}
	sink := newRejectingSink(rejected...)
	cfg := dlqConfig()
	cfg.MaxBatchRecords, cfg.QueueTransactions, cfg.QueueBytes = 16, 1, 64<<10
	badRows := multiRouter{}
	for _, id := range bad {
		badRows[id] = true
	}
	p, err := NewPipeline(cfg, src, badRows, sink, &memCheckpointer{t: t}, zerolog.Nop(), nil)
	if err != nil {
		t.Fatal(err)
	}
	obs := &idObserver{}
	p.Observe(obs)
	if err := p.Run(context.Background()); !errors.Is(err, errExhausted) {
		t.Fatal(err)
	}

	if !slices.Equal(obs.ids, ids) {
		t.Fatalf("the observer heard %d ids, want %d in order; first difference at %d", len(obs.ids), len(ids), firstDiff(obs.ids, ids))
	}
	sink.mu.Lock()
	defer sink.mu.Unlock()
	var got []string
	for i := range sink.written {
		r := &sink.written[i]
		if r.Topic == "dlq" {
			id, _ := headerOf(r, HeaderMessageID)
			if origin, _ := headerOf(r, HeaderOrigin); origin != "tx "+id {
				t.Errorf("dead-letter record of %s names origin %q", id, origin)
			}
			if agg, _ := headerOf(r, HeaderAggregateID); agg != strconv3(atoiAfterDot(id)) {
				t.Errorf("dead-letter record of %s names aggregate id %q", id, agg)
			}
			got = append(got, id)
		} else {
			id, _ := headerOf(r, "id")
			if string(r.Key) != strconv3(atoiAfterDot(id)) {
				t.Errorf("record %s has key %q", id, r.Key)
			}
			got = append(got, id)
		}
		if id := got[len(got)-1]; string(r.Value) != `{"m":"`+id+`"}` {
			t.Errorf("record %s carries %q", id, r.Value)
		}
	}
	// Each rejected row was acknowledged once as a dead letter, after the
	// rows of its batch before it were written (then again): compare the
	// last copy of each.
	if last := lastCopies(got); !slices.Equal(last, ids) {
		t.Fatalf("records %d, want %d in order; first difference at %d", len(last), len(ids), firstDiff(last, ids))
	}
	if len(sink.dead) != len(rejected)+len(bad) {
		t.Fatalf("%d dead letters, want %d", len(sink.dead), len(rejected)+len(bad))
	}

	events, reused := src.pool.Allocated()
	t.Logf("%d rows in %d transactions: %d Events allocated, %d slices reused", len(ids), txCount, events, reused)
	if events > int64(len(ids)/4) {
		t.Fatalf("%d Events allocated for %d rows: the pipeline does not give Events back", events, len(ids))
	}
}

func atoiAfterDot(id string) int {
	var j int
	fmt.Sscan(id[strings.IndexByte(id, '.')+1:], &j)
	return j
}

// lastCopies keeps the last occurrence of each id, in the order of those.
func lastCopies(ids []string) []string {
	last := map[string]int{}
	for i, id := range ids {
		last[id] = i
	}
	var out []string
	for i, id := range ids {
		if last[id] == i {
			out = append(out, id)
		}
	}
	return out
}

func firstDiff(a, b []string) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}
