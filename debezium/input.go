package debezium

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
)

// record is one offset as Kafka Connect stores it: the partition key
// (JSON text, ["<connector>",{"server":"<prefix>"}]) and the offset value
// (JSON text). A nil value is a tombstone: the offset was deleted.
type record struct {
	key   string
	value []byte
}

// readRecords accepts every form an operator can produce with ordinary
// tools:
//
//   - a FileOffsetBackingStore file (Debezium Server's offset.storage.file.filename);
//   - a bare offset value, {"file":...} or {"lsn":...};
//   - offsets-topic lines "key<TAB>value", as printed by
//     kcat -C -t connect-offsets -f '%k\t%s\n' or by kafka-console-consumer
//     --property print.key=true; an empty, "null" or "NULL" value is a tombstone;
//   - JSON objects with "key" and "value" (or kcat -J's "payload"), one per
//     line or alone, the value as an object or as a string holding JSON.
func readRecords(data []byte) ([]record, error) {
	if bytes.HasPrefix(data, javaMagic) {
		return readJavaOffsets(data)
	}
	data = bytes.TrimPrefix(data, []byte("\xEF\xBB\xBF"))
	t := bytes.TrimSpace(data)
	if len(t) == 0 {
		return nil, fmt.Errorf("%w: the input is empty", ErrBadOffset)
	}
	if t[0] == '{' && json.Valid(t) {
		r, err := objectRecord(t)
		if err != nil {
			return nil, err
		}
		return []record{r}, nil
	}
	var recs []record
	for i, line := range strings.Split(string(data), "\n") {
		line = strings.TrimRight(line, "\r")
		if strings.TrimSpace(line) == "" {
			continue
		}
		if k, v, ok := strings.Cut(line, "\t"); ok {
			r := record{key: strings.TrimSpace(k)}
			switch v = strings.TrimSpace(v); v {
			case "", "null", "NULL":
			default:
				r.value = []byte(v)
			}
			recs = append(recs, r)
			continue
		}
		l := strings.TrimSpace(line)
		if strings.HasPrefix(l, "{") && json.Valid([]byte(l)) {
			r, err := objectRecord([]byte(l))
			if err != nil {
				return nil, fmt.Errorf("line %d: %w", i+1, err)
			}
			recs = append(recs, r)
			continue
		}
		return nil, fmt.Errorf("%w: line %d is neither \"key<TAB>value\" nor a JSON object: %.60q", ErrBadOffset, i+1, l)
	}
	return recs, nil
}

// offsetFields mark an object as a bare offset value rather than a record
// wrapper {"key":...,"value":...} (or kcat -J's "payload").
var offsetFields = []string{"file", "pos", "gtids", "lsn", "lsn_proc", "lsn_commit", "txId"}

func objectRecord(obj []byte) (record, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(obj, &m); err != nil {
		return record{}, fmt.Errorf("%w: %v", ErrBadOffset, err)
	}
	for _, f := range offsetFields {
		if _, ok := m[f]; ok {
			return record{value: obj}, nil
		}
	}
	val, hasVal := m["value"]
	if !hasVal {
		val, hasVal = m["payload"] // kcat -J
	}
	key, hasKey := m["key"]
	if !hasVal && !hasKey {
		return record{value: obj}, nil // let the conversion say what is missing
	}
	r := record{key: unquoteJSON(key)}
	if hasVal {
		if s := unquoteJSON(val); s != "" && s != "null" {
			r.value = []byte(s)
		}
	}
	return r, nil
}

// unquoteJSON returns the text a JSON string holds, or the compact JSON
// of any other value ("" for nothing).
func unquoteJSON(raw json.RawMessage) string {
	if len(raw) == 0 {
		return ""
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return strings.TrimSpace(s)
	}
	var b bytes.Buffer
	if json.Compact(&b, raw) == nil {
		return b.String()
	}
	return string(raw)
}

// connectorOf returns the connector (or Debezium Server engine) name of a
// partition key ["<name>",{...}], or "".
func connectorOf(key string) string {
	var k []json.RawMessage
	if json.Unmarshal([]byte(key), &k) != nil || len(k) == 0 {
		return ""
	}
	var name string
	if json.Unmarshal(k[0], &name) != nil {
		return ""
	}
	return name
}

// pick reduces the records to the one offset to convert: the last record
// of each key wins (the offsets topic is compacted by key, so later
// records replace earlier ones), then connector selects among keys.
func pick(recs []record, connector string) (record, error) {
	last := map[string]record{}
	var order []string
	for _, r := range recs {
		if _, ok := last[r.key]; !ok {
			order = append(order, r.key)
		}
		last[r.key] = r
	}
	if len(order) == 0 {
		return record{}, fmt.Errorf("%w: the input holds no offset record", ErrBadOffset)
	}
	if connector != "" {
		var kept []string
		for _, k := range order {
			if k == connector || connectorOf(k) == connector {
				kept = append(kept, k)
			}
		}
		if len(kept) == 0 {
			return record{}, fmt.Errorf("%w: no offset for connector %q; the input holds %s", ErrBadOffset, connector, listKeys(order))
		}
		order = kept
	}
	if len(order) > 1 {
		return record{}, fmt.Errorf("%w: the input holds offsets for %d connectors/partitions (%s); choose one by connector name", ErrBadOffset, len(order), listKeys(order))
	}
	r := last[order[0]]
	if r.value == nil {
		what := "the offset"
		if r.key != "" {
			what = "the last offset record for " + r.key
		}
		return record{}, fmt.Errorf("%w: %s is a tombstone (null): Debezium's offset was deleted, there is no position to take over", ErrBadOffset, what)
	}
	return r, nil
}

func listKeys(keys []string) string {
	s := make([]string, len(keys))
	for i, k := range keys {
		if k == "" {
			k = "(no key)"
		}
		s[i] = k
	}
	sort.Strings(s)
	return strings.Join(s, ", ")
}
