package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/rs/zerolog"
)

// stopOnSignals returns a context that ends at the first SIGINT or
// SIGTERM: the connectors then stop reading, deliver and checkpoint what
// they received, bounded by pipeline.shutdown_timeout. A second signal
// during that drain calls exit(1) at once, for an operator (or an
// orchestrator) that will not wait: what was not checkpointed is read and
// sent again at the next start, as after a crash. stop unregisters the
// signals.
func stopOnSignals(log zerolog.Logger, exit func(int)) (ctx context.Context, stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		select {
		case s := <-sigs:
			log.Info().Str("signal", signalName(s)).Msg("stopping: delivering and checkpointing what was received; a second signal exits at once")
			cancel()
		case <-done:
			return
		}
		select {
		case s := <-sigs:
			log.Error().Str("signal", signalName(s)).Msg("second signal during the stop: exiting at once with status 1 without finishing the drain; the next start sends again what was not checkpointed")
			exit(1)
		case <-done:
		}
	}()
	return ctx, func() {
		signal.Stop(sigs)
		close(done)
		cancel()
	}
}

func signalName(s os.Signal) string {
	switch s {
	case syscall.SIGINT:
		return "SIGINT"
	case syscall.SIGTERM:
		return "SIGTERM"
	}
	return s.String()
}
