package main

import (
	"fmt"
	"reflect"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"
)

// This file turns a YAML document plus OUTBOX_CDC_* environment variables
// into typed configuration structs, strictly: every key must name a field,
// and a wrong one gets a did-you-mean hint.

// configError is a configuration mistake: the process exits 2. Key is
// the dotted key it is about ("" when it concerns none), Line the key's
// line in the file (0 when the value came from elsewhere), Hint the remedy.
// In a connectors: list Key starts with the entry (connectors[1].delivery)
// and Connector holds the entry's name.
type configError struct {
	File      string // the configuration file, when the mistake is in it
	Key       string
	Connector string // the name of the connectors: entry the mistake is in
	Line      int
	Msg       string
	Hint      string
	also      []*configError // further mistakes found by the same check, one line each
}

func (e *configError) Error() string {
	var b strings.Builder
	if e.File != "" {
		b.WriteString(e.File)
		b.WriteString(": ")
	}
	if e.Key != "" {
		b.WriteString(e.Key)
		switch {
		case e.Connector != "" && e.Line > 0:
			fmt.Fprintf(&b, " (connector %q, line %d)", e.Connector, e.Line)
		case e.Connector != "":
			fmt.Fprintf(&b, " (connector %q)", e.Connector)
		case e.Line > 0:
			fmt.Fprintf(&b, " (line %d)", e.Line)
		}
		b.WriteString(": ")
	} else if e.Line > 0 {
		fmt.Fprintf(&b, "line %d: ", e.Line)
	}
	b.WriteString(e.Msg)
	if e.Hint != "" {
		b.WriteString("; ")
		b.WriteString(e.Hint)
	}
	for _, a := range e.also {
		b.WriteString("\n")
		b.WriteString(a.Error())
	}
	return b.String()
}

// configErrorf is a mistake that concerns no single key.
func configErrorf(format string, args ...any) error {
	return &configError{Msg: fmt.Sprintf(format, args...)}
}

// keyErrorf is a mistake in the value of key.
func keyErrorf(key, format string, args ...any) *configError {
	return &configError{Key: key, Msg: fmt.Sprintf(format, args...)}
}

// keySet is every valid dotted key path of a config struct, with the Go type
// of each leaf.
type keySet map[string]reflect.Type

// keysOf collects the yaml key paths of struct type t under prefix.
func keysOf(t reflect.Type, prefix string, into keySet) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	walkConfig(reflect.New(t).Elem(), prefix, func(k configKey) { into[k.Path] = k.Field.Type })
}

// fileSuffix marks a key whose value is read from a file: source.dsn_file
// (OUTBOX_CDC_SOURCE_DSN_FILE) holds the path of a file containing
// source.dsn, for Kubernetes and Docker secrets.
const fileSuffix = "_file"

// withFileKeys adds path_file for every string (and string list) key. A
// key that already ends in _file holds a path (source.tls.ca_file) and
// gets none.
func withFileKeys(keys keySet) {
	for p, t := range keys {
		if strings.HasSuffix(p, fileSuffix) {
			continue
		}
		if t.Kind() == reflect.String || (t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.String) {
			if _, clash := keys[p+fileSuffix]; !clash {
				keys[p+fileSuffix] = reflect.TypeOf("")
			}
		}
	}
}

