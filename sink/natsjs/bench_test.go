package natsjs

import (
	"context"
	"fmt"
	"testing"

	"github.com/rs/zerolog"
)

// BenchmarkWrite: batches of 1000 records (about 100 bytes each) to a
// memory stream of the local NATS server, each acknowledged by a PubAck;
// every batch has new message ids (no duplicates).
func BenchmarkWrite(b *testing.B) {
	f := newFixture(b, 0)
	s, err := New(testConfig(f.url, f.stream), zerolog.Nop(), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	recs := records(f.prefix, 1000, 7)
	b.SetBytes(int64(len(recs) * recs[0].Size()))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for j := range recs {
			recs[j].MessageID = fmt.Sprintf("b%d-%d", i, j)
		}
		if err := s.Write(context.Background(), recs); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*len(recs))/b.Elapsed().Seconds(), "records/s")
}
