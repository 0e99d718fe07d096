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
	got, missing, rows := configReference(docs)
	for _, m := range missing {
		t.Errorf("key %s has no description: give %s a doc comment", m.key, m.field)
	}
	idents, err := goIdentifiers(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range goLeaks(rows, idents) {
		t.Errorf("key %s speaks Go, not the user's words: %s in %q; reword the doc comment of %s", l.row.key, l.what, l.text, l.row.field)
	}
	for _, d := range sharedDescriptions(rows) {
		t.Errorf("keys %s and %s share one description (%q): give %s and %s each its own doc comment", d[0].key, d[1].key, d[0].desc, d[0].field, d[1].field)
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
// module's packages under root. A field without a comment of its own has
// no description (one comment over several fields would be one sentence
// shown for several keys).
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
			for _, fl := range st.Fields.List {
				doc := strings.TrimSpace(fl.Doc.Text() + " " + fl.Comment.Text())
				for _, name := range fl.Names {
					if doc != "" {
						docs[pkg+"."+ts.Name.Name+"."+name.Name] = doc
					}
				}
			}
			return true
		})
		return nil
	})
	return docs, err
}

type missingDoc struct{ key, field string }

// refRow is one key's row of the reference.
type refRow struct {
	key, field string // the key path, the Go field it decodes into
	typ, def   string // the type and default columns
	desc       string // the description
	// siblings are the Go names of the fields of the key's struct.
	siblings map[string]bool
}

// goLeak is Go found in a row.
type goLeak struct {
	row        refRow
	what, text string
}

// goSyntax is Go a user never writes: each pattern with what it is.
var goSyntax = []struct {
	re   *regexp.Regexp
	what string
}{
	{regexp.MustCompile(`\*[A-Z]\w*`), "a pointer type"},
	{regexp.MustCompile(`\bmap\[|\[\](?:string|int|byte)\b`), "a Go map or slice type"},
	{regexp.MustCompile("[\\w`)]\\.[A-Z]\\w*"), "a qualified Go name (Type.Field, pkg.Type)"},
	{regexp.MustCompile(`\b\w+\.go\b`), "a Go file name"},
	{regexp.MustCompile(`\b[A-Za-z]+\*`), "a Go name pattern (Prefix*)"},
	{regexp.MustCompile(`(?i)\bpackage doc(?:umentation)?\b|\bissue #?\d+\b|\bgodoc\b`), "a reference to the code or to the project's history"},
}

var (
	lowerCamel = regexp.MustCompile(`\b[a-z]+[A-Z]\w*`)
	quoted     = regexp.MustCompile("\"[^\"]*\"|`[^`]*`")
	camelWord  = regexp.MustCompile(`\b[A-Z][a-z0-9]+[A-Z][A-Za-z0-9]*\b`)
	// midWord is a capitalised word in mid-sentence, after a lower-case
	// word: a name (Kafka) or a Go name (Write, Ready).
	midWord = regexp.MustCompile(`[a-z0-9,;:] ([A-Z][a-z]+)\b`)
	// sentenceWord is the first word of a sentence: a field's Go name
	// there was left as it is by describe (Key, Batch).
	sentenceWord = regexp.MustCompile(`(?:^|[.;:] )([A-Z][a-z]+)\b`)
)

// userNames are the products and terms users know by these names,
// although the code also declares them.
var userNames = map[string]bool{
	"MySQL": true, "MariaDB": true, "PostgreSQL": true, "Postgres": true, "CloudEvents": true,
	"Kafka": true, "Debezium": true, "Redis": true, "Java": true, "Maxwell": true, "Connect": true,
}

