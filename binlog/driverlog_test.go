package binlog

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/outbox-cdc/outbox-cdc/test/testenv"
)

// TestReplicationLoggerUniqueKeys: slog lets a line carry a key twice
// (from WithAttrs and the record, or the record alone) and use the names
// of the logger's own fields; every line written is still one JSON object
// with unique keys, nothing dropped but the configuration.
func TestReplicationLoggerUniqueKeys(t *testing.T) {
	var buf bytes.Buffer
	base := zerolog.New(&buf).With().Str("connector", "c").Timestamp().Logger()
	l := replicationLogger(base, nil).With(slog.String("error", "from WithAttrs"), slog.String("component", "library's"))
	l.Error("kill connection", slog.Any("error", errors.New("from the record")), slog.Int64("id", 7), slog.Int64("id", 8),
		slog.String("time", "library's"), slog.Group("g", slog.Int("a", 1), slog.Int("a", 2)))
	line := buf.String()
	if err := testenv.CheckJSONLines(strings.NewReader(line)); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"error":"from WithAttrs"`, `"error_2":"from the record"`, `"id":7`, `"id_2":8`,
		`"component":"binlog-driver"`, `"component_2":"library's"`, `"time_2":"library's"`, `"g.a":1`, `"g.a_2":2`} {
		if !strings.Contains(line, want) {
			t.Errorf("line lacks %s: %s", want, line)
		}
	}
}
