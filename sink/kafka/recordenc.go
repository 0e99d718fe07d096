package kafka

import (
	"encoding/binary"
	"math/bits"
	"reflect"
	"unsafe"

	"github.com/IBM/sarama"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
)

// Uncompressed record batches: the sink encodes a batch's records itself,
// in one pass into a buffer it reuses, and hands sarama the encoded bytes
// as the batch's records, which sarama then only copies into the request.
// Left to itself, sarama sizes every record in one pass, encodes it into a
// buffer allocated per batch (and zeroed) in a second, then copies that
// buffer into the request: in the drain profile that was a fifth of the
// connector's CPU and half of its allocated bytes. The bytes are the ones
// sarama's own encoder writes (TestPresetRecordsSameBytes compares the
// whole client-to-broker stream both ways).
//
// sarama keeps a batch's encoded records in RecordBatch.compressedRecords
// (and their uncompressed length in recordsLen, for its compression-ratio
// metric) and encodes Records only while that is nil. Both fields are
// unexported, so they are found by name once, checked for their types, and
// set through their offsets; with another sarama whose fields differ,
// presetField.ok is false and sarama encodes the records as before. Compressed
// batches are always left to sarama (its codecs are unexported).

var presetField = func() (f struct {
	ok        bool
	raw, size uintptr
}) {
	t := reflect.TypeOf(sarama.RecordBatch{})
	raw, ok1 := t.FieldByName("compressedRecords")
	size, ok2 := t.FieldByName("recordsLen")
	if ok1 && ok2 && raw.Type == reflect.TypeOf([]byte(nil)) && size.Type == reflect.TypeOf(0) {
		f.ok, f.raw, f.size = true, raw.Offset, size.Offset
	}
	return f
}()

// presetting says whether a sink whose batches have codec encodes their
// records itself (kafkaSink.preset). Its pendings then carry no sarama
// headers: the records are encoded from their own.
func presetting(codec sarama.CompressionCodec) bool {
	return presetField.ok && codec == sarama.CompressionNone
}

// setRecords makes raw, the encoded records of b (b.Records must still
// hold one entry per record: sarama writes their count), b's encoded
// records. raw must stay unchanged until the request holding b is encoded.
func setRecords(b *sarama.RecordBatch, raw []byte) {
	p := unsafe.Pointer(b)
	*(*[]byte)(unsafe.Add(p, presetField.raw)) = raw
	*(*int)(unsafe.Add(p, presetField.size)) = len(raw)
}

// appendRecord appends one record of a v2 record batch, as sarama's
// Record.encode writes it: its length, attributes (0), timestamp and
// offset deltas, key, value (nil: length -1) and headers, every integer a
// zigzag varint.
func appendRecord(dst []byte, tsDeltaMs, offsetDelta int64, key, value []byte, headers []outboxcdc.Header) []byte {
	n := 1 + varintLen(tsDeltaMs) + varintLen(offsetDelta) + bytesLen(key) + bytesLen(value) + varintLen(int64(len(headers)))
	for i := range headers {
		n += varintLen(int64(len(headers[i].Key))) + len(headers[i].Key) + bytesLen(headers[i].Value)
	}
	dst = binary.AppendVarint(dst, int64(n))
	dst = append(dst, 0)
	dst = binary.AppendVarint(dst, tsDeltaMs)
	dst = binary.AppendVarint(dst, offsetDelta)
	dst = appendBytes(dst, key)
	dst = appendBytes(dst, value)
	dst = binary.AppendVarint(dst, int64(len(headers)))
	for i := range headers {
		dst = binary.AppendVarint(dst, int64(len(headers[i].Key))) // a key is never null
		dst = append(dst, headers[i].Key...)
		dst = appendBytes(dst, headers[i].Value)
	}
	return dst
}

func appendBytes(dst, b []byte) []byte {
	if b == nil {
		return binary.AppendVarint(dst, -1)
	}
	dst = binary.AppendVarint(dst, int64(len(b)))
	return append(dst, b...)
}

// bytesLen is the encoded size of b with its length.
func bytesLen(b []byte) int {
	if b == nil {
		return 1
	}
	return varintLen(int64(len(b))) + len(b)
}

// varintLen is the size of v as a zigzag varint.
func varintLen(v int64) int {
	u := uint64(v<<1) ^ uint64(v>>63)
	return (bits.Len64(u|1) + 6) / 7
}
