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
	if *brokers < 1 {
		fmt.Fprintf(os.Stderr, "kfake-broker: -brokers must be at least 1, got %d\n", *brokers)
		os.Exit(2)
	}
	ports := make([]int, *brokers)
	for i := range ports {
		ports[i] = *port + i
	}
	opts := []kfake.Opt{
		kfake.NumBrokers(*brokers),
		kfake.Ports(ports...),
		kfake.DefaultNumPartitions(*partitions),
		kfake.AllowAutoTopicCreation(),
	}
	var seeded []string
	if *topics != "" {
		seeded = strings.Split(*topics, ",")
		opts = append(opts, kfake.SeedTopics(int32(*partitions), seeded...))
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		fmt.Fprintf(os.Stderr, "kfake-broker: %v\n", err)
		os.Exit(1)
	}
	for _, t := range seeded {
		for p := range int32(*partitions) {
			if err := c.MoveTopicPartition(t, p, p%int32(*brokers)); err != nil {
				fmt.Fprintf(os.Stderr, "kfake-broker: topic %s partition %d: %v\n", t, p, err)
				os.Exit(1)
			}
		}
	}
	fmt.Printf("kfake-broker: listening on %v\n", c.ListenAddrs())
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	<-sig
	c.Close()
}
