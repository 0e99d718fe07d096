package main

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

var yamlLine = regexp.MustCompile(`^line (\d+): `)

// keysAtLines turns the "line N: cannot unmarshal ..." messages of a yaml
// type error into the key paths at those lines, as " (key: a.b, c)", so
// that a value of the wrong type is reported by its key. It returns "" when
// it finds none.
func keysAtLines(prefix string, n *yaml.Node, err error) string {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		return ""
	}
	var keys []string
	for _, msg := range te.Errors {
		m := yamlLine.FindStringSubmatch(msg)
		if m == nil {
			continue
		}
		line, _ := strconv.Atoi(m[1])
		if k := keyAtLine(n, line, prefix); k != "" {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return ""
	}
	return fmt.Sprintf(" (key: %s)", strings.Join(keys, ", "))
}

// keyAtLine returns the path of the innermost mapping key whose value
// starts at line.
func keyAtLine(n *yaml.Node, line int, path string) string {
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			if k := keyAtLine(c, line, path); k != "" {
				return k
			}
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			key, val := n.Content[i], n.Content[i+1]
			p := key.Value
			if path != "" {
				p = path + "." + p
			}
			if k := keyAtLine(val, line, p); k != "" {
				return k
			}
			if val.Line == line || key.Line == line {
				return p
			}
		}
	case yaml.SequenceNode:
		for _, c := range n.Content {
			if c.Line == line {
				return path
			}
		}
	}
	return ""
}
