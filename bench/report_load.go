package main

import (
	"fmt"
	"io"
	"math"
	"strings"
)

// The report of issue 29's scenarios: sustained load, several connectors
// in one process, the drain's repeated pairs, HA takeover.

// referenceWindow is the sustained scenarios' reference measured window.
const referenceWindowSeconds = 60

// sustainedTargets are issue 29's p99 bounds per asked rate (ms).
var sustainedTargets = map[int]float64{10_000: 20, 50_000: 100}

// loadTargets is issue 29's table, judged on res.
func loadTargets(res *results) []target {
	var t []target
	for _, db := range res.DBs {
		name := dbLabel(db.Kind)
		t = append(t, sustainedTargetRows(name, db.Sustained)...)
		if m := db.Multi; m != nil {
			tp := target{measure: fmt.Sprintf("%s %d connectors in one process, %d rows/s each: p99", name, m.Connectors, m.RatePerConnector), want: "≤ 50 ms", verdict: notRun, now: "–"}
			tr := target{measure: fmt.Sprintf("%s %d connectors in one process, %d rows/s each: peak RSS", name, m.Connectors, m.RatePerConnector), want: "≤ 150 MiB", verdict: notRun, now: "–"}
			switch {
			case m.Error != "":
				tp.now, tp.verdict = "failed: "+firstLine(m.Error), miss
				tr.now, tr.verdict = tp.now, miss
			default:
				note := windowNote(m.Seconds)
				if !m.Sustained {
					note += fmt.Sprintf(" (not sustained: %.0f rows/s of %d)", m.Achieved, m.Connectors*m.RatePerConnector)
				}
				worst := 0.0
				for _, p := range m.Per {
					worst = math.Max(worst, float64(p.P99))
				}
				tp.now = fmt.Sprintf("%s ms overall, worst connector %s ms%s", m.P99, fmtMS(worst), note)
				tp.verdict = verdict(float64(m.P99) <= 50 && worst <= 50 && m.Sustained)
				tr.now = fmt.Sprintf("%.1f MiB (%.1f MiB at the end)", m.PeakRSSMiB, m.RSSMiB)
				tr.verdict = verdict(m.PeakRSSMiB <= 150)
			}
			t = append(t, tp, tr)
		}
		if d := db.Drain; d != nil && len(d.Repeats) > 0 {
			want, bound := "≥ 0.9×", 0.9
			measure := name + " drain vs raw binlog read, same run, start-up excluded"
			if db.Kind == "postgres" {
				want, bound, measure = "≥ 1.2×", 1.2, name+" drain vs `pg_recvlogical`, same backlog, start-up excluded"
			}
			tt := target{measure: measure, want: want, verdict: notRun, now: "–"}
			whole, f2l, mid := pairRatios(d.Repeats)
			if sp := spreadOf(f2l); sp.Median > 0 {
				note := ""
				if d.Rows != referenceRows {
					note = fmt.Sprintf("; %d rows, not the reference load", d.Rows)
				}
				tt.now = fmt.Sprintf("%.2f× median from the first row to the last (%s over %d pairs); 10-90 %%: %s; whole run: %s%s",
					sp.Median, spreadText(sp, "×"), len(f2l), spreadText(spreadOf(mid), "×"), spreadText(spreadOf(whole), "×"), note)
				tt.verdict = verdict(sp.Median >= bound)
			}
			bcpu := map[string]float64{"mysql": 1.5, "postgres": 2.0}[db.Kind]
			tc := target{measure: name + " connector CPU per 1M rows (at-least-once drain)", want: fmt.Sprintf("≤ %.1f s", bcpu), verdict: notRun, now: "–"}
			var cpu []float64
			for _, p := range d.Repeats {
				if p.Drain.Error == "" && p.Drain.Rows > 0 && p.Drain.CPUSeconds > 0 {
					cpu = append(cpu, p.Drain.CPUSeconds/float64(p.Drain.Rows)*1e6)
				}
			}
			if sp := spreadOf(cpu); sp.Median > 0 {
				tc.now = fmt.Sprintf("%.2f s median (%s over %d drains)", sp.Median, spreadText(sp, " s"), len(cpu))
				tc.verdict = verdict(sp.Median <= bcpu)
			}
			t = append(t, tt, tc)
		}
		for _, h := range db.HA {
			th := target{measure: fmt.Sprintf("%s takeover: %s, %s", name, haFaultText(h.Fault), h.Delivery), want: "p50 / max over 20 trials", verdict: reported}
			ok := len(h.Trials) - h.Failed
			switch {
			case ok == 0:
				th.now, th.verdict = "no trial succeeded", miss
				if h.Error != "" {
					th.now += ": " + firstLine(h.Error)
				}
			default:
				th.now = fmt.Sprintf("first record %.2f / %.2f s, /active %.2f / %.2f s (%d trials", h.ToRecord.Median, h.ToRecord.Max, h.ToActive.Median, h.ToActive.Max, ok)
				if h.Failed > 0 {
					th.now += fmt.Sprintf(", %d failed", h.Failed)
					th.verdict = miss
				}
				th.now += ")"
				if h.Lost > 0 || h.Error != "" {
					th.verdict = miss
					th.now += "; " + firstLine(h.Error)
				}
			}
			t = append(t, th)
		}
	}
	return t
}

