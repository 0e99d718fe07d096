package outboxcdc

import (
	"errors"
	"fmt"
	"strings"
)

// KeyError is a configuration value that cannot be used. Each package's
// Validate names Key relative to its own section ("dsn", "tls.mode",
// "headers[2]"); whoever assembles the sections puts the section in front
// with Under, so the key text is built once and never patched by matching
// strings. A KeyError is permanent: no retry fixes a configuration.
type KeyError struct {
	Key  string // dotted path, relative to the section that checked it
	Msg  string // what is wrong with the value, without the key
	Hint string // the remedy, or ""
}

// KeyErrorf returns a *KeyError about key with a remedy (hint may be
// empty) and a message formatted as by fmt.Sprintf.
func KeyErrorf(key, hint, format string, args ...any) *KeyError {
	return &KeyError{Key: key, Msg: fmt.Sprintf(format, args...), Hint: hint}
}

func (e *KeyError) Error() string {
	var b strings.Builder
	if e.Key != "" {
		b.WriteString(e.Key)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	if e.Hint != "" {
		b.WriteString(" (")
		b.WriteString(e.Hint)
		b.WriteString(")")
	}
	return b.String()
}

// Under returns a copy of e whose Key sits under section: "dsn" under
// "source" is "source.dsn", "[2]" under "headers" is "headers[2]".
func (e *KeyError) Under(section string) *KeyError {
	c := *e
	c.Key = joinKey(section, e.Key)
	return &c
}

func joinKey(section, key string) string {
	switch {
	case section == "":
		return key
	case key == "":
		return section
	case strings.HasPrefix(key, "["):
		return section + key
	}
	return section + "." + key
}

// classification makes a KeyError permanent, with its hint (see errclass.go).
func (e *KeyError) classification() (transient bool, hint string, inner error) {
	return false, e.Hint, nil
}

// KeysUnder puts section in front of the key of every *KeyError in err: err
// itself, or the errors it joins (errors.Join). Other errors, and errors
// that wrap a KeyError with text of their own, are returned unchanged.
func KeysUnder(section string, err error) error {
	if ke, ok := err.(*KeyError); ok {
		return ke.Under(section)
	}
	j, ok := err.(interface{ Unwrap() []error })
	if !ok {
		return err
	}
	var out []error
	for _, e := range j.Unwrap() {
		out = append(out, KeysUnder(section, e))
	}
	return errors.Join(out...)
}

// KeyErrors returns the *KeyError values in err, in order: err's own
// (found by errors.As) or, for joined errors, each joined error's.
func KeyErrors(err error) []*KeyError {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []*KeyError
		for _, e := range j.Unwrap() {
			out = append(out, KeyErrors(e)...)
		}
		return out
	}
	var ke *KeyError
	if errors.As(err, &ke) {
		return []*KeyError{ke}
	}
	return nil
}
