package main

import (
	"bytes"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"
)

// docs/configuration.md is generated from the configuration structs: the
// keys by the walk the loader and config print use (walkConfig), the
// defaults from defaultConfig, the descriptions from the fields' doc
// comments. Regenerate it with `go generate ./cmd/outbox-cdc`.

//go:generate go test -run ^TestConfigReference$ -update .

var update = flag.Bool("update", false, "rewrite docs/configuration.md from the configuration structs")

const (
	repoRoot      = "../.."
	referencePath = repoRoot + "/docs/configuration.md"
	modulePath    = "github.com/outbox-cdc/outbox-cdc"
)

// TestConfigReference fails when docs/configuration.md is not what the
// configuration structs give, or when a key has no description.
func TestConfigReference(t *testing.T) {
	docs, err := parseFieldDocs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	got, missing := configReference(docs)
	for _, m := range missing {
		t.Errorf("key %s has no description: give %s a doc comment", m.key, m.field)
	}
	if *update {
		if err := os.WriteFile(referencePath, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(referencePath)
	if err != nil {
		t.Fatalf("%v; generate it with `go generate ./cmd/outbox-cdc`", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("docs/configuration.md is out of date with the configuration structs (%s);\n"+
			"regenerate it with `go generate ./cmd/outbox-cdc` (or `go test ./cmd/outbox-cdc -run '^TestConfigReference$' -update`) and commit it",
			firstDifference(want, got))
	}
}

// TestConfigReferenceHasEveryKey: every key the loader accepts, for every
// source and sink type, has a row (the *_file variants are described once
// in the introduction).
func TestConfigReferenceHasEveryKey(t *testing.T) {
	ref, err := os.ReadFile(referencePath)
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^\\| `([a-z0-9_.]+)` \\|").FindAllSubmatch(ref, -1) {
		rows[string(m[1])] = true
	}
	for src := range sourceKinds {
		for snk := range sinkKinds {
			for p, typ := range validKeys(src, snk) {
				if section(typ) || (strings.HasSuffix(p, fileSuffix) && !rows[p]) {
					continue
				}
				if !rows[p] {
					t.Errorf("source %s, sink %s: key %s is not in docs/configuration.md", src, snk, p)
				}
			}
		}
	}
}

func firstDifference(want, got []byte) string {
	w, g := strings.Split(string(want), "\n"), strings.Split(string(got), "\n")
	for i := 0; i < len(w) || i < len(g); i++ {
		var a, b string
		if i < len(w) {
			a = w[i]
		}
		if i < len(g) {
			b = g[i]
		}
		if a != b {
			return fmt.Sprintf("line %d is %q, the structs give %q", i+1, a, b)
		}
	}
	return "same lines"
}

// fieldDocs maps "pkgpath.Type.Field" to the field's doc comment.
type fieldDocs map[string]string

// parseFieldDocs reads the doc comments of every struct field in the
// module's packages under root. A field without a comment that follows
// fields sharing one comment which names it ("RetryBackoffMin and
// RetryBackoffMax bound ...") gets that comment.
func parseFieldDocs(root string) (fieldDocs, error) {
	docs := fieldDocs{}
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); n != "." && n != ".." && (strings.HasPrefix(n, ".") || n == "testdata" || n == "bin") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ParseComments)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, filepath.Dir(path))
		if err != nil {
			return err
		}
		pkg := modulePath
		if rel != "." {
			pkg += "/" + filepath.ToSlash(rel)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			ts, ok := n.(*ast.TypeSpec)
			if !ok {
				return true
			}
			st, ok := ts.Type.(*ast.StructType)
			if !ok {
				return true
			}
			var shared string // the last comment, for the fields it names
			for _, fl := range st.Fields.List {
				doc := strings.TrimSpace(fl.Doc.Text() + " " + fl.Comment.Text())
				for _, name := range fl.Names {
					d := doc
					if d == "" && regexp.MustCompile(`\b`+name.Name+`\b`).MatchString(shared) {
						d = shared
					}
					if d != "" {
						docs[pkg+"."+ts.Name.Name+"."+name.Name] = d
					}
				}
				if doc != "" {
					shared = doc
				}
			}
			return true
		})
		return nil
	})
	return docs, err
}

type missingDoc struct{ key, field string }

var (
	goFileRef  = regexp.MustCompile(`\s*\((?:see )?[\w./]+\.go\)|;?\s*see [\w./]+\.go\b`)
	spaces     = regexp.MustCompile(`\s+`)
	durationTy = reflect.TypeOf(time.Duration(0))
)