// goLeaks returns the Go in the rows' types and descriptions: the
// patterns of goSyntax; lowerCamelCase outside quotes (a quoted one is a
// value, such as a header name); the CamelCase names the module declares
// (idents); and the one-word names it declares (Write, Ready) in
// mid-sentence.
func goLeaks(rows []refRow, idents map[string]bool) []goLeak {
	var out []goLeak
	for _, r := range rows {
		for _, text := range []string{r.typ, r.def, r.desc} {
			for _, p := range goSyntax {
				if m := p.re.FindString(text); m != "" {
					out = append(out, goLeak{r, p.what, m})
				}
			}
			if m := lowerCamel.FindString(quoted.ReplaceAllString(text, `""`)); m != "" {
				out = append(out, goLeak{r, "a Go name (lowerCamelCase)", m})
			}
			for _, m := range camelWord.FindAllString(text, -1) {
				if idents[m] && !userNames[m] {
					out = append(out, goLeak{r, "a name declared in the Go code", m})
				}
			}
			for _, m := range sentenceWord.FindAllStringSubmatch(text, -1) {
				if r.siblings[m[1]] {
					out = append(out, goLeak{r, "the Go name of a field", m[1]})
				}
			}
			for _, m := range midWord.FindAllStringSubmatch(text, -1) {
				if idents[m[1]] && !userNames[m[1]] {
					out = append(out, goLeak{r, "a Go name in mid-sentence", m[1]})
				}
			}
		}
	}
	return out
}

// sharedDescriptions returns the pairs of rows of different Go fields
// with the same description (the same field shown under several sections,
// as tls.ca_file is, is one description).
func sharedDescriptions(rows []refRow) [][2]refRow {
	first := map[string]refRow{}
	seen := map[[2]string]bool{}
	var out [][2]refRow
	for _, r := range rows {
		if r.desc == "" {
			continue // reported as missing
		}
		f, ok := first[r.desc]
		if !ok {
			first[r.desc] = r
			continue
		}
		// One key in two source types (source.reconnect.min) may say the
		// same in both.
		if f.field != r.field && f.key != r.key && !seen[[2]string{f.field, r.field}] {
			seen[[2]string{f.field, r.field}] = true
			out = append(out, [2]refRow{f, r})
		}
	}
	return out
}

