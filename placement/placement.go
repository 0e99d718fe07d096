// Package placement spreads the connectors of one deployment over its
// replicas, so that each connector is started on one replica and the
// replicas share the work evenly. It reuses Kafka's group membership
// instead of a protocol of its own, the way Kafka Connect's distributed
// mode places tasks:
//
//   - Every replica joins the consumer group "outbox-cdc-placement-<deployment>"
//     and subscribes to one placement topic that holds no records. The topic
//     has one partition per connector: partition i stands for the i-th name
//     of the sorted connector list. The topic's name ends with a fingerprint
//     of that list, so replicas configured with different lists (during a
//     rollout that adds or removes a connector) never read a partition
//     number as two different connectors.
//   - The group's balancer is franz-go's cooperative sticky balancer: the
//     partitions (connectors) are spread evenly, and a rebalance moves only
//     the connectors that must move; the others keep running.
//   - A replica that cannot deliver for a connector (it stepped down:
//     its sink is out of reach while another replica proved it reaches
//     it) marks the connector unfit; it rejoins with the mark in its join
//     metadata and the balancer moves the connector to a replica fit for
//     it, giving the marked replica nothing new until the mark is cleared
//     (unfit.go).
//   - When the group assigns a partition to this replica, placement calls
//     Connectors.Start for its connector; when the partition is revoked
//     (another replica joined) or lost (this replica missed its heartbeats
//     for the session timeout and was dropped from the group), it calls
//     Connectors.Stop for a revoke (graceful: drain, checkpoint) and
//     Connectors.Abort for a loss (nothing more is written: another
//     replica may already stream the connector).
//
// # Placement is a hint; the lock fences
//
// Two replicas may believe at once that they own a connector: a frozen
// replica (SIGSTOP, a stuck VM) that resumes after the group gave its
// connectors away runs until its next heartbeat says so; during a rollout
// that changes the connector list, old and new replicas use different
// placement topics. Exclusive activity is therefore not placement's job.
// Each started connector still takes its own HA lock in the source
// database (package ha) before it streams, a replica assigned a connector
// whose lock is still held waits for it, and the lock, the checkpoint
// table's claim and, in exactly-once mode, the Kafka transactional id fence
// out a stale owner. Placement only decides who should try.
//
// # Timing
//
// The group's session timeout is meant to equal ha.session_timeout. A
// replica that dies or is cut off from Kafka is dropped from the group
// after the session timeout; the survivors' next heartbeat (a fifth of it
// later) starts a rebalance that hands its connectors out, and each new
// owner then takes the lock, which the database frees within the same
// session timeout. A replica that stops gracefully stops its connectors
// (releasing their locks) and leaves the group at once, so the others take
// over without waiting for any timeout.
package placement

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
	"github.com/outbox-cdc/outbox-cdc/retry"
)

// Config is the placement: section.
type Config struct {
	// Enabled turns placement on. Off, every replica starts every
	// connector and the HA locks alone decide which copy streams.
	Enabled bool `yaml:"enabled"`
	// Deployment names the group of replicas that share one connector
	// list; it names the consumer group and the placement topic. Two
	// deployments on one Kafka cluster need different names.
	Deployment string `yaml:"deployment"`
	// Brokers are the Kafka-protocol bootstrap servers the group lives on.
	// Any Kafka-protocol cluster does, also when the sink is not Kafka.
	Brokers []string `yaml:"brokers"`
	// SessionTimeout is how long the group keeps a replica it hears no
	// heartbeat from. Keep it equal to ha.session_timeout; the cluster's
	// group.min.session.timeout.ms (6s on Kafka by default) bounds it from
	// below. In outbox-cdc run, 0 takes the longest ha.session_timeout of
	// the connectors.
	SessionTimeout time.Duration `yaml:"session_timeout"`
	// RebalanceTimeout is how long a replica may take to stop the
	// connectors a rebalance takes from it (drain, checkpoint, release the
	// lock) before the group drops it. Keep it above
	// pipeline.shutdown_timeout.
	RebalanceTimeout time.Duration `yaml:"rebalance_timeout"`
	// ReplicationFactor of the placement topic when placement creates it;
	// -1 takes the cluster's default.
	ReplicationFactor int16 `yaml:"replication_factor"`
}

