package main

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
)

// Plots of the sustained-load scenarios: latency over the time of each run
// (a regression shows as a raised line, a stall as a spike), and the CDF of
// each run's measured window on a "nines" scale, so the tail is as wide as
// the middle.

// loadSeries is one run to plot.
type loadSeries struct {
	db, label      string
	exactly        bool
	warmupSeconds  float64
	timeline       []timePoint
	cdf            []quantilePoint
	targetMs       float64 // the p99 target, 0 if none
	achieved, rate float64
}

func loadSeriesOf(res *results) []loadSeries {
	var out []loadSeries
	for _, db := range res.DBs {
		for _, r := range db.Sustained {
			if r.Error != "" {
				continue
			}
			target := sustainedTargets[r.Rate]
			if r.FallbackOf != 0 {
				target = sustainedTargets[r.FallbackOf]
			}
			out = append(out, loadSeries{db: dbLabel(db.Kind), label: r.label(), exactly: r.Delivery == modeEOS.label, warmupSeconds: r.WarmupSeconds,
				timeline: r.Timeline, cdf: r.CDF, targetMs: target, achieved: r.Achieved, rate: float64(r.Rate)})
		}
		if m := db.Multi; m != nil && m.Error == "" {
			out = append(out, loadSeries{db: dbLabel(db.Kind), label: fmt.Sprintf("%d connectors × %s rows/s, all", m.Connectors, rateLabel(m.RatePerConnector)),
				warmupSeconds: m.WarmupSeconds, timeline: m.Timeline, cdf: m.CDF, targetMs: 50, achieved: m.Achieved, rate: float64(m.Connectors * m.RatePerConnector)})
		}
	}
	return out
}

// Log-scale latency axis: 0.1 ms .. 10 s.
const latMinExp, latMaxExp = -1.0, 4.0

var latLabels = []string{"0.1 ms", "1 ms", "10 ms", "100 ms", "1 s", "10 s"}

