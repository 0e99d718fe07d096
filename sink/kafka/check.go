package kafka

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/IBM/sarama"
	outboxcdc "github.com/outbox-cdc/outbox-cdc"
)

// TopicNeed is a family of topics the connector will write to: every topic
// whose name starts with Prefix (the literal part of a topic template before
// its first placeholder), or exactly Prefix when Exact (a template without
// placeholders, a dead-letter topic).
type TopicNeed struct {
	Prefix string
	Exact  bool
}

func (n TopicNeed) String() string {
	if n.Exact {
		return "topic " + strconv.Quote(n.Prefix)
	}
	return "topics " + strconv.Quote(n.Prefix+"*")
}

// CheckKafka is the preflight for `outbox-cdc check`: it connects to the
// brokers with the sink's client settings, describes the cluster and
// reports, for each need, whether matching topics exist or the brokers
// auto-create topics. It creates nothing and produces nothing.
func CheckKafka(ctx context.Context, cfg KafkaConfig, needs ...TopicNeed) []outboxcdc.CheckResult {
	if err := cfg.Validate(); err != nil {
		return []outboxcdc.CheckResult{outboxcdc.Fail("kafka.config", err.Error(), "fix the sink section of the configuration")}
	}
	type answer struct {
		res []outboxcdc.CheckResult
	}
	done := make(chan answer, 1)
	go func() { done <- answer{checkKafka(cfg, needs)} }()
	select {
	case a := <-done:
		return a.res
	case <-ctx.Done():
		return []outboxcdc.CheckResult{outboxcdc.Fail("kafka.reachable",
			fmt.Sprintf("no answer from %s: %v", strings.Join(cfg.Brokers, ","), ctx.Err()),
			"check sink.brokers and that the brokers are up and reachable from here")}
	}
}

func checkKafka(cfg KafkaConfig, needs []TopicNeed) []outboxcdc.CheckResult {
	sc, err := cfg.clientConfig()
	if err != nil {
		return []outboxcdc.CheckResult{outboxcdc.Fail("kafka.config", err.Error(), "fix sink.tls")}
	}
	// The producer fetches metadata only for its topics; the admin client
	// needs the cluster's (brokers, controller, topic list).
	sc.Metadata.Full = true
	sc.Net.ReadTimeout = min(sc.Net.ReadTimeout, 15*time.Second)
	sc.Net.WriteTimeout = min(sc.Net.WriteTimeout, 15*time.Second)
	admin, err := sarama.NewClusterAdmin(cfg.Brokers, sc)
	if err != nil {
		return []outboxcdc.CheckResult{outboxcdc.Fail("kafka.reachable",
			fmt.Sprintf("cannot reach %s: %v", strings.Join(cfg.Brokers, ","), err),
			"check sink.brokers and that the brokers are up and reachable from here")}
	}
	defer admin.Close()
	brokers, controller, err := admin.DescribeCluster()
	if err != nil {
		return []outboxcdc.CheckResult{outboxcdc.Fail("kafka.reachable", "describe cluster: "+err.Error(),
			"check that the brokers answer and the client may describe the cluster")}
	}
	out := []outboxcdc.CheckResult{outboxcdc.Pass("kafka.reachable",
		fmt.Sprintf("%d broker(s), controller %d", len(brokers), controller))}

	topics, err := admin.ListTopics()
	if err != nil {
		return append(out, outboxcdc.Fail("kafka.topics", "list topics: "+err.Error(), "check that the client may describe topics"))
	}
	names := make([]string, 0, len(topics))
	for t := range topics {
		names = append(names, t)
	}
	sort.Strings(names)

	// auto.create.topics.enable of the controller; nil when not reported.
	var autoCreate *bool
	entries, err := admin.DescribeConfig(sarama.ConfigResource{
		Type: sarama.BrokerResource, Name: strconv.Itoa(int(controller)), ConfigNames: []string{"auto.create.topics.enable"},
	})
	if err == nil {
		for _, e := range entries {
			if e.Name == "auto.create.topics.enable" {
				v := strings.EqualFold(e.Value, "true")
				autoCreate = &v
			}
		}
	}
	for _, n := range needs {
		out = append(out, topicResult(n, names, autoCreate))
	}
	return out
}