// sustainedTargetRows judges the runs at the rates issue 29 names; a rate
// that was not sustained is judged on the run at the rate that followed it.
func sustainedTargetRows(name string, runs []sustainedResult) []target {
	var t []target
	for i := range runs {
		r := &runs[i]
		if r.FallbackOf != 0 {
			continue
		}
		bound, ok := sustainedTargets[r.Rate]
		measure := fmt.Sprintf("%s sustained %s rows/s, %s: p99", name, rateLabel(r.Rate), r.Delivery)
		if !ok {
			t = append(t, target{measure: measure, want: "–", verdict: reported, now: sustainedNow(r)})
			continue
		}
		tt := target{measure: measure, want: fmt.Sprintf("≤ %.0f ms", bound)}
		if r.Rate > 10_000 {
			tt.measure += " (or the highest rate sustained here)"
		}
		switch {
		case r.Error != "":
			tt.now, tt.verdict = "failed: "+firstLine(r.Error), miss
		case r.Sustained:
			tt.now = sustainedNow(r)
			tt.verdict = verdict(float64(r.P99) <= bound)
		default:
			tt.now = fmt.Sprintf("not sustained: %.0f rows/s achieved (generator lag p99 %.0f ms)", r.Achieved, r.LagP99Ms)
			tt.verdict = miss
			// The rate measured instead: the first that was sustained, or
			// the last tried.
			var fb *sustainedResult
			for j := range runs {
				if f := &runs[j]; f.FallbackOf == r.Rate && f.Delivery == r.Delivery && (fb == nil || !fb.Sustained) {
					fb = f
				}
			}
			if fb != nil {
				tt.now += "; at " + sustainedNow(fb)
				if fb.Error == "" && fb.Sustained && r.Rate > 10_000 {
					tt.verdict = verdict(float64(fb.P99) <= bound) + " (at the highest rate sustained)"
				}
			}
		}
		t = append(t, tt)
	}
	return t
}

func sustainedNow(r *sustainedResult) string {
	if r.Error != "" {
		return fmt.Sprintf("%d rows/s: failed: %s", r.Rate, firstLine(r.Error))
	}
	s := fmt.Sprintf("%d rows/s: p99 %s ms (p50 %s, p99.9 %s, max %s), %.0f rows/s achieved", r.Rate, r.P99, r.P50, r.P999, r.Max, r.Achieved)
	if !r.Sustained {
		s += " (not sustained)"
	}
	return s + windowNote(r.Seconds)
}

func windowNote(secs float64) string {
	if secs < referenceWindowSeconds {
		return fmt.Sprintf(" (%.0f s window, not %d s)", secs, referenceWindowSeconds)
	}
	return ""
}

// pairRatios are each pair's drain over raw read: whole runs, first to
// last, 10-90 %; a figure missing on either side is NaN.
func pairRatios(ps []drainPair) (whole, f2l, mid []float64) {
	ratio := func(a, b float64) float64 {
		if a <= 0 || b <= 0 || math.IsNaN(a) || math.IsNaN(b) {
			return math.NaN()
		}
		return a / b
	}
	for _, p := range ps {
		if p.Drain.Error != "" || p.Drain.Seconds <= 0 {
			continue
		}
		whole = append(whole, ratio(p.Drain.rate(), p.Raw.rate()))
		f2l = append(f2l, ratio(p.Drain.FirstToLast, p.Raw.FirstToLast))
		mid = append(mid, ratio(p.Drain.Middle, p.Raw.Middle))
	}
	return whole, f2l, mid
}

