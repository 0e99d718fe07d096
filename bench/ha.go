package main

import (
	"context"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outbox-cdc/outbox-cdc/placement"
)

// The ha scenario (issue 29): how long a connector is not delivered after
// its owner fails, with the default HA and placement settings, over many
// trials. Two processes run the same connector, as in test/e2e's HA tests:
//
//   - kill, sigstop: an HA pair (ha.enabled, defaults), one active, one
//     standby; the active one gets SIGKILL or SIGSTOP.
//   - move, move-kill: two replicas with placement on (defaults), the
//     connector on one of them; the owner gets SIGTERM (a rolling update:
//     it stops its connector and leaves the group) or SIGKILL.
//
// A writer commits single-row transactions throughout. The time is from
// the signal to the new owner's /active answering 200, and to the first
// record the new owner delivered reaching a consumer (read_committed for
// exactly-once). Records are told apart by their producer: every process's
// sink has its own producer id (exactly-once: the same transactional id
// with a new epoch), so a record of a producer that had not been seen
// before the signal is the new owner's; a moved owner's last records, sent
// while it stops, do not count. After a trial the faulted process is gone
// (a frozen one is killed) and a fresh one takes its place as the standby
// of the next trial. At the end, every committed row must have been
// delivered.

var haFaultNames = []string{"kill", "sigstop", "move", "move-kill"}

// haResult is one fault's series of trials.
type haResult struct {
	Fault, Delivery string
	Trials          []haTrial
	// ToRecord and ToActive are over the trials that succeeded, in seconds.
	ToRecord, ToActive spread
	Failed             int
	// Written and Delivered are the series' rows (delivered: distinct);
	// Lost are the rows committed and never delivered: must be 0.
	Written, Delivered, Lost int
	LoadAvgBefore            string
	Error                    string `json:",omitempty"`
}

// haTrial is one fault and takeover.
type haTrial struct {
	// AtSeconds is when the signal went, since the writer began.
	AtSeconds                        float64
	ToRecordSeconds, ToActiveSeconds float64
	Error                            string `json:",omitempty"`
	at                               time.Time
}

// haFaultText says what a fault is, for tables.
func haFaultText(f string) string {
	switch f {
	case "kill":
		return "HA pair, active killed (kill -9)"
	case "sigstop":
		return "HA pair, active frozen (SIGSTOP)"
	case "move":
		return "placement, owner stopped (SIGTERM): planned move"
	case "move-kill":
		return "placement, owner killed (kill -9)"
	}
	return f
}

func runHA(ctx context.Context, o *options, be *backend, fault, delivery string) haResult {
	r := haResult{Fault: fault, Delivery: delivery, LoadAvgBefore: loadAvg()}
	logf("%s: ha: %s, %s, %d trials", be.kind, haFaultText(fault), delivery, o.haTrials)
	if err := haInto(ctx, o, be, &r); err != nil {
		r.Error = err.Error()
		logf("%s: ha %s %s failed: %v", be.kind, fault, delivery, err)
	}
	var rec, act []float64
	for _, t := range r.Trials {
		if t.Error != "" {
			r.Failed++
			continue
		}
		rec, act = append(rec, t.ToRecordSeconds), append(act, t.ToActiveSeconds)
	}
	r.ToRecord, r.ToActive = spreadOf(rec), spreadOf(act)
	logf("%s: ha %s %s: %d trials, %d failed; to the first record of the new owner p50 %.2f s max %.2f s; to /active p50 %.2f s max %.2f s; %d rows written, %d lost",
		be.kind, fault, delivery, len(r.Trials), r.Failed, r.ToRecord.Median, r.ToRecord.Max, r.ToActive.Median, r.ToActive.Max, r.Written, r.Lost)
	return r
}

// ownerWatch tells the first record of a producer not seen before arm.
type ownerWatch struct {
	mu       sync.Mutex
	all      map[[2]int64]bool
	before   map[[2]int64]bool
	armed    bool
	firstNew int64 // consumer clock, µs
}

