package outboxcdc

import (
	"strconv"

	"github.com/rs/zerolog"
)

// Every line the connector writes is one JSON object with unique keys
// (the e2e tests check every line of every run). zerolog appends fields
// without looking, so two rules keep keys unique: a package's constructor
// adds its own component (and context fields) to the logger it is given,
// and its callers pass their logger as it is, never one that has a
// component already; and an adapter copying a library's key-values into
// a line goes through LogKeys.
//
// LogKeys keeps the field names of one log line unique where a library's
// own key-values are copied into it (franz-go's, go-mysql's). A library
// may repeat a key, or use one the line has already: zerolog's own
// (level, time, message), the component and connector every line of ours
// may carry, and the logger's context keys the adapter knows of.
// Every line the connector writes is one JSON object with unique keys;
// zerolog does not check it, so adapters of library logs go through here.
type LogKeys map[string]struct{}

// NewLogKeys returns the keys of a new line: zerolog's level, time and
// message, component, connector, and taken (the adapter's context keys;
// error if it adds one).
func NewLogKeys(taken ...string) LogKeys {
	k := LogKeys{}
	for _, s := range append([]string{zerolog.LevelFieldName, zerolog.TimestampFieldName, zerolog.MessageFieldName,
		"component", "connector"}, taken...) {
		k[s] = struct{}{}
	}
	return k
}

// Unique returns key, or key with the first free suffix _2, _3, ... when
// it is taken, and marks what it returns taken.
func (k LogKeys) Unique(key string) string {
	u := key
	for n := 2; ; n++ {
		if _, ok := k[u]; !ok {
			break
		}
		u = key + "_" + strconv.Itoa(n)
	}
	k[u] = struct{}{}
	return u
}
