package main

import (
	"fmt"
	"path/filepath"
	"sort"
	"strings"

	yaml "go.yaml.in/yaml/v3"

	"github.com/outbox-cdc/outbox-cdc/checkpoint"
)

// Several connectors in one process. The file either is one connector
// (name, source, route, sink, checkpoint, pipeline, delivery, ha,
// lifecycle, with http and log beside them: the original layout), or
// lists them:
//
//	http: {listen: ":9464"}
//	log: {level: info}
//	connectors:
//	  - name: orders
//	    source: {type: mysql, dsn: ...}
//	    sink: {brokers: [...]}
//	  - name: billing
//	    source: {type: postgres, dsn: ...}
//	    ...
//
// http, log and placement are the process's and stay at the top. Every entry is a
// whole connector configuration with its own defaults. An OUTBOX_CDC_*
// variable of a connector key (OUTBOX_CDC_SINK_BROKERS) applies to every
// connector that has that key; one that no connector has is an error.

// processConfig is the whole configuration: the settings the process
// shares and its connectors, in file order. Every Config in Connectors
// carries the shared HTTP and Log too.
type processConfig struct {
	HTTP       HTTPConfig
	Log        LogConfig
	Connectors []Config
	// Placement spreads the connectors over the replicas that share this
	// configuration (placement.go).
	Placement PlacementConfig
	// Listed is true when the file used the connectors: list (a list of
	// one included).
	Listed bool
}

// sharedKeys are the top-level keys of a connectors: file besides the list.
var sharedKeys = map[string]bool{"http": true, "log": true}

// loadProcessConfig reads the file at path (optional) and returns every
// connector it configures, each loaded as loadConfig loads one. Any
// mistake is a *configError; a connector's mistakes name it.
func loadProcessConfig(path string, env map[string]string) (processConfig, error) {
	root, err := readConfigFile(path)
	if err != nil {
		return processConfig{}, err
	}
	plc, env, err := takePlacement(&root, path, env)
	if err != nil {
		return processConfig{}, err
	}
	list := lookup(&root, "connectors")
	if list == nil {
		cfg, _, err := configFromNode(&root, path, env, true)
		if err != nil {
			return processConfig{}, err
		}
		pc := processConfig{HTTP: cfg.HTTP, Log: cfg.Log, Connectors: []Config{cfg}, Placement: plc}
		if err := validatePlacement(&pc.Placement, pc.Connectors, false); err != nil {
			return processConfig{}, err
		}
		return pc, nil
	}
	where := func(line int) string {
		if path != "" {
			return fmt.Sprintf("%s: line %d", path, line)
		}
		return fmt.Sprintf("line %d", line)
	}
	doc := root.Content[0]
	var shared []*yaml.Node
	for i := 0; i+1 < len(doc.Content); i += 2 {
		k := doc.Content[i]
		switch {
		case k.Value == "connectors":
		case sharedKeys[k.Value]:
			shared = append(shared, k, doc.Content[i+1])
		default:
			return processConfig{}, configErrorf("%s: %q sits at the top level beside connectors:; a connector's keys go inside its entry (only http, log and placement are shared)", where(k.Line), k.Value)
		}
	}
	if list.Kind != yaml.SequenceNode || len(list.Content) == 0 {
		return processConfig{}, configErrorf("%s: connectors: want a list of connector configurations, each with at least a name", where(list.Line))
	}
	pc := processConfig{Listed: true}
	var allKeys []keySet
	for i, entry := range list.Content {
		name := ""
		if n := lookup(entry, "name"); n != nil && n.Kind == yaml.ScalarNode {
			name = n.Value
		}
		// entryError is a mistake in the entry, at line (a key of the
		// entry when key is set).
		entryError := func(key string, line int, msg, hint string) error {
			return inConnector(&configError{File: path, Key: key, Line: line, Msg: msg, Hint: hint}, i, name)
		}
		if entry.Kind != yaml.MappingNode {
			return processConfig{}, entryError("", entry.Line, "want a mapping of connector keys", "")
		}
		for j := 0; j+1 < len(entry.Content); j += 2 {
			if k := entry.Content[j]; sharedKeys[k.Value] {
				// Not inConnector's key: it would leave a shared key's name alone.
				return processConfig{}, &configError{File: path, Key: fmt.Sprintf("connectors[%d].%s", i, k.Value), Connector: name, Line: k.Line,
					Msg: k.Value + " is shared by every connector", Hint: "set it at the top level"}
			}
		}
		if lookup(entry, "name") == nil {
			return processConfig{}, entryError("name", entry.Line, "every connector in a list needs its own name", "")
		}
		// The entry plus the shared keys form a single-connector document.
		m := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map", Line: entry.Line, Column: entry.Column}
		m.Content = append(append(m.Content, entry.Content...), cloneNodes(shared)...)
		one := &yaml.Node{Kind: yaml.DocumentNode, Content: []*yaml.Node{m}}
		cfg, keys, err := configFromNode(one, path, env, false)
		if err != nil {
			return processConfig{}, inConnector(err, i, name)
		}
		pc.Connectors = append(pc.Connectors, cfg)
		allKeys = append(allKeys, keys)
	}
	union := keySet{}
	for _, ks := range allKeys {
		for k, t := range ks {
			union[k] = t
		}
	}
	if err := warnUnknownEnv(env, union); err != nil {
		return processConfig{}, err
	}
	deriveCheckpointPaths(pc.Connectors)
	if err := checkDistinct(pc.Connectors); err != nil {
		return processConfig{}, err
	}
	pc.HTTP, pc.Log = pc.Connectors[0].HTTP, pc.Connectors[0].Log
	pc.Placement = plc
	if err := validatePlacement(&pc.Placement, pc.Connectors, true); err != nil {
		return processConfig{}, err
	}
	return pc, nil
}

