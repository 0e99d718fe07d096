package kafka

import (
	"context"
	"fmt"
	"runtime"
	"sort"
	"testing"
	"time"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
	"github.com/outbox-cdc/outbox-cdc/test/testenv"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kfake"
)

// benchRecords makes n records of about 200 bytes (key, JSON value, three
// headers), spread over 1000 aggregates.
func benchRecords(n int) []outboxcdc.Record {
	recs := make([]outboxcdc.Record, n)
	now := time.Now()
	for i := range recs {
		id := fmt.Sprintf("%032d", i)
		recs[i] = outboxcdc.Record{
			Topic: "outbox.event.ORDER",
			Key:   []byte(fmt.Sprintf("order-%d", i%1000)),
			Value: []byte(fmt.Sprintf(`{"order_id":"order-%d","status":"PAID","amount_cents":%d,"currency":"EUR","items":3,"seq":%08d}`, i%1000, i*7, i)),
			Headers: []outboxcdc.Header{
				{Key: "id", Value: []byte(id)},
				{Key: "event_type", Value: []byte("ORDER_PAID")},
				{Key: "aggregate_type", Value: []byte("ORDER")},
			},
			Timestamp: now,
		}
	}
	return recs
}

// BenchmarkKafkaWrite writes batches of ~200-byte records to an in-process
// kfake broker (which shares the CPUs with the producer) and reports
// records/s and allocations per record.
func BenchmarkKafkaWrite(b *testing.B) {
	for _, batch := range []int{1, 100, 1000, 5000} {
		for _, compression := range []string{"none", "lz4"} {
			b.Run(fmt.Sprintf("batch=%d/compression=%s", batch, compression), func(b *testing.B) {
				_, addrs := testenv.Kafka(b, kfake.SeedTopics(6, "outbox.event.ORDER"))
				cfg := DefaultKafkaConfig()
				cfg.Brokers = addrs
				cfg.Compression = compression
				k, err := NewKafka(cfg, zerolog.Nop(), nil)
				if err != nil {
					b.Fatal(err)
				}
				defer k.Close()
				recs := benchRecords(batch)
				ctx := context.Background()
				if err := k.Write(ctx, recs); err != nil { // connect, metadata
					b.Fatal(err)
				}
				var ms0, ms1 runtime.MemStats
				runtime.ReadMemStats(&ms0)
				lat := make([]time.Duration, 0, b.N)
				b.ResetTimer()
				start := time.Now()
				for i := 0; i < b.N; i++ {
					t0 := time.Now()
					if err := k.Write(ctx, recs); err != nil {
						b.Fatal(err)
					}
					lat = append(lat, time.Since(t0))
				}
				el := time.Since(start)
				b.StopTimer()
				runtime.ReadMemStats(&ms1)
				n := float64(b.N * batch)
				b.ReportMetric(n/el.Seconds(), "records/s")
				// Process-wide: includes sarama's and kfake's allocations.
				b.ReportMetric(float64(ms1.Mallocs-ms0.Mallocs)/n, "allocs/record")
				sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
				b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms/write")
			})
		}
	}
}
