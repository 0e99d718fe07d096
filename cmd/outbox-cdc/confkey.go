package main

import (
	"errors"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
)

// sectionError turns the error of a section's Validate into a *configError.
// Packages name keys relative to their section (*outboxcdc.KeyError);
// section goes in front of each with KeysUnder, never by editing the text.
// Joined errors become one *configError with the others in also, in order.
// Errors without a key keep their text.
func sectionError(section string, err error) error {
	if err == nil {
		return nil
	}
	var all []*configError
	for _, e := range leaves(outboxcdc.KeysUnder(section, err)) {
		var ke *outboxcdc.KeyError
		if errors.As(e, &ke) {
			all = append(all, &configError{Key: ke.Key, Msg: ke.Msg, Hint: ke.Hint})
		} else {
			all = append(all, &configError{Msg: e.Error()})
		}
	}
	first := all[0]
	first.also = all[1:]
	return first
}

// leaves flattens errors.Join trees.
func leaves(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, leaves(e)...)
		}
		return out
	}
	if err == nil {
		return nil
	}
	return []error{err}
}

// withLines gives every *configError in err the line of its key in the
// file at path, when the key is written there (not defaulted, not from the
// environment).
func withLines(err error, root *yaml.Node, path string) error {
	var ce *configError
	if !errors.As(err, &ce) {
		return err
	}
	for _, e := range append([]*configError{ce}, ce.also...) {
		if e.Key == "" || e.Line > 0 {
			continue
		}
		if line := keyLine(root, e.Key); line > 0 {
			e.Line, e.File = line, path
		}
	}
	return err
}

// keyLine returns the line of key in the document root, 0 when the file
// does not set it. Keys are dotted paths whose parts may end in [n] (an
// item of a list) or ["name"] (an entry of a mapping whose names hold
// dots, as route.tables["shop.orders"].topic).
func keyLine(root *yaml.Node, key string) int {
	n := root
	if n == nil || n.Kind == yaml.DocumentNode {
		if n == nil || len(n.Content) == 0 {
			return 0
		}
		n = n.Content[0]
	}
	line := 0
	for rest := key; rest != ""; {
		var step string
		switch {
		case strings.HasPrefix(rest, "."):
			rest = rest[1:]
			continue
		case strings.HasPrefix(rest, `["`):
			end := strings.Index(rest, `"]`)
			if end < 0 {
				return 0
			}
			s, err := strconv.Unquote(rest[1 : end+1])
			if err != nil {
				return 0
			}
			step, rest = s, rest[end+2:]
		case strings.HasPrefix(rest, "["):
			end := strings.IndexByte(rest, ']')
			i, err := strconv.Atoi(rest[1:max(end, 1)])
			if end < 0 || err != nil || n.Kind != yaml.SequenceNode || i < 0 || i >= len(n.Content) {
				return 0
			}
			n, line, rest = n.Content[i], n.Content[i].Line, rest[end+1:]
			continue
		default:
			end := strings.IndexAny(rest, ".[")
			if end < 0 {
				end = len(rest)
			}
			step, rest = rest[:end], rest[end:]
		}
		if n.Kind != yaml.MappingNode {
			return 0
		}
		found := false
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == step {
				line, n, found = n.Content[i].Line, n.Content[i+1], true
			}
		}
		if !found {
			return 0
		}
	}
	return line
}
