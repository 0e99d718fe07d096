package kafka

import (
	"context"
	"errors"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
	"github.com/outbox-cdc/outbox-cdc/test/testenv"
)

// A record that names its partition (route.partition_column, Debezium's
// partition placement) is written there, whatever its key hashes to; one
// that names a partition the topic lacks is a permanent error naming the
// record, as the Java producer rejects it.
func TestKafkaWritesToTheRecordsPartition(t *testing.T) {
	const topic, parts = "placed", 6
	_, addrs := testenv.Kafka(t, kfake.SeedTopics(parts, topic))
	k, _ := newTestKafka(t, testConfig(addrs))
	key := []byte("order-1")
	want := (JavaPartition(key, parts) + 1) % parts // anything but the hash's
	recs := []outboxcdc.Record{
		{Topic: topic, Key: key, Value: []byte("placed"), Partition: &want},
		{Topic: topic, Key: key, Value: []byte("by key")},
	}
	if err := k.Write(context.Background(), recs); err != nil {
		t.Fatal(err)
	}
	for _, r := range consume(t, addrs, topic, 2) {
		switch string(r.Value) {
		case "placed":
			if r.Partition != want {
				t.Errorf("placed record on partition %d, want %d", r.Partition, want)
			}
		case "by key":
			if r.Partition != JavaPartition(key, parts) {
				t.Errorf("keyed record on partition %d, want %d", r.Partition, JavaPartition(key, parts))
			}
		}
	}
	missing := int32(parts)
	err := k.Write(context.Background(), []outboxcdc.Record{{Topic: topic, Key: key, Value: []byte("x"), Partition: &missing}})
	var se *Error
	if !errors.As(err, &se) || !se.Permanent || se.Index != 0 {
		t.Fatalf("partition %d of %d: %v, want a permanent error for record 0", missing, parts, err)
	}
}

func TestTransactionalWritesToTheRecordsPartition(t *testing.T) {
	const topic, parts = "placed-txn", 6
	_, addrs := testenv.Kafka(t, kfake.SeedTopics(parts, topic), kfake.SeedTopics(1, "progress"))
	s := txnSink(t, addrs, "placed")
	key := []byte("order-1")
	want := (JavaPartition(key, parts) + 2) % parts
	if err := s.WriteAtomic(context.Background(), []outboxcdc.Record{{Topic: topic, Key: key, Value: []byte("placed"), Partition: &want}},
		outboxcdc.MakePosition("mysql", "file:binlog.000001:4")); err != nil {
		t.Fatal(err)
	}
	got := readAll(t, addrs, topic, true)
	if len(got) != 1 || got[0].Partition != want {
		t.Fatalf("read %d records, first on partition %v; want 1 on %d", len(got), got, want)
	}
}