// DefaultConfig returns the defaults: disabled, 10s session timeout (the
// HA default), 60s rebalance timeout, the cluster's replication factor.
func DefaultConfig() Config {
	return Config{SessionTimeout: 10 * time.Second, RebalanceTimeout: time.Minute, ReplicationFactor: -1}
}

var legalName = regexp.MustCompile(`^[a-zA-Z0-9._-]{1,150}$`)

// Validate checks the configuration.
func (c Config) Validate() error {
	if !c.Enabled {
		return nil
	}
	switch {
	case !legalName.MatchString(c.Deployment):
		return outboxcdc.KeyErrorf("deployment", "", "%q must be 1 to 150 of a-z A-Z 0-9 . _ - (it names a Kafka group and topic)", c.Deployment)
	case len(c.Brokers) == 0:
		return outboxcdc.KeyErrorf("brokers", "", "placement needs a Kafka-protocol cluster to hold its group; without one, leave placement off and let every replica contend for every connector's HA lock")
	case c.SessionTimeout < time.Second || c.SessionTimeout > 30*time.Minute:
		return outboxcdc.KeyErrorf("session_timeout", "", "%s is outside 1s..30m", c.SessionTimeout)
	case c.RebalanceTimeout < c.SessionTimeout:
		return outboxcdc.KeyErrorf("rebalance_timeout", "", "%s must be at least placement.session_timeout (%s)", c.RebalanceTimeout, c.SessionTimeout)
	case c.ReplicationFactor == 0 || c.ReplicationFactor < -1:
		return outboxcdc.KeyErrorf("replication_factor", "", "%d must be -1 (cluster default) or positive", c.ReplicationFactor)
	}
	return nil
}

// HeartbeatInterval is how often a replica heartbeats: a fifth of the
// session timeout, so a survivor notices a rebalance soon after a member
// is dropped.
func (c Config) HeartbeatInterval() time.Duration { return c.SessionTimeout / 5 }

// GroupName is the consumer group of a deployment.
func GroupName(deployment string) string { return "outbox-cdc-placement-" + deployment }

// TopicName is the placement topic of a deployment running the connectors
// names (in any order): the group name and 12 hex digits of SHA-256 of the
// sorted names.
func TopicName(deployment string, names []string) string {
	s := slices.Clone(names)
	slices.Sort(s)
	h := sha256.Sum256([]byte(strings.Join(s, "\n")))
	return GroupName(deployment) + "-" + hex.EncodeToString(h[:6])
}

// Connectors is the supervisor placement drives. Placement calls Start and
// Stop from its group callbacks, one call at a time, never concurrently;
// Start is called at most once for a name until Stop is called for it.
type Connectors interface {
	// Start begins running the connector and returns without waiting: the
	// connector takes its HA lock (waiting while another replica still
	// holds it) and then streams, in goroutines of its own, until Stop.
	// A connector that halts by itself stays stopped on this replica. An
	// error (unknown name) is logged; the connector stays unstarted.
	Start(name string) error
	// Stop stops the connector gracefully (drain, checkpoint, release the
	// lock) and returns once it has stopped, within
	// placement.rebalance_timeout. It is called for every name Start was
	// called for, also when the connector already stopped by itself. An
	// error is logged.
	Stop(name string) error
	// Abort stops the connector at once, without draining anything into
	// its sink (what it read ahead is dropped, the write in flight
	// cancelled), and returns once it has stopped. Placement calls it
	// instead of Stop when the assignment was lost: the group has
	// already given the connector to another replica, which may be
	// streaming it, so nothing more may be written here. Same calling
	// rules as Stop.
	Abort(name string) error
}

