package placement

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-cdc/outbox-cdc/test/testenv"
)

func TestConfigValidate(t *testing.T) {
	ok := DefaultConfig()
	ok.Enabled = true
	ok.Deployment = "orders-eu.1"
	ok.Brokers = []string{"k:9092"}
	if err := ok.Validate(); err != nil {
		t.Fatalf("valid config: %v", err)
	}
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatalf("disabled default: %v", err)
	}
	for name, tc := range map[string]struct {
		edit func(*Config)
		want string
	}{
		"deployment empty":     {func(c *Config) { c.Deployment = "" }, "deployment:"},
		"deployment illegal":   {func(c *Config) { c.Deployment = "a/b" }, "deployment:"},
		"no brokers":           {func(c *Config) { c.Brokers = nil }, "brokers:"},
		"session too short":    {func(c *Config) { c.SessionTimeout = 10 * time.Millisecond }, "session_timeout:"},
		"rebalance < session":  {func(c *Config) { c.RebalanceTimeout = 5 * time.Second }, "rebalance_timeout:"},
		"replication factor 0": {func(c *Config) { c.ReplicationFactor = 0 }, "replication_factor:"},
	} {
		t.Run(name, func(t *testing.T) {
			c := ok
			tc.edit(&c)
			err := c.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error naming %s", err, tc.want)
			}
		})
	}
}

func TestTopicNameIsTheSortedList(t *testing.T) {
	a := TopicName("d", []string{"b", "a", "c"})
	if b := TopicName("d", []string{"c", "b", "a"}); a != b {
		t.Fatalf("order changes the topic: %s vs %s", a, b)
	}
	if b := TopicName("d", []string{"a", "b", "c", "d"}); a == b {
		t.Fatalf("another list, same topic %s", a)
	}
	if b := TopicName("e", []string{"a", "b", "c"}); a == b {
		t.Fatalf("another deployment, same topic %s", a)
	}
	if !strings.HasPrefix(a, GroupName("d")+"-") || len(a) != len(GroupName("d"))+13 {
		t.Fatalf("topic %s", a)
	}
}

type nopConnectors struct{}

func (nopConnectors) Start(string) error { return nil }
func (nopConnectors) Stop(string) error  { return nil }
func (nopConnectors) Abort(string) error { return nil }

// A placement topic with another partition count than connectors would
// make partition numbers name the wrong connectors: Run refuses it.
func TestRunRefusesTopicWithOtherPartitionCount(t *testing.T) {
	names := []string{"a", "b", "c"}
	topic := TopicName("wrongcount", names)
	kf, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, topic))
	if err != nil {
		t.Fatal(err)
	}
	defer kf.Close()
	cfg := DefaultConfig()
	cfg.Enabled, cfg.Deployment, cfg.Brokers = true, "wrongcount", kf.ListenAddrs()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err = Run(ctx, cfg, names, nopConnectors{}, zerolog.New(zerolog.NewTestWriter(t)))
	if err == nil || !strings.Contains(err.Error(), "has 2 partitions, want 3") {
		t.Fatalf("got %v", err)
	}
}

func TestRunRefusesDuplicateNames(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Enabled, cfg.Deployment, cfg.Brokers = true, "dup", []string{"127.0.0.1:1"}
	err := Run(context.Background(), cfg, []string{"a", "b", "a"}, nopConnectors{}, zerolog.Nop())
	if err == nil || !strings.Contains(err.Error(), "unique") {
		t.Fatalf("got %v", err)
	}
}

// TestKgoLoggerUniqueKeys: franz-go's key-values may repeat the context's
// (group) or each other; the line is still one JSON object with unique
// keys, every value kept.
func TestKgoLoggerUniqueKeys(t *testing.T) {
	var buf bytes.Buffer
	log := zerolog.New(&buf).With().Str("component", "placement").Str("group", "g").Str("topic", "t").Timestamp().Logger()
	kgoLogger{log}.Log(kgo.LogLevelError, "group manage loop errored", "group", "g", "err", "UNKNOWN_MEMBER_ID", "err", "again", "time", 1)
	line := buf.String()
	if err := testenv.CheckJSONLines(strings.NewReader(line)); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"group_2":"g"`, `"err":"UNKNOWN_MEMBER_ID"`, `"err_2":"again"`, `"time_2":1`} {
		if !strings.Contains(line, want) {
			t.Errorf("line lacks %s: %s", want, line)
		}
	}
}

// callLog is a Connectors that records which call each connector got.
type callLog struct {
	mu    sync.Mutex
	calls []string
}

func (c *callLog) record(call, name string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls = append(c.calls, call+" "+name)
	return nil
}
func (c *callLog) Start(name string) error { return c.record("start", name) }
func (c *callLog) Stop(name string) error  { return c.record("stop", name) }
func (c *callLog) Abort(name string) error { return c.record("abort", name) }

// TestLostAssignmentAborts: a lost assignment aborts its connectors (no
// drain into the sink: another replica may stream them already), a
// revoked one stops them gracefully.
func TestLostAssignmentAborts(t *testing.T) {
	c := &callLog{}
	m := &member{conns: c, names: []string{"a", "b", "c"}, topic: "p", log: zerolog.Nop(), running: map[string]bool{}}
	m.assigned(context.Background(), nil, map[string][]int32{"p": {0, 1, 2}})
	m.lost(context.Background(), nil, map[string][]int32{"p": {0, 1}})
	m.revoked(context.Background(), nil, map[string][]int32{"p": {2}})
	slices.Sort(c.calls) // each callback ends its connectors in parallel
	got := strings.Join(c.calls, ", ")
	want := "abort a, abort b, start a, start b, start c, stop c"
	if got != want {
		t.Fatalf("calls: %s\nwant:  %s", got, want)
	}
}