// spreadText is "min–max" of a spread.
func spreadText(sp spread, unit string) string {
	if sp.Median == 0 && sp.Max == 0 {
		return "–"
	}
	if sp.Min == sp.Max {
		return fmt.Sprintf("%.2f%s", sp.Min, unit)
	}
	return fmt.Sprintf("%.2f–%.2f%s", sp.Min, sp.Max, unit)
}

func writeLoadTargets(w io.Writer, res *results) {
	fmt.Fprintln(w, "| measure | now | target | verdict |")
	fmt.Fprintln(w, "|---|---|---|---|")
	for _, t := range loadTargets(res) {
		fmt.Fprintf(w, "| %s | %s | %s | %s |\n", t.measure, strings.ReplaceAll(t.now, "|", "/"), t.want, t.verdict)
	}
}

func hasLoad(res *results) bool {
	for _, db := range res.DBs {
		if len(db.Sustained) > 0 || db.Multi != nil || len(db.HA) > 0 || (db.Drain != nil && len(db.Drain.Repeats) > 0) {
			return true
		}
	}
	return false
}

func hasSustained(res *results) bool {
	for _, db := range res.DBs {
		if len(db.Sustained) > 0 || db.Multi != nil {
			return true
		}
	}
	return false
}

// writeLoadTables writes the tables of issue 29's scenarios that ran.
func writeLoadTables(w io.Writer, res *results) {
	writeRepeatTable(w, res)
	writeSustainedTable(w, res)
	writeMultiTable(w, res)
	writeHATable(w, res)
}

func writeRepeatTable(w io.Writer, res *results) {
	found := false
	for _, db := range res.DBs {
		found = found || (db.Drain != nil && len(db.Drain.Repeats) > 0)
	}
	if !found {
		return
	}
	fmt.Fprintln(w, "\n### Drain against the raw read, start-up excluded")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Each pair is a raw read of the backlog, then an at-least-once drain of it (fresh broker), in turn. Rates in rows/s: whole run; from the first row (record) to the last; between 10 % and 90 % of the backlog.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| database | pair | raw read: whole / first→last / 10-90 % | raw read's first row after | drain: whole / first→last / 10-90 % | drain's first record after | drain / raw: whole / first→last / 10-90 % | connector CPU s per 1M rows | load avg before raw / drain |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|")
	for _, db := range res.DBs {
		d := db.Drain
		if d == nil || len(d.Repeats) == 0 {
			continue
		}
		for i, p := range d.Repeats {
			drain := "failed: " + strings.ReplaceAll(firstLine(p.Drain.Error), "|", "/")
			ratios, first, cpu := "–", "–", "–"
			if p.Drain.Error == "" {
				drain = fmt.Sprintf("%s / %s / %s", rateText(p.Drain.rate()), rateText(p.Drain.FirstToLast), rateText(p.Drain.Middle))
				first = fmt.Sprintf("%.3f s", p.Drain.FirstSeconds)
				if pw, pf, pm := pairRatios([]drainPair{p}); len(pw) == 1 {
					ratios = fmt.Sprintf("%s / %s / %s", ratioX(pw[0]), ratioX(pf[0]), ratioX(pm[0]))
				}
				cpu = perM(p.Drain.CPUSeconds, p.Drain.Rows)
			}
			fmt.Fprintf(w, "| %s | %d | %s / %s / %s | %.3f s | %s | %s | %s | %s | %s / %s |\n", dbLabel(db.Kind), i+1,
				rateText(p.Raw.rate()), rateText(p.Raw.FirstToLast), rateText(p.Raw.Middle), p.Raw.FirstSeconds, drain, first, ratios, cpu, p.Raw.LoadAvgBefore, p.Drain.LoadAvgBefore)
		}
		if len(d.Repeats) > 1 {
			var rw, rf, rm, dw, df, dm []float64
			for _, p := range d.Repeats {
				rw, rf, rm = append(rw, p.Raw.rate()), append(rf, p.Raw.FirstToLast), append(rm, p.Raw.Middle)
				if p.Drain.Error == "" {
					dw, df, dm = append(dw, p.Drain.rate()), append(df, p.Drain.FirstToLast), append(dm, p.Drain.Middle)
				}
			}
			whole, f2l, mid := pairRatios(d.Repeats)
			fmt.Fprintf(w, "| %s | median (min–max) | %s / %s / %s | | %s / %s / %s | | %s / %s / %s | | |\n", dbLabel(db.Kind),
				medianRange(rw, rateText), medianRange(rf, rateText), medianRange(rm, rateText),
				medianRange(dw, rateText), medianRange(df, rateText), medianRange(dm, rateText),
				medianRange(whole, ratioX), medianRange(f2l, ratioX), medianRange(mid, ratioX))
		}
	}
}

