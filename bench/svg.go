package main

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
)

// The plots are hand-written SVG: text stays text (searchable, sharp at any
// size, diffable in review), and no plotting dependency is needed for two
// charts.

// svgDoc accumulates SVG elements.
type svgDoc struct {
	b    bytes.Buffer
	w, h int
}

func newSVG(w, h int) *svgDoc {
	d := &svgDoc{w: w, h: h}
	fmt.Fprintf(&d.b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="Helvetica, Arial, sans-serif" font-size="13">`+"\n", w, h, w, h)
	fmt.Fprintf(&d.b, `<rect width="%d" height="%d" fill="white"/>`+"\n", w, h)
	return d
}

func esc(s string) string {
	var b strings.Builder
	xml.EscapeText(&b, []byte(s))
	return b.String()
}

// text draws s at x, y; anchor is start, middle or end.
func (d *svgDoc) text(x, y float64, anchor, s string, attrs ...string) {
	fmt.Fprintf(&d.b, `<text x="%.1f" y="%.1f" text-anchor="%s"%s>%s</text>`+"\n", x, y, anchor, joinAttrs(attrs), esc(s))
}

func (d *svgDoc) line(x1, y1, x2, y2 float64, stroke string, width float64, attrs ...string) {
	fmt.Fprintf(&d.b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="%.1f"%s/>`+"\n", x1, y1, x2, y2, stroke, width, joinAttrs(attrs))
}

