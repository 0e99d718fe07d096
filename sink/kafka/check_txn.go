package kafka

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/IBM/sarama"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
)

// CheckTransactional is the exactly-once part of `outbox-cdc check`. It
// finds the transaction coordinator of the connector's transactional id
// (which needs a broker that supports transactions and, with ACLs,
// DESCRIBE on the TransactionalId) and looks at the progress topic. It does
// not initialise the transactional id: that would fence a running
// connector.
func CheckTransactional(ctx context.Context, cfg KafkaConfig, tcfg TxnConfig, connector string) []outboxcdc.CheckResult {
	tcfg = tcfg.WithName(connector)
	done := make(chan []outboxcdc.CheckResult, 1)
	go func() { done <- checkTransactional(cfg, tcfg) }()
	select {
	case res := <-done:
		return res
	case <-ctx.Done():
		return []outboxcdc.CheckResult{outboxcdc.Fail("kafka.transactional_id",
			fmt.Sprintf("no answer for transactional id %q: %v", tcfg.TransactionalID, ctx.Err()),
			"check sink.brokers and that the brokers are up")}
	}
}

func checkTransactional(cfg KafkaConfig, tcfg TxnConfig) []outboxcdc.CheckResult {
	sc, err := cfg.clientConfig()
	if err != nil {
		return []outboxcdc.CheckResult{outboxcdc.Fail("kafka.config", err.Error(), "fix sink.tls / sink.sasl")}
	}
	sc.Metadata.Full = true
	sc.Net.ReadTimeout = min(sc.Net.ReadTimeout, 15*time.Second)
	client, err := sarama.NewClient(cfg.Brokers, sc)
	if err != nil {
		return []outboxcdc.CheckResult{outboxcdc.Fail("kafka.transactional_id",
			fmt.Sprintf("cannot reach %s: %v", strings.Join(cfg.Brokers, ","), err),
			"check sink.brokers and that the brokers are up and reachable from here")}
	}
	defer client.Close()

	var out []outboxcdc.CheckResult
	if b, err := client.TransactionCoordinator(tcfg.TransactionalID); err != nil {
		out = append(out, outboxcdc.Fail("kafka.transactional_id",
			fmt.Sprintf("no transaction coordinator for %q: %v", tcfg.TransactionalID, err),
			"exactly-once needs brokers with transactions (Kafka 2.5+, transaction.state.log.* satisfiable) and, with ACLs, DESCRIBE and WRITE on TransactionalId "+tcfg.TransactionalID))
	} else {
		out = append(out, outboxcdc.Pass("kafka.transactional_id",
			fmt.Sprintf("%q: coordinator is broker %d (not initialised here, which would fence a running connector)", tcfg.TransactionalID, b.ID())))
	}

	topics, err := client.Topics()
	if err != nil {
		return append(out, outboxcdc.Fail("kafka.progress_topic", "list topics: "+err.Error(), "check that the client may describe topics"))
	}
	for _, t := range topics {
		if t != tcfg.ProgressTopic {
			continue
		}
		parts, err := client.Partitions(t)
		switch {
		case err != nil:
			return append(out, outboxcdc.Fail("kafka.progress_topic", err.Error(), "check that the client may describe "+t))
		case len(parts) != 1:
			return append(out, outboxcdc.Fail("kafka.progress_topic",
				fmt.Sprintf("%s has %d partitions; the progress topic must have exactly one", t, len(parts)),
				"set sink.progress_topic to a new name (it is created with one partition, compacted), or recreate this one"))
		}
		admin, err := sarama.NewClusterAdminFromClient(client)
		if err != nil {
			return append(out, outboxcdc.Warn("kafka.progress_topic", t+" exists with one partition; its cleanup.policy could not be read ("+err.Error()+"): "+
				"without compaction its progress record expires after retention.ms", "check that "+t+" has cleanup.policy=compact (kafka-configs --describe --entity-type topics --entity-name "+t+")"))
		}
		entries, err := admin.DescribeConfig(sarama.ConfigResource{Type: sarama.TopicResource, Name: t, ConfigNames: []string{"cleanup.policy"}})
		if err != nil {
			return append(out, outboxcdc.Warn("kafka.progress_topic", t+" exists with one partition; its cleanup.policy is not readable here ("+err.Error()+"): "+
				"without compaction its progress record expires after retention.ms", "grant the connector's user DESCRIBE_CONFIGS on "+t+", or check that it has cleanup.policy=compact"))
		}
		for _, e := range entries {
			if e.Name != "cleanup.policy" {
				continue
			}
			if !strings.Contains(e.Value, "compact") {
				return append(out, outboxcdc.Fail("kafka.progress_topic",
					fmt.Sprintf("%s has cleanup.policy=%s: its progress record expires after retention.ms", t, e.Value),
					"kafka-configs --alter --entity-type topics --entity-name "+t+" --add-config cleanup.policy=compact"))
			}
			return append(out, outboxcdc.Pass("kafka.progress_topic", t+" exists with one partition, compacted"))
		}
		return append(out, outboxcdc.Warn("kafka.progress_topic", t+" exists with one partition; the broker does not report its cleanup.policy: "+
			"without compaction its progress record expires after retention.ms", "check that "+t+" has cleanup.policy=compact"))
	}
	return append(out, outboxcdc.Pass("kafka.progress_topic",
		tcfg.ProgressTopic+" does not exist yet; the connector creates it (1 partition, cleanup.policy=compact), which needs CREATE on it"))
}
