package testenv

import (
	"net"
	"net/url"
	"os"
	"testing"
	"time"
)

// Environment variables that point tests at the message brokers beyond
// Kafka; the defaults are the local services.
const (
	EnvRabbitMQURL = "OUTBOX_CDC_TEST_RABBITMQ_URL"
	EnvNATSURL     = "OUTBOX_CDC_TEST_NATS_URL"
	EnvRedisURL    = "OUTBOX_CDC_TEST_REDIS_URL"

	DefaultRabbitMQURL = "amqp://guest:guest@127.0.0.1:5672/"
	DefaultNATSURL     = "nats://127.0.0.1:4222"
	DefaultRedisURL    = "redis://127.0.0.1:6379/0"
)

// RabbitMQURL returns the AMQP URL of a reachable RabbitMQ, or skips (fails
// in CI) the test.
func RabbitMQURL(t testing.TB) string {
	return brokerURL(t, "RabbitMQ", EnvRabbitMQURL, DefaultRabbitMQURL)
}

// NATSURL returns the URL of a reachable NATS server with JetStream.
func NATSURL(t testing.TB) string { return brokerURL(t, "NATS", EnvNATSURL, DefaultNATSURL) }

// RedisURL returns the URL of a reachable Redis.
func RedisURL(t testing.TB) string { return brokerURL(t, "Redis", EnvRedisURL, DefaultRedisURL) }

// brokerURL returns the URL from env (else def) once its host answers a
// TCP connect.
func brokerURL(t testing.TB, what, env, def string) string {
	t.Helper()
	raw := os.Getenv(env)
	if raw == "" {
		raw = def
	}
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatalf("%s: %v", env, err)
	}
	c, err := net.DialTimeout("tcp", u.Host, 2*time.Second)
	if err != nil {
		Unavailable(t, "%s at %s: %v", what, u.Host, err)
		return ""
	}
	c.Close()
	return raw
}

// WithHost returns raw with its host:port replaced (to point a client at
// a Proxy in front of the broker).
func WithHost(t testing.TB, raw, hostport string) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	u.Host = hostport
	return u.String()
}

// HostOf returns raw's host:port.
func HostOf(t testing.TB, raw string) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u.Host
}