// sustainedSVG draws one panel per sustained run: p50, p99 and max per
// second of the run (the warm-up shaded, the p99 target dotted) and under
// it a strip of the rows committed per second against the asked rate.
func sustainedSVG(res *results) []byte {
	series := loadSeriesOf(res)
	const panelW, panelH, left, right, top, strip, bottom = 560.0, 330.0, 70.0, 20.0, 40.0, 40.0, 45.0
	cols := 2
	rows := (len(series) + cols - 1) / cols
	d := newSVG(int(panelW)*cols, int(panelH)*max(1, rows)+40)
	if len(series) == 0 {
		d.text(20, 30, "start", "no sustained run")
		return d.bytes()
	}
	for i, s := range series {
		ox, oy := float64(i%cols)*panelW, float64(i/cols)*panelH
		pw, ph := panelW-left-right, panelH-top-strip-bottom-10
		x0, y0 := ox+left, oy+top
		sy0 := y0 + ph + 10 // the rate strip
		d.text(x0, oy+24, "start", s.db+": "+s.label, `font-weight="bold"`)
		tmax, rmax := 1.0, s.rate
		for _, p := range s.timeline {
			tmax = math.Max(tmax, p.Second+1)
			rmax = math.Max(rmax, float64(p.Rows))
		}
		px := func(sec float64) float64 { return x0 + sec/tmax*pw }
		py := func(ms float64) float64 {
			v := math.Log10(math.Max(ms, math.Pow(10, latMinExp)))
			v = math.Min(v, latMaxExp)
			return y0 + ph - (v-latMinExp)/(latMaxExp-latMinExp)*ph
		}
		ry := func(rows float64) float64 { return sy0 + strip - rows/rmax*strip }
		if s.warmupSeconds > 0 {
			w := math.Min(s.warmupSeconds, tmax) / tmax * pw
			d.rect(x0, y0, w, ph, "#eeeeee")
			d.rect(x0, sy0, w, strip, "#eeeeee")
			d.text(x0+4, y0+14, "start", "warm-up", `fill="#777777"`, `font-size="11"`)
		}
		for e := int(latMinExp); e <= int(latMaxExp); e++ {
			y := py(math.Pow(10, float64(e)))
			d.line(x0, y, x0+pw, y, "#dddddd", 1)
			d.text(x0-6, y+4, "end", latLabels[e-int(latMinExp)], `font-size="11"`)
		}
		d.line(x0, y0, x0, y0+ph, "black", 1)
		d.line(x0, y0+ph, x0+pw, y0+ph, "black", 1)
		d.line(x0, sy0, x0, sy0+strip, "black", 1)
		d.line(x0, sy0+strip, x0+pw, sy0+strip, "black", 1)
		step := niceStep(tmax)
		for t := 0.0; t <= tmax; t += step {
			d.line(px(t), sy0+strip, px(t), sy0+strip+4, "black", 1)
			d.text(px(t), sy0+strip+16, "middle", fmt.Sprintf("%.0f", t), `font-size="11"`)
		}
		d.text(x0+pw/2, sy0+strip+32, "middle", "seconds since the writers began", `font-size="11"`)
		// Rows per second against the asked rate.
		d.text(x0-6, sy0+strip/2+4, "end", "rows/s", `font-size="11"`)
		if s.rate > 0 {
			d.line(x0, ry(s.rate), x0+pw, ry(s.rate), "#2a9d3a", 1, `stroke-dasharray="2 3"`)
			d.text(x0+pw-4, ry(s.rate)-3, "end", fmt.Sprintf("asked %s", rateLabel(int(s.rate))), `font-size="10"`, `fill="#2a9d3a"`)
		}
		var rp [][2]float64
		for _, p := range s.timeline {
			rp = append(rp, [2]float64{px(p.Second + 0.5), ry(float64(p.Rows))})
		}
		d.polylineStyle(rp, "#555555", 1.5, "")
		if s.targetMs > 0 {
			y := py(s.targetMs)
			d.line(x0, y, x0+pw, y, "#2a9d3a", 1.5, `stroke-dasharray="2 3"`)
			d.text(x0+pw-4, y-4, "end", fmt.Sprintf("p99 target %.0f ms", s.targetMs), `font-size="11"`, `fill="#2a9d3a"`)
		}
		for _, pc := range []struct {
			get    func(timePoint) msec
			colour string
			width  float64
			dash   string
		}{
			{func(p timePoint) msec { return p.Max }, "#f2a0a0", 1, ""},
			{func(p timePoint) msec { return p.P99 }, "#b22222", 2, ""},
			{func(p timePoint) msec { return p.P50 }, "#1f5fbf", 2, "6 4"},
		} {
			var pts [][2]float64
			for _, p := range s.timeline {
				v := float64(pc.get(p))
				if math.IsNaN(v) {
					continue
				}
				x := px(p.Second + 0.5)
				if math.IsInf(v, 1) {
					d.marker("triangle", x, y0+6, pc.colour)
					pts = append(pts, [2]float64{x, y0 + 6})
					continue
				}
				pts = append(pts, [2]float64{x, py(v)})
			}
			d.polylineStyle(pts, pc.colour, pc.width, pc.dash)
		}
	}
	ly := float64(max(1, rows))*panelH + 20
	x := 20.0
	for _, l := range []struct{ colour, dash, text string }{{"#1f5fbf", "6 4", "p50"}, {"#b22222", "", "p99"}, {"#f2a0a0", "", "max"}, {"#555555", "", "rows committed per second"}} {
		d.line(x, ly, x+24, ly, l.colour, 2, dashAttr(l.dash)...)
		d.text(x+30, ly+4, "start", l.text)
		x += 70 + 7*float64(len(l.text))
	}
	d.marker("triangle", x+6, ly, "black")
	d.text(x+16, ly+4, "start", "a row not delivered by the end of the run")
	return d.bytes()
}

// cdfColours tell the runs of a panel apart.
var cdfColours = []string{"#1f5fbf", "#b22222", "#e08a00", "#2a9d3a", "#6a3d9a", "#8c564b", "#17becf", "#7f7f7f"}

