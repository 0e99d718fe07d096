package main

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

// The sustained-load scenario (issue 29): the connector under a fixed
// rate for a minute after a warm-up, at-least-once and exactly-once, with
// the same latency measurement as the live scenario (the writer's clock
// before the INSERT to the consumer's poll, read_committed for
// exactly-once), and the CPU split between the database server, the
// broker, the connector and this process.

// sustainedResult is one sustained run.
type sustainedResult struct {
	Rate     int // rows/s asked for
	Delivery string
	// TxRows are the rows of each transaction (one multi-row INSERT in
	// autocommit), Writers the connections committing them.
	TxRows, Writers int
	// WarmupSeconds are discarded; Seconds is the measured window after
	// them.
	WarmupSeconds, Seconds float64
	// FallbackOf is the rate asked for by the run this one follows, which
	// was not sustained; this run asks for less to measure latency at a
	// rate that is.
	FallbackOf int `json:",omitempty"`
	// Achieved is the rows whose clock was read in the window, over its
	// length. Sustained is Achieved at least 98 % of Rate.
	Achieved  float64
	Sustained bool
	// Written and Delivered count the whole run, warm-up included; Samples
	// the rows of the window.
	Written, Delivered, Samples int
	WriterRetries               int64
	P50, P99, P999, Max         msec
	CommitP50, CommitP99        msec
	// LagP99Ms and LagMaxMs are how late the generator sent a transaction
	// against its schedule, over the window's transactions.
	LagP99Ms, LagMaxMs float64
	// ConnectorCPUSeconds is the connector's CPU in the window.
	ConnectorCPUSeconds, PeakRSSMiB float64
	CPU                             *cpuWindow `json:",omitempty"`
	// Timeline is the latency per second of the run, warm-up included;
	// CDF the window's latency at cdfQuantiles.
	Timeline                    []timePoint     `json:",omitempty"`
	CDF                         []quantilePoint `json:",omitempty"`
	LoadAvgBefore, LoadAvgAfter string
	Error                       string `json:",omitempty"`
}

// label names a run in tables and plots.
func (r *sustainedResult) label() string {
	s := fmt.Sprintf("%s, %s", rateLabel(r.Rate)+" rows/s", r.Delivery)
	if r.FallbackOf != 0 {
		s += fmt.Sprintf(" (%s not sustained)", rateLabel(r.FallbackOf))
	}
	return s
}

// A run is sustained when it achieved sustainedShare of the asked rate and
// the generator kept to its schedule: 99 % of the window's transactions
// went out less than sustainedLagMs late. A generator that fell behind in
// the warm-up and catches up in the window can exceed the rate while the
// database runs at its limit; the lag shows it.
const (
	sustainedShare = 0.98
	sustainedLagMs = 100
)

func sustained(achieved, rate, lagP99Ms float64) bool {
	return achieved >= sustainedShare*rate && lagP99Ms < sustainedLagMs
}

// runSustainedAll runs every rate and delivery mode. After a rate that was
// not sustained it measures again at 85 % of what was achieved (rounded
// down to a thousand rows/s), up to sustainedFallbacks times, until a rate
// is sustained.
func runSustainedAll(ctx context.Context, o *options, be *backend) ([]sustainedResult, error) {
	var out []sustainedResult
	for _, rate := range o.susRates {
		for _, delivery := range o.susDeliveries {
			if ctx.Err() != nil {
				return out, ctx.Err()
			}
			r := runSustained(ctx, o, be, rate, delivery, 0)
			out = append(out, r)
			for step := 0; o.susFallback && step < sustainedFallbacks && r.Error == "" && !r.Sustained && ctx.Err() == nil; step++ {
				fb := fallbackRate(r.Rate, r.Achieved)
				if fb <= 0 {
					break
				}
				logf("%s: %d rows/s %s not sustained (%.0f achieved, generator lag p99 %.0f ms); measuring at %d rows/s", be.kind, r.Rate, delivery, r.Achieved, r.LagP99Ms, fb)
				r = runSustained(ctx, o, be, fb, delivery, rate)
				out = append(out, r)
			}
		}
	}
	return out, ctx.Err()
}

// sustainedFallbacks bounds the runs after a rate that was not sustained.
const sustainedFallbacks = 3

// fallbackRate is the next rate to try after a run at rate achieved only
// achieved: 85 % of the lower of the two, rounded down to a thousand rows/s
// (to a hundred below 2,000); 0 when there is none.
func fallbackRate(rate int, achieved float64) int {
	v := 0.85 * math.Min(float64(rate), achieved)
	step := 1000.0
	if v < 2000 {
		step = 100
	}
	fb := int(math.Floor(v/step) * step)
	if fb >= rate {
		return 0
	}
	return fb
}

// runSustained is one run; a failure is recorded in the result.
func runSustained(ctx context.Context, o *options, be *backend, rate int, delivery string, fallbackOf int) sustainedResult {
	r := sustainedResult{Rate: rate, Delivery: delivery, TxRows: o.susTxRows, Writers: o.susWriters,
		WarmupSeconds: o.susWarmup.Seconds(), Seconds: o.susFor.Seconds(), FallbackOf: fallbackOf, LoadAvgBefore: loadAvg()}
	logf("%s: sustained %d rows/s, %s, %d-row transactions from %d writers, %s after %s of warm-up", be.kind, rate, delivery, o.susTxRows, o.susWriters, o.susFor, o.susWarmup)
	if err := sustainedInto(ctx, o, be, &r); err != nil {
		r.Error = err.Error()
		logf("%s: sustained %d rows/s %s failed: %v", be.kind, rate, delivery, err)
	}
	r.LoadAvgAfter = loadAvg()
	return r
}

