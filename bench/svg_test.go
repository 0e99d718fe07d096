package main

import (
	"bytes"
	"encoding/xml"
	"io"
	"math"
	"strings"
	"testing"
)

// svgElements parses doc as XML (failing the test if it is not well
// formed) and returns its element names and text.
func svgElements(t *testing.T, doc []byte) (map[string]int, string) {
	t.Helper()
	dec := xml.NewDecoder(bytes.NewReader(doc))
	elems := map[string]int{}
	var text strings.Builder
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("not well-formed XML: %v\n%s", err, doc)
		}
		switch tk := tok.(type) {
		case xml.StartElement:
			elems[tk.Name.Local]++
			if tk.Name.Local == "svg" && tk.Name.Space != "http://www.w3.org/2000/svg" {
				t.Fatalf("svg element in namespace %q", tk.Name.Space)
			}
			for _, a := range tk.Attr {
				if strings.Contains(a.Value, "NaN") || strings.Contains(a.Value, "Inf") {
					t.Fatalf("<%s %s=%q>: a coordinate is not a number", tk.Name.Local, a.Name.Local, a.Value)
				}
			}
		case xml.CharData:
			text.Write(tk)
			text.WriteByte('\n')
		}
	}
	return elems, text.String()
}

func TestLatencySVG(t *testing.T) {
	res := sampleResults()
	// A percentile that could not be computed is left out, not drawn at NaN.
	res.DBs[1].Live[0].P99 = msec(math.NaN())
	elems, text := svgElements(t, latencySVG(res))
	for _, want := range []string{"MariaDB: commit → visible latency", "PostgreSQL: commit → visible latency",
		"outbox-cdc p99", "seed relay p50", "tuned relay p99", "1k", "load (rows/s)", "100 s", "(unbounded)"} {
		if !strings.Contains(text, want) {
			t.Errorf("latency plot lacks the text %q", want)
		}
	}
	// The seed relay's unbounded p50 and p99 at 1k/s are triangles, as is
	// the legend's.
	if elems["polygon"] != 3 {
		t.Errorf("%d triangles, want 3 (two unbounded percentiles and the legend)", elems["polygon"])
	}
	if elems["circle"] == 0 || elems["rect"] < 2 {
		t.Errorf("markers missing: %v", elems)
	}
}

func TestDrainSVG(t *testing.T) {
	res := sampleResults()
	res.DBs[0].Drain.Runs[1].Error = "connector exited"
	_, text := svgElements(t, drainSVG(res))
	for _, want := range []string{"MariaDB: backlog drain, rows/s", "raw source read", "outbox-cdc, at-least-once, 3 brokers",
		"1000k", "500k", "failed"} {
		if !strings.Contains(text, want) {
			t.Errorf("drain plot lacks the text %q", want)
		}
	}
	// No drain at all: still a valid, empty document.
	svgElements(t, drainSVG(&results{}))
	svgElements(t, latencySVG(&results{}))
}

func TestSVGEscapes(t *testing.T) {
	d := newSVG(10, 10)
	d.text(1, 1, "start", `a < b & "c"`)
	_, text := svgElements(t, d.bytes())
	if !strings.Contains(text, `a < b & "c"`) {
		t.Fatalf("text not escaped and restored: %q", text)
	}
}
