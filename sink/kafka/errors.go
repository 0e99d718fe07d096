package kafka

import (
	"errors"
	"fmt"

	"github.com/IBM/sarama"
	outboxcdc "github.com/outbox-cdc/outbox-cdc"
	"github.com/outbox-cdc/outbox-cdc/sink"
)

// Error is a record the Kafka sink could not deliver. Write returns it (for
// the first failed record) only when it is permanent; retryable failures are
// retried inside Write and show up only in logs, metrics and, when ctx ends
// first, in the message of the error Write then returns.
type Error struct {
	// Index is the record's position in the slice passed to Write, so the
	// caller can name the source row (message id, position); -1 when the
	// failure concerns no record (the producer could not start, the sink
	// is closed).
	Index int
	Topic string
	// Partition is -1 when the record failed before a partition was chosen
	// (no metadata for the topic, record rejected by the client).
	Partition int32
	// Err is the cause: a sarama.KError for errors the broker answered (see
	// Code), otherwise the client's error.
	Err error
	// Permanent says that sending the same record again cannot succeed
	// (record too large, invalid topic, not authorized, ...).
	Permanent bool
	// Others are the indexes of further records of the Write that failed
	// permanently in the same way (every record for a blocked topic).
	Others []int
}

func (e *Error) Error() string {
	kind := "retryable"
	if e.Permanent {
		kind = "permanent"
	}
	if e.Index < 0 {
		return fmt.Sprintf("kafka: %s error: %v", kind, e.Err)
	}
	where := fmt.Sprintf("topic %q partition %d", e.Topic, e.Partition)
	if e.Partition < 0 {
		where = fmt.Sprintf("topic %q (no partition chosen)", e.Topic)
	}
	if code, ok := Code(e.Err); ok {
		return fmt.Sprintf("kafka: %s error producing record %d to %s: kafka error code %d: %v",
			kind, e.Index, where, int16(code), e.Err)
	}
	return fmt.Sprintf("kafka: %s error producing record %d to %s: %v", kind, e.Index, where, e.Err)
}

// Unwrap returns the cause classified (outboxcdc.Transient, or
// outboxcdc.Permanent with the remedy as hint), so outboxcdc.IsTransient
// and outboxcdc.Hint answer for the Kafka sinks as for the other sinks;
// errors.Is and errors.As still reach the cause.
func (e *Error) Unwrap() error {
	if e.Err == nil || outboxcdc.IsClassified(e.Err) {
		return e.Err
	}
	if !e.Permanent {
		return outboxcdc.Transient(e.Err)
	}
	return outboxcdc.Permanent(e.Err, hint(e.Topic, e.Err))
}

// hint is the remedy for a permanent produce failure, by Kafka error code
// where it has one.
func hint(topic string, err error) string {
	var blocked *TopicBlockedError
	switch {
	case errors.As(err, &blocked):
		return blockedHint(blocked.Topic, blocked.Err)
	case errors.Is(err, sarama.ErrMessageSizeTooLarge), errors.Is(err, sarama.ErrInvalidMessageSize):
		return "raise sink.max_message_bytes and the topic's max.message.bytes, or set pipeline.on_error: dlq"
	case errors.Is(err, sarama.ErrTopicAuthorizationFailed), errors.Is(err, sarama.ErrClusterAuthorizationFailed):
		return blockedHint(topic, err)
	case errors.Is(err, sarama.ErrInvalidTopic):
		return "fix route.topic: Kafka topic names allow only [a-zA-Z0-9._-], up to 249 characters"
	case errors.Is(err, sarama.ErrTransactionalIDAuthorizationFailed):
		return "grant the connector's principal WRITE and DESCRIBE on its transactional id"
	}
	return ""
}

// FailedRecord implements outboxcdc.RecordError, so the pipeline can name
// the row and, with on_error: dlq, divert just this record.
func (e *Error) FailedRecord() (index int, permanent bool) { return e.Index, e.Permanent }