// cdfSVG draws, per database, the latency CDF of every sustained run's
// measured window: x latency (log), y the fraction of rows delivered
// within it, spaced in nines (90 %, 99 %, 99.9 %, 99.99 %).
func cdfSVG(res *results) []byte {
	series := loadSeriesOf(res)
	var dbs []string
	for _, s := range series {
		if len(dbs) == 0 || dbs[len(dbs)-1] != s.db {
			dbs = append(dbs, s.db)
		}
	}
	const panelW, panelH, left, right, top, bottom = 600.0, 420.0, 70.0, 20.0, 40.0, 50.0
	maxRuns := 0
	for _, db := range dbs {
		n := 0
		for _, s := range series {
			if s.db == db {
				n++
			}
		}
		maxRuns = max(maxRuns, n)
	}
	d := newSVG(int(panelW)*max(1, len(dbs)), int(panelH)+20*maxRuns+20)
	if len(series) == 0 {
		d.text(20, 30, "start", "no sustained run")
		return d.bytes()
	}
	const maxNines = 4.0
	for pi, db := range dbs {
		ox := float64(pi) * panelW
		pw, ph := panelW-left-right, panelH-top-bottom
		x0, y0 := ox+left, top
		px := func(ms float64) float64 {
			v := math.Log10(math.Max(ms, math.Pow(10, latMinExp)))
			v = math.Min(v, latMaxExp)
			return x0 + (v-latMinExp)/(latMaxExp-latMinExp)*pw
		}
		py := func(q float64) float64 {
			n := maxNines
			if q < 1 {
				n = math.Min(maxNines, -math.Log10(1-q))
			}
			return y0 + ph - n/maxNines*ph
		}
		d.text(x0, 24, "start", db+": latency CDF, measured windows", `font-size="16"`, `font-weight="bold"`)
		for e := int(latMinExp); e <= int(latMaxExp); e++ {
			x := px(math.Pow(10, float64(e)))
			d.line(x, y0, x, y0+ph, "#dddddd", 1)
			d.text(x, y0+ph+16, "middle", latLabels[e-int(latMinExp)], `font-size="11"`)
		}
		d.text(x0+pw/2, y0+ph+36, "middle", "commit → visible latency", `font-size="11"`)
		for _, g := range []struct {
			q   float64
			lab string
		}{{0, "0 %"}, {0.5, "50 %"}, {0.9, "90 %"}, {0.99, "99 %"}, {0.999, "99.9 %"}, {0.9999, "99.99 %"}} {
			y := py(g.q)
			d.line(x0, y, x0+pw, y, "#dddddd", 1)
			d.text(x0-6, y+4, "end", g.lab, `font-size="11"`)
		}
		d.line(x0, y0, x0, y0+ph, "black", 1)
		d.line(x0, y0+ph, x0+pw, y0+ph, "black", 1)
		ly := y0 + ph + 60
		k := 0
		for _, s := range series {
			if s.db != db {
				continue
			}
			c := cdfColours[k%len(cdfColours)]
			dash := ""
			if s.exactly {
				dash = "6 4"
			}
			var pts [][2]float64
			for _, q := range s.cdf {
				v := float64(q.Ms)
				if math.IsNaN(v) {
					continue
				}
				if math.IsInf(v, 1) {
					break // the rest were never delivered
				}
				pts = append(pts, [2]float64{px(v), py(q.Q)})
			}
			d.polylineStyle(pts, c, 2, dash)
			d.line(x0, ly, x0+24, ly, c, 2, dashAttr(dash)...)
			d.text(x0+30, ly+4, "start", s.label)
			ly += 20
			k++
		}
	}
	return d.bytes()
}

func dashAttr(dash string) []string {
	if dash == "" {
		return nil
	}
	return []string{fmt.Sprintf(`stroke-dasharray="%s"`, dash)}
}

// polylineStyle is polyline with a width and a dash pattern.
func (d *svgDoc) polylineStyle(pts [][2]float64, stroke string, width float64, dash string) {
	if len(pts) < 2 {
		return
	}
	fmt.Fprintf(&d.b, `<polyline points="`)
	for i, pt := range pts {
		if i > 0 {
			d.b.WriteByte(' ')
		}
		fmt.Fprintf(&d.b, "%.1f,%.1f", pt[0], pt[1])
	}
	fmt.Fprintf(&d.b, `" fill="none" stroke="%s" stroke-width="%.1f"%s/>`+"\n", stroke, width, joinAttrs(dashAttr(dash)))
}

// niceStep is a tick step giving 4 to 10 ticks over 0..span.
func niceStep(span float64) float64 {
	for _, s := range []float64{1, 2, 5, 10, 20, 30, 60, 120, 300, 600} {
		if span/s <= 10 {
			return s
		}
	}
	return math.Ceil(span / 10)
}

// writeLoadPlots writes sustained.svg and cdf.svg when res has sustained
// runs.
func writeLoadPlots(dir string, res *results) error {
	if !hasSustained(res) {
		return nil
	}
	if err := os.WriteFile(filepath.Join(dir, "sustained.svg"), sustainedSVG(res), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "cdf.svg"), cdfSVG(res), 0o644)
}
