package kafka

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kfake"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
	"github.com/outbox-cdc/outbox-cdc/test/testenv"
)

// BenchmarkAtLeastOnceVsExactlyOnce writes the same batches of ~200-byte
// records through the idempotent sink (at-least-once: Write, the position
// saved elsewhere) and the transactional sink (exactly-once: WriteAtomic,
// one Kafka transaction with a progress record per batch) against an
// in-process kfake broker, and reports records/s.
func BenchmarkAtLeastOnceVsExactlyOnce(b *testing.B) {
	for _, batch := range []int{10, 100, 1000, 5000} {
		for _, mode := range []string{"at-least-once", "exactly-once"} {
			b.Run(fmt.Sprintf("batch=%d/%s", batch, mode), func(b *testing.B) {
				_, addrs := testenv.Kafka(b, kfake.SeedTopics(6, "outbox.event.ORDER"))
				cfg := DefaultKafkaConfig()
				cfg.Brokers = addrs
				recs := benchRecords(batch)
				ctx := context.Background()
				var write func(i int) error
				if mode == "at-least-once" {
					k, err := NewKafka(cfg, zerolog.Nop(), nil)
					if err != nil {
						b.Fatal(err)
					}
					defer k.Close()
					write = func(int) error { return k.Write(ctx, recs) }
				} else {
					tc := DefaultTxnConfig()
					t, err := NewTransactional(cfg, tc, "bench", "", zerolog.Nop(), nil)
					if err != nil {
						b.Fatal(err)
					}
					defer t.Close()
					if _, err := t.Load(ctx); err != nil {
						b.Fatal(err)
					}
					write = func(i int) error {
						return t.WriteAtomic(ctx, recs, outboxcdc.Position(fmt.Sprintf("mysql:0-1-%d", i)))
					}
				}
				if err := write(0); err != nil { // connect, metadata
					b.Fatal(err)
				}
				b.ResetTimer()
				start := time.Now()
				for i := 0; i < b.N; i++ {
					if err := write(i + 1); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.N*batch)/time.Since(start).Seconds(), "records/s")
			})
		}
	}
}
