package main

import (
	"math"
	"strings"
	"testing"
)

func TestParseProc(t *testing.T) {
	// A command name with spaces and a ")" must not shift the fields.
	stat := []byte("4242 (outbox cdc) x) S 1 4242 4242 0 -1 4194560 1523 0 0 0 250 75 0 0 20 0 9 0 1234 123456789 4321 18446744073709551615")
	status := []byte("Name:\toutbox-cdc\nVmPeak:\t  900000 kB\nVmHWM:\t  131072 kB\nVmRSS:\t   65536 kB\nThreads:\t9\n")
	got, err := parseProc(stat, status)
	if err != nil {
		t.Fatal(err)
	}
	want := procStats{CPUSeconds: 3.25, PeakRSSMiB: 128, RSSMiB: 64}
	if got != want {
		t.Fatalf("parseProc = %+v, want %+v", got, want)
	}
	if _, err := parseProc([]byte("4242 (x) S 1"), status); err == nil {
		t.Fatal("a truncated stat line parsed without an error")
	}
	if _, err := parseProc([]byte("no command name"), status); err == nil {
		t.Fatal("a stat line without a command name parsed without an error")
	}
}

func TestParseGCTrace(t *testing.T) {
	log := `{"level":"info","component":"pipeline","message":"started"}
gc 1 @0.012s 3%: 0.018+1.2+0.005 ms clock, 0.036+0.40/1.1/0.20+0.010 ms cpu, 4->4->1 MB, 4 MB goal, 0 MB stacks, 0 MB globals, 2 P
gc 2 @0.500s 7%: 0.020+3.0+0.004 ms clock, 0.040+1.0/2.0/0.5+0.008 ms cpu, 90->95->40 MB, 92 MB goal, 0 MB stacks, 0 MB globals, 2 P
gc 3 @1.000s 9%: 0.020+3.0+0.004 ms clock, 0.040+1.0/2.0/0.5+0.008 ms cpu, 80->81->30 MB, 85 MB goal, 0 MB stacks, 0 MB globals, 2 P (forced)
gc 4 @oops: not a trace line
{"level":"info","message":"gc 5 is not at the start of the line"}
`
	got := parseGCTrace(strings.NewReader(log))
	if got.Cycles != 3 {
		t.Fatalf("cycles = %d, want 3", got.Cycles)
	}
	wantCPU := (0.036 + 0.40 + 1.1 + 0.20 + 0.010 + 2*(0.040+1.0+2.0+0.5+0.008)) / 1000
	if math.Abs(got.CPUSeconds-wantCPU) > 1e-9 {
		t.Fatalf("GC CPU = %v s, want %v s", got.CPUSeconds, wantCPU)
	}
	if got.Percent != 9 || got.PeakHeapMB != 90 {
		t.Fatalf("percent %v, peak heap %v MB; want 9 and 90", got.Percent, got.PeakHeapMB)
	}
}

func TestParseMetrics(t *testing.T) {
	text := `# HELP go_memstats_alloc_bytes_total Total number of bytes allocated.
# TYPE go_memstats_alloc_bytes_total counter
go_memstats_alloc_bytes_total 3.912345e+09
go_memstats_mallocs_total 1.8e+07
outbox_cdc_records_delivered_total{connector="bench"} 1e+06
outbox_cdc_records_delivered_total_extra 5
outbox_cdc_sink_records_total{connector="bench",topic="a"} 7
go_memstats_alloc_bytes 1234 1700000000000
`
	got, err := parseMetrics(strings.NewReader(text), "go_memstats_alloc_bytes_total", "outbox_cdc_records_delivered_total", "go_memstats_alloc_bytes", "missing")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{"go_memstats_alloc_bytes_total": 3.912345e9, "outbox_cdc_records_delivered_total": 1e6, "go_memstats_alloc_bytes": 1234}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("%s = %v, want %v", k, got[k], v)
		}
	}
	if _, err := parseMetrics(strings.NewReader("go_memstats_mallocs_total x\n"), "go_memstats_mallocs_total"); err == nil {
		t.Fatal("a value that is not a number parsed without an error")
	}
}
