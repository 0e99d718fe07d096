package sink

import (
	"crypto/hmac"
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"hash"
	"strconv"
	"strings"
)

// scramClient is the client side of SCRAM (RFC 5802) for SASL/SCRAM-SHA-256
// and SCRAM-SHA-512, as sarama.SCRAMClient: Begin, then Step with "" (the
// client-first message), with the server-first message (the client-final
// message with the proof), and with the server-final message, which it
// verifies before Done turns true. Channel binding is not offered ("n,,"),
// as Kafka does not support it. Like Kafka's own client, the password is
// used as its UTF-8 bytes, without SASLprep.
type scramClient struct {
	newHash func() hash.Hash

	user, password, authzID string
	nonce                   string // client nonce
	step                    int
	firstBare               string // client-first-message-bare
	serverSignature         []byte
	done                    bool
}

func newSCRAMClient(h func() hash.Hash) *scramClient { return &scramClient{newHash: h} }

// Begin implements sarama.SCRAMClient.
func (c *scramClient) Begin(user, password, authzID string) error {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		return err
	}
	*c = scramClient{newHash: c.newHash, user: user, password: password, authzID: authzID,
		nonce: base64.RawStdEncoding.EncodeToString(b)}
	return nil
}

// Step implements sarama.SCRAMClient.
func (c *scramClient) Step(challenge string) (string, error) {
	c.step++
	switch c.step {
	case 1:
		c.firstBare = "n=" + scramName(c.user) + ",r=" + c.nonce
		return c.gs2Header() + c.firstBare, nil
	case 2:
		return c.final(challenge)
	case 3:
		return "", c.verify(challenge)
	}
	return "", errors.New("scram: exchange already finished")
}

// Done implements sarama.SCRAMClient.
func (c *scramClient) Done() bool { return c.done }

func (c *scramClient) gs2Header() string {
	if c.authzID == "" {
		return "n,,"
	}
	return "n,a=" + scramName(c.authzID) + ","
}

// scramName escapes a user name as RFC 5802 saslname.
func scramName(s string) string {
	return strings.NewReplacer("=", "=3D", ",", "=2C").Replace(s)
}

// scramAttrs parses "k=v,k=v"; a value may itself contain "=".
func scramAttrs(msg string) map[byte]string {
	out := map[byte]string{}
	for _, part := range strings.Split(msg, ",") {
		if len(part) >= 2 && part[1] == '=' {
			out[part[0]] = part[2:]
		}
	}
	return out
}

func (c *scramClient) hmac(key []byte, msg string) []byte {
	m := hmac.New(c.newHash, key)
	m.Write([]byte(msg))
	return m.Sum(nil)
}

// final answers the server-first message "r=nonce,s=salt,i=iterations".
func (c *scramClient) final(serverFirst string) (string, error) {
	a := scramAttrs(serverFirst)
	if e, ok := a['e']; ok {
		return "", fmt.Errorf("scram: the server refused: %s", e)
	}
	if _, ok := a['m']; ok {
		return "", errors.New("scram: the server requires an extension this client does not know")
	}
	nonce, salt64, iter64 := a['r'], a['s'], a['i']
	if !strings.HasPrefix(nonce, c.nonce) || len(nonce) == len(c.nonce) {
		return "", errors.New("scram: the server's nonce does not extend the client's")
	}
	salt, err := base64.StdEncoding.DecodeString(salt64)
	if err != nil || len(salt) == 0 {
		return "", errors.New("scram: the server sent no valid salt")
	}
	iter, err := strconv.Atoi(iter64)
	if err != nil || iter < 1 {
		return "", fmt.Errorf("scram: the server sent an invalid iteration count %q", iter64)
	}
	// Kafka accepts 4096 to 16384 iterations; refuse absurd counts that
	// would stall the client.
	if iter > 1<<20 {
		return "", fmt.Errorf("scram: the server asks for %d iterations, too many", iter)
	}
	h := c.newHash()
	salted, err := pbkdf2.Key(c.newHash, c.password, salt, iter, h.Size())
	if err != nil {
		return "", fmt.Errorf("scram: %w", err)
	}
	clientKey := c.hmac(salted, "Client Key")
	h.Write(clientKey)
	storedKey := h.Sum(nil)
	withoutProof := "c=" + base64.StdEncoding.EncodeToString([]byte(c.gs2Header())) + ",r=" + nonce
	authMessage := c.firstBare + "," + serverFirst + "," + withoutProof
	proof := c.hmac(storedKey, authMessage)
	for i := range proof {
		proof[i] ^= clientKey[i]
	}
	c.serverSignature = c.hmac(c.hmac(salted, "Server Key"), authMessage)
	return withoutProof + ",p=" + base64.StdEncoding.EncodeToString(proof), nil
}

// verify checks the server-final message "v=signature": the server, too,
// must know the password's salted form.
func (c *scramClient) verify(serverFinal string) error {
	a := scramAttrs(serverFinal)
	if e, ok := a['e']; ok {
		return fmt.Errorf("scram: authentication failed: %s", e)
	}
	got, err := base64.StdEncoding.DecodeString(a['v'])
	if err != nil || subtle.ConstantTimeCompare(got, c.serverSignature) != 1 {
		return errors.New("scram: the server's signature does not match: it does not know this user's credentials")
	}
	c.done = true
	return nil
}