// Run joins the placement group and starts and stops connectors as the
// group assigns them to this replica, until ctx is done. Then it stops the
// connectors it runs and leaves the group, so the other replicas take them
// over at once, and returns nil. names is the deployment's connector list;
// every replica of the deployment must be given the same one. opts are
// extra franz-go client options, for TLS and SASL. Brokers that cannot be
// reached at start are retried (retry.Default, each failure logged with
// the remedy) until they answer or ctx is done, running no connector
// meanwhile. An error is a configuration the cluster refuses (the
// placement topic exists with another partition count, authorisation).
func Run(ctx context.Context, cfg Config, names []string, conns Connectors, log zerolog.Logger, opts ...kgo.Opt) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	if len(names) == 0 {
		return errors.New("placement: no connectors to place")
	}
	sorted := slices.Clone(names)
	slices.Sort(sorted)
	if d := slices.Compact(slices.Clone(sorted)); len(d) != len(sorted) {
		return errors.New("placement: connector names must be unique")
	}
	topic := TopicName(cfg.Deployment, sorted)
	group := GroupName(cfg.Deployment)
	log = log.With().Str("component", "placement").Str("group", group).Str("topic", topic).Logger()

	// Brokers that cannot be reached yet (the cluster restarting, the
	// network not up when the pod starts) are waited for: a replica
	// holding no connector is ready, and exiting would only restart it.
	err := retry.Do(ctx, retry.Default(), func(ctx context.Context) error {
		return ensureTopic(ctx, cfg, topic, int32(len(sorted)), log, opts)
	}, func(err error, wait time.Duration) {
		log.Warn().Err(err).Dur("retry_in", wait).Str("hint", outboxcdc.Hint(err)).
			Msg("cannot set up the placement group; running no connector until it can")
	})
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err() // stopped while waiting for the brokers
		}
		return err
	}

	m := &member{conns: conns, names: sorted, topic: topic, log: log, running: map[string]bool{}}
	copts := append(slices.Clone(opts),
		kgo.SeedBrokers(cfg.Brokers...),
		kgo.ClientID("outbox-cdc-placement"),
		kgo.ConsumerGroup(group),
		kgo.ConsumeTopics(topic),
		// unfitProtocol first; plain cooperative-sticky for a group that
		// still has replicas without it (unfit.go).
		kgo.Balancers(newUnfitBalancer(topic, m.unfitPartitions), kgo.CooperativeStickyBalancer()),
		kgo.SessionTimeout(cfg.SessionTimeout),
		kgo.HeartbeatInterval(cfg.HeartbeatInterval()),
		kgo.RebalanceTimeout(cfg.RebalanceTimeout),
		// A request on a silent network gives up after a third of the
		// session timeout beyond its own timeout, so a replica cut off
		// from Kafka finds its heartbeats failing, and drops its
		// connectors, about when the group drops it.
		kgo.RequestTimeoutOverhead(max(time.Second, cfg.SessionTimeout/3)),
		kgo.DisableAutoCommit(),
		kgo.OnPartitionsAssigned(m.assigned),
		kgo.OnPartitionsRevoked(m.revoked),
		kgo.OnPartitionsLost(m.lost),
		kgo.WithLogger(kgoLogger{log}),
	)
	cl, err := kgo.NewClient(copts...)
	if err != nil {
		return fmt.Errorf("placement: %w", err)
	}
	log.Info().Int("connectors", len(sorted)).Dur("session_timeout", cfg.SessionTimeout).Msg("joining the placement group")

	// The placement topic holds no records; polling only surfaces group
	// errors to log, the group itself is managed in the background.
	polled := make(chan struct{})
	go func() {
		defer close(polled)
		for {
			fs := cl.PollFetches(ctx)
			if ctx.Err() != nil {
				return
			}
			fs.EachError(func(t string, p int32, err error) {
				if !errors.Is(err, context.Canceled) {
					log.Warn().Err(err).Msg("placement group error; retrying")
				}
			})
			if fs.IsClientClosed() {
				return
			}
		}
	}()
	if u, ok := conns.(Unfit); ok {
		go func() {
			for {
				select {
				case <-ctx.Done():
					return
				case <-u.UnfitChanged():
				}
				log.Info().Strs("unfit", u.Unfit()).Msg("the connectors this replica cannot deliver for changed: rejoining the placement group")
				cl.ForceRebalance()
			}
		}()
	}
	<-ctx.Done()
	// Close revokes every partition (OnPartitionsRevoked stops the
	// connectors) and then leaves the group.
	cl.Close()
	<-polled
	m.stopAll("shutting down")
	log.Info().Msg("left the placement group")
	return nil
}

