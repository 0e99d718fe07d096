package testenv

import (
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// RejectOldTimestamps makes c answer INVALID_TIMESTAMP to produce requests
// for topic that carry a record batch whose first timestamp is more than
// maxAge in the past, as a Kafka topic with message.timestamp.before.max.ms
// (message.timestamp.difference.max.ms before Kafka 3.6) does. kfake has no
// such setting of its own.
func RejectOldTimestamps(c *kfake.Cluster, topic string, maxAge time.Duration) {
	c.Fault(kfake.Fault{
		Keys:  []kmsg.Key{kmsg.Produce},
		Topic: topic,
		Err:   kerr.InvalidTimestamp,
		Count: -1,
		When: func(kr kmsg.Request) bool {
			req, ok := kr.(*kmsg.ProduceRequest)
			if !ok {
				return false
			}
			oldest := time.Now().Add(-maxAge).UnixMilli()
			for _, t := range req.Topics {
				if t.Topic != topic {
					continue
				}
				for _, p := range t.Partitions {
					for b := p.Records; len(b) >= 61; { // 61: a batch header
						var rb kmsg.RecordBatch
						if err := rb.ReadFrom(b); err != nil {
							break
						}
						if rb.FirstTimestamp < oldest {
							return true
						}
						n := 12 + int(rb.Length) // offset and length, then the rest
						if n <= 12 || n > len(b) {
							break
						}
						b = b[n:]
					}
				}
			}
			return false
		},
	})
}
