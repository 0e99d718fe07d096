package httpsink

import (
	"context"
	"fmt"
	"net/http"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
)

// Check is the preflight for `outbox-cdc check`: it validates the section
// (the secret and certificate files included) and sends a HEAD request to
// the probe URL (sink.probe_url, else the scheme and host of route.topic);
// any answer below 500 passes, as the receiver is there. It posts nothing.
func Check(ctx context.Context, cfg Config) []outboxcdc.CheckResult {
	if err := cfg.Validate(); err != nil {
		return []outboxcdc.CheckResult{outboxcdc.Fail("http.config", err.Error(), "fix the sink section and route.topic")}
	}
	var out []outboxcdc.CheckResult
	if cfg.SigningSecretFile != "" {
		out = append(out, outboxcdc.Pass("http.signing", "requests are signed (Standard Webhooks v1, HMAC-SHA256)"))
	}
	u := cfg.probeURL()
	if u == "" {
		return append(out, outboxcdc.Pass("http.reachable", "the receiver's host depends on the row; set sink.probe_url to check one"))
	}
	tc, err := cfg.tlsConfig()
	if err != nil {
		return append(out, outboxcdc.Fail("http.config", err.Error(), "fix sink.tls"))
	}
	c := cfg.client(tc)
	defer c.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(ctx, cfg.DialTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodHead, u, nil)
	if err != nil {
		return append(out, outboxcdc.Fail("http.reachable", err.Error(), "fix sink.probe_url"))
	}
	(&Sink{cfg: cfg}).setStatic(req)
	resp, err := c.Do(req)
	if err != nil {
		err = classifyNet(err)
		fix := outboxcdc.Hint(err)
		if fix == "" {
			fix = "check route.topic (or sink.probe_url) and that the receiver is up and reachable from here"
		}
		return append(out, outboxcdc.Fail("http.reachable", fmt.Sprintf("HEAD %s: %v", redactURL(u), err), fix))
	}
	resp.Body.Close()
	if resp.StatusCode >= 500 {
		return append(out, outboxcdc.Fail("http.reachable", fmt.Sprintf("HEAD %s answered %s", redactURL(u), resp.Status),
			"the receiver is failing; its logs say why"))
	}
	return append(out, outboxcdc.Pass("http.reachable", fmt.Sprintf("HEAD %s answered %s", redactURL(u), resp.Status)))
}
