package debezium

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/outbox-cdc/outbox-cdc/binlog"
	"github.com/outbox-cdc/outbox-cdc/wal"
)

// # From a Debezium configuration
//
// TranslateDebeziumConfig reads a Debezium connector's configuration,
// either the JSON that Kafka Connect's GET /connectors/<name>/config
// returns (or the {"name":..., "config":{...}} body used to create it) or
// Debezium Server's application.properties, and writes the outbox-cdc
// configuration that produces the same records. Every key is accounted
// for: translated, ignored because it does not change what outbox-cdc
// writes (with the reason), or reported as not supported (with the reason).
// Nothing is dropped silently.

// Finding is one configuration key the translation did not carry over.
type Finding struct {
	Key    string
	Reason string
}

// Translation is the result of TranslateDebeziumConfig.
type Translation struct {
	// YAML is the outbox-cdc configuration.
	YAML []byte
	// Unsupported lists the keys whose behaviour outbox-cdc cannot
	// reproduce; Ignored the keys that do not affect the records.
	Unsupported, Ignored []Finding
	// Notes are things to check or do that the input cannot tell.
	Notes []string
}

// ErrDebeziumConfig is wrapped by errors about an input that cannot be
// translated at all.
var ErrDebeziumConfig = errors.New("cannot translate the Debezium configuration")

// Debezium class names.
const (
	classMySQL      = "io.debezium.connector.mysql.MySqlConnector"
	classMariaDB    = "io.debezium.connector.mariadb.MariaDbConnector"
	classPostgres   = "io.debezium.connector.postgresql.PostgresConnector"
	classEventRoute = "io.debezium.transforms.outbox.EventRouter"
)

// converterClasses maps Kafka Connect converter classes to route.converters
// names.
var converterClasses = map[string]string{
	"org.apache.kafka.connect.storage.StringConverter":       "string",
	"org.apache.kafka.connect.json.JsonConverter":            "json",
	"org.apache.kafka.connect.converters.ByteArrayConverter": "bytearray",
	"io.debezium.converters.BinaryDataConverter":             "binary",
}

// translator holds the input keys and what became of each.
type translator struct {
	props    map[string]string
	used     map[string]bool
	server   bool // Debezium Server (application.properties)
	out      *ymap
	t        *Translation
	kind     string // mysql | postgres
	mariadb  bool
	prefix   string // transforms.<name>. of the EventRouter
	valueCnv string // the value converter chosen
	partConv bool   // Debezium Server ignores the partition placement
}

// TranslateDebeziumConfig translates input (see the section comment).
func TranslateDebeziumConfig(input []byte) (*Translation, error) {
	props, server, err := readConnectorConfig(input)
	if err != nil {
		return nil, err
	}
	tr := &translator{props: props, used: map[string]bool{}, server: server, out: newYMap(), t: &Translation{}}
	if err := tr.translate(); err != nil {
		return nil, err
	}
	for _, k := range sortedKeys(props) {
		if !tr.used[k] {
			tr.unsupported(k, "not a setting this translation knows; check what it does before relying on the result")
		}
	}
	sortFindings(tr.t.Unsupported)
	sortFindings(tr.t.Ignored)
	y, err := tr.out.marshal()
	if err != nil {
		return nil, err
	}
	tr.t.YAML = y
	return tr.t, nil
}

func sortFindings(f []Finding) {
	sort.SliceStable(f, func(i, j int) bool { return f[i].Key < f[j].Key })
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// readConnectorConfig parses the JSON forms (flat, or wrapped in "config")
// or Java properties. For Debezium Server the keys are turned into Kafka
// Connect's names: debezium.source.X -> X, debezium.transforms... ->
// transforms..., debezium.format.{key,value,header}... ->
// {key,value,header}.converter...; the rest keep their names.
func readConnectorConfig(input []byte) (map[string]string, bool, error) {
	trimmed := bytes.TrimSpace(input)
	if len(trimmed) == 0 {
		return nil, false, fmt.Errorf("%w: the input is empty", ErrDebeziumConfig)
	}
	if trimmed[0] == '{' {
		var raw map[string]any
		dec := json.NewDecoder(bytes.NewReader(trimmed))
		dec.UseNumber()
		if err := dec.Decode(&raw); err != nil {
			return nil, false, fmt.Errorf("%w: not valid JSON: %v", ErrDebeziumConfig, err)
		}
		if cfg, ok := raw["config"].(map[string]any); ok {
			if name, ok := raw["name"].(string); ok {
				if _, has := cfg["name"]; !has {
					cfg["name"] = name
				}
			}
			raw = cfg
		}
		props := map[string]string{}
		for k, v := range raw {
			switch x := v.(type) {
			case string:
				props[k] = x
			case json.Number:
				props[k] = x.String()
			case bool:
				props[k] = strconv.FormatBool(x)
			case nil:
				props[k] = ""
			default:
				return nil, false, fmt.Errorf("%w: %q is not a string, number or boolean (Kafka Connect configurations are flat)", ErrDebeziumConfig, k)
			}
		}
		return props, false, nil
	}
	props, err := parseProperties(input)
	if err != nil {
		return nil, false, err
	}
	server := false
	for k := range props {
		if strings.HasPrefix(k, "debezium.") {
			server = true
		}
	}
	if !server {
		return props, false, nil
	}
	out := map[string]string{}
	for k, v := range props {
		switch {
		case strings.HasPrefix(k, "debezium.source."):
			out[strings.TrimPrefix(k, "debezium.source.")] = v
		case strings.HasPrefix(k, "debezium.transforms"):
			out[strings.TrimPrefix(k, "debezium.")] = v
		case k == "debezium.format.key" || k == "debezium.format.value" || k == "debezium.format.header":
			out["server.format."+strings.TrimPrefix(k, "debezium.format.")] = v
		case strings.HasPrefix(k, "debezium.format.key.") || strings.HasPrefix(k, "debezium.format.value.") || strings.HasPrefix(k, "debezium.format.header."):
			rest := strings.TrimPrefix(k, "debezium.format.")
			part, opt, _ := strings.Cut(rest, ".")
			out[part+".converter."+opt] = v
		default:
			out[k] = v
		}
	}
	return out, true, nil
}

// parseProperties reads java.util.Properties text: key=value, key:value or
// key value; # and ! comments; a trailing backslash continues the line;
// \t \n \r \f \uXXXX and \x escapes.
func parseProperties(input []byte) (map[string]string, error) {
	props := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(input))
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	var logical strings.Builder
	lineNo := 0
	flush := func() error {
		line := strings.TrimLeft(logical.String(), " \t\f")
		logical.Reset()
		if line == "" || line[0] == '#' || line[0] == '!' {
			return nil
		}
		i := 0
		for i < len(line) {
			c := line[i]
			if c == '\\' {
				i += 2
				continue
			}
			if c == '=' || c == ':' || c == ' ' || c == '\t' || c == '\f' {
				break
			}
			i++
		}
		key := line[:min(i, len(line))]
		rest := line[min(i, len(line)):]
		rest = strings.TrimLeft(rest, " \t\f")
		if rest != "" && (rest[0] == '=' || rest[0] == ':') {
			rest = strings.TrimLeft(rest[1:], " \t\f")
		}
		k, err := unescapeProperty(key)
		if err != nil {
			return fmt.Errorf("%w: line %d: %v", ErrDebeziumConfig, lineNo, err)
		}
		v, err := unescapeProperty(rest)
		if err != nil {
			return fmt.Errorf("%w: line %d: %v", ErrDebeziumConfig, lineNo, err)
		}
		props[k] = v
		return nil
	}
	for sc.Scan() {
		lineNo++
		line := sc.Text()
		if logical.Len() > 0 {
			line = strings.TrimLeft(line, " \t\f")
		} else if t := strings.TrimLeft(line, " \t\f"); t != "" && (t[0] == '#' || t[0] == '!') {
			continue
		}
		// A line ending in an odd number of backslashes continues.
		n := 0
		for j := len(line) - 1; j >= 0 && line[j] == '\\'; j-- {
			n++
		}
		if n%2 == 1 {
			logical.WriteString(line[:len(line)-1])
			continue
		}
		logical.WriteString(line)
		if err := flush(); err != nil {
			return nil, err
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrDebeziumConfig, err)
	}
	if err := flush(); err != nil {
		return nil, err
	}
	if len(props) == 0 {
		return nil, fmt.Errorf("%w: neither JSON nor properties with any key", ErrDebeziumConfig)
	}
	return props, nil
}