// inConnector places a mistake found in the i-th entry of connectors:
// (called name) in that entry: its key gets connectors[i] in front
// (connectors[0].source.dsn; the entry itself when the mistake names no
// key) and the name goes in Connector. File, Line and Hint stay. A key of
// the shared http or log keeps its own name: it is written at the top.
// Any other error becomes the message of a *configError about the entry.
func inConnector(err error, i int, name string) error {
	entry := fmt.Sprintf("connectors[%d]", i)
	ce, ok := err.(*configError)
	if !ok {
		return &configError{Key: entry, Connector: name, Msg: err.Error()}
	}
	for _, e := range append([]*configError{ce}, ce.also...) {
		e.Connector = name
		first, _, _ := strings.Cut(e.Key, ".")
		switch {
		case e.Key == "":
			e.Key = entry
		case !sharedKeys[first]:
			e.Key = entry + "." + e.Key
		}
	}
	return ce
}

// cloneNodes deep-copies nodes, so that applying the environment to one
// connector's document leaves the others' alone.
func cloneNodes(ns []*yaml.Node) []*yaml.Node {
	out := make([]*yaml.Node, len(ns))
	for i, n := range ns {
		c := *n
		c.Content = cloneNodes(n.Content)
		out[i] = &c
	}
	return out
}

// deriveCheckpointPaths gives each file checkpoint left at the default
// path its own file beside it, named after the connector, when there are
// several connectors: one shared file would be overwritten by each.
func deriveCheckpointPaths(cs []Config) {
	if len(cs) < 2 {
		return
	}
	for i := range cs {
		if cs[i].Checkpoint.Path == checkpoint.DefaultPath {
			dir := filepath.Dir(checkpoint.DefaultPath)
			cs[i].Checkpoint.Path = filepath.Join(dir, "outbox-cdc."+fileSafe(cs[i].Name)+".checkpoint")
		}
	}
}

func fileSafe(name string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_', r == '.':
			return r
		}
		return '_'
	}, name)
}

// checkDistinct rejects two connectors that would share what must be one
// connector's own: the name (metrics, locks, checkpoint rows, transactional
// ids derive from it), a checkpoint file, a MySQL server_id, a Postgres
// slot on the same server.
func checkDistinct(cs []Config) error {
	seen := map[string]string{}
	// scope narrows where a value must be unique (a Postgres server).
	claim := func(i int, what, scope, value string) error {
		k := what + "\x00" + scope + "\x00" + value
		if prev, ok := seen[k]; ok {
			return inConnector(&configError{Key: what, Msg: fmt.Sprintf("%q is also %s's", value, prev), Hint: "every connector needs its own"}, i, cs[i].Name)
		}
		seen[k] = fmt.Sprintf("connectors[%d] (%s)", i, cs[i].Name)
		return nil
	}
	for i, c := range cs {
		if err := claim(i, "name", "", c.Name); err != nil {
			return err
		}
		if c.Checkpoint.Type == "file" || c.Checkpoint.Type == "kafka" {
			p, err := filepath.Abs(c.Checkpoint.Path)
			if err != nil {
				p = c.Checkpoint.Path
			}
			if err := claim(i, "checkpoint.path", "", p); err != nil {
				return err
			}
		}
		if k, ok := sourceKinds[c.Source.Type]; ok { // sources.go
			key, scope, value := k.exclusive(c)
			if err := claim(i, key, scope, value); err != nil {
				return err
			}
		}
	}
	return nil
}

// connectorNames lists the names, for messages.
func connectorNames(cs []Config) string {
	names := make([]string, len(cs))
	for i, c := range cs {
		names[i] = c.Name
	}
	return strings.Join(names, ", ")
}

// pickConnector returns the connector called name, or the only one when
// name is empty. With several and no name it is a *configError listing
// them.
func pickConnector(pc processConfig, name string) (Config, error) {
	if name == "" {
		if len(pc.Connectors) == 1 {
			return pc.Connectors[0], nil
		}
		return Config{}, configErrorf("the configuration holds %d connectors (%s): choose one with --connector NAME", len(pc.Connectors), connectorNames(pc.Connectors))
	}
	for _, c := range pc.Connectors {
		if c.Name == name {
			return c, nil
		}
	}
	sorted := append([]Config(nil), pc.Connectors...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
	return Config{}, configErrorf("--connector %q: no such connector (the configuration has %s)", name, connectorNames(sorted))
}

// loadConnectorConfig loads the file and picks one connector (see
// pickConnector).
func loadConnectorConfig(path, name string, env map[string]string) (Config, error) {
	pc, err := loadProcessConfig(path, env)
	if err != nil {
		return Config{}, err
	}
	return pickConnector(pc, name)
}
