package outboxcdc

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// recordErr is a sink's permanent per-record error, as sink.Error is.
type recordErr struct {
	index int
	msg   string
}

func (e *recordErr) Error() string                  { return e.msg }
func (e *recordErr) FailedRecord() (int, bool)      { return e.index, true }
func headerOf(r *Record, key string) (string, bool) { return headerValue(r.Headers, key) }

func headerValue(hs []Header, key string) (string, bool) {
	for _, h := range hs {
		if h.Key == key {
			return string(h.Value), true
		}
	}
	return "", false
}

// rejectingSink acknowledges records in order until it meets one it
// rejects: a record whose id is in reject, or a dead-letter record when
// rejectDLQ says so. It then returns a RecordError for that record; the
// records before it in the write were acknowledged (a partial write).
type rejectingSink struct {
	mu        sync.Mutex
	reject    map[string]bool
	rejectDLQ func(r *Record) bool
	written   []Record
	acked     map[string]int // original records by id
	dead      map[string]int // dead-letter records by outbox_cdc.message_id
}

func newRejectingSink(reject ...string) *rejectingSink {
	s := &rejectingSink{reject: map[string]bool{}, acked: map[string]int{}, dead: map[string]int{}}
	for _, id := range reject {
		s.reject[id] = true
	}
	return s
}

func (s *rejectingSink) Write(_ context.Context, recs []Record) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range recs {
		r := &recs[i]
		if id, ok := headerOf(r, HeaderMessageID); ok && r.Topic == "dlq" {
			if s.rejectDLQ != nil && s.rejectDLQ(r) {
				return &recordErr{i, "dead-letter record too large"}
			}
			s.dead[id]++
		} else {
			id, _ := headerOf(r, "id")
			if s.reject[id] {
				return &recordErr{i, fmt.Sprintf("record %d rejected: MESSAGE_TOO_LARGE", i)}
			}
			s.acked[id]++
		}
		s.written = append(s.written, *r)
	}
	return nil
}
func (s *rejectingSink) Ready() error { return nil }
func (s *rejectingSink) Close() error { return nil }

// delivered says whether id was written as itself or as a dead letter.
func (s *rejectingSink) delivered(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.acked[id] > 0 || s.dead[id] > 0
}

// barrierCheckpointer fails the test when a checkpoint passes a row that
// was neither delivered nor dead-lettered.
type barrierCheckpointer struct {
	t     *testing.T
	pos   Position
	perTx int
	sink  *rejectingSink
}

func (c *barrierCheckpointer) Load(context.Context) (Position, error) { return c.pos, nil }
func (c *barrierCheckpointer) Save(_ context.Context, pos Position) error {
	for i := fakeIndex(c.t, c.pos) + 1; i <= fakeIndex(c.t, pos); i++ {
		for j := 0; j < c.perTx; j++ {
			if id := fmt.Sprintf("%d.%d", i, j); !c.sink.delivered(id) {
				c.t.Errorf("checkpoint %s saved before row %s was delivered or dead-lettered", pos, id)
			}
		}
	}
	c.pos = pos
	return nil
}

func dlqConfig() PipelineConfig {
	cfg := smallBatches()
	cfg.OnError = OnErrorDLQ
	cfg.DLQTopic = "dlq"
	return cfg
}

// multiRouter rejects every message id in bad.
type multiRouter map[string]bool

func (r multiRouter) Route(ev *Event) (Record, error) {
	if r[ev.MessageID] {
		return Record{}, &BadRowError{Origin: ev.Origin, MessageID: ev.MessageID, Reason: "aggregate id is empty"}
	}
	return idRouter{}.Route(ev)
}