func unescapeProperty(s string) (string, error) {
	if !strings.Contains(s, `\`) {
		return s, nil
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' || i+1 == len(s) {
			b.WriteByte(s[i])
			continue
		}
		i++
		switch s[i] {
		case 't':
			b.WriteByte('\t')
		case 'n':
			b.WriteByte('\n')
		case 'r':
			b.WriteByte('\r')
		case 'f':
			b.WriteByte('\f')
		case 'u':
			if i+5 > len(s) {
				return "", fmt.Errorf("short \\u escape")
			}
			v, err := strconv.ParseUint(s[i+1:i+5], 16, 32)
			if err != nil {
				return "", fmt.Errorf("bad \\u escape")
			}
			b.WriteRune(rune(v))
			i += 4
		default:
			b.WriteByte(s[i])
		}
	}
	return b.String(), nil
}

// get returns a key's value and marks it used.
func (tr *translator) get(key string) (string, bool) {
	v, ok := tr.props[key]
	if ok {
		tr.used[key] = true
	}
	return v, ok
}

// flag returns a boolean key that is on unless it says false, and marks it
// used.
func (tr *translator) flag(key string) bool {
	v, ok := tr.get(key)
	return !ok || v != "false"
}

func (tr *translator) unsupported(key, reason string) {
	tr.used[key] = true
	tr.t.Unsupported = append(tr.t.Unsupported, Finding{Key: key, Reason: reason})
}

func (tr *translator) ignored(key, reason string) {
	tr.used[key] = true
	tr.t.Ignored = append(tr.t.Ignored, Finding{Key: key, Reason: reason})
}

func (tr *translator) note(format string, args ...any) {
	tr.t.Notes = append(tr.t.Notes, fmt.Sprintf(format, args...))
}

// each calls f for every unused key with the prefix.
func (tr *translator) each(prefix string, f func(key, value string)) {
	for _, k := range sortedKeys(tr.props) {
		if strings.HasPrefix(k, prefix) && !tr.used[k] {
			f(k, tr.props[k])
		}
	}
}

func (tr *translator) translate() error {
	class, ok := tr.get("connector.class")
	if !ok {
		return fmt.Errorf("%w: no connector.class (debezium.source.connector.class): is this a Debezium connector configuration?", ErrDebeziumConfig)
	}
	switch class {
	case classMySQL:
		tr.kind = binlog.Kind
	case classMariaDB:
		tr.kind, tr.mariadb = binlog.Kind, true
	case classPostgres:
		tr.kind = wal.Kind
	default:
		return fmt.Errorf("%w: connector.class %s: outbox-cdc reads MySQL, MariaDB and PostgreSQL (%s, %s, %s)",
			ErrDebeziumConfig, class, classMySQL, classMariaDB, classPostgres)
	}
	if err := tr.findEventRouter(); err != nil {
		return err
	}
	tr.name()
	tr.source()
	tr.route()
	tr.contextHeaders()
	tr.converters()
	tr.sink()
	tr.pipeline()
	tr.rest()
	return nil
}

func (tr *translator) name() {
	name, ok := tr.get("name")
	if !ok || name == "" {
		if p, ok := tr.props["topic.prefix"]; ok {
			name = p
		} else if p, ok := tr.props["database.server.name"]; ok {
			name = p
		} else {
			name = "outbox-cdc"
		}
		tr.note("the connector had no name (Debezium Server): the outbox-cdc connector is named %q, which derives nothing Debezium used; set name to taste", name)
	}
	tr.out.set("name", name, "")
}

// findEventRouter finds the one EventRouter in transforms.
func (tr *translator) findEventRouter() error {
	list, ok := tr.get("transforms")
	if !ok || strings.TrimSpace(list) == "" {
		return fmt.Errorf("%w: no transforms: outbox-cdc replaces a connector running Debezium's Outbox EventRouter (%s), and this one has none", ErrDebeziumConfig, classEventRoute)
	}
	var router string
	for _, n := range strings.Split(list, ",") {
		n = strings.TrimSpace(n)
		if n == "" {
			continue
		}
		typ := tr.props["transforms."+n+".type"]
		if typ == classEventRoute {
			if router != "" {
				return fmt.Errorf("%w: two EventRouter transforms (%s, %s)", ErrDebeziumConfig, router, n)
			}
			router = n
			continue
		}
		tr.each("transforms."+n+".", func(k, _ string) {
			tr.unsupported(k, fmt.Sprintf("transform %q (%s) is not the EventRouter; outbox-cdc applies no other transform", n, typ))
		})
	}
	if router == "" {
		return fmt.Errorf("%w: transforms %q hold no %s", ErrDebeziumConfig, list, classEventRoute)
	}
	tr.prefix = "transforms." + router + "."
	tr.get(tr.prefix + "type")
	return nil
}

var plainTable = regexp.MustCompile(`^[A-Za-z0-9_$]+(\\?\.[A-Za-z0-9_$]+)?$`)

func (tr *translator) source() {
	tr.out.set("source.type", tr.kind, "")
	host, _ := tr.get("database.hostname")
	port, hasPort := tr.get("database.port")
	user, _ := tr.get("database.user")
	if _, ok := tr.get("database.password"); ok {
		tr.note("database.password is not copied: put the password into source.dsn where it says PASSWORD, or better into the file named by source.dsn_file (or OUTBOX_CDC_SOURCE_DSN)")
	}
	dbname, _ := tr.get("database.dbname")
	if host == "" {
		host = "localhost"
		tr.note("database.hostname is not set: source.dsn says localhost")
	}
	// The outbox table: table.include.list with exactly one plain name.
	var schema, table string
	if list, ok := tr.get("table.include.list"); ok {
		tables := splitList(list)
		for i, t := range tables {
			if !plainTable.MatchString(t) {
				tr.unsupported("table.include.list", fmt.Sprintf("%q is a regular expression; outbox-cdc reads one named outbox table: set source.table", t))
				break
			}
			t = strings.ReplaceAll(t, `\.`, ".")
			if i > 0 {
				tr.unsupported("table.include.list", fmt.Sprintf("lists %d tables; outbox-cdc reads one outbox table (%s translated, %s not)", len(tables), tables[0], strings.Join(tables[1:], ", ")))
				break
			}
			if s, n, ok := strings.Cut(t, "."); ok {
				schema, table = s, n
			} else {
				table = t
			}
		}
	} else if _, ok := tr.get("table.whitelist"); ok {
		tr.unsupported("table.whitelist", "the pre-1.3 name of table.include.list: rename it, then translate again")
	}
	for _, k := range []string{"table.exclude.list", "column.include.list", "column.exclude.list"} {
		if v, ok := tr.get(k); ok && v != "" {
			tr.unsupported(k, "filters what Debezium captures; outbox-cdc reads exactly the configured outbox table and its routed columns")
		}
	}
	if table == "" {
		tr.note("no single outbox table in table.include.list: set source.table")
	}
	switch tr.kind {
	case binlog.Kind:
		if !hasPort {
			port = "3306"
		}
		db := schema
		if list, ok := tr.get("database.include.list"); ok {
			dbs := splitList(list)
			if db == "" && len(dbs) == 1 && plainTable.MatchString(dbs[0]) {
				db = dbs[0]
			}
		}
		if db == "" {
			tr.note("the outbox table's database is unknown: put it into source.dsn after the slash")
		}
		dsn := user + ":PASSWORD@tcp(" + hostPort(host, port) + ")/" + db
		tr.out.set("source.dsn", dsn, "go-sql-driver DSN; the password is not copied")
		if table != "" {
			tr.out.set("source.table", table, "")
		}
		if id, ok := tr.get("database.server.id"); ok {
			if n, err := strconv.ParseUint(id, 10, 32); err == nil && n > 0 {
				tr.out.set("source.server_id", int(n), "Debezium's database.server.id: stop Debezium before starting outbox-cdc, or pick an id no replica uses")
			} else {
				tr.unsupported("database.server.id", fmt.Sprintf("%q is not a replica id (1..4294967295); source.server_id is derived from the name", id))
			}
		}
		if mode, ok := tr.get("database.ssl.mode"); ok {
			m := strings.ReplaceAll(strings.ToLower(mode), "_", "-")
			if m == "verify-identity" {
				m = "verify-full"
			}
			if m != "disabled" {
				tr.out.set("source.tls.mode", m, "database.ssl.mode")
			}
		}
		tr.out.set("source.start", "latest", "a first run without an imported offset starts here; Debezium's snapshot is not repeated")
	case wal.Kind:
		if !hasPort {
			port = "5432"
		}
		u := url.URL{Scheme: "postgres", User: url.UserPassword(user, "PASSWORD"), Host: hostPort(host, port), Path: "/" + dbname}
		q := url.Values{}
		if mode, ok := tr.get("database.sslmode"); ok {
			q.Set("sslmode", mode)
		}
		u.RawQuery = q.Encode()
		tr.out.set("source.dsn", u.String(), "the password is not copied")
		if table != "" {
			if schema == "" {
				schema = "public"
			}
			tr.out.set("source.table", schema+"."+table, "")
		}
		slot, ok := tr.get("slot.name")
		if !ok {
			slot = "debezium"
		}
		tr.out.set("source.slot", slot, "Debezium's slot: outbox-cdc continues from it (pgoutput only)")
		pub, ok := tr.get("publication.name")
		if !ok {
			pub = "dbz_publication"
		}
		tr.out.set("source.publication", pub, "")
		if plugin, ok := tr.get("plugin.name"); ok && plugin != "pgoutput" {
			tr.unsupported("plugin.name", fmt.Sprintf("%s: outbox-cdc decodes pgoutput only, so Debezium's slot cannot be reused; create a pgoutput slot before stopping Debezium (docs/migration.md, Cut-over runbook)", plugin))
		} else if !ok {
			tr.unsupported("plugin.name", "not set: Debezium's default before 2.0 was decoderbufs, which outbox-cdc cannot read; if the slot is pgoutput, ignore this")
		}
		if mode, ok := tr.get("publication.autocreate.mode"); ok {
			tr.out.set("source.create", mode != "disabled", "publication.autocreate.mode "+mode)
		}
		if v, ok := tr.get("slot.drop.on.stop"); ok && v == "true" {
			tr.unsupported("slot.drop.on.stop", "outbox-cdc never drops its slot: it resumes from it")
		}
		tr.out.set("source.start", "earliest", "the slot's oldest retained change")
	}
	if mode, ok := tr.get("snapshot.mode"); ok {
		switch mode {
		case "never", "no_data", "schema_only", "initial", "when_needed":
			tr.ignored("snapshot.mode", "outbox-cdc does not snapshot the outbox table (rows already in it are history, not events); the imported offset says where streaming resumes")
		default:
			tr.ignored("snapshot.mode", mode+": outbox-cdc does not snapshot; to publish rows a polling relay left undelivered see source.start: pending")
		}
	}
}

func hostPort(host, port string) string {
	if strings.Contains(host, ":") && !strings.HasPrefix(host, "[") {
		host = "[" + host + "]"
	}
	return host + ":" + port
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// route translates the EventRouter's options.
func (tr *translator) route() {
	p := tr.prefix
	tr.out.set("route.preset", "debezium", "the EventRouter's default columns: id, aggregatetype, aggregateid, type, payload; header id")
	cols := []struct{ opt, key, def string }{
		{"table.field.event.id", "message_id", "id"},
		{"table.field.event.key", "aggregate_id", "aggregateid"},
		{"table.field.event.type", "event_type", "type"},
		{"table.field.event.payload", "payload", "payload"},
		{"route.by.field", "aggregate_type", "aggregatetype"},
		{"table.field.event.timestamp", "timestamp", ""},
		{"table.field.event.schema.version", "schema_version", ""},
	}
	for _, c := range cols {
		v, ok := tr.get(p + c.opt)
		if !ok || v == c.def || v == "" {
			continue
		}
		if c.key == "timestamp" && tr.server {
			tr.ignored(p+c.opt, "Debezium Server's Kafka sink sends records without the transform's timestamp (the producer stamps them), so the column never reached Kafka")
			continue
		}
		tr.out.set("route.columns."+c.key, v, c.opt)
	}
	regex, hasRegex := tr.get(p + "route.topic.regex")
	repl, hasRepl := tr.get(p + "route.topic.replacement")
	if hasRegex || hasRepl {
		if !hasRegex {
			regex = "(?<routedByValue>.*)"
		}
		if !hasRepl {
			repl = "outbox.event.${routedByValue}"
		}
		if tmpl, ok := topicTemplate(regex, repl); ok {
			tr.out.set("route.topic", tmpl, "route.topic.replacement "+repl)
		} else {
			tr.out.set("route.topic_regex", regex, "route.topic.regex")
			tr.out.set("route.topic_replacement", repl, "route.topic.replacement")
		}
	}
	if v, ok := tr.get(p + "table.fields.additional.placement"); ok {
		var headers, envelope []string
		for _, f := range splitList(v) {
			parts := strings.Split(f, ":")
			for i := range parts {
				parts[i] = strings.TrimSpace(parts[i])
			}
			if len(parts) < 2 || len(parts) > 3 {
				tr.unsupported(p+"table.fields.additional.placement", fmt.Sprintf("%q is not column:placement[:alias]", f))
				continue
			}
			col, alias := parts[0], parts[0]
			if len(parts) == 3 {
				alias = parts[2]
			}
			switch strings.ToLower(parts[1]) {
			case "header":
				if alias == col {
					headers = append(headers, col)
				} else {
					headers = append(headers, col+":"+alias)
				}
			case "envelope":
				if alias == col {
					envelope = append(envelope, col)
				} else {
					envelope = append(envelope, col+":"+alias)
				}
			case "partition":
				if tr.server {
					tr.ignored(p+"table.fields.additional.placement", fmt.Sprintf("%q: Debezium Server's Kafka sink ignores the partition a transform sets (records went by key), so outbox-cdc partitions by key too", f))
					continue
				}
				tr.out.set("route.partition_column", col, "partition placement")
			default:
				tr.unsupported(p+"table.fields.additional.placement", fmt.Sprintf("%q: unknown placement %s", f, parts[1]))
			}
		}
		if len(headers) > 0 {
			tr.out.set("route.headers", headers, "table.fields.additional.placement (header)")
		}
		if len(envelope) > 0 {
			tr.out.set("route.envelope", envelope, "table.fields.additional.placement (envelope)")
		}
	}
	missing, _ := tr.get(p + "table.field.additional.missing")
	if missing == "" {
		missing = "error"
	}
	tr.out.set("route.on_missing_column", strings.ToLower(missing), "table.field.additional.missing (Debezium's default: error)")
	for _, o := range routeOptions {
		if v, ok := tr.get(p + o.opt); ok {
			if x, ok := o.value(v); ok {
				tr.out.set(o.key, x, "")
			}
		}
	}
	op, _ := tr.get(p + "table.op.invalid.behavior")
	if op == "" {
		op = "warn"
	}
	tr.out.set("route.on_update", strings.ToLower(op), "table.op.invalid.behavior (Debezium's default: warn)")
	if tr.kind == wal.Kind {
		tr.note("route.on_update needs the publication to publish UPDATEs (Debezium's dbz_publication does); with an insert-only publication outbox-cdc refuses to start and says so")
	}
	tr.each(p+"tracing.", func(k, _ string) {
		tr.unsupported(k, "Debezium's tracing SMT is not reproduced; store the W3C traceparent in a column and list it in route.headers")
	})
	for _, k := range []string{p + "predicate", p + "negate"} {
		if _, ok := tr.get(k); ok {
			tr.unsupported(k, "transform predicates are not reproduced: the EventRouter applies to every outbox row")
		}
	}
	// Debezium's record timestamp is the time it processed the change
	// (ts_ms) or, in Debezium Server, the time its producer sent the
	// record: production time either way, outbox-cdc's default.
	why := "Debezium stamps the time it processed the change (ts_ms)"
	switch _, col := tr.out.get("route.columns.timestamp"); {
	case tr.server:
		why = "Debezium Server's Kafka sink lets the producer stamp the time it sends"
	case col:
		why = "a NULL timestamp column falls back to it, as to ts_ms in Debezium"
	}
	tr.out.set("route.timestamp", "produce", why)
}

// routeOptions are the EventRouter options that become one route key each,
// in the order they are written.
var routeOptions = []struct {
	opt, key string
	value    func(string) (any, bool)
}{
	{"route.tombstone.on.empty.payload", "route.tombstone_on_empty_payload", onlyTrue},
	{"table.expand.json.payload", "route.expand_json_payload", onlyTrue},
	{"table.json.payload.null.behavior", "route.expand_json_nulls", lower},
	{"table.json.payload.empty.array.behavior", "route.expand_json_empty_arrays", lower},
}

// Value conversions for the tables: false means nothing is written.
func onlyTrue(v string) (any, bool) { return true, v == "true" }
func lower(v string) (any, bool)    { return strings.ToLower(v), true }
func text(v string) (any, bool)     { return v, true }
func integer(v string) (any, bool) {
	n, err := strconv.Atoi(v)
	return n, err == nil
}
func millis(v string) (any, bool) {
	n, err := strconv.Atoi(v)
	return strconv.Itoa(n) + "ms", err == nil
}

// topicTemplate turns the default regex with a replacement that only
// wraps ${routedByValue} in literal text into a route.topic template.
var templateRepl = regexp.MustCompile(`^([A-Za-z0-9._-]*)\$\{routedByValue\}([A-Za-z0-9._-]*)$`)

func topicTemplate(regex, repl string) (string, bool) {
	if regex != "(?<routedByValue>.*)" {
		return "", false
	}
	m := templateRepl.FindStringSubmatch(repl)
	if m == nil {
		return "", false
	}
	return m[1] + "{aggregate_type}" + m[2], true
}

// converters translates key.converter, value.converter, header.converter
// (Kafka Connect) or debezium.format.* (Debezium Server).
// contextHeaders translates extended.headers.enabled: Debezium 3.2 and
// later add __debezium.context.* headers to every record (3.2.0 always,
// 3.2.1 and later unless extended.headers.enabled is false); runId only
// from 3.4 on. The configuration does not say which version ran.
func (tr *translator) contextHeaders() {
	v, ok := tr.get("extended.headers.enabled")
	prefix := tr.props["topic.prefix"]
	if prefix == "" {
		prefix = tr.props["database.server.name"]
	}
	switch {
	case !ok:
		tr.note("Debezium 3.2 and later add the headers __debezium.context.connectorLogicalName, taskId, connectorName (and from 3.4 runId) to every record "+
			"unless extended.headers.enabled is false; if this connector ran 3.2 or later and a consumer reads them, set route.context_headers.enabled: true "+
			"(logical_name %q%s)", prefix, map[bool]string{true: ", connector_name mariadb", false: ""}[tr.mariadb])
		return
	case strings.EqualFold(v, "false"):
		tr.ignored("extended.headers.enabled", "false: no context headers, as outbox-cdc sends by default")
		return
	case !strings.EqualFold(v, "true"):
		tr.unsupported("extended.headers.enabled", fmt.Sprintf("%q is not true or false", v))
		return
	}
	tr.out.set("route.context_headers.enabled", true, "extended.headers.enabled: the __debezium.context.* headers")
	if prefix != "" {
		tr.out.set("route.context_headers.logical_name", prefix, "topic.prefix")
		tr.get("topic.prefix")
		tr.get("database.server.name")
	}
	if tr.mariadb {
		tr.out.set("route.context_headers.connector_name", "mariadb", "Debezium's MariaDB connector")
	}
	tr.note("route.context_headers sends runId, as Debezium 3.4 and later do; if the connector ran Debezium 3.2 or 3.3, set route.context_headers.run_id: false")
}

func (tr *translator) converters() {
	for _, part := range []string{"key", "value"} {
		name := tr.converter(part)
		tr.out.set("route.converters."+part, name, "")
		if name == "binary" {
			tr.delegate(part)
		}
		if part == "value" {
			tr.valueCnv = name
		}
		if name == "json" || (name == "binary" && tr.props[part+".converter.delegate.converter.type"] == "org.apache.kafka.connect.json.JsonConverter") {
			key := part + ".converter.schemas.enable"
			if name == "binary" {
				key = part + ".converter.delegate.converter.type.schemas.enable"
			}
			on := tr.flag(key)
			if name == "binary" {
				tr.out.set("route.converters.delegate_schemas", on, key)
			} else {
				tr.out.set("route.converters."+part+"_schemas", on, key+" (JsonConverter's default: true)")
			}
		}
		if v, ok := tr.get(part + ".converter.decimal.format"); ok && part == "value" {
			tr.out.set("route.converters.decimal_format", strings.ToLower(v), "")
		}
		if v, ok := tr.get(part + ".converter.replace.null.with.default"); ok && part == "value" {
			tr.out.set("route.converters.replace_null_with_default", v != "false", "")
		}
		tr.each(part+".converter.", func(k, _ string) {
			tr.unsupported(k, "a converter setting outbox-cdc does not reproduce")
		})
	}
	// Headers.
	if tr.server {
		format, ok := tr.get("server.format.header")
		if !ok {
			format = "json"
		}
		switch format {
		case "json":
			on := tr.flag("header.converter.schemas.enable")
			tr.out.set("route.converters.headers", "json", "Debezium Server's header format")
			tr.out.set("route.converters.header_schemas", on, "debezium.format.header.schemas.enable (default true)")
		default:
			tr.unsupported("debezium.format.header", format+": outbox-cdc writes Debezium Server's json header format or Kafka Connect's SimpleHeaderConverter")
			tr.out.set("route.converters.headers", "simple", "")
		}
	} else {
		class, ok := tr.get("header.converter")
		h, known := headerConverters[class]
		switch {
		case !ok:
			tr.out.set("route.converters.headers", "simple", "Kafka Connect's default header.converter, SimpleHeaderConverter")
		case known:
			tr.out.set("route.converters.headers", h.name, h.comment)
			if h.name == "json" {
				tr.out.set("route.converters.header_schemas", tr.flag("header.converter.schemas.enable"), "")
			}
		default:
			tr.unsupported("header.converter", class+": not reproduced")
			tr.out.set("route.converters.headers", "simple", "")
		}
	}
	tr.each("header.converter.", func(k, _ string) { tr.unsupported(k, "a header converter setting outbox-cdc does not reproduce") })
	// Settings of the connector that shape the column values.
	if v, ok := tr.get("decimal.handling.mode"); ok {
		tr.out.set("route.converters.decimal_handling", v, "")
	}
	for _, m := range valueModes {
		switch v, ok := tr.get(m.key); {
		case !ok:
		case slices.Contains(m.same, v):
			tr.ignored(m.key, m.ignored)
		default:
			tr.unsupported(m.key, v+": "+m.unsupported)
		}
	}
	prefix, ok := tr.get("topic.prefix")
	if !ok {
		prefix, ok = tr.get("database.server.name")
	}
	if ok {
		_, ctx := tr.out.get("route.context_headers.enabled")
		if _, env := tr.out.get("route.envelope"); env {
			tr.out.set("route.converters.topic_prefix", prefix, "names the envelope's value schema")
		} else if !ctx {
			tr.ignored(map[bool]string{true: "topic.prefix", false: "database.server.name"}[tr.props["topic.prefix"] != ""],
				"names Debezium's own topics; the EventRouter routes outbox records to their own topics")
		}
	}
	if v, _ := tr.out.get("route.expand_json_payload"); v == true && tr.valueCnv == "string" {
		tr.unsupported(tr.prefix+"table.expand.json.payload", "under StringConverter Debezium writes the expanded payload as Java's Struct{...} text, which no consumer can parse: "+
			"not reproduced; outbox-cdc refuses the combination (use value.converter JsonConverter)")
		tr.out.delete("route.expand_json_payload")
	}
	if _, env := tr.out.get("route.envelope"); env && tr.valueCnv == "string" {
		tr.unsupported(tr.prefix+"table.fields.additional.placement", "envelope fields under StringConverter make Debezium write Java's Struct{...} text: not reproduced")
		tr.out.delete("route.envelope")
	}
}

// headerConverters maps Kafka Connect header converter classes to
// route.converters.headers (json also takes schemas.enable).
var headerConverters = map[string]struct{ name, comment string }{
	"org.apache.kafka.connect.storage.SimpleHeaderConverter": {"simple", ""},
	"org.apache.kafka.connect.json.JsonConverter":            {"json", ""},
	"org.apache.kafka.connect.storage.StringConverter":       {"simple", "StringConverter writes the same text as SimpleHeaderConverter for the header values the EventRouter sets"},
}

// valueModes are connector settings that shape column values: outbox-cdc
// renders the values the modes in same render (ignored), and no other
// (unsupported: the value, then the reason).
var valueModes = []struct {
	key                  string
	same                 []string
	ignored, unsupported string
}{
	{"time.precision.mode", []string{"adaptive", "adaptive_time_microseconds"},
		"the default mode: date and time columns render the same", "outbox-cdc renders date and time columns as the default adaptive mode does"},
	{"binary.handling.mode", []string{"bytes"}, "the default", "outbox-cdc renders binary columns as bytes (the default)"},
	{"bigint.unsigned.handling.mode", []string{"long"}, "the default", "outbox-cdc renders BIGINT UNSIGNED as long (the default)"},
	{"schema.name.adjustment.mode", []string{"none"}, "none: names unchanged, as outbox-cdc writes them", "outbox-cdc writes schema names unchanged (none)"},
	{"field.name.adjustment.mode", []string{"none"}, "none: names unchanged", "outbox-cdc writes the expanded payload's field names unchanged (none)"},
}

// serverFormats maps Debezium Server's debezium.format.key and .value to
// route.converters names.
var serverFormats = map[string]string{"json": "json", "simplestring": "string", "binary": "binary", "jsonbytearray": "json"}

// converter returns route.converters' name for a part's converter.
func (tr *translator) converter(part string) string {
	if tr.server {
		format, ok := tr.get("server.format." + part)
		if !ok {
			format = "json"
		}
		if name, ok := serverFormats[format]; ok {
			return name
		}
		tr.unsupported("debezium.format."+part, format+": outbox-cdc writes json, simplestring and binary")
		return "json"
	}
	class, ok := tr.get(part + ".converter")
	if !ok {
		tr.note("%s.converter is not in the connector's configuration, so Kafka Connect used the worker's: the translation assumes JsonConverter with schemas.enable=true (the default worker configuration); "+
			"if your worker's %s.converter differs, set route.converters.%s accordingly", part, part, part)
		return "json"
	}
	name, ok := converterClasses[class]
	if !ok {
		tr.unsupported(part+".converter", class+": outbox-cdc reproduces StringConverter, JsonConverter, ByteArrayConverter and BinaryDataConverter")
		return "json"
	}
	return name
}

// delegate translates BinaryDataConverter's delegate.converter.type.
func (tr *translator) delegate(part string) {
	d, ok := tr.get(part + ".converter.delegate.converter.type")
	if !ok {
		return
	}
	switch converterClasses[d] {
	case "json":
		tr.out.set("route.converters.delegate", "json", "delegate.converter.type")
	case "string":
		tr.out.set("route.converters.delegate", "string", "delegate.converter.type")
	default:
		tr.unsupported(part+".converter.delegate.converter.type", d+": not reproduced")
	}
}

// sink translates what Debezium Server says about Kafka; Kafka Connect
// keeps brokers in the worker's configuration.
func (tr *translator) sink() {
	tr.out.set("sink.type", "kafka", "")
	if tr.server {
		if t, ok := tr.get("debezium.sink.type"); ok && t != "kafka" {
			tr.unsupported("debezium.sink.type", t+": outbox-cdc writes to Kafka")
		}
	}
	brokers, ok := tr.get("debezium.sink.kafka.producer.bootstrap.servers")
	if !ok {
		brokers, ok = tr.get("producer.override.bootstrap.servers")
	}
	if ok {
		tr.out.set("sink.brokers", splitList(brokers), "")
	} else {
		tr.out.set("sink.brokers", []string{"BROKER:9092"}, "Kafka Connect keeps bootstrap.servers in the worker's configuration: set it")
		tr.note("set sink.brokers to the Kafka cluster's bootstrap servers (the worker's bootstrap.servers)")
	}
	for _, pre := range []string{"debezium.sink.kafka.producer.", "producer.override."} {
		tr.each(pre, func(k, v string) {
			r, ok := producerSettings[strings.TrimPrefix(k, pre)]
			if !ok {
				r = rule{unsupported: "a producer setting outbox-cdc does not take; see sink.* in docs/configuration.md"}
			}
			tr.apply(k, v, r)
		})
	}
	tr.each("debezium.sink.", func(k, _ string) {
		tr.unsupported(k, "a Debezium Server sink setting outbox-cdc does not take")
	})
}

// A rule says what becomes of one key: it is translated into the outbox-cdc
// key to (value converts it; false writes nothing), or else ignored, or
// else unsupported, with the reason.
type rule struct {
	to                   string
	value                func(string) (any, bool)
	ignored, unsupported string
}

func (tr *translator) apply(k, v string, r rule) {
	switch {
	case r.to != "":
		tr.get(k)
		if x, ok := r.value(v); ok {
			tr.out.set(r.to, x, "")
		}
	case r.ignored != "":
		tr.ignored(k, r.ignored)
	default:
		tr.unsupported(k, r.unsupported)
	}
}

// producerSettings are the Kafka producer settings of Debezium Server
// (debezium.sink.kafka.producer.*) and Kafka Connect (producer.override.*).
var producerSettings = func() map[string]rule {
	m := map[string]rule{
		"compression.type": {to: "sink.compression", value: text},
		"linger.ms":        {to: "sink.linger", value: millis},
		"max.request.size": {to: "sink.max_message_bytes", value: integer},
		"client.id":        {to: "sink.client_id", value: text},
	}
	for _, k := range []string{"acks", "enable.idempotence", "max.in.flight.requests.per.connection", "retries", "key.serializer", "value.serializer"} {
		m[k] = rule{ignored: "outbox-cdc's producer is always idempotent with acks=all and byte-array serializers"}
	}
	for _, k := range []string{"security.protocol", "sasl.mechanism", "sasl.jaas.config", "ssl.truststore.location", "ssl.keystore.location"} {
		m[k] = rule{unsupported: "set sink.tls and sink.sasl by hand (PEM files, not Java keystores; the JAAS password is not copied)"}
	}
	return m
}()

// pipeline translates Kafka Connect's error handling.
func (tr *translator) pipeline() {
	tol, _ := tr.get("errors.tolerance")
	dlq, hasDLQ := tr.get("errors.deadletterqueue.topic.name")
	if tol == "all" && hasDLQ && dlq != "" {
		tr.out.set("pipeline.on_error", "dlq", "errors.tolerance=all with a dead letter queue")
		tr.out.set("pipeline.dlq_topic", dlq, "")
	} else if tol == "all" {
		tr.unsupported("errors.tolerance", "all without a dead letter queue skips bad records silently; outbox-cdc never does: it halts (pipeline.on_error: halt) or dead-letters them (dlq)")
	}
	tr.each("errors.", func(k, _ string) {
		tr.ignored(k, "outbox-cdc logs every bad row and puts the reason in the dead letter's headers")
	})
}

// ignoredPrefixes are settings that do not change what outbox-cdc writes.
var ignoredPrefixes = []struct{ prefix, reason string }{
	{"tasks.max", "outbox-cdc reads the log with one task"},
	{"schema.history.internal", "outbox-cdc reads column names and types from the binlog and the catalog; it keeps no schema history"},
	{"database.history", "outbox-cdc keeps no schema history"},
	{"include.schema.changes", "outbox-cdc writes no schema change topic"},
	{"include.query", "outbox-cdc writes no change events, only outbox records"},
	{"tombstones.on.delete", "the EventRouter drops deletes; so does outbox-cdc"},
	{"skipped.operations", "the EventRouter routes inserts only; outbox-cdc reads inserts only"},
	{"heartbeat.", "outbox-cdc moves its position on an idle outbox by itself (no heartbeat topic)"},
	{"max.batch.size", "batches: pipeline.max_batch_records"},
	{"max.queue.size", "buffering: pipeline.queue_transactions"},
	{"poll.interval.ms", "outbox-cdc does not poll"},
	{"offset.", "offsets: use outbox-cdc position import-debezium, then outbox-cdc keeps its own checkpoint"},
	{"snapshot.", "outbox-cdc does not snapshot"},
	{"incremental.snapshot.", "outbox-cdc does not snapshot"},
	{"signal.", "outbox-cdc takes no signals"},
	{"notification.", "outbox-cdc sends no notifications"},
	{"database.connectionTimeZone", "outbox-cdc reads DATETIME as written, like Debezium's default"},
	{"connect.timeout.ms", "source connect timeouts are outbox-cdc's own"},
	{"connect.keep.alive", "outbox-cdc keeps the replication connection alive itself"},
	{"event.processing.failure.handling.mode", "outbox-cdc never skips a row it cannot decode"},
	{"inconsistent.schema.handling.mode", "outbox-cdc stops on a table it cannot map"},
	{"status.update.interval.ms", "Postgres status updates: source.status_interval"},
	{"quarkus.", "Debezium Server's runtime settings"},
	{"debezium.api.", "Debezium Server's runtime settings"},
	{"config.action.reload", "Kafka Connect's own setting"},
	{"config.providers", "Kafka Connect's config providers: put secrets into *_file keys"},
}

// otherSettings are the settings that are neither translated nor ignored
// by prefix: the first that matches a key says what became of it.
var otherSettings = []struct {
	match func(key, value string) bool
	rule
}{
	{func(k, v string) bool { return k == "provide.transaction.metadata" && v == "true" },
		rule{unsupported: "outbox-cdc writes no transaction topic; every record's id header names its row"}},
	{func(k, _ string) bool { return k == "provide.transaction.metadata" }, rule{ignored: "false: nothing to write"}},
	{func(k, _ string) bool { return k == "predicates" || strings.HasPrefix(k, "predicates.") },
		rule{unsupported: "Kafka Connect transform predicates are not reproduced: the EventRouter applies to every outbox row"}},
	{func(k, _ string) bool { return k == "message.key.columns" },
		rule{unsupported: "changes Debezium's change-event keys, not the EventRouter's; outbox-cdc keys records by table.field.event.key"}},
	{func(k, _ string) bool {
		return strings.HasPrefix(k, "column.") || strings.HasPrefix(k, "datatype.propagate")
	},
		rule{unsupported: "column transformations and type propagation change the values or schemas Debezium writes; outbox-cdc does not reproduce them"}},
	{func(k, _ string) bool {
		return k == "converters" || strings.Contains(k, ".converter.") && !strings.HasPrefix(k, "key.") && !strings.HasPrefix(k, "value.") && !strings.HasPrefix(k, "header.")
	}, rule{unsupported: "custom Debezium converters change column values; outbox-cdc does not run them"}},
	{func(k, _ string) bool { return k == "database.include.list" || k == "schema.include.list" },
		rule{ignored: "the outbox table's database or schema is in source.dsn / source.table"}},
}

// rest accounts for the settings not translated so far.
func (tr *translator) rest() {
next:
	for _, k := range sortedKeys(tr.props) {
		if tr.used[k] {
			continue
		}
		for _, ig := range ignoredPrefixes {
			if strings.HasPrefix(k, ig.prefix) {
				tr.ignored(k, ig.reason)
				continue next
			}
		}
		v := tr.props[k]
		for _, o := range otherSettings {
			if o.match(k, v) {
				tr.apply(k, v, o.rule)
				break
			}
		}
	}
}

// ymap builds a YAML mapping keeping the order keys are set in.
type ymap struct {
	root *yaml.Node
}

func newYMap() *ymap {
	return &ymap{root: &yaml.Node{Kind: yaml.MappingNode}}
}

func (m *ymap) node(path string, create bool) (*yaml.Node, *yaml.Node) {
	parts := strings.Split(path, ".")
	cur := m.root
	for i, p := range parts {
		var found *yaml.Node
		var key *yaml.Node
		for j := 0; j+1 < len(cur.Content); j += 2 {
			if cur.Content[j].Value == p {
				key, found = cur.Content[j], cur.Content[j+1]
			}
		}
		if found == nil {
			if !create {
				return nil, nil
			}
			key = &yaml.Node{Kind: yaml.ScalarNode, Value: p}
			found = &yaml.Node{Kind: yaml.MappingNode}
			cur.Content = append(cur.Content, key, found)
		}
		if i == len(parts)-1 {
			return key, found
		}
		cur = found
	}
	return nil, nil
}

func (m *ymap) set(path string, v any, comment string) {
	key, n := m.node(path, true)
	*n = yaml.Node{}
	switch x := v.(type) {
	case string:
		n.Kind, n.Tag, n.Value = yaml.ScalarNode, "!!str", x
	case int:
		n.Kind, n.Tag, n.Value = yaml.ScalarNode, "!!int", strconv.Itoa(x)
	case bool:
		n.Kind, n.Tag, n.Value = yaml.ScalarNode, "!!bool", strconv.FormatBool(x)
	case []string:
		n.Kind, n.Style = yaml.SequenceNode, yaml.FlowStyle
		for _, s := range x {
			n.Content = append(n.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s})
		}
	}
	if n.Kind == yaml.SequenceNode {
		n.LineComment = comment // on the key, yaml.v3 would print it after the list
	} else {
		key.LineComment = comment
	}
}

// get returns the value set at path: a string, bool, or []string.
func (m *ymap) get(path string) (any, bool) {
	_, n := m.node(path, false)
	if n == nil {
		return nil, false
	}
	switch {
	case n.Kind == yaml.SequenceNode:
		var out []string
		for _, c := range n.Content {
			out = append(out, c.Value)
		}
		return out, true
	case n.Tag == "!!bool":
		return n.Value == "true", true
	}
	return n.Value, true
}

func (m *ymap) delete(path string) {
	parts := strings.Split(path, ".")
	parent := m.root
	if len(parts) > 1 {
		_, parent = m.node(strings.Join(parts[:len(parts)-1], "."), false)
	}
	if parent == nil {
		return
	}
	last := parts[len(parts)-1]
	for j := 0; j+1 < len(parent.Content); j += 2 {
		if parent.Content[j].Value == last {
			parent.Content = append(parent.Content[:j], parent.Content[j+2:]...)
			return
		}
	}
}

func (m *ymap) marshal() ([]byte, error) {
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(m.root); err != nil {
		return nil, err
	}
	return buf.Bytes(), enc.Close()
}
