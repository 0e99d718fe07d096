package kafka

import (
	"context"
	"fmt"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// scramClient gives sarama (sarama.SCRAMClient) the SCRAM-SHA-256/512
// client of franz-go (pkg/sasl/scram), the maintained implementation the
// progress reader already authenticates with: one SCRAM implementation for
// both Kafka clients, none of our own. It verifies the server's final
// signature, so a server that does not know the credentials is refused.
type scramClient struct {
	sha512 bool
	nonce  []byte // raw client nonce, for tests; empty: random

	sess  sasl.Session
	first []byte // client-first message, until Step("") takes it
	done  bool
}

var _ sarama.SCRAMClient = (*scramClient)(nil)

// Begin starts an exchange (sarama calls it once per authentication).
func (c *scramClient) Begin(user, password, authzID string) error {
	a := scram.Auth{User: user, Pass: password, Zid: authzID, Nonce: c.nonce}
	mech := a.AsSha256Mechanism()
	if c.sha512 {
		mech = a.AsSha512Mechanism()
	}
	sess, first, err := mech.Authenticate(context.Background(), "")
	if err != nil {
		return fmt.Errorf("scram: %w", err)
	}
	c.sess, c.first, c.done = sess, first, false
	return nil
}

// Step answers the server's last message: "" for the client-first
// message, then the server-first message (answered with the proof), then
// the server-final message (verified; Done turns true).
func (c *scramClient) Step(challenge string) (string, error) {
	if c.first != nil {
		first := c.first
		c.first = nil
		return string(first), nil
	}
	done, out, err := c.sess.Challenge([]byte(challenge))
	if err != nil {
		return "", fmt.Errorf("scram: %w", err)
	}
	c.done = done
	return string(out), nil
}

// Done reports whether the server's signature was verified.
func (c *scramClient) Done() bool { return c.done }
