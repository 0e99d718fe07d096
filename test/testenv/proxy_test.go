package testenv

import (
	"bufio"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// echo serves a line echo on a loopback port.
func echo(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					c.Write([]byte(line))
				}
			}()
		}
	}()
	return ln.Addr().String()
}

func TestProxySilenceHealCut(t *testing.T) {
	p := NewProxy(t, echo(t))
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	roundTrip := func(msg string, wait time.Duration) (string, error) {
		c.SetDeadline(time.Now().Add(wait))
		if _, err := c.Write([]byte(msg + "\n")); err != nil {
			return "", err
		}
		return r.ReadString('\n')
	}
	if got, err := roundTrip("a", 2*time.Second); err != nil || got != "a\n" {
		t.Fatalf("through the proxy: %q, %v", got, err)
	}
	p.Silence()
	_, err = roundTrip("b", 300*time.Millisecond)
	if ne, ok := err.(net.Error); !ok || !ne.Timeout() {
		t.Fatalf("silent path: want a read timeout (no data, no EOF), got %v", err)
	}
	p.Heal()
	if got, err := roundTrip("c", 2*time.Second); err != nil || got != "c\n" {
		t.Fatalf("healed path: %q, %v", got, err)
	}
	p.Cut()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := r.ReadString('\n'); err == nil {
		t.Fatal("cut path: want EOF")
	}
	if p.Accepted() != 1 {
		t.Fatalf("accepted %d connections, want 1", p.Accepted())
	}
}

// TestProxyFreezeThaw: a frozen proxy reads nothing, so a sender's writes
// block once the kernel buffers are full; thawed, everything held back
// arrives.
func TestProxyFreezeThaw(t *testing.T) {
	p := NewProxy(t, echo(t))
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte("a\n")); err != nil {
		t.Fatal(err)
	}
	if got, err := r.ReadString('\n'); err != nil || got != "a\n" {
		t.Fatalf("through the proxy: %q, %v", got, err)
	}
	p.Freeze()
	time.Sleep(50 * time.Millisecond) // the pipes finish the read they were in
	line := make([]byte, 1<<10)
	for i := range line {
		line[i] = 'x'
	}
	line[len(line)-1] = '\n'
	sent := 0
	c.SetWriteDeadline(time.Now().Add(2 * time.Second))
	for sent < 256<<20 {
		n, err := c.Write(line)
		sent += n
		if err != nil {
			if ne, ok := err.(net.Error); !ok || !ne.Timeout() {
				t.Fatalf("write to a frozen path: %v", err)
			}
			break
		}
	}
	if sent >= 256<<20 {
		t.Fatal("256 MiB written to a frozen path without blocking")
	}
	t.Logf("a write blocked after %d KiB", sent>>10)
	p.Thaw()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	got := 0
	for got < sent-sent%len(line) {
		s, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("after %d of %d bytes: %v", got, sent, err)
		}
		got += len(s)
	}
}

// recorder serves a loopback port that keeps every byte it receives.
func recorder(t *testing.T) (addr string, got func() string) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var mu sync.Mutex
	var b strings.Builder
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				buf := make([]byte, 4096)
				for {
					n, err := c.Read(buf)
					mu.Lock()
					b.Write(buf[:n])
					mu.Unlock()
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String(), func() string {
		mu.Lock()
		defer mu.Unlock()
		return b.String()
	}
}

// TestProxyPartition: a partition holds what the connections open at the
// time send (new connections pass) and delivers it on Heal, as TCP
// retransmits it; what a side sent before it reset its connection is
// discarded, what it sent before a FIN arrives.
func TestProxyPartition(t *testing.T) {
	p := NewProxy(t, echo(t))
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	c.Write([]byte("a\n"))
	c.SetDeadline(time.Now().Add(2 * time.Second))
	if got, err := r.ReadString('\n'); err != nil || got != "a\n" {
		t.Fatalf("through the proxy: %q, %v", got, err)
	}
	p.Partition()
	c.Write([]byte("b\n"))
	c.SetDeadline(time.Now().Add(300 * time.Millisecond))
	if _, err := r.ReadString('\n'); err == nil {
		t.Fatal("an answer through a partitioned connection")
	}
	c2, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	c2.Write([]byte("new\n"))
	c2.SetDeadline(time.Now().Add(2 * time.Second))
	if got, err := bufio.NewReader(c2).ReadString('\n'); err != nil || got != "new\n" {
		t.Fatalf("a new connection during the partition: %q, %v", got, err)
	}
	p.Heal()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	if got, err := r.ReadString('\n'); err != nil || got != "b\n" {
		t.Fatalf("after heal, the held line: %q, %v", got, err)
	}

	addr, got := recorder(t)
	q := NewProxy(t, addr)
	for _, reset := range []bool{false, true} {
		c, err := net.Dial("tcp", q.Addr())
		if err != nil {
			t.Fatal(err)
		}
		tag := fmt.Sprintf("[reset=%v]", reset)
		c.Write([]byte("before" + tag))
		Eventually(t, 2*time.Second, "the first write", func() bool { return strings.Contains(got(), "before"+tag) })
		q.Partition()
		c.Write([]byte("during" + tag))
		time.Sleep(100 * time.Millisecond) // the proxy reads it
		if reset {
			c.(*net.TCPConn).SetLinger(0)
		}
		c.Close()
		time.Sleep(100 * time.Millisecond)
		q.Heal()
		time.Sleep(200 * time.Millisecond)
		if arrived := strings.Contains(got(), "during"+tag); arrived == reset {
			t.Fatalf("%s: what was sent during the partition arrived: %v (%q)", tag, arrived, got())
		}
	}
}