func newOwnerWatch() *ownerWatch { return &ownerWatch{all: map[[2]int64]bool{}} }

func (w *ownerWatch) record(r *kgo.Record, now int64) {
	w.observe([2]int64{r.ProducerID, int64(r.ProducerEpoch)}, now)
}

func (w *ownerWatch) observe(id [2]int64, now int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.all[id] = true
	if w.armed && w.firstNew == 0 && !w.before[id] {
		w.firstNew = now
	}
}

// arm starts a trial: producers seen so far are the old owners'.
func (w *ownerWatch) arm() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.before = make(map[[2]int64]bool, len(w.all))
	for id := range w.all {
		w.before[id] = true
	}
	w.armed, w.firstNew = true, 0
}

func (w *ownerWatch) first() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.firstNew
}

func haInto(ctx context.Context, o *options, be *backend, r *haResult) error {
	exactly := r.Delivery == modeEOS.label
	usePlacement := strings.HasPrefix(r.Fault, "move")
	if err := be.recreateTable(ctx); err != nil {
		return err
	}
	tag := fmt.Sprintf("ha_%s_%s", strings.ReplaceAll(r.Fault, "-", ""), strings.ReplaceAll(r.Delivery, "-", ""))
	topic := "bench." + be.kind + "." + tag
	br, err := startBroker(ctx, o, 1, topic)
	if err != nil {
		return err
	}
	defer br.stop()
	var slot string
	if be.kind == "postgres" {
		slot = be.slotName(tag)
		if err := be.createSlot(ctx, slot, slot); err != nil {
			return err
		}
		defer be.db.ExecContext(context.WithoutCancel(ctx), "DROP PUBLICATION IF EXISTS "+slot)
		defer be.dropSlot(ctx, slot)
	}
	name := fmt.Sprintf("bench-%s-%s-%s", be.kind, strings.ReplaceAll(tag, "_", "-"), o.runID)
	spec := connSpec{name: name, sourceYAML: be.sourceYAML(slot, slot), topic: topic, br: br, exactly: exactly,
		extraYAML: "ha:\n  enabled: true\n"}
	if !exactly {
		// Shared by the instances: a table in the bench database.
		spec.checkpointYAML = "  type: table\n"
	}
	top := fmt.Sprintf("placement:\n  enabled: true\n  deployment: %s\n  brokers: [%q]\n", name, br.addr)
	instance := 0
	start := func() (*connector, error) {
		instance++
		if usePlacement {
			return startConnectors(o, fmt.Sprintf("%s-%d", name, instance), top, []connSpec{spec}, nil)
		}
		s := spec
		s.instance = fmt.Sprint(instance)
		return startConnector(o, s)
	}
	var procs []*connector
	defer func() {
		for _, p := range procs {
			p.cmd.Process.Kill()
			<-p.done
		}
	}()
	track := func(c *connector, err error) (*connector, error) {
		if c != nil {
			procs = append(procs, c)
		}
		return c, err
	}

	// The writer runs through the whole series.
	capacity := o.haRate * o.haTrials * int((o.haTimeout + time.Minute).Seconds())
	s := newSamples(capacity)
	watch := newOwnerWatch()
	var seen atomic.Int64
	cctx, stopConsumer := context.WithCancel(ctx)
	defer stopConsumer()
	if err := consume(cctx, br, topic, s, &seen, exactly, watch.record); err != nil {
		return err
	}
	// startActive starts the active instance of a fresh pair; firstRecord
	// waits for its first record: its producer is then known.
	startActive := func() (*connector, error) {
		watch.arm()
		c, err := track(start())
		if err != nil {
			return nil, err
		}
		if err := c.waitStatus(ctx, "/active", 200, 2*time.Minute); err != nil {
			return nil, fmt.Errorf("the first instance: %w", err)
		}
		return c, nil
	}
	firstRecord := func(c *connector) error {
		for deadline := time.Now().Add(time.Minute); watch.first() == 0; time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				return fmt.Errorf("no record of the active instance reached the consumer within a minute\n%s", c.tail())
			}
		}
		return nil
	}
	// The first instance starts at the source's end (start: latest): the
	// writer begins once a probe row (numbered beyond the writer's rows)
	// written after its start came through.
	active, err := startActive()
	if err != nil {
		return err
	}
	probe := make(chan struct{})
	go func() {
		for i := int64(0); ; i++ {
			r := makeRow(int64(capacity)+i, o.aggregates, 0)
			be.db.ExecContext(ctx, be.insertSQL(1), rowArgs([]row{r})...)
			select {
			case <-probe:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	err = firstRecord(active)
	close(probe)
	if err != nil {
		return err
	}
	be.db.SetMaxOpenConns(8)
	stopWriter := make(chan struct{})
	werr := make(chan error, 1)
	writerStart := time.Now()
	go func() {
		_, err := runLoad(ctx, be, liveLoad{db: be.db, table: "outbox_message", writers: 2, rate: o.haRate, txRows: 1, d: 24 * time.Hour, aggregates: o.aggregates, stop: stopWriter}, s)
		werr <- err
	}()
	stopped := false
	defer func() {
		if !stopped {
			close(stopWriter)
			<-werr
		}
	}()
	var standby *connector
	for trial := 0; trial < o.haTrials; trial++ {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if standby == nil {
			if standby, err = track(start()); err != nil {
				return err
			}
		}
		if err := waitStandby(ctx, o, standby, usePlacement, br, name); err != nil {
			return fmt.Errorf("trial %d: the standby: %w", trial+1, err)
		}
		// The active one streams a while first; its producer is known
		// (its first record was the previous trial's measurement).
		time.Sleep(time.Second)
		t := haTrialRun(ctx, o, r.Fault, active, standby, watch)
		t.AtSeconds = t.at.Sub(writerStart).Seconds()
		r.Trials = append(r.Trials, t)
		if t.Error != "" {
			logf("%s: ha %s trial %d: %s", be.kind, r.Fault, trial+1, t.Error)
			// Start over from a clean pair: the next trial's active is
			// whichever streams.
			for _, p := range []*connector{active, standby} {
				p.cmd.Process.Kill()
				<-p.done
			}
			// It resumes from the shared checkpoint (or progress).
			if active, err = startActive(); err == nil {
				err = firstRecord(active)
			}
			if err != nil {
				return fmt.Errorf("restart after a failed trial: %w", err)
			}
			standby = nil
			continue
		}
		logf("%s: ha %s trial %d: first record of the new owner %.3f s, /active %.3f s after the signal", be.kind, r.Fault, trial+1, t.ToRecordSeconds, t.ToActiveSeconds)
		active, standby = standby, nil
	}
	close(stopWriter)
	stopped = true
	if err := <-werr; err != nil {
		return fmt.Errorf("writer: %w", err)
	}
	r.Written = s.written()
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if _, n := s.missing(0); n == 0 {
			break
		}
	}
	r.Delivered = int(seen.Load())
	var lost []int
	lost, r.Lost = s.missing(10)
	if r.Lost > 0 {
		var at []string
		for _, i := range lost {
			at = append(at, fmt.Sprintf("row %d committed %.3f s after the writer began", i, float64(s.sent[i]-writerStart.UnixMicro())/1e6))
		}
		var faults []string
		for _, t := range r.Trials {
			faults = append(faults, fmt.Sprintf("%.3f s", t.AtSeconds))
		}
		return fmt.Errorf("%d of %d committed rows were not delivered within a minute of the last trial (%s; faults at %s)", r.Lost, r.Written, strings.Join(at, ", "), strings.Join(faults, ", "))
	}
	return nil
}

// waitStandby waits until c is a standby that can take over: an HA
// standby answers /readyz 200 and /active 503; a placement replica must
// also have joined the group (two members, stable).
func waitStandby(ctx context.Context, o *options, c *connector, usePlacement bool, br *broker, deployment string) error {
	if err := c.waitStatus(ctx, "/readyz", 200, time.Minute); err != nil {
		return err
	}
	if c.status("/active") != 503 {
		return fmt.Errorf("/active is %d, want 503 (not streaming)", c.status("/active"))
	}
	if !usePlacement {
		return nil
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(br.addrs...))
	if err != nil {
		return err
	}
	defer cl.Close()
	group := placement.GroupName(deployment)
	deadline := time.Now().Add(2 * time.Minute)
	for {
		req := kmsg.NewPtrDescribeGroupsRequest()
		req.Groups = []string{group}
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		resp, err := req.RequestWith(rctx, cl)
		cancel()
		if err == nil && len(resp.Groups) == 1 && resp.Groups[0].State == "Stable" && len(resp.Groups[0].Members) == 2 {
			return nil
		}
		if time.Now().After(deadline) {
			state := fmt.Sprint(err)
			if err == nil && len(resp.Groups) == 1 {
				state = fmt.Sprintf("%s with %d members", resp.Groups[0].State, len(resp.Groups[0].Members))
			}
			return fmt.Errorf("placement group %s not stable with 2 members within 2 minutes (%s)\n%s", group, state, c.tail())
		}
		select {
		case <-c.done:
			return fmt.Errorf("replica exited: %v\n%s", c.err, c.tail())
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// haTrialRun signals the active process and times the standby's takeover.
// Afterwards the active process is gone.
func haTrialRun(ctx context.Context, o *options, fault string, active, standby *connector, watch *ownerWatch) haTrial {
	var t haTrial
	sig := map[string]syscall.Signal{"kill": syscall.SIGKILL, "move-kill": syscall.SIGKILL, "sigstop": syscall.SIGSTOP, "move": syscall.SIGTERM}[fault]
	watch.arm()
	t0 := time.Now()
	t.at = t0
	if err := active.cmd.Process.Signal(sig); err != nil {
		t.Error = fmt.Sprintf("signal %v: %v", sig, err)
		return t
	}
	// NaN until seen; a failed trial keeps 0 (JSON has no NaN).
	t.ToRecordSeconds, t.ToActiveSeconds = math.NaN(), math.NaN()
	for {
		if math.IsNaN(t.ToActiveSeconds) && standby.status("/active") == 200 {
			t.ToActiveSeconds = time.Since(t0).Seconds()
		}
		if f := watch.first(); f != 0 && math.IsNaN(t.ToRecordSeconds) {
			t.ToRecordSeconds = float64(f-t0.UnixMicro()) / 1e6
		}
		if !math.IsNaN(t.ToActiveSeconds) && !math.IsNaN(t.ToRecordSeconds) {
			break
		}
		if time.Since(t0) > o.haTimeout {
			t.Error = fmt.Sprintf("no takeover within %s (first record %v s, /active %v s)\n%s", o.haTimeout, t.ToRecordSeconds, t.ToActiveSeconds, standby.tail())
			break
		}
		select {
		case <-standby.done:
			t.Error = fmt.Sprintf("the standby exited: %v\n%s", standby.err, standby.tail())
		case <-ctx.Done():
			t.Error = ctx.Err().Error()
		case <-time.After(10 * time.Millisecond):
		}
		if t.Error != "" {
			break
		}
	}
	// The faulted process goes: a frozen one is killed; a stopping one
	// gets its shutdown time.
	if sig == syscall.SIGTERM {
		select {
		case <-active.done:
		case <-time.After(time.Minute):
		}
	}
	active.cmd.Process.Kill()
	<-active.done
	t.ToRecordSeconds, t.ToActiveSeconds = finite(t.ToRecordSeconds), finite(t.ToActiveSeconds)
	return t
}
