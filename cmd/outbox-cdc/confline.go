package main

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// yaml reports a value of the wrong type as
// "line 5: cannot unmarshal !!int `5` into time.Duration".
var yamlTypeMsg = regexp.MustCompile("^line (\\d+): cannot unmarshal !!(\\w+) `(.*)` into (.+)$")

// typeError turns the first of a yaml type error's messages into a
// configuration error naming the key at that line, the value and the form
// the key expects. It returns nil when err is not a type error.
func typeError(prefix string, n *yaml.Node, err error) *configError {
	var te *yaml.TypeError
	if !errors.As(err, &te) || len(te.Errors) == 0 {
		return nil
	}
	m := yamlTypeMsg.FindStringSubmatch(te.Errors[0])
	if m == nil {
		return &configError{Msg: te.Errors[0]}
	}
	line, _ := strconv.Atoi(m[1])
	tag, value, goType := m[2], m[3], m[4]
	what, hint := expectedForm(goType, tag, value)
	return &configError{
		Key:  keyAtLine(n, line, prefix),
		Line: line,
		Msg:  fmt.Sprintf("%s is not %s", describeValue(tag, value), what),
		Hint: hint,
	}
}

func describeValue(tag, value string) string {
	switch tag {
	case "map":
		return "a mapping"
	case "seq":
		return "a list"
	}
	return strconv.Quote(value)
}

// expectedForm names what a Go type takes in the file, and how to write it.
func expectedForm(goType, tag, value string) (what, hint string) {
	switch {
	case goType == "time.Duration":
		hint = `write a number with a unit: "500ms", "5s", "2m", "1h"`
		if _, err := strconv.Atoi(value); err == nil && tag == "int" {
			hint = fmt.Sprintf("write it with a unit, as %q", value+"s")
		}
		return "a duration", hint
	case goType == "bool":
		return "true or false", ""
	case strings.HasPrefix(goType, "int") || strings.HasPrefix(goType, "uint"):
		return "a whole number", ""
	case strings.HasPrefix(goType, "float"):
		return "a number", ""
	case goType == "string":
		return "text", `quote it: key: "value"`
	case strings.HasPrefix(goType, "[]"):
		return "a list", `write [a, b] or one item per "- " line`
	case strings.HasPrefix(goType, "map[") || strings.Contains(goType, "."):
		return "a section of keys", "indent its keys below it"
	}
	return goType, ""
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