// describe turns a field's doc comment into one line of the reference:
// the field's own name dropped from the front, and the Go names of its
// struct's fields written as their keys.
func describe(doc string, k configKey) string {
	d := spaces.ReplaceAllString(goFileRef.ReplaceAllString(doc, ""), " ")
	d = strings.TrimSpace(d)
	if m := regexp.MustCompile(`^` + k.Field.Name + `(?: is| are|:)? (.*)$`).FindStringSubmatch(d); m != nil &&
		!regexp.MustCompile(`^(and|or|,) `).MatchString(m[1]) {
		d = m[1]
	}
	for i := 0; i < k.Owner.NumField(); i++ {
		f := k.Owner.Field(i)
		name, _, skip := yamlKey(f)
		if skip || name == "" {
			continue
		}
		re := regexp.MustCompile(`\b` + f.Name + `\b`)
		d = replaceMatches(d, re, func(at int) bool {
			// CamelCase names are Go; a one-word name only when it is
			// capitalised in mid-sentence.
			return camelCase(f.Name) || (at > 1 && !strings.ContainsAny(d[at-2:at-1], ".:?"))
		}, "`"+name+"`")
	}
	return strings.ReplaceAll(d, "|", `\|`)
}

func replaceMatches(s string, re *regexp.Regexp, ok func(at int) bool, with string) string {
	var b strings.Builder
	last := 0
	for _, m := range re.FindAllStringIndex(s, -1) {
		if !ok(m[0]) {
			continue
		}
		b.WriteString(s[last:m[0]])
		b.WriteString(with)
		last = m[1]
	}
	b.WriteString(s[last:])
	return b.String()
}

// camelCase reports a Go name of several words (RetryBackoffMax, DSNFile),
// not a plain word (Table) or an acronym (DSN).
func camelCase(name string) bool {
	upper, lower := 0, 0
	for _, r := range name {
		switch {
		case r >= 'A' && r <= 'Z':
			upper++
		case r >= 'a' && r <= 'z':
			lower++
		}
	}
	return upper >= 2 && lower >= 1
}

func typeName(t reflect.Type) string {
	switch {
	case t == durationTy:
		return "duration"
	case t.Kind() == reflect.String:
		return "string"
	case t.Kind() == reflect.Bool:
		return "bool"
	case t.Kind() >= reflect.Int && t.Kind() <= reflect.Uint64:
		return "integer"
	case t.Kind() == reflect.Float32 || t.Kind() == reflect.Float64:
		return "number"
	case t.Kind() == reflect.Slice:
		return "list of " + typeName(t.Elem()) + "s"
	}
	return t.String()
}

func defaultValue(v reflect.Value) string {
	switch {
	case v.Type() == durationTy:
		d := time.Duration(v.Int()).String()
		if strings.Contains(d, "m") && strings.HasSuffix(d, "m0s") {
			d = strings.TrimSuffix(d, "0s")
		}
		if strings.Contains(d, "h") && strings.HasSuffix(d, "h0m") {
			d = strings.TrimSuffix(d, "0m")
		}
		return "`" + d + "`"
	case v.Kind() == reflect.Int || v.Kind() == reflect.Int64:
		if n := v.Int(); n >= 1<<20 && n%(1<<20) == 0 {
			return fmt.Sprintf("`%d` (%d MiB)", n, n>>20)
		}
	case v.Kind() == reflect.String:
		if v.String() == "" {
			return "—"
		}
		return "`" + strings.ReplaceAll(v.String(), "|", `\|`) + "`"
	case v.Kind() == reflect.Slice:
		var items []string
		for i := 0; i < v.Len(); i++ {
			items = append(items, fmt.Sprint(v.Index(i).Interface()))
		}
		return "`[" + strings.Join(items, ", ") + "]`"
	}
	return "`" + fmt.Sprint(v.Interface()) + "`"
}