func sustainedInto(ctx context.Context, o *options, be *backend, r *sustainedResult) error {
	exactly := r.Delivery == modeEOS.label
	if err := be.recreateTable(ctx); err != nil {
		return err
	}
	syscall.Sync() // as before a live run
	tag := fmt.Sprintf("sus_%d_%s", r.Rate, strings.ReplaceAll(r.Delivery, "-", ""))
	if r.FallbackOf != 0 {
		tag += fmt.Sprintf("_after_%d", r.FallbackOf) // not the name of the run at the rate asked for
	}
	topic := "bench." + be.kind + "." + tag
	br, err := startBroker(ctx, o, 1, topic)
	if err != nil {
		return err
	}
	defer br.stop()
	total := o.susWarmup + o.susFor
	s := newSamples(int(float64(r.Rate)*total.Seconds()) + 2*r.TxRows)
	cctx, stopConsumer := context.WithCancel(ctx)
	defer stopConsumer()
	var seen atomic.Int64
	if err := consume(cctx, br, topic, s, &seen, exactly, nil); err != nil {
		return err
	}
	c, stopCDC, err := startLiveConnector(ctx, o, be, tag, topic, br, exactly)
	if err != nil {
		return err
	}
	defer stopCDC()
	meter, merr := newCPUMeter(ctx, be, br.cmd.Process.Pid, c.cmd.Process.Pid)

	be.db.SetMaxOpenConns(r.Writers + 4)
	wstart := time.Now()
	cut, end := wstart.Add(o.susWarmup), wstart.Add(total)
	began := make(chan struct{})
	go func() {
		defer close(began)
		select {
		case <-time.After(time.Until(cut)):
			meter.begin()
		case <-ctx.Done():
		}
	}()
	st, err := runLoad(ctx, be, liveLoad{db: be.db, table: "outbox_message", writers: r.Writers, rate: r.Rate, txRows: r.TxRows, d: total, aggregates: o.aggregates}, s)
	if err != nil {
		return err
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	<-began
	if time.Now().Before(cut) {
		return fmt.Errorf("the writers stopped before the warm-up ended")
	}
	win := meter.end()
	if merr != nil {
		win.Error = merr.Error()
	}
	r.CPU = &win
	if sh, ok := win.share("connector"); ok {
		r.ConnectorCPUSeconds = sh.Seconds
	}
	r.Written = s.written()
	r.WriterRetries = s.retries.Load()
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline) && int(seen.Load()) < r.Written; {
		time.Sleep(20 * time.Millisecond)
	}
	r.Delivered = int(seen.Load())
	if ps, err := readProc(c.cmd.Process.Pid); err == nil {
		r.PeakRSSMiB = ps.PeakRSSMiB
	}
	if err := c.stop(); err != nil {
		return err
	}
	stopConsumer()

	r.Timeline = timelineOf(s, wstart, total)
	_, lat, commit := s.latencies(cut.UnixMicro(), end.UnixMicro())
	r.Samples = len(lat)
	r.Achieved = float64(len(lat)) / o.susFor.Seconds()
	slices.Sort(lat)
	r.P50, r.P99, r.P999, r.Max = msec(sortedPct(lat, 50)), msec(sortedPct(lat, 99)), msec(sortedPct(lat, 99.9)), msec(sortedPct(lat, 100))
	r.CDF = quantiles(lat)
	slices.Sort(commit)
	r.CommitP50, r.CommitP99 = msec(sortedPct(commit, 50)), msec(sortedPct(commit, 99))
	lags := st.lagsMs(cut.UnixMicro(), end.UnixMicro())
	slices.Sort(lags)
	r.LagP99Ms, r.LagMaxMs = finite(sortedPct(lags, 99)), finite(sortedPct(lags, 100))
	r.Sustained = sustained(r.Achieved, float64(r.Rate), r.LagP99Ms)
	verdict := "sustained"
	if !r.Sustained {
		verdict = fmt.Sprintf("NOT sustained (%.0f %% of the rate)", 100*r.Achieved/float64(r.Rate))
	}
	logf("%s: sustained %d rows/s %s: achieved %.0f rows/s, %s; %d written, %d delivered; p50 %s p99 %s p99.9 %s max %s ms; generator lag p99 %.1f ms; %s",
		be.kind, r.Rate, r.Delivery, r.Achieved, verdict, r.Written, r.Delivered, r.P50, r.P99, r.P999, r.Max, r.LagP99Ms, win.summary())
	return nil
}

// timelineOf is the latency per second of every row of s whose clock was
// read in the d from start.
func timelineOf(s *samples, start time.Time, d time.Duration) []timePoint {
	sent, lat, _ := s.latencies(start.UnixMicro(), start.Add(d).UnixMicro())
	return timeline(start.UnixMicro(), time.Second, sent, lat)
}

// summary is the CPU split in one line, in cores.
func (w *cpuWindow) summary() string {
	var parts []string
	for _, sh := range w.Shares {
		parts = append(parts, fmt.Sprintf("%s %.2f", sh.Name, sh.Cores))
	}
	s := fmt.Sprintf("CPU in cores: machine %.2f: %s; other %.2f", w.MachineCores, strings.Join(parts, ", "), w.OtherCores)
	if w.Error != "" {
		s += " (" + w.Error + ")"
	}
	return s
}
