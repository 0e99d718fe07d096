package rabbitmq

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
)

// Check is the preflight for `outbox-cdc check`: it connects with the
// sink's credentials, checks that the exchanges exist (or may be
// declared) with the configured type, and, where the broker's management
// API answers, that queues are bound to them. It declares and publishes
// nothing.
func Check(ctx context.Context, cfg Config) []outboxcdc.CheckResult {
	if err := cfg.Validate(); err != nil {
		return []outboxcdc.CheckResult{outboxcdc.Fail("rabbitmq.config", err.Error(), "fix the sink section")}
	}
	c, err := connect(ctx, cfg, nil)
	if err != nil {
		return []outboxcdc.CheckResult{outboxcdc.Fail("rabbitmq.reachable", err.Error(), fixOf(err,
			"check sink.url and that RabbitMQ is up and reachable from here"))}
	}
	defer c.Close()
	out := []outboxcdc.CheckResult{outboxcdc.Pass("rabbitmq.reachable",
		fmt.Sprintf("connected to %s (RabbitMQ %v)", outboxcdc.RedactDSN(cfg.URL), c.Properties["version"]))}
	names := []string{cfg.Exchange}
	if cfg.DeadLetterTopic != "" && cfg.dlqExchange() != cfg.Exchange {
		names = append(names, cfg.dlqExchange())
	}
	for _, name := range names {
		out = append(out, checkExchange(c, cfg, name))
	}
	out = append(out, checkBindings(ctx, cfg, names))
	return out
}

func fixOf(err error, otherwise string) string {
	if h := outboxcdc.Hint(err); h != "" {
		return h
	}
	return otherwise
}

// checkExchange declares name passively on a channel of its own.
func checkExchange(c *amqp.Connection, cfg Config, name string) outboxcdc.CheckResult {
	const check = "rabbitmq.exchange"
	ch, err := c.Channel()
	if err != nil {
		return outboxcdc.Fail(check, err.Error(), "check that the broker allows a channel")
	}
	defer ch.Close()
	err = ch.ExchangeDeclarePassive(name, cfg.ExchangeType, true, false, false, false, nil)
	var ae *amqp.Error
	switch {
	case err == nil:
		return outboxcdc.Pass(check, fmt.Sprintf("exchange %q exists", name))
	case errors.As(err, &ae) && ae.Code == amqp.NotFound && cfg.Declare:
		return outboxcdc.Pass(check, fmt.Sprintf("exchange %q does not exist yet; sink.declare creates it (%s, durable)", name, cfg.ExchangeType))
	case errors.As(err, &ae) && ae.Code == amqp.NotFound:
		return outboxcdc.Fail(check, fmt.Sprintf("exchange %q does not exist", name),
			"declare it (durable) with the type your queues expect, or set sink.declare: true")
	case errors.As(err, &ae) && ae.Code == amqp.AccessRefused:
		return outboxcdc.Fail(check, fmt.Sprintf("exchange %q: %v", name, err), "grant the user write permission on the exchange")
	}
	return outboxcdc.Fail(check, fmt.Sprintf("exchange %q: %v", name, err), "check the exchange's settings")
}

// bindingsFix is how to settle bindings the check could not see.
const bindingsFix = "make sure the consumers' queues are bound to the exchange before starting (rabbitmqctl list_bindings), " +
	"or enable the management plugin on port 15672 for the user so that check can see them"

// checkBindings asks the management API (http on port 15672 of the AMQP
// host, same credentials) how many bindings have each exchange as their
// source. AMQP itself cannot list bindings; without the API the check
// says so with a warning: an unroutable record stops the connector (mandatory
// flag) instead of being dropped.
func checkBindings(ctx context.Context, cfg Config, names []string) outboxcdc.CheckResult {
	const check = "rabbitmq.bindings"
	_, u, err := cfg.dialURL()
	if err != nil {
		return outboxcdc.Fail(check, err.Error(), "fix sink.url")
	}
	vhost := strings.TrimPrefix(u.Path, "/")
	if vhost == "" {
		vhost = "/"
	}
	user, pass := "guest", "guest"
	if u.User != nil {
		user = u.User.Username()
		pass, _ = u.User.Password()
	}
	var details []string
	for _, name := range names {
		api := fmt.Sprintf("http://%s/api/exchanges/%s/%s/bindings/source",
			net.JoinHostPort(u.Hostname(), "15672"), url.PathEscape(vhost), url.PathEscape(name))
		rctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		req, _ := http.NewRequestWithContext(rctx, http.MethodGet, api, nil)
		req.SetBasicAuth(user, pass)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			cancel()
			return outboxcdc.Warn(check, "bindings not checked: the management API does not answer on port 15672 "+
				"(AMQP cannot list bindings); a record no queue is bound for stops the connector (mandatory flag), nothing is dropped", bindingsFix)
		}
		var bindings []struct {
			Destination string `json:"destination"`
			RoutingKey  string `json:"routing_key"`
		}
		err = json.NewDecoder(resp.Body).Decode(&bindings)
		resp.Body.Close()
		cancel()
		if resp.StatusCode != http.StatusOK || err != nil {
			return outboxcdc.Warn(check, fmt.Sprintf("bindings not checked: the management API answered %s "+
				"(AMQP cannot list bindings); a record no queue is bound for stops the connector (mandatory flag), nothing is dropped", resp.Status), bindingsFix)
		}
		if len(bindings) == 0 {
			return outboxcdc.Fail(check, fmt.Sprintf("no queue is bound to exchange %q: every record would be unroutable", name),
				"bind the consumers' queues to the exchange before starting")
		}
		keys := make([]string, 0, min(len(bindings), 5))
		for _, b := range bindings[:min(len(bindings), 5)] {
			keys = append(keys, fmt.Sprintf("%s (%q)", b.Destination, b.RoutingKey))
		}
		details = append(details, fmt.Sprintf("exchange %q: %d binding(s): %s", name, len(bindings), strings.Join(keys, ", ")))
	}
	return outboxcdc.Pass(check, strings.Join(details, "; "))
}