func (d *svgDoc) rect(x, y, w, h float64, fill string, attrs ...string) {
	fmt.Fprintf(&d.b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"%s/>`+"\n", x, y, w, h, fill, joinAttrs(attrs))
}

func (d *svgDoc) polyline(pts [][2]float64, stroke string, dashed bool) {
	if len(pts) < 2 {
		return
	}
	var p []string
	for _, pt := range pts {
		p = append(p, fmt.Sprintf("%.1f,%.1f", pt[0], pt[1]))
	}
	dash := ""
	if dashed {
		dash = ` stroke-dasharray="6 4"`
	}
	fmt.Fprintf(&d.b, `<polyline points="%s" fill="none" stroke="%s" stroke-width="2"%s/>`+"\n", strings.Join(p, " "), stroke, dash)
}

// marker draws a point: a disc (p50), a square (p99) or a triangle
// pointing up (unbounded).
func (d *svgDoc) marker(kind string, x, y float64, fill string) {
	switch kind {
	case "disc":
		fmt.Fprintf(&d.b, `<circle cx="%.1f" cy="%.1f" r="4.5" fill="%s"/>`+"\n", x, y, fill)
	case "square":
		d.rect(x-4.5, y-4.5, 9, 9, fill)
	case "triangle":
		fmt.Fprintf(&d.b, `<polygon points="%.1f,%.1f %.1f,%.1f %.1f,%.1f" fill="%s"/>`+"\n", x, y-6, x-6, y+5, x+6, y+5, fill)
	}
}

func joinAttrs(attrs []string) string {
	if len(attrs) == 0 {
		return ""
	}
	return " " + strings.Join(attrs, " ")
}

func (d *svgDoc) bytes() []byte {
	out := append([]byte(nil), d.b.Bytes()...)
	return append(out, "</svg>\n"...)
}

// Colours per system (and for the drain bars).
var systemColour = map[string]string{
	sysCDC:   "#1f5fbf",
	sysSeed:  "#b22222",
	sysTuned: "#e08a00",
}

// latencySVG plots, for each database, p50 and p99 commit→visible latency
// (log scale) against the live load for every system measured. A
// percentile that is unbounded (rows not delivered by the end of the run)
// is a triangle on the top edge.
func latencySVG(res *results) []byte {
	const panelW, panelH, top, left, bottom, right = 600.0, 470.0, 60.0, 80.0, 70.0, 30.0
	n := max(1, len(res.DBs))
	systems := presentSystems(res)
	d := newSVG(int(panelW)*n, int(panelH)+30+22*len(systems))
	const yMin, yMax = -1.0, 5.0 // log10 ms: 0.1 ms .. 100 s
	for pi, db := range res.DBs {
		ox := float64(pi) * panelW
		pw, ph := panelW-left-right, panelH-top-bottom
		py := func(ms float64) float64 {
			v := math.Log10(math.Max(ms, 0.1))
			return top + ph - (v-yMin)/(yMax-yMin)*ph
		}
		d.text(ox+left, 28, "start", dbLabel(db.Kind)+": commit → visible latency", `font-size="16"`, `font-weight="bold"`)
		for e := int(yMin); e <= int(yMax); e++ {
			y := py(math.Pow(10, float64(e)))
			d.line(ox+left, y, ox+left+pw, y, "#dddddd", 1)
			d.text(ox+left-8, y+4, "end", []string{"0.1 ms", "1 ms", "10 ms", "100 ms", "1 s", "10 s", "100 s"}[e-int(yMin)])
		}
		d.line(ox+left, top, ox+left, top+ph, "black", 1)
		d.line(ox+left, top+ph, ox+left+pw, top+ph, "black", 1)
		var rates []int
		for _, l := range db.Live {
			if !slices.Contains(rates, l.Rate) {
				rates = append(rates, l.Rate)
			}
		}
		px := func(i int) float64 { return ox + left + float64(2*i+1)*pw/float64(2*max(1, len(rates))) }
		for i, r := range rates {
			d.line(px(i), top+ph, px(i), top+ph+5, "black", 1)
			d.text(px(i), top+ph+20, "middle", rateLabel(r))
		}
		d.text(ox+left+pw/2, top+ph+45, "middle", "load (rows/s)")
		for _, sys := range systems {
			for _, p99 := range []bool{false, true} {
				var pts [][2]float64
				flush := func() {
					d.polyline(pts, systemColour[sys], !p99)
					pts = nil
				}
				for i, r := range rates {
					v := math.NaN()
					for _, l := range db.Live {
						if l.Rate == r && l.System == sys {
							v = float64(l.P50)
							if p99 {
								v = float64(l.P99)
							}
						}
					}
					if math.IsNaN(v) {
						flush()
						continue
					}
					x, y := px(i), py(v)
					kind := "disc"
					if p99 {
						kind = "square"
					}
					if math.IsInf(v, 1) || v > math.Pow(10, yMax) {
						y, kind = top+6, "triangle"
					}
					pts = append(pts, [2]float64{x, y})
					d.marker(kind, x, y, systemColour[sys])
				}
				flush()
			}
		}
	}
	ly := panelH + 10
	for _, sys := range systems {
		c := systemColour[sys]
		d.line(20, ly, 44, ly, c, 2, `stroke-dasharray="6 4"`)
		d.marker("disc", 32, ly, c)
		d.text(52, ly+4, "start", sys+" p50")
		d.line(170, ly, 194, ly, c, 2)
		d.marker("square", 182, ly, c)
		d.text(202, ly+4, "start", sys+" p99")
		ly += 22
	}
	d.marker("triangle", 32, ly, "black")
	d.text(52, ly+4, "start", "not every row delivered by the end of the run (unbounded)")
	return d.bytes()
}

func presentSystems(res *results) []string {
	var out []string
	for _, sys := range []string{sysCDC, sysSeed, sysTuned} {
		for _, db := range res.DBs {
			for _, l := range db.Live {
				if l.System == sys && !slices.Contains(out, sys) {
					out = append(out, sys)
				}
			}
		}
	}
	return out
}

// bar is one bar of the drain plot.
type bar struct {
	label  string
	rate   float64
	colour string
}

func drainBars(db dbResult) []bar {
	d := db.Drain
	if d == nil {
		return nil
	}
	rate := func(s float64) float64 { return float64(d.Rows) / s }
	bars := []bar{
		{"raw source read", rate(d.RawReadSeconds), "#7f7f7f"},
		{"raw produce, sarama AsyncProducer", rate(d.RawProduceSaramaSeconds), "#a6a6a6"},
		{"raw produce, franz-go", rate(d.RawProduceFranzSeconds), "#c8c8c8"},
	}
	for _, r := range d.Runs {
		c := map[[2]bool]string{{false, false}: "#1f5fbf", {false, true}: "#6f9be0", {true, false}: "#6a3d9a", {true, true}: "#a98bcf"}[[2]bool{r.ExactlyOnce, r.Brokers > 1}]
		bars = append(bars, bar{"outbox-cdc, " + r.Mode, r.rate(), c})
	}
	return bars
}

// drainSVG draws, for each database, the drain rate of every connector run
// beside the physical limits measured on the same backlog.
func drainSVG(res *results) []byte {
	const barH, gap, left, right, width = 22.0, 6.0, 260.0, 110.0, 900.0
	type panel struct {
		title string
		bars  []bar
	}
	var panels []panel
	for _, db := range res.DBs {
		if bars := drainBars(db); len(bars) > 0 {
			panels = append(panels, panel{dbLabel(db.Kind) + ": backlog drain, rows/s", bars})
		}
	}
	h := 20.0
	for _, p := range panels {
		h += 40 + float64(len(p.bars))*(barH+gap) + 20
	}
	d := newSVG(int(width), int(h)+10)
	y := 20.0
	for _, p := range panels {
		top := 0.0
		for _, b := range p.bars {
			if !math.IsNaN(b.rate) && !math.IsInf(b.rate, 0) {
				top = math.Max(top, b.rate)
			}
		}
		d.text(10, y+16, "start", p.title, `font-size="16"`, `font-weight="bold"`)
		y += 36
		pw := width - left - right
		for _, b := range p.bars {
			d.text(left-8, y+barH/2+4, "end", b.label)
			if math.IsNaN(b.rate) || top == 0 {
				d.text(left+4, y+barH/2+4, "start", "failed")
			} else {
				w := b.rate / top * pw
				d.rect(left, y, w, barH, b.colour)
				d.text(left+w+6, y+barH/2+4, "start", fmt.Sprintf("%.0fk", b.rate/1000))
			}
			y += barH + gap
		}
		d.line(left, y-gap, left, y-gap-float64(len(p.bars))*(barH+gap)+gap, "black", 1)
		y += 20
	}
	return d.bytes()
}

func writePlots(dir string, res *results) error {
	if err := os.WriteFile(dir+"/latency.svg", latencySVG(res), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(dir+"/drain.svg", drainSVG(res), 0o644); err != nil {
		return err
	}
	return writeLoadPlots(dir, res)
}

func rateLabel(r int) string {
	switch {
	case r == 0:
		return "max"
	case r >= 1000 && r%1000 == 0:
		return fmt.Sprintf("%dk", r/1000)
	}
	return fmt.Sprint(r)
}