// member is one replica's view of its assignment.
type member struct {
	conns   Connectors
	names   []string
	topic   string
	log     zerolog.Logger
	mu      sync.Mutex
	running map[string]bool
}

// unfitPartitions are the partitions of the connectors Connectors marks
// unfit (Unfit), sorted.
func (m *member) unfitPartitions() []int32 {
	u, ok := m.conns.(Unfit)
	if !ok {
		return nil
	}
	var out []int32
	for _, n := range u.Unfit() {
		if i, found := slices.BinarySearch(m.names, n); found {
			out = append(out, int32(i))
		}
	}
	return out
}

func (m *member) namesOf(parts map[string][]int32) []string {
	var out []string
	for _, p := range parts[m.topic] {
		if int(p) < len(m.names) && p >= 0 {
			out = append(out, m.names[p])
		} else {
			m.log.Error().Int32("partition", p).Msg("placement topic partition beyond the connector list; ignored")
		}
	}
	slices.Sort(out)
	return out
}

func (m *member) assigned(_ context.Context, _ *kgo.Client, parts map[string][]int32) {
	for _, n := range m.namesOf(parts) {
		m.mu.Lock()
		already := m.running[n]
		m.running[n] = true
		m.mu.Unlock()
		if already {
			continue
		}
		m.log.Info().Str("connector", n).Msg("assigned: starting the connector")
		if err := m.conns.Start(n); err != nil {
			m.log.Error().Err(err).Str("connector", n).Msg("starting the assigned connector")
		}
	}
}

func (m *member) revoked(_ context.Context, _ *kgo.Client, parts map[string][]int32) {
	m.stop(m.namesOf(parts), "revoked: another replica takes it")
}

// lost aborts: the group gave the connectors away while this replica was
// silent (frozen, cut off), so another replica may stream them already.
func (m *member) lost(_ context.Context, _ *kgo.Client, parts map[string][]int32) {
	m.end(m.namesOf(parts), "lost: the group dropped this replica (missed heartbeats)", true)
}

// stop stops names gracefully in parallel, so a replica giving several
// connectors away is done after the slowest one.
func (m *member) stop(names []string, why string) { m.end(names, why, false) }

// end stops (or, with abort, aborts) names in parallel.
func (m *member) end(names []string, why string, abort bool) {
	var wg sync.WaitGroup
	for _, n := range names {
		m.mu.Lock()
		was := m.running[n]
		delete(m.running, n)
		m.mu.Unlock()
		if !was {
			continue
		}
		wg.Add(1)
		if abort {
			m.log.Warn().Str("connector", n).Msg(why + ": aborting the connector without draining")
			go func() {
				defer wg.Done()
				if err := m.conns.Abort(n); err != nil {
					m.log.Error().Err(err).Str("connector", n).Msg("aborting the connector")
				}
			}()
			continue
		}
		m.log.Info().Str("connector", n).Msg(why + ": stopping the connector")
		go func() {
			defer wg.Done()
			if err := m.conns.Stop(n); err != nil {
				m.log.Error().Err(err).Str("connector", n).Msg("stopping the connector")
			}
		}()
	}
	wg.Wait()
}

func (m *member) stopAll(why string) {
	m.mu.Lock()
	var names []string
	for n := range m.running {
		names = append(names, n)
	}
	m.mu.Unlock()
	m.stop(names, why)
}

