package testenv

import (
	"net"
	"testing"
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

// KafkaBehindProxy starts an in-process kfake (as Kafka does) whose only
// way in is a Proxy: the broker advertises the proxy's address in its
// metadata, so every client connection, bootstrap or not, crosses it and
// Silence/Heal/Cut reach all of them.
func KafkaBehindProxy(t testing.TB, opts ...kfake.Opt) (*kfake.Cluster, *Proxy, []string) {
	t.Helper()
	var p *Proxy
	listen := func(network, address string) (net.Listener, error) {
		ln, err := net.Listen(network, address)
		if err != nil {
			return nil, err
		}
		p = NewProxy(t, ln.Addr().String())
		return advertised{ln, p.ln.Addr()}, nil
	}
	c, _ := Kafka(t, append([]kfake.Opt{kfake.ListenFn(listen)}, opts...)...)
	return c, p, []string{p.Addr()}
}

// advertised is a listener that reports another address as its own.
type advertised struct {
	net.Listener
	addr net.Addr
}

func (a advertised) Addr() net.Addr { return a.addr }
