package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// The multi scenario (issue 29): several connectors in one process (one
// configuration with a connectors: list, docs/multi-connectors.md), each
// reading its own outbox table of the bench database and writing its own
// topic, each table written at the same fixed rate; latency per connector
// and over all of them, measured as in the sustained scenario, and the
// process's memory.

// multiResult is one multi run.
type multiResult struct {
	Connectors, RatePerConnector int
	TxRows, WritersPerConnector  int
	WarmupSeconds, Seconds       float64
	Per                          []multiConnResult
	// Achieved is every connector's rows in the window over its length;
	// Sustained says every connector's load was sustained (sustained()).
	Achieved            float64
	Sustained           bool
	Written, Delivered  int
	P50, P99, P999, Max msec
	// PeakRSSMiB is the process's VmHWM at the end, RSSMiB its VmRSS.
	PeakRSSMiB, RSSMiB, ConnectorCPUSeconds float64
	CPU                                     *cpuWindow      `json:",omitempty"`
	Timeline                                []timePoint     `json:",omitempty"`
	CDF                                     []quantilePoint `json:",omitempty"`
	LoadAvgBefore, LoadAvgAfter             string
	Error                                   string `json:",omitempty"`
}

// multiConnResult is one connector of a multi run.
type multiConnResult struct {
	Name     string
	Achieved float64
	// LagP99Ms is the connector's writers' lag behind their schedule.
	LagP99Ms            float64
	Written, Delivered  int
	P50, P99, P999, Max msec
}

// runMulti runs the scenario once; a failure is recorded in the result.
func runMulti(ctx context.Context, o *options, be *backend) multiResult {
	r := multiResult{Connectors: o.multiN, RatePerConnector: o.multiRate, TxRows: o.susTxRows, WritersPerConnector: o.multiWriters,
		WarmupSeconds: o.susWarmup.Seconds(), Seconds: o.susFor.Seconds(), LoadAvgBefore: loadAvg()}
	logf("%s: multi: %d connectors in one process, %d rows/s each in %d-row transactions, %s after %s of warm-up",
		be.kind, o.multiN, o.multiRate, o.susTxRows, o.susFor, o.susWarmup)
	if err := multiInto(ctx, o, be, &r); err != nil {
		r.Error = err.Error()
		logf("%s: multi failed: %v", be.kind, err)
	}
	r.LoadAvgAfter = loadAvg()
	return r
}