// resolveFileKeys replaces every key_file entry by key with the content of
// the named file (trailing newlines trimmed; for lists, comma-separated).
// readFile is os.ReadFile outside tests.
func resolveFileKeys(n *yaml.Node, prefix string, keys keySet, readFile func(string) ([]byte, error)) error {
	if n.Kind == yaml.DocumentNode {
		if len(n.Content) == 0 {
			return nil
		}
		return resolveFileKeys(n.Content[0], prefix, keys, readFile)
	}
	if n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		path := k.Value
		if prefix != "" {
			path = prefix + "." + k.Value
		}
		base, isFile := strings.CutSuffix(k.Value, fileSuffix)
		basePath, _ := strings.CutSuffix(path, fileSuffix)
		t, known := keys[basePath]
		if !isFile || !known || v.Kind != yaml.ScalarNode {
			if err := resolveFileKeys(v, path, keys, readFile); err != nil {
				return err
			}
			continue
		}
		for j := 0; j+1 < len(n.Content); j += 2 {
			if n.Content[j].Value == base {
				return &configError{Key: path, Line: k.Line, Msg: basePath + " and " + path + " are both set", Hint: "set one"}
			}
		}
		raw, err := readFile(v.Value)
		if err != nil {
			return &configError{Key: path, Line: k.Line, Msg: err.Error()}
		}
		val := strings.TrimRight(string(raw), "\r\n")
		leaf := &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: val}
		if t.Kind() == reflect.Slice {
			leaf = &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
			for _, item := range strings.Split(val, ",") {
				if item = strings.TrimSpace(item); item != "" {
					leaf.Content = append(leaf.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: item})
				}
			}
		}
		k.Value, n.Content[i+1] = base, leaf
	}
	return nil
}

// checkKeys walks a mapping node and reports the first key not in keys.
func checkKeys(n *yaml.Node, prefix string, keys keySet) error {
	if n.Kind == yaml.DocumentNode && len(n.Content) > 0 {
		return checkKeys(n.Content[0], prefix, keys)
	}
	if n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		path := k.Value
		if prefix != "" {
			path = prefix + "." + k.Value
		}
		t, ok := keys[path]
		if !ok {
			return &configError{Key: path, Line: k.Line, Msg: fmt.Sprintf("unknown configuration key %q%s", path, didYouMean(path, keys))}
		}
		if t.Kind() == reflect.Struct {
			if err := checkKeys(v, path, keys); err != nil {
				return err
			}
		}
		if t.Kind() == reflect.Map && t.Elem().Kind() == reflect.Struct && v.Kind == yaml.MappingNode {
			// route.tables: every entry's keys are the element struct's.
			sub := keySet{}
			keysOf(t.Elem(), "", sub)
			for j := 0; j+1 < len(v.Content); j += 2 {
				if err := checkKeys(v.Content[j+1], "", sub); err != nil {
					return configErrorf("%s[%q]: %v", path, v.Content[j].Value, err)
				}
			}
		}
	}
	return nil
}

func didYouMean(path string, keys keySet) string {
	names := make([]string, 0, len(keys))
	for k := range keys {
		names = append(names, k)
	}
	best := closest(path, names, 3)
	if best == "" {
		// Same leaf name under another section?
		leaf := path[strings.LastIndex(path, ".")+1:]
		var cands []string
		for k := range keys {
			if strings.HasSuffix(k, "."+leaf) || k == leaf {
				cands = append(cands, k)
			}
		}
		sort.Strings(cands)
		if len(cands) > 0 {
			return fmt.Sprintf(" (did you mean %s?)", strings.Join(cands, " or "))
		}
		return ""
	}
	return fmt.Sprintf(" (did you mean %q?)", best)
}

