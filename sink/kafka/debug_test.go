package kafka

import (
	"log"
	"os"

	"github.com/IBM/sarama"
)

// SARAMA_DEBUG=1 go test ./sink/ -v prints sarama's internal log.
func init() {
	if os.Getenv("SARAMA_DEBUG") != "" {
		sarama.Logger = log.New(os.Stderr, "[sarama] ", log.Lmicroseconds)
	}
}