// TestPipelineOnErrorDLQ: bad rows (router) and records the sink rejects
// permanently each become one dead-letter record with the error headers;
// every other row is delivered, in order per key; the checkpoint reaches
// the end and never passes a row that is neither; the metric counts both
// classes. A dead-letter record the sink rejects is retried without the
// payload, and if that fails too the pipeline halts naming the row.
func TestPipelineOnErrorDLQ(t *testing.T) {
	const txCount, perTx = 60, 3
	cases := []struct {
		name      string
		badRows   []string
		rejected  []string
		rejectDLQ func(r *Record) bool
		wantErr   string // empty: runs to the end
		omitted   bool   // dead letters carry no payload
	}{
		{name: "bad rows", badRows: []string{"5.1", "17.0", "17.2", "60.2"}},
		{name: "rejected records", rejected: []string{"3.0", "29.2", "30.1"}},
		{name: "both", badRows: []string{"8.1"}, rejected: []string{"8.2", "41.0"}},
		{name: "dead letter too large", rejected: []string{"12.1"}, omitted: true,
			rejectDLQ: func(r *Record) bool { return len(r.Value) > 0 }},
		{name: "dead letter rejected", rejected: []string{"12.1"}, wantErr: "12.1",
			rejectDLQ: func(*Record) bool { return true }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			sink := newRejectingSink(tc.rejected...)
			sink.rejectDLQ = tc.rejectDLQ
			cp := &barrierCheckpointer{t: t, perTx: perTx, sink: sink}
			bad := multiRouter{}
			for _, id := range tc.badRows {
				bad[id] = true
			}
			reg := prometheus.NewRegistry()
			p, err := NewPipeline(dlqConfig(), &fakeSource{txCount: txCount, perTx: perTx}, bad, sink, cp, zerolog.Nop(), reg)
			if err != nil {
				t.Fatal(err)
			}
			err = p.Run(context.Background())
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), "dead-letter record was rejected too") {
					t.Fatalf("want a halt naming %s, got %v", tc.wantErr, err)
				}
				if fakeIndex(t, cp.pos) >= 12 {
					t.Fatalf("checkpoint %s passed the row that could not be dead-lettered", cp.pos)
				}
				return
			}
			if !errors.Is(err, errExhausted) {
				t.Fatalf("run: %v", err)
			}
			if cp.pos != fakePos(txCount) {
				t.Fatalf("checkpoint %s, want %s", cp.pos, fakePos(txCount))
			}
			failed := map[string]string{}
			for _, id := range tc.badRows {
				failed[id] = FailureBadRow
			}
			for _, id := range tc.rejected {
				failed[id] = FailureRejected
			}
			for i := 1; i <= txCount; i++ {
				for j := 0; j < perTx; j++ {
					id := fmt.Sprintf("%d.%d", i, j)
					if _, ok := failed[id]; ok {
						if sink.acked[id] != 0 || sink.dead[id] == 0 {
							t.Fatalf("row %s: %d records, %d dead letters; want only dead letters", id, sink.acked[id], sink.dead[id])
						}
					} else if sink.acked[id] == 0 {
						t.Fatalf("row %s lost", id)
					}
				}
			}
			// Dead letters: headers and value.
			for _, r := range sink.written {
				if r.Topic != "dlq" {
					continue
				}
				id, _ := headerOf(&r, HeaderMessageID)
				class, _ := headerOf(&r, HeaderErrorClass)
				origin, _ := headerOf(&r, HeaderOrigin)
				msg, _ := headerOf(&r, HeaderError)
				if class != failed[id] || origin == "" || msg == "" {
					t.Fatalf("dead letter for %s: class %q origin %q error %q", id, class, origin, msg)
				}
				topic, hasTopic := headerOf(&r, HeaderTopic)
				if (class == FailureRejected) != hasTopic || (hasTopic && topic != "t") {
					t.Fatalf("dead letter for %s (%s): original topic header %q present=%v", id, class, topic, hasTopic)
				}
				_, omitted := headerOf(&r, HeaderValueOmitted)
				if omitted != tc.omitted || (!omitted && string(r.Value) != "{}") {
					t.Fatalf("dead letter for %s: value %q, omitted header %v", id, r.Value, omitted)
				}
			}
			// Order per key: the last copy of every record keeps commit order.
			last := map[string]int{}
			for i, r := range sink.written {
				if r.Topic == "t" {
					id, _ := headerOf(&r, "id")
					last[id] = i
				}
			}
			prev := map[string]int{}
			for i := 1; i <= txCount; i++ {
				for j := 0; j < perTx; j++ {
					id := fmt.Sprintf("%d.%d", i, j)
					at, ok := last[id]
					if !ok {
						continue
					}
					key := fmt.Sprint(j % 3)
					if p, seen := prev[key]; seen && at < p {
						t.Fatalf("key %s: the last copy of %s was written before that of an earlier row", key, id)
					}
					prev[key] = at
				}
			}
			if got := counterValue(t, reg, "outbox_cdc_dlq_records_total", FailureBadRow); got != float64(len(tc.badRows)) {
				t.Fatalf("outbox_cdc_dlq_records_total{class=bad_row} = %v, want %d", got, len(tc.badRows))
			}
			if got := counterValue(t, reg, "outbox_cdc_dlq_records_total", FailureRejected); got != float64(len(tc.rejected)) {
				t.Fatalf("outbox_cdc_dlq_records_total{class=rejected} = %v, want %d", got, len(tc.rejected))
			}
		})
	}
}