// medianRange is "median (min–max)" of vs in format f.
func medianRange(vs []float64, f func(float64) string) string {
	sp := spreadOf(vs)
	if sp.Median == 0 {
		return "–"
	}
	return fmt.Sprintf("%s (%s–%s)", f(sp.Median), f(sp.Min), f(sp.Max))
}

func rateText(v float64) string {
	if v <= 0 || math.IsNaN(v) || math.IsInf(v, 0) {
		return "–"
	}
	return fmt.Sprintf("%.0fk", v/1000)
}

func ratioX(v float64) string {
	if v <= 0 || math.IsNaN(v) || math.IsInf(v, 0) {
		return "–"
	}
	return fmt.Sprintf("%.2f×", v)
}

func writeSustainedTable(w io.Writer, res *results) {
	found := false
	for _, db := range res.DBs {
		found = found || len(db.Sustained) > 0
	}
	if !found {
		return
	}
	fmt.Fprintln(w, "\n### Sustained load: commit → visible to a consumer at a fixed rate (ms)")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| database | delivery | asked rows/s | achieved rows/s | sustained | rows per transaction × writers | window | written / delivered | p50 | p99 | p99.9 | max | INSERT+commit p50 / p99 | generator lag p99 / max (ms) | peak RSS | load avg before → after |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, db := range res.DBs {
		for _, r := range db.Sustained {
			asked := fmt.Sprint(r.Rate)
			if r.FallbackOf != 0 {
				asked += fmt.Sprintf(" (after %d)", r.FallbackOf)
			}
			if r.Error != "" {
				fmt.Fprintf(w, "| %s | %s | %s | failed: %s | | | | | | | | | | | | %s → %s |\n", dbLabel(db.Kind), r.Delivery, asked,
					strings.ReplaceAll(firstLine(r.Error), "|", "/"), r.LoadAvgBefore, r.LoadAvgAfter)
				continue
			}
			sus := "yes"
			switch {
			case r.Sustained:
			case r.Achieved < sustainedShare*float64(r.Rate):
				sus = fmt.Sprintf("**no** (%.0f %% of the rate)", 100*r.Achieved/float64(r.Rate))
			default:
				sus = "**no** (generator behind its schedule)"
			}
			fmt.Fprintf(w, "| %s | %s | %s | %.0f | %s | %d × %d | %.0f s after %.0f s | %d / %d | %s | %s | %s | %s | %s / %s | %.1f / %.1f | %.1f MiB | %s → %s |\n",
				dbLabel(db.Kind), r.Delivery, asked, r.Achieved, sus, r.TxRows, r.Writers, r.Seconds, r.WarmupSeconds, r.Written, r.Delivered,
				r.P50, r.P99, r.P999, r.Max, r.CommitP50, r.CommitP99, r.LagP99Ms, r.LagMaxMs, r.PeakRSSMiB, r.LoadAvgBefore, r.LoadAvgAfter)
		}
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Where the CPU went in each measured window, in cores (1.00 = one core busy throughout; the machine has "+res.Machine.Nproc+"):")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| database | run | machine | database server | broker | connector | bench process (generator, consumer) | rest of the machine |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|")
	for _, db := range res.DBs {
		for _, r := range db.Sustained {
			if r.CPU != nil {
				writeCPURow(w, dbLabel(db.Kind), r.label(), r.CPU)
			}
		}
		if m := db.Multi; m != nil && m.CPU != nil {
			writeCPURow(w, dbLabel(db.Kind), fmt.Sprintf("%d connectors × %s rows/s", m.Connectors, rateLabel(m.RatePerConnector)), m.CPU)
		}
	}
}

// writeCPURow writes one window's split.
func writeCPURow(w io.Writer, db, run string, c *cpuWindow) {
	cell := func(prefix string) string {
		sh, ok := c.share(prefix)
		if !ok {
			return "–"
		}
		return fmt.Sprintf("%.2f", sh.Cores)
	}
	server := "–"
	var parts []string
	for _, sh := range c.Shares {
		switch {
		case strings.HasPrefix(sh.Name, "MariaDB server") || strings.HasPrefix(sh.Name, "PostgreSQL server"):
			server = fmt.Sprintf("%.2f", sh.Cores)
		case sh.Of != "":
			parts = append(parts, fmt.Sprintf("%s %.2f", sh.Name, sh.Cores))
		}
	}
	if len(parts) > 0 {
		server += " (" + strings.Join(parts, ", ") + ")"
	}
	if c.Error != "" {
		server += " (" + strings.ReplaceAll(firstLine(c.Error), "|", "/") + ")"
	}
	fmt.Fprintf(w, "| %s | %s | %.2f | %s | %s | %s | %s | %.2f |\n", db, run, c.MachineCores, server, cell("broker"), cell("connector"), cell("bench process"), c.OtherCores)
}

