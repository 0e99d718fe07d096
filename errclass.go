package outboxcdc

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"
)

// Error classification: every part of the connector decides at the place
// an error arises whether retrying can help, and says what the operator
// should do about it. Later code asks IsTransient and Hint; nothing
// classifies by matching error text.
//
// An error is transient when it, or an error it wraps, was marked with
// Transient and no error closer to the top of the chain was marked with
// Permanent. Unmarked errors are permanent: a connector that stops and says
// why is better than one that retries something forever in silence, so
// every network path marks its failures where it meets them (Network does
// the common part).
//
// This default is the one rule for every part, both sources included: the
// MySQL/MariaDB source (binlog/errors.go classifyConnErr) and the
// PostgreSQL source (wal/errors.go classify) mark the network's failures
// and the server errors that heal transient, the server errors that do
// not permanent with a remedy, and stop on anything left unmarked. It is
// the safe one for an operator: an unknown error halts the connector with
// its cause in the log, where a transient default would retry it for ever
// while the lag grows (TestUnmarkedErrorIsPermanent in binlog and wal).

// classified marks an error transient or permanent and may carry a hint.
type classified struct {
	err       error
	transient bool
	hint      string
}

func (e *classified) Error() string {
	if e.hint == "" {
		return e.err.Error()
	}
	return e.err.Error() + " (" + e.hint + ")"
}

func (e *classified) Unwrap() error { return e.err }

func (e *classified) classification() (transient bool, hint string, inner error) {
	return e.transient, e.hint, e.err
}

// classifier is an error that says whether it is transient, its remedy,
// and the error it classifies (nil when it is the cause itself).
type classifier interface {
	classification() (transient bool, hint string, inner error)
}

// Transient marks err as worth retrying: the same operation may succeed
// later (a broken connection, a server restarting, a lock timeout).
func Transient(err error) error {
	if err == nil {
		return nil
	}
	return &classified{err: err, transient: true}
}

// Permanent marks err as one retrying cannot fix, with the remedy the
// operator needs (hint may be empty). Error() is "err (hint)".
func Permanent(err error, hint string) error {
	if err == nil {
		return nil
	}
	return &classified{err: err, hint: hint}
}

// TransientHint is Transient with a remedy, for errors that heal by
// themselves but may need a hand (a slot held by another process).
func TransientHint(err error, hint string) error {
	if err == nil {
		return nil
	}
	return &classified{err: err, transient: true, hint: hint}
}

// IsTransient reports whether the outermost classification in err's chain
// says transient. Context cancellation is never transient.
func IsTransient(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) {
		return false
	}
	var c classifier
	if errors.As(err, &c) {
		transient, _, _ := c.classification()
		return transient
	}
	return false
}

// IsClassified reports whether err carries a classification.
func IsClassified(err error) bool {
	var c classifier
	return errors.As(err, &c)
}

// Hint returns the remedy of the outermost classified error in err's chain
// that has one, or "".
func Hint(err error) string {
	for err != nil {
		var c classifier
		if !errors.As(err, &c) {
			return ""
		}
		_, hint, inner := c.classification()
		if hint != "" {
			return hint
		}
		err = inner
	}
	return ""
}

// Cause returns err's text without the remedy Hint returns: the cause
// alone, for a log line that carries the remedy in a field of its own
// (LogError). The remedy is left out where the classification rendered it,
// " (hint)" after the text it classifies.
func Cause(err error) string {
	if err == nil {
		return ""
	}
	text := err.Error()
	if h := Hint(err); h != "" {
		text = strings.Replace(text, " ("+h+")", "", 1)
	}
	return text
}

// Network marks the failures of a network round trip as transient: a
// connection refused, reset or closed, an I/O timeout (a peer that went
// silent, packets dropped on the way), an unexpected EOF, a DNS failure.
// Other errors are returned unchanged for the caller to classify. It does
// not mark a context's own deadline or cancellation.
func Network(err error) error {
	if err == nil || IsClassified(err) || errors.Is(err, context.Canceled) {
		return err
	}
	if errors.Is(err, context.DeadlineExceeded) {
		// A deadline the caller set on a network call: the peer did not
		// answer in time.
		return Transient(err)
	}
	var ne net.Error
	var oe *net.OpError
	var de *net.DNSError
	switch {
	case errors.As(err, &oe), errors.As(err, &de), errors.As(err, &ne):
		return Transient(err)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE),
		errors.Is(err, syscall.ETIMEDOUT), errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return Transient(err)
	}
	return err
}