// configReference renders docs/configuration.md, and lists the keys
// without a description.
func configReference(docs fieldDocs) ([]byte, []missingDoc) {
	var b bytes.Buffer
	var missing []missingDoc
	cfg := defaultConfig()
	table := func(v reflect.Value, prefix string, skip func(string) bool) {
		b.WriteString("| key | type | default | description |\n|---|---|---|---|\n")
		walkConfig(v, prefix, func(k configKey) {
			if section(k.Field.Type) || (skip != nil && skip(k.Path)) {
				return
			}
			pkg := k.Owner.PkgPath()
			id := pkg + "." + k.Owner.Name() + "." + k.Field.Name
			doc, ok := docs[id]
			if !ok {
				missing = append(missing, missingDoc{k.Path, id})
			}
			fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", k.Path, typeName(k.Field.Type), defaultValue(k.Value), describe(doc, k))
		})
		b.WriteString("\n")
	}
	only := func(keys ...string) func(string) bool {
		return func(p string) bool {
			for _, k := range keys {
				if p == k {
					return false
				}
			}
			return true
		}
	}
	b.WriteString(referenceIntro)

	b.WriteString("## Top level\n\n")
	table(reflect.ValueOf(cfg), "", only("name", "delivery"))

	b.WriteString("## source\n\n`source.type` picks the source; the keys of that type sit directly under `source:`.\n\n")
	table(reflect.ValueOf(cfg.Source), "source", nil)
	for _, name := range sortedKeys(sourceKinds) {
		fmt.Fprintf(&b, "### source.type: %s\n\n", name)
		table(reflect.ValueOf(sourceKinds[name].config(&cfg.Source)), "source", nil)
	}

	b.WriteString("## route\n\nThe defaults are the Kafka ones; with another sink, `route.topic` defaults to that broker's destination (see [sinks.md](sinks.md)).\n\n")
	table(reflect.ValueOf(cfg.Route), "route", nil)

	b.WriteString("## sink\n\n`sink.type` picks the broker; the keys of that type sit directly under `sink:`. `stdout` has no keys.\n\n")
	table(reflect.ValueOf(cfg.Sink), "sink", only("sink.type"))
	for _, name := range sortedKeys(sinkKinds) {
		switch k := sinkKinds[name]; {
		case name == "kafka":
			b.WriteString("### sink.type: kafka\n\nThe `transactional_id`, `progress_topic` and `transaction_timeout` keys apply with `delivery: exactly-once`.\n\n")
			table(reflect.ValueOf(cfg.Sink), "sink", func(p string) bool { return p == "sink.type" })
		case k.config != nil:
			fmt.Fprintf(&b, "### sink.type: %s\n\n", name)
			table(reflect.ValueOf(k.config(&cfg.Sink)), "sink", nil)
		}
	}

	for _, s := range []struct {
		key string
		v   any
	}{
		{"checkpoint", cfg.Checkpoint}, {"pipeline", cfg.Pipeline}, {"ha", cfg.HA},
		{"lifecycle", cfg.Lifecycle}, {"http", cfg.HTTP}, {"log", cfg.Log},
	} {
		fmt.Fprintf(&b, "## %s\n\n", s.key)
		table(reflect.ValueOf(s.v), s.key, nil)
	}
	b.WriteString("## placement\n\nThe process's, at the top level beside `connectors:` (like `http` and `log`): spreads the connectors over the replicas that share the configuration; every connector then needs `ha.enabled: true`. See [delivery.md](delivery.md#spreading-connectors-over-replicas).\n\n")
	table(reflect.ValueOf(defaultPlacementConfig()), "placement", nil)
	return bytes.TrimRight(b.Bytes(), "\n"), missing
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

const referenceIntro = `# Configuration reference

<!-- Generated from the configuration structs by ` + "`go generate ./cmd/outbox-cdc`" + `; do not edit by hand. -->

Every key outbox-cdc reads, with its type, its default and what it does. The
descriptions are the doc comments of the Go fields the keys decode into.

- **Where values come from.** The defaults below, then the file given with
  ` + "`--config`" + `, then ` + "`OUTBOX_CDC_*`" + ` environment variables: the upper-cased
  key path joined with ` + "`_`" + ` (` + "`source.server_id`" + ` is
  ` + "`OUTBOX_CDC_SOURCE_SERVER_ID`" + `). A list takes comma-separated values
  (` + "`OUTBOX_CDC_SINK_BROKERS=k1:9092,k2:9092`" + `).
- **Secrets from files.** Every string or list key ` + "`k`" + ` has a ` + "`k_file`" + `
  twin that names a file holding the value (` + "`source.dsn_file`" + `,
  ` + "`OUTBOX_CDC_SOURCE_DSN_FILE`" + `); trailing newlines are trimmed. Setting both
  is an error.
- **Strict.** An unknown key, in the file or in an ` + "`OUTBOX_CDC_*`" + ` variable,
  is an error with a did-you-mean hint; so is a value of the wrong type.
  Durations are written ` + "`500ms`" + `, ` + "`5s`" + `, ` + "`2m`" + `, ` + "`1h`" + `.
- **What is in effect.** ` + "`outbox-cdc config print --config FILE`" + ` prints the
  effective configuration (passwords redacted) and the values derived from it:
  the server_id, slot, publication, transactional id, dead-letter topic and
  the preset's headers.

`
