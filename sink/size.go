package sink

import outboxcdc "github.com/outbox-cdc/outbox-cdc"

// The record-size formula: Record.Size (destination, key, value and
// headers, plus a fixed overhead per record and header) is what a record
// counts against max_message_bytes and max_in_flight_bytes in every sink;
// PayloadBytes is what outbox_cdc_sink_bytes_total counts.

// PayloadBytes is the key, value and header bytes of records, as the sink
// metrics count them.
func PayloadBytes(records []outboxcdc.Record) float64 {
	var n int
	for i := range records {
		r := &records[i]
		n += len(r.Key) + len(r.Value)
		for _, h := range r.Headers {
			n += len(h.Key) + len(h.Value)
		}
	}
	return float64(n)
}
