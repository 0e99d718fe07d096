package main

import (
	"reflect"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// The configuration's keys are the yaml names of the structs' fields. One
// walk turns the structs into keys for the loader (keysOf), the reference
// (docs/configuration.md) and config print (toNode), so the three cannot
// disagree about which keys exist.

// yamlKey is how field f appears in the file: its key name, whether its
// fields sit directly in the enclosing mapping (",inline"), and whether it
// is no key at all ("-" or unexported).
func yamlKey(f reflect.StructField) (name string, inline, skip bool) {
	if !f.IsExported() {
		return "", false, true
	}
	name, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
	if name == "-" {
		return "", false, true
	}
	if strings.Contains(opts, "inline") {
		return "", true, false
	}
	if name == "" {
		name = strings.ToLower(f.Name)
	}
	return name, false, false
}

// section reports whether a field of type t is a mapping of further keys
// rather than a value.
func section(t reflect.Type) bool {
	return t.Kind() == reflect.Struct && t != reflect.TypeOf(time.Time{}) && t != reflect.TypeOf(yaml.Node{})
}

// configKey is one key met by walkConfig.
type configKey struct {
	Path  string              // dotted path, "source.reconnect.min"
	Owner reflect.Type        // the struct that declares the field
	Field reflect.StructField // the field
	Value reflect.Value       // its value in the walked struct
}

// walkConfig calls visit for every key of struct value v under prefix, in
// field order, sections before their keys.
func walkConfig(v reflect.Value, prefix string, visit func(configKey)) {
	for v.Kind() == reflect.Pointer {
		if v.IsNil() {
			v = reflect.New(v.Type().Elem())
		}
		v = v.Elem()
	}
	t := v.Type()
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, inline, skip := yamlKey(f)
		if skip {
			continue
		}
		if inline {
			walkConfig(v.Field(i), prefix, visit)
			continue
		}
		path := name
		if prefix != "" {
			path = prefix + "." + name
		}
		visit(configKey{Path: path, Owner: t, Field: f, Value: v.Field(i)})
		if section(f.Type) {
			walkConfig(v.Field(i), path, visit)
		}
	}
}
