package kafka

import (
	"encoding/binary"
)

// Murmur2 is the 32-bit murmur2 hash exactly as the Java Kafka client
// computes it (org.apache.kafka.common.utils.Utils.murmur2: seed 0x9747b28c,
// little-endian 4-byte blocks), returned as Java's signed int.
func Murmur2(data []byte) int32 {
	const (
		seed uint32 = 0x9747b28c
		m    uint32 = 0x5bd1e995
		r           = 24
	)
	n := len(data)
	h := seed ^ uint32(n)
	for len(data) >= 4 {
		k := binary.LittleEndian.Uint32(data)
		k *= m
		k ^= k >> r
		k *= m
		h *= m
		h ^= k
		data = data[4:]
	}
	switch len(data) {
	case 3:
		h ^= uint32(data[2]) << 16
		fallthrough
	case 2:
		h ^= uint32(data[1]) << 8
		fallthrough
	case 1:
		h ^= uint32(data[0])
		h *= m
	}
	h ^= h >> 13
	h *= m
	h ^= h >> 15
	return int32(h)
}

// JavaPartition returns the partition the Java client's default partitioner
// (DefaultPartitioner / BuiltInPartitioner.partitionForKey) picks for a
// non-null key: toPositive(murmur2(key)) % numPartitions, where toPositive
// clears the sign bit (it is not Math.abs). Debezium and Kafka Connect use
// it, so a key keeps its partition when a Java producer is replaced by this
// connector.
func JavaPartition(key []byte, numPartitions int32) int32 {
	return (Murmur2(key) & 0x7fffffff) % numPartitions
}
