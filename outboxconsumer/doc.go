// Package outboxconsumer is the receiving end of the transactional outbox:
// the pieces a consumer needs to apply every event exactly once to its own
// database although the relay delivers at least once.
//
// The relay (outbox-cdc) promises "never lost", not "never twice": after a
// crash it sends again what it delivered since its last checkpoint, a
// failed broker write is sent again, and after a broker outage a stale copy
// can even arrive after the copy that replaced it. So a consumer dedupes on
// the message id, and on the first copy of each id it sees, in the same
// database transaction as the business change:
//
//   - Dedupe inserts the message id into a processed-messages table and
//     runs the handler in that transaction: the id is recorded if and only
//     if the business change commits. A duplicate is skipped and reported;
//     a failed handler leaves no trace, so the redelivery is applied.
//     Purge and RunRetention keep the table small.
//   - RedisFilter answers most duplicates from Redis before the database
//     is asked. It only remembers ids the database has already committed,
//     and a Redis that says "new", is down, or was restarted empty only
//     costs the database round trip: the database decides.
//   - Machine is a business state machine: the handler declares the state
//     an event moves its aggregate from and to; a move already made, or
//     one the aggregate is already past, is ignored and counted; an event
//     that arrives before the one it depends on is refused with ErrEarly,
//     so it is retried.
//   - OrderCheck follows a per-aggregate sequence (written by
//     outboxwriter's Config.Sequence into a header) and says whether an
//     event is the next one, leaves a gap, or comes after a later one.
//   - FromKafka, FromAMQP, FromNATS and FromRedisStream read a Message (id,
//     aggregate, event type, sequence, value) from where the relay puts
//     each field for each broker, including the Kafka Connect converter
//     forms of a Debezium-compatible route.
//
// docs/consumers.md puts the pieces together: what the relay promises per
// broker, what the consumer must do, and what each piece costs.
package outboxconsumer