// TestPipelineOnErrorHaltRejectedRecord: with the default policy a record
// the sink rejects stops the pipeline with the row's message id and
// position, after writing and checkpointing the transactions before it;
// nothing of the row's transaction is checkpointed, and a restart stops at
// the same row without sending the earlier ones again.
func TestPipelineOnErrorHaltRejectedRecord(t *testing.T) {
	sink := newRejectingSink("23.1")
	cp := &barrierCheckpointer{t: t, perTx: 2, sink: sink}
	for run := 0; run < 2; run++ {
		p, err := NewPipeline(smallBatches(), &fakeSource{txCount: 40, perTx: 2}, idRouter{}, sink, cp, zerolog.Nop(), nil)
		if err != nil {
			t.Fatal(err)
		}
		err = p.Run(context.Background())
		var re RecordError
		if err == nil || !errors.As(err, &re) || !strings.Contains(err.Error(), "outbox row at fake:23 (message id 23.1)") ||
			!strings.Contains(err.Error(), "on_error") {
			t.Fatalf("run %d: want a halt naming row 23.1 at fake:23, got %v", run, err)
		}
		if cp.pos != fakePos(22) {
			t.Fatalf("run %d: checkpoint %s, want fake:22", run, cp.pos)
		}
	}
	for i := 1; i <= 22; i++ {
		for j := 0; j < 2; j++ {
			if n := sink.acked[fmt.Sprintf("%d.%d", i, j)]; n < 1 {
				t.Fatalf("row %d.%d lost", i, j)
			}
		}
	}
	if sink.acked["23.1"] != 0 || len(sink.dead) != 0 {
		t.Fatal("the rejected row was written or dead-lettered under on_error: halt")
	}
}

func TestPipelineConfigOnError(t *testing.T) {
	for _, c := range []struct {
		mut  func(*PipelineConfig)
		want string
	}{
		{func(c *PipelineConfig) { c.OnError = "skip" }, "on_error"},
		{func(c *PipelineConfig) { c.DLQTopic = "bad topic" }, "dlq_topic"},
		{func(c *PipelineConfig) { c.DLQTopic = strings.Repeat("x", 250) }, "dlq_topic"},
	} {
		cfg := DefaultPipelineConfig()
		c.mut(&cfg)
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want an error naming %s", cfg, err, c.want)
		}
	}
	cfg := DefaultPipelineConfig()
	cfg.OnError = OnErrorDLQ
	if _, err := NewPipeline(cfg, &fakeSource{}, idRouter{}, &flakySink{}, &memCheckpointer{}, zerolog.Nop(), nil); err == nil ||
		!strings.Contains(err.Error(), "dlq_topic") {
		t.Fatalf("on_error dlq without a topic: %v", err)
	}
}

// counterValue reads a counter with the given label value from reg.
func counterValue(t *testing.T, reg *prometheus.Registry, name, label string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetValue() == label {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	t.Fatalf("no %s{%s}", name, label)
	return 0
}

// lastFirstSink rejects every record whose id is in reject, as a Kafka
// producer does when several partitions answer: it reports the last
// rejected record of the write (its partition answered first), and writes
// the others.
type lastFirstSink struct{ *rejectingSink }

func (s lastFirstSink) Write(_ context.Context, recs []Record) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	last := -1
	for i := range recs {
		id, _ := headerOf(&recs[i], "id")
		if s.reject[id] {
			last = i
			continue
		}
		s.acked[id]++
		s.written = append(s.written, recs[i])
	}
	if last >= 0 {
		return &recordErr{last, fmt.Sprintf("record %d rejected: INVALID_TIMESTAMP", last)}
	}
	return nil
}

// TestPipelineHaltNamesFirstRejectedRow: two rows of different transactions
// in one write are rejected and the sink reports the later one; the halt
// names the earlier row and checkpoints just before its transaction.
func TestPipelineHaltNamesFirstRejectedRow(t *testing.T) {
	sink := lastFirstSink{newRejectingSink("2.1", "3.0")}
	cp := &memCheckpointer{}
	cfg := DefaultPipelineConfig()
	cfg.MaxBatchRecords = 100
	// One write for every transaction: the source sends them all before
	// the pipeline's first batch is cut (see the assertion on writes).
	src := &fakeSource{txCount: 4, perTx: 2}
	p, err := NewPipeline(cfg, src, idRouter{}, sink, cp, zerolog.Nop(), nil)
	if err != nil {
		t.Fatal(err)
	}
	err = p.Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), "(message id 2.1)") {
		t.Fatalf("want a halt naming row 2.1, the first rejected, got %v", err)
	}
	if cp.pos != fakePos(1) {
		t.Fatalf("checkpoint %s, want fake:1", cp.pos)
	}
}