// goIdentifiers returns the exported names declared in the module's Go
// code under root: types, functions, methods, constants, variables and
// struct fields.
func goIdentifiers(root string) (map[string]bool, error) {
	names := map[string]bool{}
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
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		add := func(ids ...*ast.Ident) {
			for _, id := range ids {
				if id.IsExported() {
					names[id.Name] = true
				}
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.TypeSpec:
				add(n.Name)
			case *ast.FuncDecl:
				add(n.Name)
			case *ast.ValueSpec:
				add(n.Names...)
			case *ast.Field:
				add(n.Names...)
			}
			return true
		})
		return nil
	})
	return names, err
}

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
	if m := regexp.MustCompile(`^` + k.Field.Name + `(?: is| are|:|,)? (.*)$`).FindStringSubmatch(d); m != nil &&
		!regexp.MustCompile(`^(?:(?:and|or|,) |\()`).MatchString(m[1]) {
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
			// capitalised in mid-sentence. A quoted one is a value.
			if strings.Count(d[:at], `"`)%2 == 1 {
				return false
			}
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
	case t.Kind() == reflect.Map && t.Key().Kind() == reflect.String && t.Elem().Kind() == reflect.Struct:
		return "mapping of names to sections"
	case t.Kind() == reflect.Map && t.Key().Kind() == reflect.String && t.Elem().Kind() == reflect.String:
		return "mapping of names to strings"
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
	case v.Kind() == reflect.Map && v.Len() == 0:
		return "—"
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
func configReference(docs fieldDocs) ([]byte, []missingDoc, []refRow) {
	var b bytes.Buffer
	var missing []missingDoc
	var rows []refRow
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
			r := refRow{key: k.Path, field: id, typ: typeName(k.Field.Type), def: defaultValue(k.Value), desc: describe(doc, k), siblings: map[string]bool{}}
			for i := 0; i < k.Owner.NumField(); i++ {
				r.siblings[k.Owner.Field(i).Name] = true
			}
			rows = append(rows, r)
			fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", r.key, r.typ, r.def, r.desc)
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
	return bytes.TrimRight(b.Bytes(), "\n"), missing, rows
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

Every key outbox-cdc reads, with its type, its default and what it does.

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

// TestGoLeaksCatchesGo: the leak check flags the Go that reached the
// reference before (each case below was in it) and none of the user's
// words the reference needs.
func TestGoLeaksCatchesGo(t *testing.T) {
	idents, err := goIdentifiers(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	row := func(desc string) refRow {
		return refRow{key: "k", field: "F", typ: "string", desc: desc, siblings: map[string]bool{"Key": true, "Batch": true}}
	}
	for _, bad := range []string{
		`"earliest" or "latest" (see StartEarliest, StartLatest).`,
		"one of the TLS* constants: disabled, preferred.",
		"are read; see tables.go for the publication this takes.",
		"is bounded by slotCreateTimeout (5 minutes) instead.",
		"a row the router rejects (a *BadRowError).",
		"writes a dead-letter record (DeadLetterTo) to the topic.",
		"their bytes (Record.Size).",
		"only logical decoding messages (`messages`.Prefix) are read.",
		"See the package documentation for the bounds it gives.",
		"fixed in issue 17.",
		"Key is the integer primary key.",
		"rows per DELETE. Batch rows per DELETE.",
		"how often an idle sink checks, for Ready and the gauge.",
		"A batch must be committed within it, see Transactional.",
	} {
		if len(goLeaks([]refRow{row(bad)}, idents)) == 0 {
			t.Errorf("not flagged: %q", bad)
		}
	}
	if len(goLeaks([]refRow{{key: "route.tables", typ: "map[string]router.TableRoute"}}, idents)) == 0 {
		t.Errorf("a Go map type is not flagged")
	}
	for _, good := range []string{
		"raw | string (StringConverter) | json (JsonConverter) | binary (Debezium's BinaryDataConverter).",
		`as Debezium's route.topic.regex does (e.g. "type:header:eventType").`,
		"Kubernetes' `terminationGracePeriodSeconds`, 30 s by default.",
		`each "database.table", e.g. "*.outbox_message" or "tenant_%.outbox".`,
		"the source database: mysql (MySQL or MariaDB) or postgres; the CloudEvents source attribute.",
		"the Kafka transaction.timeout.ms; Java: max.request.size. Empty: the system's roots.",
		`"<prefix>.<database or schema>.<table>.<routing value>.Value".`,
		"the same Nats-Msg-Id; pg_logical_emit_message; a NATS .creds file (user JWT and NKey seed).",
	} {
		if l := goLeaks([]refRow{row(good)}, idents); len(l) > 0 {
			t.Errorf("flagged: %q (%s %q)", good, l[0].what, l[0].text)
		}
	}
}

// TestSharedDescriptions: two keys of different fields with one
// description are reported; one field shown in several sections, or one
// key in two source types, is not.
func TestSharedDescriptions(t *testing.T) {
	rows := []refRow{
		{key: "lifecycle.cleanup.batch", field: "C.Batch", desc: "rows per DELETE, `pause` between two batches."},
		{key: "lifecycle.cleanup.pause", field: "C.Pause", desc: "rows per DELETE, `pause` between two batches."},
		{key: "source.tls.ca_file", field: "T.CAFile", desc: "a PEM bundle."},
		{key: "sink.tls.ca_file", field: "T.CAFile", desc: "a PEM bundle."},
		{key: "source.reconnect.min", field: "binlog.B.Min", desc: "the first wait."},
		{key: "source.reconnect.min", field: "wal.B.Min", desc: "the first wait."},
	}
	got := sharedDescriptions(rows)
	if len(got) != 1 || got[0][0].key != "lifecycle.cleanup.batch" || got[0][1].key != "lifecycle.cleanup.pause" {
		t.Fatalf("got %v, want only batch and pause", got)
	}
}
