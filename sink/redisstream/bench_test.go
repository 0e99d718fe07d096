package redisstream

import (
	"context"
	"testing"

	"github.com/rs/zerolog"
)

// BenchmarkWrite: batches of 1000 XADDs (about 100 bytes each) to the
// local Redis, trimmed to about 10000 entries.
func BenchmarkWrite(b *testing.B) {
	f := newFixture(b)
	cfg := testConfig(f.url)
	cfg.MaxLen = 10000
	s, err := New(cfg, zerolog.Nop(), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	recs := records(f.prefix, 1000, 7)
	b.SetBytes(int64(len(recs) * recs[0].Size()))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := s.Write(context.Background(), recs); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*len(recs))/b.Elapsed().Seconds(), "records/s")
}
