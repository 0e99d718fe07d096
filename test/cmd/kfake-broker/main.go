// Command kfake-broker runs an in-memory Kafka-protocol broker (franz-go's
// kfake) as its own process, for the demo and benchmarks, so the
// connector's CPU and memory are measured alone. It is a test broker: it
// keeps nothing on disk. It stops on SIGINT/SIGTERM. With -brokers N it is a
// cluster of N brokers on consecutive ports, as real clusters spread
// partition leaders over brokers.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/twmb/franz-go/pkg/kfake"
)

func main() {
	port := flag.Int("port", 9092, "port to listen on (127.0.0.1)")
	partitions := flag.Int("partitions", 3, "partitions of auto-created topics")
	brokers := flag.Int("brokers", 1, "brokers in the cluster, on ports port, port+1, ...")
	topics := flag.String("topics", "", "topics to create at start, comma-separated, with partition p led by broker p mod brokers (auto-created topics get random leaders)")
	flag.Parse()
	var seeded []string
	if *topics != "" {
		seeded = strings.Split(*topics, ",")
	}
	c, err := newCluster(*port, *brokers, *partitions, seeded)
	if err != nil {
		fmt.Fprintf(os.Stderr, "kfake-broker: %v\n", err)
		os.Exit(1)
	}
	fmt.Printf("kfake-broker: listening on %v\n", c.ListenAddrs())
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	<-sig
	c.Close()
}

// newCluster starts brokers brokers on ports port, port+1, ... (port 0:
// any free ones) and creates topics with partition p led by broker
// p mod brokers.
func newCluster(port, brokers, partitions int, topics []string) (*kfake.Cluster, error) {
	if brokers < 1 {
		return nil, fmt.Errorf("-brokers must be at least 1, got %d", brokers)
	}
	ports := make([]int, brokers)
	for i := range ports {
		if port != 0 {
			ports[i] = port + i
		}
	}
	opts := []kfake.Opt{
		kfake.NumBrokers(brokers),
		kfake.Ports(ports...),
		kfake.DefaultNumPartitions(partitions),
		kfake.AllowAutoTopicCreation(),
	}
	if len(topics) > 0 {
		opts = append(opts, kfake.SeedTopics(int32(partitions), topics...))
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		return nil, err
	}
	for _, t := range topics {
		for p := range int32(partitions) {
			if err := c.MoveTopicPartition(t, p, p%int32(brokers)); err != nil {
				c.Close()
				return nil, fmt.Errorf("topic %s partition %d: %w", t, p, err)
			}
		}
	}
	return c, nil
}