// topicResult judges one need against the cluster's topics and its
// auto.create.topics.enable (nil: the broker does not report it; Kafka's
// default is true).
func topicResult(n TopicNeed, topics []string, autoCreate *bool) outboxcdc.CheckResult {
	const name = "kafka.topics"
	var match []string
	for _, t := range topics {
		if t == n.Prefix || !n.Exact && strings.HasPrefix(t, n.Prefix) {
			match = append(match, t)
		}
	}
	auto := "auto.create.topics.enable is not reported by the broker (Kafka's default is true)"
	if autoCreate != nil {
		auto = "auto.create.topics.enable=" + strconv.FormatBool(*autoCreate)
	}
	if len(match) > 0 {
		shown := match[:min(len(match), 5)]
		more := ""
		if len(match) > len(shown) {
			more = fmt.Sprintf(" and %d more", len(match)-len(shown))
		}
		detail := fmt.Sprintf("%s: %d existing: %s%s", n, len(match), strings.Join(shown, ", "), more)
		if n.Exact || autoCreate != nil && *autoCreate {
			if !n.Exact {
				detail += "; topics not created yet are created on first write: " + auto
			}
			return outboxcdc.Pass(name, detail)
		}
		// A row whose routing value names a topic not created yet fails
		// when the broker does not create it; whether it does is unknown
		// or no.
		return outboxcdc.Warn(name, detail+"; a topic not created yet needs the broker to create it, and "+auto,
			"create every topic the route can write to before rows need it, or set auto.create.topics.enable=true on the brokers")
	}
	if autoCreate != nil && !*autoCreate {
		return outboxcdc.Fail(name, n.String()+": none exists and the broker has auto.create.topics.enable=false",
			"create the topics the route writes to before starting, or set auto.create.topics.enable=true on the brokers")
	}
	if autoCreate == nil {
		return outboxcdc.Warn(name, n.String()+": none exists yet, and whether the broker creates it on first write is unknown: "+auto,
			"create the topics the route writes to before starting, or confirm auto.create.topics.enable=true on the brokers (and, with ACLs, CREATE for the connector's user)")
	}
	return outboxcdc.Pass(name, n.String()+": none exists yet; created on first write: "+auto)
}

// ReachKafka returns nil when a broker of cfg answers a metadata request
// within timeout: what a standby proves before it may take over a
// connector whose active instance cannot deliver (ha.sink_unreachable_timeout).
// It writes nothing and joins no transaction, so it never fences the
// active instance's producer. A probe that outlives ctx ends by itself
// within timeout.
func ReachKafka(ctx context.Context, cfg KafkaConfig, timeout time.Duration) error {
	sc, err := cfg.clientConfig()
	if err != nil {
		return err
	}
	sc.Net.DialTimeout, sc.Net.ReadTimeout, sc.Net.WriteTimeout = timeout, timeout, timeout
	done := make(chan error, 1)
	go func() { done <- reachKafka(cfg.Brokers, sc) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// reachKafka asks a bootstrap broker for the cluster's brokers (no
// topics), then every broker it advertises for its API versions: the
// producer writes to the partition leaders at the addresses they
// advertise, so those must answer, not only the bootstrap address.
func reachKafka(seeds []string, sc *sarama.Config) error {
	var meta *sarama.MetadataResponse
	var err error
	for _, addr := range seeds {
		b := sarama.NewBroker(addr)
		if err = b.Open(sc); err != nil {
			continue
		}
		meta, err = b.GetMetadata(sarama.NewMetadataRequest(sc.Version, []string{}))
		b.Close()
		if err == nil {
			break
		}
	}
	if meta == nil {
		if err == nil {
			err = errors.New("no bootstrap broker configured")
		}
		return err
	}
	for _, adv := range meta.Brokers {
		b := sarama.NewBroker(adv.Addr())
		if err := b.Open(sc); err != nil {
			return err
		}
		_, err := b.ApiVersions(&sarama.ApiVersionsRequest{})
		b.Close()
		if err != nil {
			return fmt.Errorf("broker %s: %w", adv.Addr(), err)
		}
	}
	return nil
}
