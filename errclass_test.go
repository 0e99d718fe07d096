package outboxcdc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"testing"
	"time"
)

func TestClassification(t *testing.T) {
	base := errors.New("boom")
	cases := []struct {
		name      string
		err       error
		transient bool
		hint      string
	}{
		{"unmarked is permanent", base, false, ""},
		{"transient", Transient(base), true, ""},
		{"wrapped transient", fmt.Errorf("reading: %w", Transient(base)), true, ""},
		{"permanent with hint", Permanent(base, "do X"), false, "do X"},
		{"outer permanent wins", Permanent(Transient(base), "stop"), false, "stop"},
		{"outer transient wins", TransientHint(Permanent(base, "inner"), "outer"), true, "outer"},
		{"hint of an inner classification", Transient(Permanent(base, "inner")), true, "inner"},
		{"canceled is never transient", Transient(context.Canceled), false, ""},
	}
	for _, c := range cases {
		if got := IsTransient(c.err); got != c.transient {
			t.Errorf("%s: IsTransient = %v", c.name, got)
		}
		if got := Hint(c.err); got != c.hint {
			t.Errorf("%s: Hint = %q, want %q", c.name, got, c.hint)
		}
		if !errors.Is(c.err, base) && !errors.Is(c.err, context.Canceled) {
			t.Errorf("%s: the cause is lost", c.name)
		}
	}
	if got := Permanent(base, "do X").Error(); got != "boom (do X)" {
		t.Errorf("message %q", got)
	}
}

func TestNetworkMarksNetworkFailures(t *testing.T) {
	// A real dial to a closed port and a real read timeout.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	_, refused := net.Dial("tcp", addr)

	ln2, _ := net.Listen("tcp", "127.0.0.1:0")
	defer ln2.Close()
	c, err := net.Dial("tcp", ln2.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(10 * time.Millisecond))
	_, timeout := c.Read(make([]byte, 1))

	for name, e := range map[string]error{
		"refused":        refused,
		"read timeout":   timeout,
		"eof":            fmt.Errorf("read packet: %w", io.EOF),
		"deadline":       context.DeadlineExceeded,
		"unexpected eof": io.ErrUnexpectedEOF,
	} {
		if !IsTransient(Network(e)) {
			t.Errorf("%s (%v): not marked transient", name, e)
		}
	}
	if IsTransient(Network(errors.New("syntax error"))) {
		t.Error("a non-network error was marked transient")
	}
	if IsTransient(Network(Permanent(io.EOF, "x"))) {
		t.Error("Network overrode an existing classification")
	}
}
