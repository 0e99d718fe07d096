package main

import (
	"bytes"
	stdlog "log"
	"sync"

	mysqldriver "github.com/go-sql-driver/mysql"
	"github.com/rs/zerolog"

	"github.com/outbox-cdc/outbox-cdc/binlog"
)

// routeLibraryLogs sends the log lines libraries write on their own
// through log: go-sql-driver's messages (every MySQL connection of the
// process: source, checkpoint table, HA lock, lifecycle) and the standard
// library's log package (net/http's server errors, log/slog's default), so
// that with log.format json every line the process writes is JSON. The
// binlog source also passes its own loggers to the drivers it opens
// (binlog/driverlog.go).
//
// The drivers' loggers are process-wide and read without a lock, so they are
// set once, by the first process run (tests run several in one binary,
// whose connectors may be parsing DSNs meanwhile).
func routeLibraryLogs(log zerolog.Logger) {
	libLogsOnce.Do(func() {
		mysqldriver.SetLogger(binlog.SQLDriverLogger(log))
		stdlog.SetFlags(0)
		stdlog.SetOutput(lineLogger{log.With().Str("component", "stdlog").Logger()})
	})
}

var libLogsOnce sync.Once

// lineLogger writes each line it is given as one warning.
type lineLogger struct{ log zerolog.Logger }

func (l lineLogger) Write(p []byte) (int, error) {
	for _, line := range bytes.Split(bytes.TrimRight(p, "\n"), []byte("\n")) {
		if len(bytes.TrimSpace(line)) > 0 {
			l.log.Warn().Msg(string(line))
		}
	}
	return len(p), nil
}
