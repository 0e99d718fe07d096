package kafka

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/IBM/sarama"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
)

// errProgressLayout is wrapped by errors about a progress topic that
// cannot hold progress (more than one partition).
var errProgressLayout = errors.New("progress topic unusable")

// ensureProgressTopic makes sure the progress topic can hold progress:
// one partition (progress records must be totally ordered) and
// cleanup.policy=compact (under delete the record expires after
// retention.ms, and a stopped connector would then find none). An existing
// topic is only described, never created, so a principal without CREATE
// can start; a missing one is created (one partition, compact, the
// broker's default replication factor).
func (t *Transactional) ensureProgressTopic(ctx context.Context) error {
	type result struct{ err error }
	ch := make(chan result, 1)
	go func() { ch <- result{t.checkProgressTopic()} }()
	select {
	case r := <-ch:
		return r.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (t *Transactional) checkProgressTopic() error {
	topic := t.tcfg.ProgressTopic
	cfg, err := t.saramaConfig()
	if err != nil {
		return err
	}
	cfg.Producer.Transaction.ID = "" // the admin client does not produce
	cfg.Producer.Idempotent = false
	cfg.Metadata.Full = true // the admin client refreshes metadata for the whole cluster
	admin, err := sarama.NewClusterAdmin(t.cfg.Brokers, cfg)
	if err != nil {
		return fmt.Errorf("connecting to describe progress topic %q: %w", topic, err)
	}
	defer admin.Close()
	meta, err := describeTopic(admin, topic)
	if errors.Is(err, sarama.ErrUnknownTopicOrPartition) {
		compact := "compact"
		err = admin.CreateTopic(topic, &sarama.TopicDetail{
			NumPartitions:     1,
			ReplicationFactor: -1,
			ConfigEntries:     map[string]*string{"cleanup.policy": &compact},
		}, false)
		switch {
		case err == nil:
			t.log.Info().Str("progress_topic", topic).Msg("created the progress topic (1 partition, cleanup.policy=compact)")
		case errors.Is(err, sarama.ErrTopicAlreadyExists):
		default:
			return fmt.Errorf("creating progress topic %q: %w (create it yourself with 1 partition and cleanup.policy=compact, or grant CREATE on it)", topic, err)
		}
		meta, err = describeTopic(admin, topic)
	}
	if err != nil {
		return fmt.Errorf("describing progress topic %q: %w (the connector needs DESCRIBE on it)", topic, err)
	}
	if len(meta.Partitions) != 1 {
		return fmt.Errorf("%w: topic %q has %d partitions; progress needs exactly 1 (point sink.progress_topic at a single-partition compacted topic)",
			errProgressLayout, topic, len(meta.Partitions))
	}
	entries, err := admin.DescribeConfig(sarama.ConfigResource{Type: sarama.TopicResource, Name: topic, ConfigNames: []string{"cleanup.policy"}})
	if err != nil {
		t.log.Warn().Err(err).Str("progress_topic", topic).Msg("cannot read the progress topic's cleanup.policy (grant DESCRIBE_CONFIGS on it); it must be compact, or a stopped connector loses its position when the record expires")
		return nil
	}
	for _, e := range entries {
		if e.Name != "cleanup.policy" {
			continue
		}
		compact, del := false, false
		for _, p := range strings.Split(e.Value, ",") {
			switch strings.TrimSpace(p) {
			case "compact":
				compact = true
			case "delete":
				del = true
			}
		}
		switch {
		case !compact:
			return fmt.Errorf("%w: topic %q has cleanup.policy=%s: its progress record expires after retention.ms, and a connector stopped that long would restart where source.start says; set cleanup.policy=compact (kafka-configs --alter --entity-type topics --entity-name %s --add-config cleanup.policy=compact)",
				errProgressLayout, topic, e.Value, topic)
		case del:
			t.log.Warn().Str("progress_topic", topic).Str("cleanup.policy", e.Value).
				Msg("the progress topic also deletes by retention: a connector stopped longer than retention.ms finds no progress record and refuses to start; prefer cleanup.policy=compact alone")
		}
	}
	return nil
}

// describeTopic returns topic's metadata, or its error
// (UNKNOWN_TOPIC_OR_PARTITION when it does not exist).
func describeTopic(admin sarama.ClusterAdmin, topic string) (*sarama.TopicMetadata, error) {
	meta, err := admin.DescribeTopics([]string{topic})
	if err != nil {
		return nil, err
	}
	for _, m := range meta {
		if m.Name != topic {
			continue
		}
		if !errors.Is(m.Err, sarama.ErrNoError) {
			return nil, m.Err
		}
		return m, nil
	}
	return nil, sarama.ErrUnknownTopicOrPartition
}

// loadWindow is how many offsets the first backward scan of the progress
// partition reads; each further scan reads four times more.
const loadWindow = 256

// readProgress returns the position in the last committed progress record
// keyed by the connector name, or a zero Position when there is none.
func (t *Transactional) readProgress(ctx context.Context) (outboxcdc.Position, error) {
	r, err := ReadProgress(ctx, t.cfg, t.tcfg.ProgressTopic, t.connector, t.kind)
	if err != nil {
		return "", err
	}
	if r.Tombstone {
		t.log.Warn().Str("progress_topic", t.tcfg.ProgressTopic).Msg("the progress record is a tombstone: starting where source.start says")
	}
	return r.Position, nil
}

// Progress is a connector's last committed progress record.
type Progress struct {
	// Position is zero when there is no record (or a tombstone).
	Position        outboxcdc.Position
	SavedAt         time.Time
	TransactionalID string
	// Tombstone: the last record for the connector is a deliberate reset.
	Tombstone bool
	// TopicMissing: the progress topic does not exist.
	TopicMissing bool
}

// ReadProgress reads the last committed progress record of connector from
// the progress topic, without starting a producer (so it fences nothing).
// kind, when not empty, is the position kind expected.
//
// It reads with read_committed, backwards in growing windows from the end,
// so a long uncompacted progress log costs only its tail. Before reading it
// waits until no transaction is open below the high watermark seen at the
// start (the last stable offset has caught up with it): a progress record
// of ours committed after another connector's still-open transaction would
// otherwise be invisible and an older one would be taken. A tombstone (null
// value) for the connector's key reads as "no progress".
func ReadProgress(ctx context.Context, cfg KafkaConfig, topic, connector, kind string) (Progress, error) {
	sec, err := cfg.kgoSecurity()
	if err != nil {
		return Progress{}, err
	}
	cl, err := kgo.NewClient(append([]kgo.Opt{
		kgo.SeedBrokers(cfg.Brokers...),
		kgo.ClientID(cfg.ClientID),
		kgo.DialTimeout(cfg.DialTimeout),
		// Each request's read deadline is its own timeout plus this; a
		// silent broker fails a request after it, and the whole read
		// after the retries.
		kgo.RequestTimeoutOverhead(10 * time.Second),
		kgo.RetryTimeout(30 * time.Second),
		kgo.RequestRetries(2),
	}, sec...)...)
	if err != nil {
		return Progress{}, err
	}
	defer cl.Close()

	leader, topicID, err := progressLeader(ctx, cl, topic)
	if errors.Is(err, kerr.UnknownTopicOrPartition) {
		return Progress{TopicMissing: true}, nil
	}
	if err != nil {
		return Progress{}, err
	}
	start, err := listOffset(ctx, cl, topic, -2, 0)
	if err != nil {
		return Progress{}, err
	}
	hwm, err := listOffset(ctx, cl, topic, -1, 0)
	if err != nil {
		return Progress{}, err
	}
	for {
		lso, err := listOffset(ctx, cl, topic, -1, 1)
		if err != nil {
			return Progress{}, err
		}
		if lso >= hwm {
			break
		}
		select {
		case <-time.After(50 * time.Millisecond):
		case <-ctx.Done():
			return Progress{}, fmt.Errorf("waiting for open transactions on progress topic %q to finish (last stable offset %d, high watermark %d): %w", topic, lso, hwm, ctx.Err())
		}
	}

	br := cl.Broker(int(leader))
	hi := hwm
	for window := int64(loadWindow); hi > start; window *= 4 {
		lo := max(start, hi-window)
		val, found, err := scanProgress(ctx, br, topic, topicID, connector, lo, hi)
		if err != nil {
			return Progress{}, err
		}
		if found {
			if val == nil {
				return Progress{Tombstone: true}, nil
			}
			p, why := decodeProgress(val)
			if why != "" {
				return Progress{}, outboxcdc.Permanent(fmt.Errorf("%w: progress record for %q in topic %q %s",
					ErrProgressUntrusted, connector, topic, why), "write a valid record or a tombstone for the key deliberately")
			}
			if kind != "" {
				if err := p.Position.CheckKind(kind); err != nil {
					return Progress{}, outboxcdc.Permanent(fmt.Errorf("progress topic %q: %w", topic, err),
						fmt.Sprintf("use another connector name or progress topic, or write a tombstone for %q deliberately", connector))
				}
			}
			return p, nil
		}
		hi = lo
	}
	return Progress{}, nil
}

// scanProgress reads offsets [lo, hi) of partition 0 with read_committed
// and returns the value of the last record keyed by the connector name.
func scanProgress(ctx context.Context, br *kgo.Broker, topic string, topicID [16]byte, connector string, lo, hi int64) (val []byte, found bool, err error) {
	off := lo
	for off < hi {
		req := kmsg.NewPtrFetchRequest()
		req.ReplicaID = -1
		req.MaxWaitMillis = 100
		req.MinBytes = 1
		req.MaxBytes = 4 << 20
		req.IsolationLevel = 1
		req.SessionEpoch = -1
		rt := kmsg.NewFetchRequestTopic()
		rt.Topic = topic
		rt.TopicID = topicID
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.Partition = 0
		rp.FetchOffset = off
		rp.LogStartOffset = -1
		rp.CurrentLeaderEpoch = -1
		rp.PartitionMaxBytes = 4 << 20
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, br)
		if err != nil {
			return nil, false, fmt.Errorf("fetching progress topic %q at offset %d: %w", topic, off, err)
		}
		if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
			return nil, false, fmt.Errorf("fetching progress topic %q: %w", topic, err)
		}
		if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
			return nil, false, fmt.Errorf("fetching progress topic %q: unexpected response shape", topic)
		}
		part := &resp.Topics[0].Partitions[0]
		if errors.Is(kerr.ErrorForCode(part.ErrorCode), kerr.OffsetOutOfRange) && off < part.LogStartOffset {
			off = part.LogStartOffset // deleted or compacted away meanwhile
			continue
		}
		fp, next := kgo.ProcessFetchPartition(kgo.ProcessFetchPartitionOpts{
			Offset:         off,
			IsolationLevel: kgo.ReadCommitted(),
			Topic:          topic,
			Partition:      0,
		}, part, kgo.DefaultDecompressor(), nil)
		if fp.Err != nil {
			return nil, false, fmt.Errorf("fetching progress topic %q at offset %d: %w", topic, off, fp.Err)
		}
		for _, r := range fp.Records {
			if r.Offset < hi && string(r.Key) == connector {
				val, found = r.Value, true
			}
		}
		if next <= off {
			// Nothing readable yet at off (should not happen below the
			// last stable offset); wait a little.
			select {
			case <-time.After(20 * time.Millisecond):
			case <-ctx.Done():
				return nil, false, ctx.Err()
			}
			continue
		}
		off = next
	}
	return val, found, nil
}

