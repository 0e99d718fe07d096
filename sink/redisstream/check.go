package redisstream

import (
	"context"
	"fmt"
	"strings"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
)

// Check is the preflight for `outbox-cdc check`: it connects with the
// sink's credentials and, for each stream key that does not depend on a
// row (a template without placeholders, the dead-letter key), checks that
// the key is a stream or free, and, where the server has ACL DRYRUN
// (Redis 7), that the user may XADD to it. It writes nothing.
func Check(ctx context.Context, cfg Config, keys ...string) []outboxcdc.CheckResult {
	if err := cfg.Validate(); err != nil {
		return []outboxcdc.CheckResult{outboxcdc.Fail("redis.config", err.Error(), "fix the sink section")}
	}
	c, err := connect(ctx, cfg, nil)
	if err != nil {
		fix := outboxcdc.Hint(err)
		if fix == "" {
			fix = "check sink.url and that Redis is up and reachable from here"
		}
		return []outboxcdc.CheckResult{outboxcdc.Fail("redis.reachable", err.Error(), fix)}
	}
	defer c.Close()
	version := "?"
	if info, err := c.Info(ctx, "server").Result(); err == nil {
		for _, line := range strings.Split(info, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
				version = v
			}
		}
	}
	out := []outboxcdc.CheckResult{outboxcdc.Pass("redis.reachable", fmt.Sprintf("connected to %s (Redis %s)", outboxcdc.RedactDSN(cfg.URL), version))}
	user := cfg.Username
	if user == "" {
		user, _ = c.Do(ctx, "ACL", "WHOAMI").Text()
	}
	for _, key := range keys {
		if strings.Contains(key, "{") {
			out = append(out, outboxcdc.Pass("redis.stream", fmt.Sprintf("keys %q depend on the row; a key holding another type is a permanent error when written", key)))
			continue
		}
		typ, err := c.Type(ctx, key).Result()
		if err != nil {
			out = append(out, outboxcdc.Fail("redis.stream", fmt.Sprintf("TYPE %s: %v", key, err), "check that the user may read the key's type"))
			continue
		}
		if typ != "stream" && typ != "none" {
			out = append(out, outboxcdc.Fail("redis.stream", fmt.Sprintf("key %q holds a %s, not a stream", key, typ),
				"change route.topic (or pipeline.dlq_topic), or remove the key"))
			continue
		}
		detail := fmt.Sprintf("key %q is a stream", key)
		if typ == "none" {
			detail = fmt.Sprintf("key %q does not exist yet; the first XADD creates the stream", key)
		}
		if user != "" {
			// ACL DRYRUN answers OK, or says in words why the user may not.
			res, err := c.Do(ctx, "ACL", "DRYRUN", user, "XADD", key, "*", "f", "v").Text()
			switch {
			case err != nil:
				// Redis 6 has no DRYRUN, or the user may not run it: unchecked.
			case res == "OK":
				detail += "; user " + user + " may XADD to it"
			default:
				out = append(out, outboxcdc.Fail("redis.stream", fmt.Sprintf("user %s may not XADD to %q: %s", user, key, res),
					"grant the user +xadd on the key pattern"))
				continue
			}
		}
		out = append(out, outboxcdc.Pass("redis.stream", detail))
	}
	return out
}
