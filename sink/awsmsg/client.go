package awsmsg

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/aws/smithy-go"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
	"github.com/outbox-cdc/outbox-cdc/deadpeer"
	"github.com/outbox-cdc/outbox-cdc/sink"
	"github.com/outbox-cdc/outbox-cdc/tlsconf"
)

// HTTPClient returns the HTTP client of one connection: its sockets are
// kept in socks (nil: not kept), so that giving the connection up resets
// them. The SDK client built on it must have aws.NopRetryer: the sink
// retries (package broker), not the SDK.
func HTTPClient(cfg Config, socks *sink.Sockets) *http.Client {
	d := deadpeer.HTTP.Dialer(cfg.DialTimeout)
	tr := &http.Transport{
		Proxy:               http.ProxyFromEnvironment,
		TLSHandshakeTimeout: cfg.DialTimeout,
		MaxIdleConnsPerHost: 4,
		IdleConnTimeout:     90 * time.Second,
		ForceAttemptHTTP2:   true,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := d.DialContext(ctx, network, addr)
			if err != nil || socks == nil {
				return c, err
			}
			return socks.Track(c), nil
		},
	}
	return &http.Client{Transport: tr}
}

// authCodes are the API error codes of credentials AWS refuses.
var authCodes = map[string]bool{
	"InvalidClientTokenId": true, "SignatureDoesNotMatch": true, "UnrecognizedClientException": true,
	"ExpiredToken": true, "IncompleteSignature": true, "MissingAuthenticationToken": true, "InvalidSecurity": true,
	"AccessDenied": true, "AccessDeniedException": true, "KMS.AccessDeniedException": true,
	"AuthorizationError": true, "KMSAccessDenied": true,
}

// TransientCodes are the API error codes worth sending again.
var TransientCodes = map[string]bool{
	"RequestThrottled": true, "ThrottlingException": true, "Throttling": true, "Throttled": true,
	"ServiceUnavailable": true, "InternalError": true, "InternalFailure": true, "RequestTimeout": true,
	"KmsThrottled": true, "KMS.ThrottlingException": true, "KMSThrottling": true, "OverLimit": true,
}

// IsAuth reports whether code is an error code of refused credentials or
// permissions.
func IsAuth(code string) bool { return authCodes[code] }

// Service names an AWS service for messages and classification.
type Service struct {
	// Name prefixes errors: "sqs", "sns".
	Name string
	// AuthHint is the remedy of refused credentials.
	AuthHint string
	// Missing are the error codes of a destination that does not exist,
	// MissingHint their remedy.
	Missing     map[string]bool
	MissingHint string
}

// Classify marks a failed call: API errors by their code (the service's
// own classification: a server fault is transient), everything else
// through outboxcdc.Network.
func (s *Service) Classify(err error) error {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		code := ae.ErrorCode()
		switch {
		case authCodes[code]:
			return sink.NoRecord(outboxcdc.Permanent(err, s.AuthHint))
		case s.Missing[code]:
			return outboxcdc.Permanent(err, s.MissingHint)
		case TransientCodes[code] || ae.ErrorFault() == smithy.FaultServer:
			return outboxcdc.Transient(err)
		}
		return outboxcdc.Permanent(err, "")
	}
	if tlsconf.IsCertificateError(err) {
		return sink.NoRecord(outboxcdc.Permanent(err, "check sink.endpoint and the system's CA certificates"))
	}
	if n := outboxcdc.Network(err); outboxcdc.IsClassified(n) {
		return n
	}
	return outboxcdc.Transient(err)
}

// Conn is the shared state of one client connection: its sockets and its
// first failure. A sink's connection embeds it.
type Conn struct {
	Svc        *Service
	AckTimeout time.Duration
	Socks      *sink.Sockets
	fault      sink.Fault // the connection's first failure
}

// Err implements sink.Conn.
func (c *Conn) Err() error { return c.fault.Err() }

// Close gives the connection up: its sockets are reset.
func (c *Conn) Close() error {
	c.fault.Fail(outboxcdc.Transient(fmt.Errorf("%s client closed by the sink", c.Svc.Name)))
	c.Socks.Abort()
	return nil
}

// Call runs one request with sink.ack_timeout. A transport failure (no
// answer) gives the connection up; an answer from the service does not.
func Call[T any](ctx context.Context, c *Conn, f func(context.Context) (T, error)) (T, error) {
	cctx, cancel := context.WithTimeout(ctx, c.AckTimeout)
	defer cancel()
	out, err := f(cctx)
	if err == nil || ctx.Err() != nil {
		return out, err
	}
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return out, c.Svc.Classify(fmt.Errorf("%s: %w", c.Svc.Name, err))
	}
	if cctx.Err() != nil {
		err = fmt.Errorf("no answer within sink.ack_timeout (%s): %w", c.AckTimeout, err)
	}
	return out, c.fault.Fail(c.Svc.Classify(fmt.Errorf("%s: %w", c.Svc.Name, err)))
}

// Answered reports whether a probe's err still proves the service
// answers and knows the credentials: a refusal for want of permission
// does, refused credentials do not.
func Answered(err error) bool {
	var ae smithy.APIError
	return errors.As(err, &ae) && (!authCodes[ae.ErrorCode()] || strings.Contains(ae.ErrorCode(), "AccessDenied") ||
		ae.ErrorCode() == "AuthorizationError")
}

// ProbeErr is a probe's outcome from the error of its request: nil when
// the service answered (Answered), the error otherwise.
func ProbeErr(ctx context.Context, err error) error {
	if err == nil || ctx.Err() != nil || !Answered(err) {
		return err
	}
	return nil
}