// progressLeader returns the leader of partition 0 of topic and the
// topic's id.
func progressLeader(ctx context.Context, cl *kgo.Client, topic string) (int32, [16]byte, error) {
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return 0, [16]byte{}, fmt.Errorf("metadata for progress topic %q: %w", topic, err)
	}
	for _, tm := range resp.Topics {
		if err := kerr.ErrorForCode(tm.ErrorCode); err != nil {
			return 0, [16]byte{}, fmt.Errorf("metadata for progress topic %q: %w", topic, err)
		}
		for _, p := range tm.Partitions {
			if p.Partition == 0 {
				if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
					return 0, [16]byte{}, fmt.Errorf("metadata for progress topic %q: %w", topic, err)
				}
				return p.Leader, tm.TopicID, nil
			}
		}
	}
	return 0, [16]byte{}, fmt.Errorf("metadata for progress topic %q: partition 0 not found", topic)
}

// listOffset returns the earliest (ts -2) or latest (ts -1) offset of
// partition 0; with isolation 1 the latest offset is the last stable one.
func listOffset(ctx context.Context, cl *kgo.Client, topic string, ts int64, isolation int8) (int64, error) {
	req := kmsg.NewPtrListOffsetsRequest()
	req.ReplicaID = -1
	req.IsolationLevel = isolation
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewListOffsetsRequestTopicPartition()
	rp.Partition = 0
	rp.Timestamp = ts
	rp.CurrentLeaderEpoch = -1
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return 0, fmt.Errorf("listing offsets of progress topic %q: %w", topic, err)
	}
	for _, tr := range resp.Topics {
		for _, pr := range tr.Partitions {
			if err := kerr.ErrorForCode(pr.ErrorCode); err != nil {
				return 0, fmt.Errorf("listing offsets of progress topic %q: %w", topic, err)
			}
			return pr.Offset, nil
		}
	}
	return 0, fmt.Errorf("listing offsets of progress topic %q: empty answer", topic)
}

// WriteProgress commits a progress record for pos (the position commands'
// `position set` and `import-debezium` in exactly-once mode). It starts a
// transactional producer with the connector's own transactional id, which
// fences a running instance of the connector (its next write fails and it
// exits; restarted, it resumes from pos) and aborts its open transaction,
// then writes the record in a transaction, exactly as a commit of the
// connector would. The progress topic is checked (created if missing) as
// at start.
func WriteProgress(ctx context.Context, cfg KafkaConfig, tcfg TxnConfig, connector, kind string, pos outboxcdc.Position, log zerolog.Logger) error {
	t, err := NewTransactional(cfg, tcfg, connector, kind, log, nil)
	if err != nil {
		return err
	}
	defer t.Close()
	if err := t.ensureProgressTopic(ctx); err != nil {
		return err
	}
	return t.WriteAtomic(ctx, nil, pos)
}
