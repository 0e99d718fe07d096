package main

import "testing"

// Seeded topics spread their partition leaders over every broker.
func TestClusterSpreadsLeaders(t *testing.T) {
	c, err := newCluster(0, 3, 6, []string{"a", "b"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if n := len(c.ListenAddrs()); n != 3 {
		t.Fatalf("%d brokers listening, want 3", n)
	}
	for _, topic := range []string{"a", "b"} {
		for p := range int32(6) {
			if got := c.LeaderFor(topic, p); got != p%3 {
				t.Errorf("%s/%d led by broker %d, want %d", topic, p, got, p%3)
			}
		}
	}
	if _, err := newCluster(0, 0, 3, nil); err == nil {
		t.Error("a cluster of no brokers started")
	}
}
