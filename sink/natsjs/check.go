package natsjs

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
)

// Check is the preflight for `outbox-cdc check`: it connects with the
// sink's credentials, checks that JetStream answers and that the stream
// exists (or will be created) and captures the subjects the route and the
// dead-letter policy publish to. It creates and publishes nothing.
func Check(ctx context.Context, cfg Config) []outboxcdc.CheckResult {
	if err := cfg.Validate(); err != nil {
		return []outboxcdc.CheckResult{outboxcdc.Fail("nats.config", err.Error(), "fix the sink section")}
	}
	nc, err := connect(ctx, cfg, nil, nil)
	if err != nil {
		return []outboxcdc.CheckResult{outboxcdc.Fail("nats.reachable", err.Error(), fixOf(err,
			"check sink.url and that the NATS server is up and reachable from here"))}
	}
	defer nc.Close()
	out := []outboxcdc.CheckResult{outboxcdc.Pass("nats.reachable",
		fmt.Sprintf("connected to %s (server %s, max_payload %d bytes)", nc.ConnectedUrlRedacted(), nc.ConnectedServerVersion(), nc.MaxPayload()))}
	js, err := jetstream.New(nc)
	if err == nil {
		_, err = js.AccountInfo(ctx)
	}
	if err != nil {
		return append(out, outboxcdc.Fail("nats.jetstream", err.Error(), "enable JetStream on the server (-js) and for the account"))
	}
	out = append(out, outboxcdc.Pass("nats.jetstream", "JetStream answers"))

	template := cfg.Template
	if template == "" {
		template = DefaultTopic
	}
	want := []string{SubjectsOf(template)}
	if cfg.DeadLetterTopic != "" {
		want = append(want, cfg.DeadLetterTopic)
	}
	st, err := js.Stream(ctx, cfg.Stream)
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound) && cfg.CreateStream:
		return append(out, outboxcdc.Pass("nats.stream", fmt.Sprintf("stream %q does not exist yet; sink.create_stream creates it with subjects %v, duplicate window %s",
			cfg.Stream, cfg.subjects(), cfg.DuplicateWindow)))
	case errors.Is(err, jetstream.ErrStreamNotFound):
		return append(out, outboxcdc.Fail("nats.stream", fmt.Sprintf("stream %q does not exist", cfg.Stream),
			fmt.Sprintf("create it with subjects capturing %s, or set sink.create_stream: true", strings.Join(want, " and "))))
	case err != nil:
		return append(out, outboxcdc.Fail("nats.stream", err.Error(), "check that the user may read stream info"))
	}
	sc := st.CachedInfo().Config
	var missing []string
	for _, w := range want {
		if !covered(sc.Subjects, w) {
			missing = append(missing, w)
		}
	}
	if len(missing) > 0 {
		return append(out, outboxcdc.Fail("nats.stream", fmt.Sprintf("stream %q (subjects %v) does not capture %s",
			cfg.Stream, sc.Subjects, strings.Join(missing, ", ")),
			"add subject filters to the stream, or change route.topic / pipeline.dlq_topic; a record no stream captures stops the connector"))
	}
	return append(out, outboxcdc.Pass("nats.stream", fmt.Sprintf("stream %q captures %s; duplicate window %s (a record sent again within it is not stored twice)",
		cfg.Stream, strings.Join(want, " and "), sc.Duplicates)))
}

func fixOf(err error, otherwise string) string {
	if h := outboxcdc.Hint(err); h != "" {
		return h
	}
	return otherwise
}

// covered reports whether one of the stream's filters captures every
// subject the filter want stands for.
func covered(filters []string, want string) bool {
	for _, f := range filters {
		if covers(f, want) {
			return true
		}
	}
	return false
}

// covers: a filter token '>' captures the rest, '*' any one token (not a
// wider '>'), a literal only itself.
func covers(filter, want string) bool {
	f, w := strings.Split(filter, "."), strings.Split(want, ".")
	for i, t := range f {
		switch {
		case t == ">":
			return len(w) > i
		case i >= len(w), w[i] == ">", t != "*" && t != w[i]:
			return false
		}
	}
	return len(f) == len(w)
}