// FailedRecords implements outboxcdc.RecordsError: Index and Others.
func (e *Error) FailedRecords() []int {
	if e.Index < 0 {
		return nil
	}
	return append([]int{e.Index}, e.Others...)
}

var _ outboxcdc.RecordsError = (*Error)(nil)

// IsPermanent reports whether err is (or wraps) a sink Error that retrying
// cannot fix. Context errors are not permanent.
func IsPermanent(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Permanent
}

// Code returns the Kafka protocol error code in err, if err carries one.
func Code(err error) (sarama.KError, bool) {
	var k sarama.KError
	if errors.As(err, &k) {
		return k, true
	}
	return 0, false
}

// retryableCodes are the Kafka error codes that a later attempt can get past:
// the Java client's RetriableException family for produce, plus the
// idempotence errors that a fresh producer id clears (the sink starts a new
// producer after every failed attempt, see Kafka.Write).
//
// A transactional mode must not reuse this table as is: there
// INVALID_PRODUCER_EPOCH (47) and PRODUCER_FENCED (90) mean another instance
// took over, which is fatal.
var retryableCodes = map[sarama.KError]bool{
	sarama.ErrInvalidMessage:                  true, // 2 CORRUPT_MESSAGE: Java retries it
	sarama.ErrUnknownTopicOrPartition:         true, // 3: may be being created
	sarama.ErrLeaderNotAvailable:              true, // 5
	sarama.ErrNotLeaderForPartition:           true, // 6
	sarama.ErrRequestTimedOut:                 true, // 7
	sarama.ErrBrokerNotAvailable:              true, // 8
	sarama.ErrReplicaNotAvailable:             true, // 9
	sarama.ErrNetworkException:                true, // 13
	sarama.ErrOffsetsLoadInProgress:           true, // 14
	sarama.ErrConsumerCoordinatorNotAvailable: true, // 15
	sarama.ErrNotCoordinatorForConsumer:       true, // 16
	sarama.ErrNotEnoughReplicas:               true, // 19
	sarama.ErrNotEnoughReplicasAfterAppend:    true, // 20
	sarama.ErrOutOfOrderSequenceNumber:        true, // 45: new producer id
	sarama.ErrInvalidProducerEpoch:            true, // 47: new producer id (idempotent only)
	sarama.ErrInvalidProducerIDMapping:        true, // 49: new producer id
	sarama.ErrConcurrentTransactions:          true, // 51
	sarama.ErrKafkaStorageError:               true, // 56
	sarama.ErrUnknownProducerID:               true, // 59: new producer id
	sarama.ErrFencedLeaderEpoch:               true, // 74
	sarama.ErrUnknownLeaderEpoch:              true, // 75
	sarama.ErrOffsetNotAvailable:              true, // 78
	sarama.ErrPreferredLeaderNotAvailable:     true, // 80
	sarama.ErrThrottlingQuotaExceeded:         true, // 89
}

// permanent classifies a produce failure. Broker answers are classified by
// code: the codes above are retryable and every other one (MESSAGE_TOO_LARGE,
// INVALID_TOPIC_EXCEPTION, TOPIC_AUTHORIZATION_FAILED, INVALID_RECORD,
// POLICY_VIOLATION, UNKNOWN_SERVER_ERROR, ...) is permanent. Errors raised by
// the client itself are permanent when they concern the record or the
// configuration (record larger than max_message_bytes, encoding failure,
// producer closed); everything else (connection refused, broker gone, no
// metadata, circuit breaker open) is a connectivity problem and retryable.
func permanent(err error) bool {
	if code, ok := Code(err); ok {
		return !retryableCodes[code]
	}
	var cfgErr sarama.ConfigurationError
	var encErr sarama.PacketEncodingError
	switch {
	case errors.As(err, &cfgErr), errors.As(err, &encErr):
		return true
	case errors.Is(err, sarama.ErrShuttingDown), errors.Is(err, sarama.ErrClosedClient),
		errors.Is(err, sarama.ErrInvalidPartition), errors.Is(err, sink.ErrClosed):
		return true
	}
	return false
}
