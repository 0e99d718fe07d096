package wal

import (
	"strings"
	"testing"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
)

func TestParseInput(t *testing.T) {
	for in, want := range map[string]outboxcdc.Position{
		"0/16B3748":          "postgres:0/16B3748",
		"postgres:0/16b3748": "postgres:0/16B3748",
		" 1/0 ":              "postgres:1/0",
	} {
		got, err := ParseInput(in)
		if err != nil || got != want {
			t.Errorf("ParseInput(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"", "16B3748", "0/0", "mysql-bin.000003:4"} {
		if got, err := ParseInput(in); err == nil {
			t.Errorf("ParseInput(%q) = %q, want an error", in, got)
		}
	}
}

func TestDescribeFormCompare(t *testing.T) {
	if got := Describe("postgres:0/16B3748"); got != "LSN 0/16B3748" {
		t.Errorf("Describe = %q", got)
	}
	if got := Form("postgres:0/16B3748"); got != FormLSN {
		t.Errorf("Form = %q", got)
	}
	p := outboxcdc.Position("postgres:pending:5:9:0/16B3748")
	if got := Describe(p); !strings.Contains(got, "rows up to key 5 published (pending rows go up to key 9), then streaming from LSN 0/16B3748") {
		t.Errorf("Describe(%s) = %q", p, got)
	}
	if Form(p) != FormPending {
		t.Errorf("Form(%s) = %q", p, Form(p))
	}
	if _, err := Compare(p, "postgres:0/1"); err == nil {
		t.Errorf("Compare ordered a pending position")
	}
	for _, tt := range []struct {
		a, b outboxcdc.Position
		want int
	}{
		{"postgres:0/16B3748", "postgres:0/16B3748", 0},
		{"postgres:0/16B3748", "postgres:0/1000", 1},
		{"postgres:0/16B3748", "postgres:1/0", -1},
	} {
		if got, err := Compare(tt.a, tt.b); err != nil || got != tt.want {
			t.Errorf("Compare(%q, %q) = %d, %v; want %d", tt.a, tt.b, got, err, tt.want)
		}
	}
	if _, err := Compare("postgres:0/1", "mysql:file:mysql-bin.000003:4"); err == nil {
		t.Error("Compare ordered a foreign position")
	}
}

func TestParseInputIdentity(t *testing.T) {
	const full = "postgres:0/16B3748,timeline=2,system=7345678901234567890"
	for in, want := range map[string]outboxcdc.Position{
		full: full,
		"0/16b3748,timeline=2,system=7345678901234567890": full,
		" " + full + " ": full,
	} {
		got, err := ParseInput(in)
		if err != nil || got != want {
			t.Errorf("ParseInput(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if got := Describe(full); got != "LSN 0/16B3748 on timeline 2 of system 7345678901234567890" {
		t.Errorf("Describe = %q", got)
	}
	if got := Form(full); got != FormLSN {
		t.Errorf("Form = %q", got)
	}
	for _, tt := range []struct {
		a, b outboxcdc.Position
		want int
	}{
		{full, "postgres:0/16B3748", 0},                                    // the short form: the same LSN
		{full, "postgres:0/1000,timeline=1,system=7345678901234567890", 1}, // an earlier timeline of the system
		{full, "postgres:1/0,timeline=2,system=7345678901234567890", -1},
	} {
		if got, err := Compare(tt.a, tt.b); err != nil || got != tt.want {
			t.Errorf("Compare(%q, %q) = %d, %v; want %d", tt.a, tt.b, got, err, tt.want)
		}
	}
	if _, err := Compare(full, "postgres:0/1,timeline=1,system=1"); err == nil || !strings.Contains(err.Error(), "two different PostgreSQL systems") {
		t.Errorf("Compare ordered positions of two systems: %v", err)
	}
}
