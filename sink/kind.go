package sink

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
)

// Env is what a sink's configuration takes from the rest of the
// connector's configuration; the command fills it in, it is no key under
// sink:.
type Env struct {
	// Connector is the connector's name.
	Connector string
	// Template is route.topic, placeholders left in ("" when unset).
	Template string
	// DeadLetterTopic is pipeline.dlq_topic when dead letters are on,
	// else "".
	DeadLetterTopic string
	// Fixed are the destinations known before any row: the route
	// template (placeholders left in) and the dead-letter topic.
	Fixed []string
}

// Kind is a sink.type as the command sees it, implemented by the sink
// package's configuration struct (value receivers). The command registers
// the type's name, where its keys decode to and its destination noun
// beside it (cmd/outbox-cdc/sinks.go), and derives validation, opening
// and `check` from these methods, so that a new sink is its package plus
// that one line. The methods are called from the command's goroutine.
type Kind interface {
	// With returns a copy of the configuration completed with what env
	// says; Validate, Open and Check are called on that copy.
	With(env Env) Kind
	// Validate checks the sink's keys; messages name the key under sink.
	Validate() error
	// Open returns the sink. It must not wait for the broker (Ready says
	// when it is reached). Metrics go on reg (nil registers none).
	Open(log zerolog.Logger, reg prometheus.Registerer) (outboxcdc.Sink, error)
	// Check connects and reports what `outbox-cdc check` shows for the
	// sink; env.Fixed names the destinations to look for.
	Check(ctx context.Context, env Env) []outboxcdc.CheckResult
}

// Opened is a sink constructor's result as Kind.Open returns it: no
// typed nil inside the interface when the constructor failed.
func Opened[S outboxcdc.Sink](s S, err error) (outboxcdc.Sink, error) {
	if err != nil {
		return nil, err
	}
	return s, nil
}
