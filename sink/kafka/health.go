package kafka

import (
	"fmt"
	"sync/atomic"
	"time"
)

// stallWatch reports a write whose records got no answer for longer than
// after: a broker path that went silent (a cut network delivers neither
// data nor a reset) is then shown by Ready within that bound, while
// sarama's own read deadlines end the attempt.
type stallWatch struct {
	after    time.Duration
	last     *atomic.Int64
	t        *time.Ticker
	reported bool
}

func newStallWatch(after time.Duration, last *atomic.Int64) *stallWatch {
	return &stallWatch{after: after, last: last, t: time.NewTicker(min(after/4, time.Second))}
}

func (w *stallWatch) tick() <-chan time.Time { return w.t.C }
func (w *stallWatch) stop()                  { w.t.Stop() }

// check returns an error (once) when no answer came for longer than after.
func (w *stallWatch) check() error {
	silent := time.Since(time.Unix(0, w.last.Load()))
	if silent < w.after || w.reported {
		return nil
	}
	w.reported = true
	return fmt.Errorf("records in flight got no answer from the brokers for %s (more than produce_timeout + 10s): the network path may be cut", silent.Round(time.Second))
}