func writeMultiTable(w io.Writer, res *results) {
	found := false
	for _, db := range res.DBs {
		found = found || db.Multi != nil
	}
	if !found {
		return
	}
	fmt.Fprintln(w, "\n### Several connectors in one process (ms)")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| database | connector | asked rows/s | achieved rows/s | generator lag p99 (ms) | written / delivered | p50 | p99 | p99.9 | max |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|")
	for _, db := range res.DBs {
		m := db.Multi
		if m == nil {
			continue
		}
		if m.Error != "" {
			fmt.Fprintf(w, "| %s | %d connectors | %d each | failed: %s | | | | | | |\n", dbLabel(db.Kind), m.Connectors, m.RatePerConnector, strings.ReplaceAll(firstLine(m.Error), "|", "/"))
			continue
		}
		for _, p := range m.Per {
			fmt.Fprintf(w, "| %s | %s | %d | %.0f | %.1f | %d / %d | %s | %s | %s | %s |\n", dbLabel(db.Kind), p.Name, m.RatePerConnector, p.Achieved, p.LagP99Ms, p.Written, p.Delivered, p.P50, p.P99, p.P999, p.Max)
		}
		fmt.Fprintf(w, "| %s | **all %d** | %d | %.0f | | %d / %d | %s | **%s** | %s | %s |\n", dbLabel(db.Kind), m.Connectors, m.Connectors*m.RatePerConnector, m.Achieved, m.Written, m.Delivered, m.P50, m.P99, m.P999, m.Max)
	}
	fmt.Fprintln(w)
	for _, db := range res.DBs {
		if m := db.Multi; m != nil && m.Error == "" {
			fmt.Fprintf(w, "%s: one process, %d connectors, %d-row transactions from %d writers per connector, %.0f s after %.0f s of warm-up: peak RSS %.1f MiB (%.1f MiB at the end), connector CPU %.2f cores; load average %s → %s.\n\n",
				dbLabel(db.Kind), m.Connectors, m.TxRows, m.WritersPerConnector, m.Seconds, m.WarmupSeconds, m.PeakRSSMiB, m.RSSMiB, m.ConnectorCPUSeconds/math.Max(m.Seconds, 1e-9), m.LoadAvgBefore, m.LoadAvgAfter)
		}
	}
}

func writeHATable(w io.Writer, res *results) {
	found := false
	for _, db := range res.DBs {
		found = found || len(db.HA) > 0
	}
	if !found {
		return
	}
	fmt.Fprintln(w, "\n### HA takeover with the default settings (s)")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "From the signal to the first record the new owner delivered reaching a consumer, and to the new owner's `/active` answering 200.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| database | fault | delivery | trials (failed) | first record: p50 / min / max | /active: p50 / min / max | rows written / lost | load avg before |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|")
	for _, db := range res.DBs {
		for _, h := range db.HA {
			trials := fmt.Sprintf("%d (%d)", len(h.Trials), h.Failed)
			if h.Error != "" {
				trials += "; " + strings.ReplaceAll(firstLine(h.Error), "|", "/")
			}
			fmt.Fprintf(w, "| %s | %s | %s | %s | %.2f / %.2f / %.2f | %.2f / %.2f / %.2f | %d / %d | %s |\n", dbLabel(db.Kind), haFaultText(h.Fault), h.Delivery, trials,
				h.ToRecord.Median, h.ToRecord.Min, h.ToRecord.Max, h.ToActive.Median, h.ToActive.Min, h.ToActive.Max, h.Written, h.Lost, h.LoadAvgBefore)
		}
	}
}

