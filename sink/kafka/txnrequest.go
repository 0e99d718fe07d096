package kafka

import (
	"errors"
	"fmt"
	"time"

	"github.com/IBM/sarama"
)

// The exactly-once sink speaks the transaction protocol to the
// coordinator itself (InitProducerId with the transactional id,
// AddPartitionsToTxn before a partition's first batch in a transaction,
// EndTxn), and sends its records with the same produce requests as the
// at-least-once sink (direct.go), marked transactional. What sarama's
// transactional producer did per message (a chain of goroutines, the
// transaction manager consulted for every record) is done once per
// partition and per request.

// txnState is the transaction part of a transactional producer's
// idempotence. Used by the writing goroutine only.
type txnState struct {
	id    string
	added map[topicPartition]bool // partitions added to the open transaction
}

// coordinatorCall sends a request to the transaction coordinator with
// call, which returns the answer's error code (or the connection's error).
// While the coordinator moves, loads, or still finishes an earlier
// transaction (CONCURRENT_TRANSACTIONS), the request is sent again up to
// Transaction.Retry.Max times, Transaction.Retry.Backoff apart; so is one
// whose connection failed when retryConn is set (a request whose effect
// is unknown after a lost answer, such as a commit, is not).
func coordinatorCall(client sarama.Client, tid string, retryConn bool, call func(*sarama.Broker) (sarama.KError, error)) error {
	sc := client.Config()
	var last error
	for n := 0; n <= sc.Producer.Transaction.Retry.Max; n++ {
		if n > 0 {
			time.Sleep(sc.Producer.Transaction.Retry.Backoff)
		}
		b, err := client.TransactionCoordinator(tid)
		if err != nil {
			last = err
			_ = client.RefreshTransactionCoordinator(tid)
			continue
		}
		code, err := call(b)
		if err != nil {
			_ = b.Close()
			_ = client.RefreshTransactionCoordinator(tid)
			if !retryConn {
				return err
			}
			last = err
			continue
		}
		switch code {
		case sarama.ErrNoError:
			return nil
		case sarama.ErrConsumerCoordinatorNotAvailable, sarama.ErrNotCoordinatorForConsumer:
			_ = client.RefreshTransactionCoordinator(tid)
			last = code
		case sarama.ErrOffsetsLoadInProgress, sarama.ErrConcurrentTransactions:
			last = code
		default:
			return code
		}
	}
	return last
}

// txnVersion is the request version of InitProducerId, AddPartitionsToTxn
// and EndTxn for the configured Kafka version (2.5 or later, checked by
// NewTransactional), as sarama's own transaction manager chooses them.
func txnVersion(v sarama.KafkaVersion, init bool) int16 {
	switch {
	case init && v.IsAtLeast(sarama.V2_7_0_0):
		return 4
	case init:
		return 3
	case v.IsAtLeast(sarama.V2_8_0_0):
		return 3
	case v.IsAtLeast(sarama.V2_7_0_0):
		return 2
	default:
		return 1
	}
}

// initTransactional gets the transactional id's producer id and a new
// epoch from its coordinator. That fences every older producer with the
// id and aborts the transaction it left open.
func initTransactional(client sarama.Client, tid string, timeout time.Duration) (*idempotence, error) {
	sc := client.Config()
	req := &sarama.InitProducerIDRequest{
		Version:            txnVersion(sc.Version, true),
		TransactionalID:    &tid,
		TransactionTimeout: timeout,
		ProducerID:         -1,
		ProducerEpoch:      -1,
	}
	var res *sarama.InitProducerIDResponse
	err := coordinatorCall(client, tid, true, func(b *sarama.Broker) (sarama.KError, error) {
		r, err := b.InitProducerID(req)
		if err != nil {
			return 0, err
		}
		res = r
		return r.Err, nil
	})
	if err != nil {
		return nil, err
	}
	return &idempotence{id: res.ProducerID, epoch: res.ProducerEpoch, seq: map[topicPartition]int32{},
		txn: &txnState{id: tid, added: map[topicPartition]bool{}}}, nil
}

// partitionError is an AddPartitionsToTxn failure of one partition.
type partitionError struct {
	tp  topicPartition
	err sarama.KError
}

func (e *partitionError) Error() string {
	return fmt.Sprintf("adding topic %q partition %d to the transaction: %v", e.tp.topic, e.tp.partition, e.err)
}

func (e *partitionError) Unwrap() error { return e.err }

// addPartitions adds the partitions of works that are not in the open
// transaction yet. A partition's own failure is a *partitionError.
func addPartitions(c *producer, works []*brokerWork) error {
	st := c.idem.txn
	req := &sarama.AddPartitionsToTxnRequest{
		Version:         txnVersion(c.client.Config().Version, false),
		TransactionalID: st.id,
		ProducerID:      c.idem.id,
		ProducerEpoch:   c.idem.epoch,
		TopicPartitions: map[string][]int32{},
	}
	var tps []topicPartition
	for _, w := range works {
		for _, round := range w.rounds {
			for _, b := range round {
				if !st.added[b.tp] {
					st.added[b.tp] = true // once per request
					tps = append(tps, b.tp)
					req.TopicPartitions[b.tp.topic] = append(req.TopicPartitions[b.tp.topic], b.tp.partition)
				}
			}
		}
	}
	if len(tps) == 0 {
		return nil
	}
	var failed *partitionError
	err := coordinatorCall(c.client, st.id, true, func(b *sarama.Broker) (sarama.KError, error) {
		res, err := b.AddPartitionsToTxn(req)
		if err != nil {
			return 0, err
		}
		failed = nil
		worst := sarama.ErrNoError
		for topic, parts := range res.Errors {
			for _, pe := range parts {
				if errors.Is(pe.Err, sarama.ErrNoError) {
					continue
				}
				// Coordinator and ordering codes are retried whole;
				// others name their partition.
				switch pe.Err {
				case sarama.ErrConsumerCoordinatorNotAvailable, sarama.ErrNotCoordinatorForConsumer,
					sarama.ErrOffsetsLoadInProgress, sarama.ErrConcurrentTransactions:
					worst = pe.Err
					continue
				case sarama.ErrOperationNotAttempted:
					continue // another partition's failure stopped it
				}
				if failed == nil {
					failed = &partitionError{tp: topicPartition{topic, pe.Partition}, err: pe.Err}
				}
			}
		}
		if failed != nil {
			return sarama.ErrNoError, nil
		}
		return worst, nil
	})
	if err == nil && failed != nil {
		err = failed
	}
	if err != nil {
		for _, tp := range tps {
			delete(st.added, tp)
		}
	}
	return err
}

// endTxn commits or aborts the open transaction. A lost answer is not
// retried: the caller learns the outcome another way.
func endTxn(c *producer, commit bool) error {
	st := c.idem.txn
	if len(st.added) == 0 {
		return nil // nothing was produced: there is no transaction to end
	}
	req := &sarama.EndTxnRequest{
		Version:           txnVersion(c.client.Config().Version, false),
		TransactionalID:   st.id,
		ProducerID:        c.idem.id,
		ProducerEpoch:     c.idem.epoch,
		TransactionResult: commit,
	}
	err := coordinatorCall(c.client, st.id, false, func(b *sarama.Broker) (sarama.KError, error) {
		res, err := b.EndTxn(req)
		if err != nil {
			return 0, err
		}
		return res.Err, nil
	})
	if err == nil {
		clear(st.added)
	}
	return err
}
