package kafka

import (
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/IBM/sarama"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// A record whose topic does not exist (a cluster without auto-create) or
// that the connector may not write (topic or cluster authorization) blocks
// its Write. Such failures are often fixed by an operator within minutes
// (create the topic, add the ACL), so the sink waits for them, but only up
// to KafkaConfig.UnwritableTopicTimeout: then the record fails permanently
// and pipeline.on_error decides (halt naming the topic, or dead-letter it).
// While a topic is blocked, Ready says which one and since when, and the
// gauges outbox_cdc_sink_blocked_topics and outbox_cdc_sink_blocked_seconds
// show it.

// blockedCode reports whether err is an unknown-topic or authorization
// failure: one the sink waits for, up to the timeout.
func blockedCode(err error) bool {
	return errors.Is(err, sarama.ErrUnknownTopicOrPartition) ||
		errors.Is(err, sarama.ErrTopicAuthorizationFailed) ||
		errors.Is(err, sarama.ErrClusterAuthorizationFailed)
}

// onlyBlocked reports whether every failure in todo is a blocked code.
func onlyBlocked(todo []*pending) bool {
	for _, p := range todo {
		if p.err != nil && !blockedCode(p.err) {
			return false
		}
	}
	return true
}

// logBlocked adds to ev, when err is a blocked failure, what blocks which
// topic and the remedy, and reports whether it did: the line then names
// the real cause (the brokers answered), not a failed connection.
func logBlocked(ev *zerolog.Event, err error, timeout time.Duration) bool {
	var e *Error
	if !blockedCode(err) || !errors.As(err, &e) {
		return false
	}
	topic := e.Topic
	if topic == "" {
		topic = clusterWide
	}
	ev.Str("topic", topic).Str("reason", blockedReason(topic, err)).AnErr("kafka_error", e.Err).
		Dur("unwritable_topic_timeout", timeout).Str("hint", blockedHint(topic, err))
	return true
}

// blockedReason says in words what a blocked code means for topic.
func blockedReason(topic string, err error) string {
	switch {
	case errors.Is(err, sarama.ErrUnknownTopicOrPartition):
		return fmt.Sprintf("topic %q does not exist on the brokers", topic)
	case errors.Is(err, sarama.ErrClusterAuthorizationFailed):
		return "the brokers refuse the connector's principal access to the cluster"
	}
	return fmt.Sprintf("the connector's principal may not write topic %q", topic)
}

// clusterWide is the blocked "topic" of a failure that concerns no topic
// (the producer cannot start: CLUSTER_AUTHORIZATION_FAILED).
const clusterWide = "(cluster)"

// TopicBlockedError is the cause of a record that failed permanently
// because its topic stayed unknown or unauthorized for the timeout.
type TopicBlockedError struct {
	Topic  string
	Waited time.Duration
	Err    error // the Kafka error (UNKNOWN_TOPIC_OR_PARTITION, *_AUTHORIZATION_FAILED)
}

func (e *TopicBlockedError) Error() string {
	what := fmt.Sprintf("topic %q", e.Topic)
	if e.Topic == clusterWide {
		what = "the cluster"
	}
	return fmt.Sprintf("%s could not be written for %s (sink.unwritable_topic_timeout): %v; %s",
		what, e.Waited.Round(time.Second), e.Err, blockedHint(e.Topic, e.Err))
}

func (e *TopicBlockedError) Unwrap() error { return e.Err }

func blockedHint(topic string, err error) string {
	switch {
	case errors.Is(err, sarama.ErrUnknownTopicOrPartition):
		return fmt.Sprintf("create topic %q (or let the brokers auto-create topics), or fix route.topic", topic)
	case errors.Is(err, sarama.ErrClusterAuthorizationFailed):
		return "grant the connector's principal IDEMPOTENT_WRITE on the cluster (Kafka < 2.8) or WRITE on its topics"
	}
	return fmt.Sprintf("grant the connector's principal WRITE and DESCRIBE on topic %q", topic)
}

// blockedTopics tracks the topics whose records keep failing with a
// blocked code. Safe for concurrent use (Ready and the gauges read it).
// Once a topic's wait is over, later records for it fail at once rather
// than stalling every aggregate for another timeout, until a record is
// written to it.
type blockedTopics struct {
	timeout time.Duration
	mu      sync.Mutex
	topics  map[string]blockedTopic
}

type blockedTopic struct {
	since time.Time
	err   error
	// gaveUp: the timeout passed and its records failed permanently;
	// later records for it fail at once (until one is written), and it no
	// longer makes the sink unready: the pipeline dealt with it.
	gaveUp bool
}

func newBlockedTopics(timeout time.Duration, reg prometheus.Registerer) *blockedTopics {
	b := &blockedTopics{timeout: timeout, topics: map[string]blockedTopic{}}
	if reg != nil {
		reg.MustRegister(
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "outbox_cdc_sink_blocked_topics",
				Help: "Topics whose records wait because the topic does not exist or may not be written (see sink.unwritable_topic_timeout).",
			}, func() float64 { n, _ := b.stats(); return float64(n) }),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "outbox_cdc_sink_blocked_seconds",
				Help: "Seconds the longest-blocked topic has been waiting (0 when none is blocked).",
			}, func() float64 { _, d := b.stats(); return d.Seconds() }),
		)
	}
	return b
}

// fail records a blocked failure for topic and returns how long the topic
// has been blocked and whether that reached the timeout.
func (b *blockedTopics) fail(topic string, err error) (time.Duration, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	t, ok := b.topics[topic]
	if !ok {
		t.since = time.Now()
	}
	t.err = err
	waited := time.Since(t.since)
	t.gaveUp = t.gaveUp || waited >= b.timeout
	b.topics[topic] = t
	return waited, t.gaveUp
}

// any reports whether some topic is blocked.
func (b *blockedTopics) any() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.topics) > 0
}

// ok records that topic was written.
func (b *blockedTopics) ok(topic string) {
	b.mu.Lock()
	delete(b.topics, topic)
	b.mu.Unlock()
}

func (b *blockedTopics) stats() (int, time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	var longest time.Duration
	n := 0
	for _, t := range b.topics {
		if !t.gaveUp {
			n++
			longest = max(longest, time.Since(t.since))
		}
	}
	return n, longest
}

// ready returns nil while no topic is blocked, else says which are.
func (b *blockedTopics) ready() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	names := make([]string, 0, len(b.topics))
	for n, t := range b.topics {
		if !t.gaveUp {
			names = append(names, n)
		}
	}
	if len(names) == 0 {
		return nil
	}
	sort.Strings(names)
	t := b.topics[names[0]]
	what := fmt.Sprintf("topic %q", names[0])
	if names[0] == clusterWide {
		what = "the cluster"
	}
	more := ""
	if len(names) > 1 {
		more = fmt.Sprintf(" (and %d more topics)", len(names)-1)
	}
	return fmt.Errorf("records blocked: %s%s cannot be written for %s: %v; after sink.unwritable_topic_timeout (%s) pipeline.on_error decides; %s",
		what, more, time.Since(t.since).Round(time.Second), t.err, b.timeout, blockedHint(names[0], t.err))
}