func multiInto(ctx context.Context, o *options, be *backend, r *multiResult) error {
	n := o.multiN
	if be.kind == "postgres" {
		// One slot per connector, on a server whose slots are shared.
		var free, maxSlots int
		if err := be.db.QueryRowContext(ctx, `SELECT current_setting('max_replication_slots')::int,
  current_setting('max_replication_slots')::int - (SELECT count(*) FROM pg_replication_slots)`).Scan(&maxSlots, &free); err != nil {
			return err
		}
		if free < n {
			return fmt.Errorf("environment: %d of the server's %d replication slots are free (max_replication_slots), the multi scenario needs %d; run it when fewer slots are in use, or with -multi-connectors %d", free, maxSlots, n, max(1, free))
		}
	}
	syscall.Sync()
	var topics []string
	for i := range n {
		topics = append(topics, fmt.Sprintf("bench.%s.multi.%d", be.kind, i))
	}
	br, err := startBroker(ctx, o, 1, topics...)
	if err != nil {
		return err
	}
	defer br.stop()
	total := o.susWarmup + o.susFor
	var specs []connSpec
	tables := make([]string, n)
	ss := make([]*samples, n)
	seen := make([]atomic.Int64, n)
	cctx, stopConsumers := context.WithCancel(ctx)
	defer stopConsumers()
	for i := range n {
		tables[i] = fmt.Sprintf("outbox_multi_%d", i)
		if err := be.recreateTableNamed(ctx, tables[i]); err != nil {
			return err
		}
		defer be.db.ExecContext(context.WithoutCancel(ctx), "DROP TABLE IF EXISTS "+tables[i])
		var slot string
		if be.kind == "postgres" {
			slot = be.slotName(fmt.Sprintf("multi_%d", i))
			if _, err := be.db.ExecContext(ctx, "CREATE PUBLICATION "+slot+" FOR TABLE "+tables[i]); err != nil {
				return fmt.Errorf("create publication: %w", err)
			}
			defer be.db.ExecContext(context.WithoutCancel(ctx), "DROP PUBLICATION IF EXISTS "+slot)
			if _, err := be.db.ExecContext(ctx, "SELECT pg_create_logical_replication_slot($1, 'pgoutput')", slot); err != nil {
				return fmt.Errorf("create slot %s: %w (environment: max_replication_slots reached?)", slot, err)
			}
			defer be.dropSlot(ctx, slot)
		}
		specs = append(specs, connSpec{name: fmt.Sprintf("bench-multi-%s-%d-%s", be.kind, i, o.runID),
			sourceYAML: be.sourceYAMLTable(tables[i], slot, slot), topic: topics[i], br: br})
		ss[i] = newSamples(int(float64(o.multiRate)*total.Seconds()) + 2*o.susTxRows)
		if err := consume(cctx, br, topics[i], ss[i], &seen[i], false, nil); err != nil {
			return err
		}
	}
	dir := "multi-" + be.kind
	if err := os.RemoveAll(filepath.Join(o.work, dir)); err != nil {
		return err
	}
	c, err := startConnectors(o, dir, "", specs, nil)
	if err != nil {
		return err
	}
	defer c.kill()
	if err := c.waitReady(ctx, 2*time.Minute); err != nil {
		return err
	}
	meter, merr := newCPUMeter(ctx, be, br.cmd.Process.Pid, c.cmd.Process.Pid)
	be.db.SetMaxOpenConns(n*o.multiWriters + 4)

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
	var wg sync.WaitGroup
	errs := make([]error, n)
	sts := make([]loadStats, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sts[i], errs[i] = runLoad(ctx, be, liveLoad{db: be.db, table: tables[i], writers: o.multiWriters, rate: o.multiRate, txRows: o.susTxRows, d: total, aggregates: o.aggregates}, ss[i])
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			return fmt.Errorf("writers of %s: %w", tables[i], err)
		}
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	<-began
	win := meter.end()
	if merr != nil {
		win.Error = merr.Error()
	}
	r.CPU = &win
	if sh, ok := win.share("connector"); ok {
		r.ConnectorCPUSeconds = sh.Seconds
	}
	written := 0
	for i := range n {
		written += ss[i].written()
	}
	delivered := func() int {
		d := 0
		for i := range n {
			d += int(seen[i].Load())
		}
		return d
	}
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline) && delivered() < written; {
		time.Sleep(20 * time.Millisecond)
	}
	r.Written, r.Delivered = written, delivered()
	if ps, err := readProc(c.cmd.Process.Pid); err == nil {
		r.PeakRSSMiB, r.RSSMiB = ps.PeakRSSMiB, ps.RSSMiB
	}
	if err := c.stop(); err != nil {
		return err
	}
	stopConsumers()

	var allSent []int64
	var allLat, windowLat []float64
	r.Sustained = true
	for i := range n {
		sent, lat, _ := ss[i].latencies(wstart.UnixMicro(), end.UnixMicro())
		allSent, allLat = append(allSent, sent...), append(allLat, lat...)
		_, w, _ := ss[i].latencies(cut.UnixMicro(), end.UnixMicro())
		windowLat = append(windowLat, w...)
		slices.Sort(w)
		lags := sts[i].lagsMs(cut.UnixMicro(), end.UnixMicro())
		slices.Sort(lags)
		pc := multiConnResult{Name: specs[i].name, Achieved: float64(len(w)) / o.susFor.Seconds(), Written: ss[i].written(), Delivered: int(seen[i].Load()),
			P50: msec(sortedPct(w, 50)), P99: msec(sortedPct(w, 99)), P999: msec(sortedPct(w, 99.9)), Max: msec(sortedPct(w, 100)), LagP99Ms: finite(sortedPct(lags, 99))}
		r.Per = append(r.Per, pc)
		r.Achieved += pc.Achieved
		r.Sustained = r.Sustained && sustained(pc.Achieved, float64(o.multiRate), pc.LagP99Ms)
	}
	r.Timeline = timeline(wstart.UnixMicro(), time.Second, allSent, allLat)
	slices.Sort(windowLat)
	r.P50, r.P99, r.P999, r.Max = msec(sortedPct(windowLat, 50)), msec(sortedPct(windowLat, 99)), msec(sortedPct(windowLat, 99.9)), msec(sortedPct(windowLat, 100))
	r.CDF = quantiles(windowLat)
	logf("%s: multi: %d connectors, achieved %.0f rows/s in all (sustained: %v), %d written, %d delivered; p50 %s p99 %s p99.9 %s max %s ms; RSS %.1f MiB, peak %.1f MiB; %s",
		be.kind, n, r.Achieved, r.Sustained, r.Written, r.Delivered, r.P50, r.P99, r.P999, r.Max, r.RSSMiB, r.PeakRSSMiB, win.summary())
	for _, pc := range r.Per {
		logf("%s: multi: %s: %.0f rows/s, p99 %s ms", be.kind, pc.Name, pc.Achieved, pc.P99)
	}
	return nil
}
