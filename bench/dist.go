package main

import (
	"math"
	"slices"
	"time"
)

// Distributions of the sustained runs, kept in results.json so that the
// report and the plots can be made again from it: latency per second of
// the run, and the latency at a fixed set of quantiles (the CDF).

// timePoint is one window of a run: the rows whose clock was read in it and
// their latency percentiles (ms; +Inf when a row was never delivered).
type timePoint struct {
	// Second is the window's start, in seconds since the writers began.
	Second              float64
	Rows                int
	P50, P99, P999, Max msec
}

// timeline cuts the rows (sent: clock in µs, lat: latency in ms, pairwise)
// into windows of width from start and returns the percentiles of each
// window that holds rows. lat is not reordered.
func timeline(start int64, width time.Duration, sent []int64, lat []float64) []timePoint {
	if len(sent) == 0 || width <= 0 {
		return nil
	}
	w := width.Microseconds()
	buckets := map[int64][]float64{}
	for i, at := range sent {
		k := (at - start) / w
		if at < start {
			k = (at-start)/w - 1
		}
		buckets[k] = append(buckets[k], lat[i])
	}
	keys := make([]int64, 0, len(buckets))
	for k := range buckets {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	out := make([]timePoint, 0, len(keys))
	for _, k := range keys {
		v := buckets[k]
		slices.Sort(v)
		out = append(out, timePoint{Second: float64(k*w) / 1e6, Rows: len(v),
			P50: msec(sortedPct(v, 50)), P99: msec(sortedPct(v, 99)), P999: msec(sortedPct(v, 99.9)), Max: msec(v[len(v)-1])})
	}
	return out
}

// quantilePoint is the latency (ms) that a fraction Q of the rows met.
type quantilePoint struct {
	Q  float64
	Ms msec
}

// cdfQuantiles are the fractions a run's CDF is kept at: evenly spaced in
// "nines" (−log10(1−q)) from 0 to 4 nines, plus the first row and the max.
func cdfQuantiles() []float64 {
	qs := []float64{0}
	for k := 1; k <= 40; k++ {
		qs = append(qs, 1-math.Pow(10, -float64(k)/10))
	}
	return append(qs, 1)
}

// quantiles returns the latency at every cdfQuantiles fraction of sorted
// (ascending; +Inf last).
func quantiles(sorted []float64) []quantilePoint {
	if len(sorted) == 0 {
		return nil
	}
	var out []quantilePoint
	for _, q := range cdfQuantiles() {
		out = append(out, quantilePoint{Q: q, Ms: msec(sortedPct(sorted, 100*q))})
	}
	return out
}

// sortedPct is pct of an already sorted slice (the nearest-rank
// percentile; p 0 is the smallest value).
func sortedPct(v []float64, p float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	i := int(math.Ceil(p/100*float64(len(v)))) - 1
	return v[max(0, min(i, len(v)-1))]
}

// spread is the smallest, the median and the largest of a repeated figure.
type spread struct{ Min, Median, Max float64 }

// spreadOf ignores NaN values; with none left, every field is 0 (JSON has
// no NaN).
func spreadOf(vs []float64) spread {
	var v []float64
	for _, x := range vs {
		if !math.IsNaN(x) {
			v = append(v, x)
		}
	}
	if len(v) == 0 {
		return spread{}
	}
	slices.Sort(v)
	med := v[len(v)/2]
	if len(v)%2 == 0 {
		med = (v[len(v)/2-1] + v[len(v)/2]) / 2
	}
	return spread{v[0], med, v[len(v)-1]}
}

// progress records how far a reader of a backlog of known size had come
// (rows, or bytes for a reader that only shows bytes) over time, so that its
// rate can be taken without its start-up: from the first row to the last,
// and over the steady middle (10 % to 90 % of the backlog).
type progress struct {
	start time.Time
	pts   []progPoint
}

type progPoint struct {
	at time.Duration // since start
	n  float64
}

func newProgress(start time.Time) *progress { return &progress{start: start} }

// add records that n units were done at time at; unchanged counts are kept
// once.
func (p *progress) add(at time.Time, n float64) {
	if k := len(p.pts); k > 0 && p.pts[k-1].n == n {
		return
	}
	p.pts = append(p.pts, progPoint{at.Sub(p.start), n})
}

// progressRates is a reader's timing of a backlog of total units (which
// stand for rows rows). A figure that could not be taken is 0 (JSON has no
// NaN).
type progressRates struct {
	// FirstSeconds is from the start to the first sample that had done
	// anything (connection, start-up, skipping what comes before the
	// backlog); LastSeconds to the first sample that had done it all.
	FirstSeconds, LastSeconds float64
	// FirstToLast is the rate from the first sample after the start to the
	// last, in rows/s: start-up does not count. Middle is the rate between
	// 10 % and 90 % of the backlog (interpolated between samples).
	FirstToLast, Middle float64
}

func (p *progress) rates(total float64, rows int) progressRates {
	var r progressRates
	if p == nil || total <= 0 {
		return r
	}
	perUnit := float64(rows) / total
	var first, last *progPoint
	for i := range p.pts {
		pt := &p.pts[i]
		if first == nil && pt.n > 0 {
			first = pt
		}
		if last == nil && pt.n >= total {
			last = pt
		}
	}
	if first == nil || last == nil {
		return r
	}
	r.FirstSeconds, r.LastSeconds = first.at.Seconds(), last.at.Seconds()
	if d := (last.at - first.at).Seconds(); d > 0 {
		r.FirstToLast = (last.n - first.n) * perUnit / d
	}
	t10, ok10 := p.crossing(0.1 * total)
	t90, ok90 := p.crossing(0.9 * total)
	if ok10 && ok90 && t90 > t10 {
		r.Middle = 0.8 * total * perUnit / (t90 - t10).Seconds()
	}
	return r
}

// crossing is when the count reached n, interpolated linearly between the
// samples around it.
func (p *progress) crossing(n float64) (time.Duration, bool) {
	for i, pt := range p.pts {
		if pt.n < n {
			continue
		}
		if i == 0 {
			return pt.at, true
		}
		prev := p.pts[i-1]
		f := (n - prev.n) / (pt.n - prev.n)
		return prev.at + time.Duration(f*float64(pt.at-prev.at)), true
	}
	return 0, false
}

// finite is v, or 0 when v is NaN or infinite (JSON has neither).
func finite(v float64) float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return 0
	}
	return v
}
