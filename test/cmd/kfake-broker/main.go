// Command kfake-broker runs an in-memory Kafka-protocol broker (franz-go's
// kfake) as its own process, for the demo and benchmarks, so the
// connector's CPU and memory are measured alone. It is a test broker: it
// keeps nothing on disk. It stops on SIGINT/SIGTERM.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/twmb/franz-go/pkg/kfake"
)

func main() {
	port := flag.Int("port", 9092, "port to listen on (127.0.0.1)")
	partitions := flag.Int("partitions", 3, "partitions of auto-created topics")
	flag.Parse()
	c, err := kfake.NewCluster(
		kfake.NumBrokers(1),
		kfake.Ports(*port),
		kfake.DefaultNumPartitions(*partitions),
		kfake.AllowAutoTopicCreation(),
	)
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
