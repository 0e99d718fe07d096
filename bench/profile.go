package main

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
	"github.com/outbox-cdc/outbox-cdc/binlog"
	"github.com/outbox-cdc/outbox-cdc/checkpoint"
	"github.com/outbox-cdc/outbox-cdc/router"
	"github.com/outbox-cdc/outbox-cdc/sink/kafka"
	"github.com/outbox-cdc/outbox-cdc/wal"
)

// runProfile loads a backlog and drains it with the pipeline wired
// in-process exactly as cmd/outbox-cdc wires it, under the CPU profiler.
// It writes <profile> (CPU of the drain), <profile>.live (CPU of 10 s at
// 1,000 rows/s), and <profile>.allocs with <profile>.allocs.base
// (allocations at the end and at the start of the drain, for pprof -base).
func runProfile(ctx context.Context, o *options) error {
	kind := o.dbs[0]
	be, err := openBackend(ctx, o, kind)
	if err != nil {
		return err
	}
	defer be.close()
	br, err := startBroker(ctx, o, 1, "bench.prof."+kind)
	if err != nil {
		return err
	}
	defer br.stop()
	logf("%s: loading %d rows", kind, o.rows)
	bl, err := loadBacklog(ctx, be, loadPlan{rows: o.rows, txRows: o.txRows, stmtRows: o.txRows, rowBytes: 200, loaders: 4, aggregates: o.aggregates, tag: "prof"})
	if err != nil {
		return err
	}
	defer bl.release(ctx, be)

	reg := prometheus.NewRegistry()
	log := zerolog.Nop()
	rcfg := router.DefaultConfig()
	rcfg.Topic = "bench.prof." + kind
	rt, err := router.New(rcfg)
	if err != nil {
		return err
	}
	sm := outboxcdc.NewSourceMetrics(reg)
	var src outboxcdc.Source
	name := "bench-prof-" + kind
	cpPath := o.work + "/prof.checkpoint"
	file, err := checkpoint.NewFile(checkpoint.FileConfig{Path: cpPath}, log)
	if err != nil {
		return err
	}
	switch kind {
	case "mysql":
		cfg := binlog.DefaultConfig()
		cfg.DSN = be.dsn
		if src, err = binlog.New(cfg, name, rt.Columns(), log, sm, reg); err != nil {
			return err
		}
		if err := file.Save(ctx, outboxcdc.MakePosition("mysql", "mariadb-gtid:"+bl.startGTID)); err != nil {
			return err
		}
	case "postgres":
		slot := be.slotName("prof")
		if err := be.copySlot(ctx, bl.tplSlot, slot); err != nil {
			return err
		}
		defer be.dropSlot(ctx, slot)
		cfg := wal.DefaultConfig()
		cfg.DSN, cfg.Table, cfg.Slot, cfg.Publication, cfg.Create = be.dsn, "public.outbox_message", slot, bl.pub, false
		if src, err = wal.New(cfg, name, rt.Columns(), log, sm, reg); err != nil {
			return err
		}
	}
	kcfg := kafka.DefaultKafkaConfig()
	kcfg.Brokers = []string{br.addr}
	snk, err := kafka.NewKafka(kcfg, log, reg)
	if err != nil {
		return err
	}
	defer snk.Close()
	p, err := outboxcdc.NewPipeline(outboxcdc.DefaultPipelineConfig(), src, rt, snk, checkpoint.Expect(kind, file), log, reg)
	if err != nil {
		return err
	}

	f, err := os.Create(o.profile)
	if err != nil {
		return err
	}
	defer f.Close()
	runtime.MemProfileRate = 64 << 10
	// The connector's soft memory limit and GOGC (cmd/outbox-cdc), so the collector
	// works as hard here as it does there.
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(100 << 20))
	if os.Getenv("GOGC") == "" {
		defer debug.SetGCPercent(debug.SetGCPercent(200))
	}
	// The allocation profile is cumulative and the backlog was loaded by
	// this process: keep a snapshot from before the drain for pprof -base.
	runtime.GC()
	if err := writeProfile("allocs", o.profile+".allocs.base"); err != nil {
		return err
	}
	var ms0, ms1 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	if err := pprof.StartCPUProfile(f); err != nil {
		return err
	}
	pctx, stop := context.WithCancel(ctx)
	defer stop()
	perr := make(chan error, 1)
	start := time.Now()
	go func() { perr <- p.Run(pctx) }()
	heapTaken := false
	for {
		n := delivered(reg)
		if n >= float64(o.rows) {
			break
		}
		if !heapTaken && n >= float64(o.rows)/2 {
			// What is live in the middle of the drain: the heap the
			// collector marks on every cycle.
			heapTaken = true
			if err := writeProfile("heap", o.profile+".heap"); err != nil {
				return err
			}
		}
		select {
		case err := <-perr:
			pprof.StopCPUProfile()
			return fmt.Errorf("pipeline stopped: %v", err)
		case <-time.After(10 * time.Millisecond):
		}
	}
	el := time.Since(start)
	pprof.StopCPUProfile()
	runtime.ReadMemStats(&ms1)
	if err := writeProfile("allocs", o.profile+".allocs"); err != nil {
		return err
	}
	printHistograms(reg)
	fmt.Printf("%s: in-process drain of %d rows in %.2fs (%.0f rows/s); %.0f bytes and %.1f allocations per row, %d GC cycles, GC CPU fraction %.1f %% since start\n",
		kind, o.rows, el.Seconds(), float64(o.rows)/el.Seconds(), float64(ms1.TotalAlloc-ms0.TotalAlloc)/float64(o.rows),
		float64(ms1.Mallocs-ms0.Mallocs)/float64(o.rows), ms1.NumGC-ms0.NumGC, 100*ms1.GCCPUFraction)

	// Then the live path: single-row transactions at 1,000/s for 10 s.
	lf, err := os.Create(o.profile + ".live")
	if err != nil {
		return err
	}
	defer lf.Close()
	if err := pprof.StartCPUProfile(lf); err != nil {
		return err
	}
	var ru0, ru1 syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
	s := newSamples(10_001)
	werr := runWriters(ctx, o, be, s, 1000, 10*time.Second)
	time.Sleep(500 * time.Millisecond)
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
	pprof.StopCPUProfile()
	if werr != nil {
		return werr
	}
	fmt.Printf("live 1,000 rows/s for 10 s: process user %.2fs, system %.2fs (includes the writers)\n",
		tv(ru1.Utime)-tv(ru0.Utime), tv(ru1.Stime)-tv(ru0.Stime))
	stop()
	<-perr
	fmt.Printf("inspect: go tool pprof -top %s | head -40\n", o.profile)
	fmt.Printf("         go tool pprof -sample_index=inuse_space -top %s.heap | head -30   (live in mid-drain)\n", o.profile)
	fmt.Printf("         go tool pprof -sample_index=alloc_space -base %s.allocs.base -top %s.allocs | head -30\n", o.profile, o.profile)
	return nil
}

// writeProfile writes the named runtime profile to path.
func writeProfile(name, path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := pprof.Lookup(name).WriteTo(f, 0); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// printHistograms prints count, sum and mean of every histogram: where the
// wall time of the drain went (sink writes, checkpoint saves, ...).
func printHistograms(reg *prometheus.Registry) {
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			if h := m.GetHistogram(); h != nil && h.GetSampleCount() > 0 {
				fmt.Printf("  %s: count %d, sum %.3f, mean %.4f\n", mf.GetName(), h.GetSampleCount(), h.GetSampleSum(), h.GetSampleSum()/float64(h.GetSampleCount()))
			}
		}
	}
}

func tv(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }

func delivered(reg *prometheus.Registry) float64 {
	mfs, err := reg.Gather()
	if err != nil {
		return 0
	}
	for _, mf := range mfs {
		if strings.HasSuffix(mf.GetName(), "records_delivered_total") && len(mf.GetMetric()) > 0 {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	return 0
}
