package outboxcdc

import (
	"errors"
	"fmt"
	"testing"
)

func TestKeyErrorUnderAndClassification(t *testing.T) {
	e := KeyErrorf("dsn", "write user:pass@tcp(host:3306)/db", "not a valid DSN")
	if got := e.Under("source").Key; got != "source.dsn" {
		t.Errorf("Under: key %q", got)
	}
	if e.Key != "dsn" {
		t.Errorf("Under changed the original: %q", e.Key)
	}
	if got := KeyErrorf("[2]", "", "x").Under("headers").Key; got != "headers[2]" {
		t.Errorf("index under a section: %q", got)
	}
	if got := e.Error(); got != "dsn: not a valid DSN (write user:pass@tcp(host:3306)/db)" {
		t.Errorf("Error() = %q", got)
	}
	wrapped := fmt.Errorf("load: %w", e)
	var ke *KeyError
	if !errors.As(wrapped, &ke) || ke.Key != "dsn" {
		t.Fatalf("errors.As through a wrap: %v", wrapped)
	}
	if IsTransient(wrapped) || !IsClassified(wrapped) || Hint(wrapped) != e.Hint {
		t.Errorf("classification: transient %v classified %v hint %q", IsTransient(wrapped), IsClassified(wrapped), Hint(wrapped))
	}
	if Hint(Transient(e)) != e.Hint || !IsTransient(Transient(e)) {
		t.Error("an outer classification does not win, or hides the key's hint")
	}
}

func TestKeysUnderRewritesEveryJoinedKey(t *testing.T) {
	other := errors.New("client rejected the settings")
	err := KeysUnder("sink", errors.Join(
		KeyErrorf("url", "", "required"),
		KeysUnder("tls", errors.Join(KeyErrorf("enabled", "", "is false"))),
		other,
	))
	var keys []string
	for _, ke := range KeyErrors(err) {
		keys = append(keys, ke.Key)
	}
	if fmt.Sprint(keys) != "[sink.url sink.tls.enabled]" {
		t.Errorf("keys %v", keys)
	}
	if !errors.Is(err, other) {
		t.Error("an error without a key was lost")
	}
	if KeysUnder("x", nil) != nil {
		t.Error("nil is not nil")
	}
}