// closest returns the candidate nearest to word, within maxD edits (the
// first in order among equally near ones), or "".
func closest(word string, cands []string, maxD int) string {
	best, bestD := "", maxD+1
	for _, c := range cands {
		if d := editDistance(word, c); d < bestD || (d == bestD && c < best) {
			best, bestD = c, d
		}
	}
	return best
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// envName is the environment variable that overrides a key path:
// source.server_id -> OUTBOX_CDC_SOURCE_SERVER_ID.
func envName(path string) string {
	return "OUTBOX_CDC_" + strings.ToUpper(strings.ReplaceAll(path, ".", "_"))
}

// applyEnv sets every key path that has an environment variable in env onto
// the document root (creating sections as needed). Lists take
// comma-separated values. It returns the variables it used.
func applyEnv(root *yaml.Node, keys keySet, env map[string]string) ([]string, error) {
	if root.Kind == 0 {
		root.Kind = yaml.DocumentNode
	}
	if len(root.Content) == 0 {
		root.Content = []*yaml.Node{{Kind: yaml.MappingNode, Tag: "!!map"}}
	}
	doc := root.Content[0]
	if doc.Kind != yaml.MappingNode {
		return nil, configErrorf("the configuration must be a YAML mapping")
	}
	paths := make([]string, 0, len(keys))
	for p := range keys {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	var used []string
	for _, p := range paths {
		t := keys[p]
		if t.Kind() == reflect.Struct {
			continue
		}
		name := envName(p)
		val, ok := env[name]
		if !ok {
			continue
		}
		leaf := &yaml.Node{Kind: yaml.ScalarNode, Value: val}
		if t.Kind() == reflect.Slice && t.Elem().Kind() != reflect.Uint8 {
			leaf = &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
			for _, item := range strings.Split(val, ",") {
				if item = strings.TrimSpace(item); item != "" {
					leaf.Content = append(leaf.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: item})
				}
			}
		} else if t.Kind() == reflect.String {
			leaf.Tag = "!!str" // "0123" stays a string
		}
		setPath(doc, strings.Split(p, "."), leaf)
		// The environment overrides the file, also across key and key_file.
		if base, ok := strings.CutSuffix(p, fileSuffix); ok {
			deletePath(doc, strings.Split(base, "."))
		} else {
			deletePath(doc, strings.Split(p+fileSuffix, "."))
		}
		used = append(used, name)
	}
	return used, nil
}

func setPath(m *yaml.Node, parts []string, leaf *yaml.Node) {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == parts[0] {
			if len(parts) == 1 {
				m.Content[i+1] = leaf
				return
			}
			if m.Content[i+1].Kind != yaml.MappingNode {
				m.Content[i+1] = &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
			}
			setPath(m.Content[i+1], parts[1:], leaf)
			return
		}
	}
	key := &yaml.Node{Kind: yaml.ScalarNode, Value: parts[0]}
	if len(parts) == 1 {
		m.Content = append(m.Content, key, leaf)
		return
	}
	sub := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
	m.Content = append(m.Content, key, sub)
	setPath(sub, parts[1:], leaf)
}

// deletePath removes the key at a dotted path, if present.
func deletePath(m *yaml.Node, parts []string) {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value != parts[0] {
			continue
		}
		if len(parts) == 1 {
			m.Content = append(m.Content[:i], m.Content[i+2:]...)
		} else if m.Content[i+1].Kind == yaml.MappingNode {
			deletePath(m.Content[i+1], parts[1:])
		}
		return
	}
}

// lookup returns the node at a dotted path, or nil.
func lookup(n *yaml.Node, path string) *yaml.Node {
	if n.Kind == yaml.DocumentNode {
		if len(n.Content) == 0 {
			return nil
		}
		n = n.Content[0]
	}
	for _, part := range strings.Split(path, ".") {
		if n.Kind != yaml.MappingNode {
			return nil
		}
		var next *yaml.Node
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == part {
				next = n.Content[i+1]
			}
		}
		if next == nil {
			return nil
		}
		n = next
	}
	return n
}

// decode decodes node into out (whose keys checkKeys has already checked)
// and turns yaml's type errors into configuration errors.
func decode(n *yaml.Node, out any) error {
	if n == nil {
		return nil
	}
	return decodeAt("", n, out)
}

// decodeAt decodes n, whose keys sit under prefix; a value of the wrong
// type is reported by its key and line (see typeErrors).
func decodeAt(prefix string, n *yaml.Node, out any) error {
	if err := n.Decode(out); err != nil {
		if ce := typeError(prefix, n, err); ce != nil {
			return ce
		}
		return configErrorf("invalid configuration: %v", err)
	}
	return nil
}