// ensureTopic creates the placement topic with one partition per connector,
// or checks the partition count of the one that exists.
//
// Failures to reach the brokers, and errors Kafka calls retriable, are
// transient (outboxcdc.IsTransient), with the remedy as hint; the rest are
// permanent. Each request gives up after the session timeout, so that
// Run's retry loop logs an outage instead of franz-go retrying in silence.
func ensureTopic(ctx context.Context, cfg Config, topic string, partitions int32, log zerolog.Logger, opts []kgo.Opt) error {
	cl, err := kgo.NewClient(append(slices.Clone(opts), kgo.SeedBrokers(cfg.Brokers...), kgo.ClientID("outbox-cdc-placement"),
		kgo.RetryTimeout(cfg.SessionTimeout))...)
	if err != nil {
		return fmt.Errorf("placement: %w", err)
	}
	defer cl.Close()
	for attempt := 0; ; attempt++ {
		meta := kmsg.NewPtrMetadataRequest()
		mt := kmsg.NewMetadataRequestTopic()
		mt.Topic = kmsg.StringPtr(topic)
		meta.Topics = append(meta.Topics, mt)
		mresp, err := meta.RequestWith(ctx, cl)
		if err != nil {
			return classify(cfg, fmt.Errorf("placement: reading metadata of topic %s: %w", topic, err))
		}
		if len(mresp.Topics) == 1 {
			t := mresp.Topics[0]
			switch terr := kerr.ErrorForCode(t.ErrorCode); {
			case terr == nil:
				if got := int32(len(t.Partitions)); got != partitions {
					return fmt.Errorf("placement: topic %s has %d partitions, want %d (one per connector): it was not created by outbox-cdc; delete it", topic, got, partitions)
				}
				return nil
			case errors.Is(terr, kerr.TopicAuthorizationFailed):
				return fmt.Errorf("placement: topic %s: %w", topic, terr)
			case !errors.Is(terr, kerr.UnknownTopicOrPartition) && attempt < 10:
				log.Warn().Err(terr).Msg("placement topic metadata; retrying")
				if err := sleep(ctx, 500*time.Millisecond); err != nil {
					return err
				}
				continue
			}
		}
		if attempt >= 10 {
			return fmt.Errorf("placement: topic %s did not appear after creating it", topic)
		}
		create := kmsg.NewPtrCreateTopicsRequest()
		ct := kmsg.NewCreateTopicsRequestTopic()
		ct.Topic = topic
		ct.NumPartitions = partitions
		ct.ReplicationFactor = cfg.ReplicationFactor
		create.Topics = append(create.Topics, ct)
		create.TimeoutMillis = 30000
		cresp, err := create.RequestWith(ctx, cl)
		if err != nil {
			return classify(cfg, fmt.Errorf("placement: creating topic %s: %w", topic, err))
		}
		if len(cresp.Topics) == 1 {
			switch cerr := kerr.ErrorForCode(cresp.Topics[0].ErrorCode); {
			case cerr == nil:
				log.Info().Int32("partitions", partitions).Msg("created the placement topic")
			case errors.Is(cerr, kerr.TopicAlreadyExists):
				// Another replica created it at the same time.
			default:
				return classify(cfg, fmt.Errorf("placement: creating topic %s: %w", topic, cerr))
			}
		}
		if err := sleep(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
}

// classify marks a failed request to the placement brokers: transient when
// the brokers could not be reached or Kafka says retrying may help.
func classify(cfg Config, err error) error {
	if outboxcdc.IsTransient(outboxcdc.Network(err)) || kerr.IsRetriable(err) {
		return outboxcdc.TransientHint(err, fmt.Sprintf("check that placement.brokers (%s) are up and reachable from this replica, and placement.tls/placement.sasl", strings.Join(cfg.Brokers, ",")))
	}
	return err
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// kgoLogger passes franz-go's warnings and errors to zerolog. franz-go's
// keys may repeat the context's (group) or each other; they are made
// unique per line.
type kgoLogger struct{ log zerolog.Logger }

func (kgoLogger) Level() kgo.LogLevel { return kgo.LogLevelWarn }

func (l kgoLogger) Log(level kgo.LogLevel, msg string, keyvals ...any) {
	ev := l.log.Warn()
	if level == kgo.LogLevelError {
		ev = l.log.Error()
	}
	keys := outboxcdc.NewLogKeys("group", "topic")
	for i := 0; i+1 < len(keyvals); i += 2 {
		ev = ev.Interface(keys.Unique(fmt.Sprint(keyvals[i])), keyvals[i+1])
	}
	ev.Msg("franz-go: " + msg)
}