// loadFigures are the before/after figures of issue 29's scenarios.
func loadFigures(db dbResult, add func(name string, v float64, higher bool)) {
	name := dbLabel(db.Kind)
	for i := range db.Sustained {
		r := &db.Sustained[i]
		if r.Error != "" {
			continue
		}
		l := fmt.Sprintf("%s sustained %s rows/s, %s", name, rateLabel(r.Rate), r.Delivery)
		add(l+": achieved (rows/s)", r.Achieved, true)
		if math.IsInf(float64(r.P99), 1) {
			continue
		}
		add(l+": p50 (ms)", float64(r.P50), false)
		add(l+": p99 (ms)", float64(r.P99), false)
		if !math.IsInf(float64(r.P999), 1) {
			add(l+": p99.9 (ms)", float64(r.P999), false)
		}
		add(l+": connector CPU (cores)", r.ConnectorCPUSeconds/math.Max(r.Seconds, 1e-9), false)
	}
	if m := db.Multi; m != nil && m.Error == "" {
		l := fmt.Sprintf("%s %d connectors × %s rows/s", name, m.Connectors, rateLabel(m.RatePerConnector))
		if !math.IsInf(float64(m.P99), 1) {
			add(l+": p99 (ms)", float64(m.P99), false)
		}
		add(l+": peak RSS (MiB)", m.PeakRSSMiB, false)
	}
	if d := db.Drain; d != nil && len(d.Repeats) > 0 {
		whole, f2l, mid := pairRatios(d.Repeats)
		add(name+" drain / raw read, first to last (median)", spreadOf(f2l).Median, true)
		add(name+" drain / raw read, 10-90 % (median)", spreadOf(mid).Median, true)
		if len(whole) > 1 {
			add(name+" drain / raw read, whole runs (median)", spreadOf(whole).Median, true)
		}
		var cpu []float64
		for _, p := range d.Repeats {
			if p.Drain.Error == "" && p.Drain.Rows > 0 {
				cpu = append(cpu, p.Drain.CPUSeconds/float64(p.Drain.Rows)*1e6)
			}
		}
		if len(cpu) > 1 {
			add(name+" drain CPU s per 1M rows (at-least-once, median)", spreadOf(cpu).Median, false)
		}
	}
	for _, h := range db.HA {
		l := fmt.Sprintf("%s takeover, %s, %s", name, h.Fault, h.Delivery)
		add(l+": first record p50 (s)", h.ToRecord.Median, false)
		add(l+": first record max (s)", h.ToRecord.Max, false)
		add(l+": /active p50 (s)", h.ToActive.Median, false)
	}
}

const loadNotes = `- **Sustained load** uses the live scenario's measurement: the writer's clock read just before
  the INSERT to the consumer's poll return (read_committed for exactly-once), INSERT+commit
  included. Each transaction is one multi-row INSERT of ` + "`-sustained-tx-rows`" + ` rows (they share the
  clock), sent on a fixed schedule (transaction k at k × rows / rate after the start) by
  ` + "`-sustained-writers`" + ` connections; "generator lag" is how late a transaction went out against
  that schedule. Only rows whose clock falls in the measured window (after the warm-up) count;
  "achieved" is those rows over the window, and a run is **sustained** when it reached 98 % of the
  asked rate. A rate that was not sustained is measured again at 90 % of what was achieved
  (rounded down to a thousand): the highest rate this machine sustained, which the target is
  then judged on.
- **CPU split**: /proc at the start and the end of the measured window: the database server
  (MariaDB: the mariadbd process named by ` + "`@@pid_file`" + `, every session of a shared server included;
  PostgreSQL: the postmaster and all its children, and of those the backends connected to the bench
  database and its walsenders), the broker process, the connector process, the bench process
  (load generator and consumers), and the rest of the machine (/proc/stat busy time less those).
- **Several connectors** run in one process from one configuration with a ` + "`connectors:`" + ` list,
  each on its own outbox table of the bench database and its own topic (PostgreSQL: its own
  publication and slot), each table written like a sustained run at ` + "`-multi-rate`" + `.
- **Drain vs raw read, start-up excluded**: the drain's progress is
  outbox_cdc_records_delivered_total sampled every 10 ms; the MariaDB raw read's is its rows,
  timed as they are read; pg_recvlogical's is its walsender's ` + "`sent_lsn`" + ` (pg_stat_replication,
  every 10 ms) across the backlog's WAL. "First to last" is the rate from the first sample with
  anything done to the end; "10-90 %" the rate between 10 % and 90 % of the backlog.
- **HA takeover**: two processes per connector with the default ` + "`ha`" + ` (and ` + "`placement`" + `) settings,
  a writer committing single-row transactions throughout. The time runs from the signal to the
  first record of a producer not seen before it reaching the consumer (each process's sink has its
  own producer id; exactly-once: a new epoch of the same transactional id), and to the new
  owner's ` + "`/active`" + ` answering 200. Every committed row must be delivered by the end.
`
