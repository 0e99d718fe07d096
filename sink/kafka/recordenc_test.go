package kafka

import (
	"bytes"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
)

// configClient is a sarama.Client that only has a Config (all request()
// asks of it).
type configClient struct {
	sarama.Client
	sc *sarama.Config
}

func (c configClient) Config() *sarama.Config { return c.sc }

// TestPresetRecordsSameBytes builds the produce requests of the same
// rounds of records with the records encoded by the sink and by sarama,
// sends both through a sarama broker connection to a listener that keeps
// what it receives, and requires the two requests to be the same bytes
// (but for the correlation id): nil and empty keys, values and header
// values, timestamps going back, a record larger than 127 bytes (two-byte
// lengths), transactional and not, in one request after another.
func TestPresetRecordsSameBytes(t *testing.T) {
	if !presetField.ok {
		t.Fatal("sarama.RecordBatch has no compressedRecords/recordsLen fields of the expected types: sarama encodes every batch (slower), update recordenc.go")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan []byte, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		b, _ := io.ReadAll(c)
		got <- b
	}()

	sc := sarama.NewConfig()
	sc.Version = sarama.V2_8_0_0
	sc.ApiVersionsRequest = false
	sc.ClientID = "outbox-cdc-test"
	br := sarama.NewBroker(ln.Addr().String())
	if err := br.Open(sc); err != nil {
		t.Fatal(err)
	}
	if ok, err := br.Connected(); !ok {
		t.Fatal(err)
	}

	t0 := time.Date(2026, 12, 3, 10, 0, 0, 123_456_789, time.UTC)
	long := []byte(strings.Repeat("x", 300))
	recs := []outboxcdc.Record{
		{Topic: "a", Key: []byte("k1"), Value: []byte(`{"a":1}`), Timestamp: t0,
			Headers: []outboxcdc.Header{{Key: "id", Value: []byte("1")}, {Key: "empty", Value: []byte{}}, {Key: "null", Value: nil}, {Key: "", Value: []byte("no key")}}},
		{Topic: "a", Key: nil, Value: nil, Timestamp: t0.Add(3 * time.Millisecond)},
		{Topic: "a", Key: []byte{}, Value: []byte{}, Timestamp: t0.Add(-2 * time.Second)},
		{Topic: "a", Key: long, Value: long, Timestamp: t0.Add(90 * time.Minute),
			Headers: []outboxcdc.Header{{Key: string(long), Value: long}}},
		{Topic: "b", Key: []byte("k2"), Value: []byte("v"), Timestamp: t0},
	}
	keys := headerKeyCache{}
	pend := make([]pending, len(recs))
	for i := range recs {
		pend[i].rec = &recs[i]
		for _, h := range recs[i].Headers {
			pend[i].headers = append(pend[i].headers, sarama.RecordHeader{Key: keys.get(h.Key), Value: h.Value})
		}
	}
	ptrs := func(ps []pending) []*pending {
		out := make([]*pending, len(ps))
		for i := range ps {
			out[i] = &ps[i]
		}
		return out
	}
	rounds := [][]*partBatch{
		{{tp: topicPartition{"a", 2}, recs: ptrs(pend[:4]), seq: 17}},
		{{tp: topicPartition{"a", 0}, recs: ptrs(pend[:1]), seq: 0}},
		{{tp: topicPartition{"b", 1}, recs: ptrs(pend[1:]), seq: 5}},
	}
	// One batch per request: sarama writes a request's topics and
	// partitions in map order.
	k := &kafkaSink{}
	var sent int
	for _, txn := range []bool{false, true} {
		p := &producer{client: configClient{sc: sc}, idem: &idempotence{id: 4711, epoch: 3}}
		if txn {
			p.idem.txn = &txnState{id: "tx-1"}
		}
		for _, round := range rounds {
			for _, on := range []bool{false, true} {
				k.preset = on
				req := k.request(p, round, &encodeBuf{})
				// acks=all waits for an answer: send with none expected.
				req.RequiredAcks = sarama.NoResponse
				if _, err := br.Produce(req); err != nil {
					t.Fatal(err)
				}
				sent++
			}
		}
	}
	br.Close()
	raw := <-got
	var frames [][]byte
	for len(raw) >= 4 {
		n := int(raw[0])<<24 | int(raw[1])<<16 | int(raw[2])<<8 | int(raw[3])
		frames = append(frames, raw[4:4+n])
		raw = raw[4+n:]
	}
	if len(frames) != sent {
		t.Fatalf("%d requests received, %d sent", len(frames), sent)
	}
	for i := 0; i < len(frames); i += 2 {
		sarama, ours := frames[i][8:], frames[i+1][8:] // after api key, version, correlation id
		if !bytes.Equal(sarama, ours) {
			t.Errorf("request %d: the sink's records differ from sarama's:\nsarama %x\nsink   %x", i/2, sarama, ours)
		}
	}
}

func TestVarintLen(t *testing.T) {
	for _, v := range []int64{0, 1, -1, 63, -64, 64, -65, 8191, 8192, 1 << 40, -(1 << 40), 1<<63 - 1, -1 << 63} {
		var b [16]byte
		if n := len(appendRecordInt(b[:0], v)); n != varintLen(v) {
			t.Errorf("varintLen(%d) = %d, encoded %d bytes", v, varintLen(v), n)
		}
	}
}

func appendRecordInt(dst []byte, v int64) []byte {
	u := uint64(v<<1) ^ uint64(v>>63)
	for u >= 0x80 {
		dst = append(dst, byte(u)|0x80)
		u >>= 7
	}
	return append(dst, byte(u))
}
