package kafka

import (
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Vectors from the Java client's UtilsTest.testMurmur2, and the ones Akka's
// Murmur2Spec took from Utils.murmur2.
func TestMurmur2JavaVectors(t *testing.T) {
	cases := []struct {
		in   string
		want int32
	}{
		{"21", -973932308},
		{"foobar", -790332482},
		{"a-little-bit-long-string", -985981536},
		{"a-little-bit-longer-string", -1486304829},
		{"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971},
		{"abc", 479470107},
		{"1", -1993445489},
		{"12", 126087238},
		{"123", -267702483},
		{"1234", -1614185708},
		{"12345", -1188365604},
	}
	for _, c := range cases {
		if got := Murmur2([]byte(c.in)); got != c.want {
			t.Errorf("Murmur2(%q) = %d, want %d", c.in, got, c.want)
		}
	}
}

func TestJavaPartitionUsesSignBitMask(t *testing.T) {
	// murmur2("21") is negative: toPositive masks the sign bit, it does not
	// negate (Math.abs would give a different partition).
	h := Murmur2([]byte("21"))
	if h >= 0 {
		t.Fatal("test needs a negative hash")
	}
	for _, n := range []int32{1, 3, 6, 7, 12, 100} {
		want := (h & 0x7fffffff) % n
		if got := JavaPartition([]byte("21"), n); got != want {
			t.Errorf("JavaPartition(21, %d) = %d, want %d", n, got, want)
		}
	}
}

// franz-go's default key partitioner is documented as compatible with the
// Java client; it is an independent implementation to compare against.
func TestJavaPartitionMatchesFranzGo(t *testing.T) {
	kp := kgo.StickyKeyPartitioner(nil).ForTopic("t")
	for i := 0; i < 2000; i++ {
		key := []byte(fmt.Sprintf("aggregate-%d", i))
		for _, n := range []int{1, 2, 3, 6, 10, 64} {
			want := kp.Partition(&kgo.Record{Key: key}, n)
			if got := JavaPartition(key, int32(n)); int(got) != want {
				t.Fatalf("JavaPartition(%q, %d) = %d, franz-go says %d", key, n, got, want)
			}
		}
	}
	// Lengths 0..7 exercise every tail case.
	for l := 0; l < 8; l++ {
		key := []byte("abcdefgh"[:l])
		want := kp.Partition(&kgo.Record{Key: key}, 7)
		if got := JavaPartition(key, 7); int(got) != want {
			t.Errorf("len %d: got %d want %d", l, got, want)
		}
	}
}

func BenchmarkMurmur2(b *testing.B) {
	key := []byte("order-1234567890")
	b.ReportAllocs()
	for b.Loop() {
		Murmur2(key)
	}
}
