package main

import (
	"fmt"
	"io"
	"reflect"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
)

// printConfig writes the effective configuration (defaults, then the file,
// then the environment) as YAML, with secrets redacted, in the shape the
// file takes: the chosen source's keys directly under source:.
func printConfig(w io.Writer, cfg Config) error {
	return printConfigPlaced(w, cfg, nil)
}

// printConfigPlaced is printConfig with the process's placement: section
// (when not nil) at the end, so that the output still loads.
func printConfigPlaced(w io.Writer, cfg Config, plc *PlacementConfig) error {
	root := toNode(reflect.ValueOf(cfg))
	if plc != nil {
		root.Content = append(root.Content, scalar("placement"), toNode(reflect.ValueOf(*plc)))
	}
	src := toNode(reflect.ValueOf(cfg.source().config(&cfg.Source)).Elem())
	src.Content = append([]*yaml.Node{scalar("type"), scalar(cfg.Source.Type)}, src.Content...)
	for i := 0; i+1 < len(root.Content); i += 2 {
		if root.Content[i].Value == "source" {
			root.Content[i+1] = src
		}
		if k := sinkKinds[cfg.Sink.Type]; root.Content[i].Value == "sink" && k.config != nil {
			snk := toNode(reflect.ValueOf(k.config(&cfg.Sink)).Elem())
			snk.Content = append([]*yaml.Node{scalar("type"), scalar(cfg.Sink.Type)}, snk.Content...)
			root.Content[i+1] = snk
		}
	}
	redactNode(root, "")
	markDerived(root, cfg)
	if _, err := fmt.Fprintln(w, "# effective configuration (secrets redacted; \"# derived:\" marks what an empty or zero key becomes)"); err != nil {
		return err
	}
	enc := yaml.NewEncoder(w)
	enc.SetIndent(2)
	if err := enc.Encode(root); err != nil {
		return err
	}
	return enc.Close()
}

// markDerived notes, beside each key left empty (or 0) for the connector
// to derive, the value it will actually use: the MySQL server_id, the
// Postgres slot and publication, the Kafka transactional id, the
// dead-letter topic, and the headers route.preset adds. Comments keep the
// output a configuration that loads back to the same one.
func markDerived(root *yaml.Node, cfg Config) {
	doc := &yaml.Node{Kind: yaml.DocumentNode, Content: []*yaml.Node{root}}
	note := func(path, text string) {
		if n := lookup(doc, path); n != nil {
			n.LineComment = "derived: " + text
		}
	}
	for _, d := range cfg.source().derived(cfg) { // sources.go
		note(d.key, d.value)
	}
	if cfg.Sink.Type == "kafka" && cfg.Sink.TransactionalID == "" {
		id := cfg.Sink.TxnConfig.WithName(cfg.Name).TransactionalID
		if cfg.Delivery != deliveryExactlyOnce {
			id += " (used with delivery: exactly-once)"
		}
		note("sink.transactional_id", id)
	}
	if cfg.Pipeline.DLQTopic == "" {
		note("pipeline.dlq_topic", outboxcdc.DefaultDeadLetterTopic(cfg.Name)+" (used with on_error: dlq)")
	}
	if h, err := cfg.Route.PresetHeaders(); err == nil {
		note("route.preset", "headers "+strings.Join(h, ", "))
	}
}

func scalar(s string) *yaml.Node { return &yaml.Node{Kind: yaml.ScalarNode, Value: s} }

var durationType = reflect.TypeOf(time.Duration(0))

// toNode renders a config value as a YAML node in field order, following
// the yaml tags (inline, "-") and writing durations as "1s", not nanoseconds.
func toNode(v reflect.Value) *yaml.Node {
	for v.Kind() == reflect.Pointer || v.Kind() == reflect.Interface {
		if v.IsNil() {
			return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null", Value: "null"}
		}
		v = v.Elem()
	}
	switch {
	case v.Type() == durationType:
		return scalar(time.Duration(v.Int()).String())
	case v.Kind() == reflect.Struct:
		m := &yaml.Node{Kind: yaml.MappingNode}
		t := v.Type()
		for i := 0; i < t.NumField(); i++ {
			name, inline, skip := yamlKey(t.Field(i))
			if skip {
				continue
			}
			if inline {
				m.Content = append(m.Content, toNode(v.Field(i)).Content...)
				continue
			}
			m.Content = append(m.Content, scalar(name), toNode(v.Field(i)))
		}
		return m
	case v.Kind() == reflect.Slice || v.Kind() == reflect.Array:
		s := &yaml.Node{Kind: yaml.SequenceNode, Style: yaml.FlowStyle}
		for i := 0; i < v.Len(); i++ {
			s.Content = append(s.Content, toNode(v.Index(i)))
		}
		return s
	case v.Kind() == reflect.Map:
		m := &yaml.Node{Kind: yaml.MappingNode}
		iter := v.MapRange()
		for iter.Next() {
			m.Content = append(m.Content, scalar(fmt.Sprint(iter.Key().Interface())), toNode(iter.Value()))
		}
		return m
	case v.Kind() == reflect.String:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: v.String()}
	case v.Kind() == reflect.Bool:
		return scalar(strconv.FormatBool(v.Bool()))
	default:
		return scalar(fmt.Sprint(v.Interface()))
	}
}

// redactNode hides DSN passwords and any value whose key names a secret.
func redactNode(n *yaml.Node, key string) {
	switch n.Kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			redactNode(n.Content[i+1], n.Content[i].Value)
		}
	case yaml.SequenceNode:
		for _, c := range n.Content {
			redactNode(c, key)
		}
	case yaml.ScalarNode:
		k := strings.ToLower(key)
		switch {
		case k == "dsn":
			n.Value = outboxcdc.RedactDSN(n.Value)
		case k == "url":
			parts := strings.Split(n.Value, ",")
			for i, p := range parts {
				parts[i] = outboxcdc.RedactDSN(strings.TrimSpace(p))
			}
			n.Value = strings.Join(parts, ",")
		case n.Value != "" && (strings.Contains(k, "password") || strings.Contains(k, "secret") || strings.HasSuffix(k, "_key") || k == "token"):
			n.Value = "xxxxx"
		}
	}
}
