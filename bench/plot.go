package main

import (
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"math"
	"os"
)

// writePlot draws, for each database, p50 and p99 commit→visible latency
// (log scale) against the live load, for outbox-cdc and the polling relay.
// A percentile that is unbounded (rows not delivered by the end of the run)
// is drawn as a triangle on the top edge.
func writePlot(path string, res *results) error {
	const panelW, panelH, top, left, bottom, right = 620, 520, 70, 90, 80, 30
	n := max(1, len(res.DBs))
	img := image.NewRGBA(image.Rect(0, 0, panelW*n, panelH+90))
	draw.Draw(img, img.Bounds(), image.NewUniform(color.White), image.Point{}, draw.Src)
	black := color.RGBA{0, 0, 0, 255}
	grey := color.RGBA{215, 215, 215, 255}
	series := []struct {
		name  string
		relay bool
		p99   bool
		c     color.RGBA
	}{
		{"OUTBOX-CDC P50", false, false, color.RGBA{60, 120, 230, 255}},
		{"OUTBOX-CDC P99", false, true, color.RGBA{0, 40, 140, 255}},
		{"POLLING RELAY P50", true, false, color.RGBA{240, 110, 80, 255}},
		{"POLLING RELAY P99", true, true, color.RGBA{160, 20, 20, 255}},
	}
	const yMin, yMax = -1.0, 5.0 // log10 ms: 0.1 ms .. 100 s
	for pi, db := range res.DBs {
		ox := pi * panelW
		pw, ph := panelW-left-right, panelH-top-bottom
		px := func(i, nx int) int { return ox + left + (2*i+1)*pw/(2*nx) }
		py := func(ms float64) int {
			v := math.Log10(math.Max(ms, 0.1))
			return top + ph - int((v-yMin)/(yMax-yMin)*float64(ph))
		}
		title := fmt.Sprintf("%s: COMMIT TO VISIBLE LATENCY", upper(db.Kind))
		drawText(img, ox+left, 20, title, 2, black)
		// Axes and grid.
		for e := int(yMin); e <= int(yMax); e++ {
			y := py(math.Pow(10, float64(e)))
			hline(img, ox+left, ox+left+pw, y, grey)
			label := []string{"0.1MS", "1MS", "10MS", "100MS", "1S", "10S", "100S"}[e-int(yMin)]
			drawText(img, ox+left-textWidth(label, 2)-8, y-7, label, 2, black)
		}
		vline(img, ox+left, top, top+ph, black)
		hline(img, ox+left, ox+left+pw, top+ph, black)
		var rates []int
		for _, l := range db.Live {
			if !contains(rates, l.Rate) {
				rates = append(rates, l.Rate)
			}
		}
		for i, r := range rates {
			label := rateLabel(r)
			x := px(i, len(rates))
			vline(img, x, top+ph, top+ph+6, black)
			drawText(img, x-textWidth(label, 2)/2, top+ph+14, label, 2, black)
		}
		drawText(img, ox+left+pw/2-textWidth("LOAD (ROWS/S)", 2)/2, top+ph+42, "LOAD (ROWS/S)", 2, black)
		for _, s := range series {
			prevX, prevY := -1, -1
			for i, r := range rates {
				var v float64 = math.NaN()
				for _, l := range db.Live {
					if l.Rate == r && l.Relay == s.relay {
						v = float64(l.P50)
						if s.p99 {
							v = float64(l.P99)
						}
					}
				}
				if math.IsNaN(v) {
					prevX = -1
					continue
				}
				x := px(i, len(rates))
				inf := math.IsInf(v, 1) || v > math.Pow(10, yMax)
				y := py(v)
				if inf {
					y = top + 6
				}
				if prevX >= 0 {
					line(img, prevX, prevY, x, y, s.c, 2)
				}
				switch {
				case inf:
					triangle(img, x, y, s.c)
				case s.p99:
					square(img, x, y, 5, s.c)
				default:
					disc(img, x, y, 5, s.c)
				}
				prevX, prevY = x, y
			}
		}
	}
	// Legend.
	lx, ly := 20, panelH+20
	for _, s := range series {
		if s.p99 {
			square(img, lx+6, ly+7, 5, s.c)
		} else {
			disc(img, lx+6, ly+7, 5, s.c)
		}
		lx += 20 + drawText(img, lx+18, ly, s.name, 2, black) + 20
	}
	triangle(img, 26, panelH+56, black)
	drawText(img, 44, panelH+50, "= NOT ALL ROWS DELIVERED BY THE END OF THE RUN (UNBOUNDED)", 2, black)
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return png.Encode(f, img)
}

func rateLabel(r int) string {
	switch {
	case r == 0:
		return "MAX"
	case r >= 1000 && r%1000 == 0:
		return fmt.Sprintf("%dK", r/1000)
	}
	return fmt.Sprint(r)
}

func upper(s string) string {
	if s == "mysql" {
		return "MARIADB"
	}
	return "POSTGRESQL"
}

func contains(v []int, x int) bool {
	for _, y := range v {
		if y == x {
			return true
		}
	}
	return false
}

func hline(img *image.RGBA, x0, x1, y int, c color.Color) {
	for x := x0; x <= x1; x++ {
		img.Set(x, y, c)
	}
}

func vline(img *image.RGBA, x, y0, y1 int, c color.Color) {
	for y := y0; y <= y1; y++ {
		img.Set(x, y, c)
	}
}

func line(img *image.RGBA, x0, y0, x1, y1 int, c color.Color, w int) {
	steps := max(abs(x1-x0), abs(y1-y0), 1)
	for i := 0; i <= steps; i++ {
		x := x0 + (x1-x0)*i/steps
		y := y0 + (y1-y0)*i/steps
		for d := -w / 2; d <= w/2; d++ {
			img.Set(x, y+d, c)
			img.Set(x+d, y, c)
		}
	}
}

func disc(img *image.RGBA, cx, cy, r int, c color.Color) {
	for y := -r; y <= r; y++ {
		for x := -r; x <= r; x++ {
			if x*x+y*y <= r*r {
				img.Set(cx+x, cy+y, c)
			}
		}
	}
}

func square(img *image.RGBA, cx, cy, r int, c color.Color) {
	for y := -r; y <= r; y++ {
		for x := -r; x <= r; x++ {
			img.Set(cx+x, cy+y, c)
		}
	}
}

func triangle(img *image.RGBA, cx, cy int, c color.Color) {
	for y := 0; y <= 8; y++ {
		for x := -y; x <= y; x++ {
			img.Set(cx+x, cy-4+y, c)
		}
	}
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}
