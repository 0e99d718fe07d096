package router

import "strconv"

// Destination is what route.topic names: a Kafka topic (the default), or
// the destination name of another sink (a RabbitMQ routing key, a NATS
// subject, a Redis stream key). Each sink's package defines the rules of
// its names and the command hands the router the one of sink.type
// (Config.Destination). The router renders the template for every row and
// checks the result against the rules, so a row whose values make an
// illegal name is a bad row (pipeline.on_error) on every sink, found
// before anything is sent. A dead-letter record's Topic is
// pipeline.dlq_topic, a name of the same kind.
type Destination struct {
	// Noun names it in messages: "Kafka topic", "NATS subject".
	Noun string
	// Default is the template used when route.topic is not set.
	Default string
	// AggregateID allows the {aggregate_id} placeholder: one destination
	// per aggregate (a NATS subject per aggregate is usual, a Kafka topic
	// per aggregate is not).
	AggregateID bool
	// MaxLen is the longest legal name in bytes; 0: no limit.
	MaxLen int
	// Literal reports whether byte c may appear in the template's literal
	// text, Value whether it may appear in a placeholder's value; nil
	// allows every byte.
	Literal, Value func(c byte) bool
	// Legal says in words which characters are legal, for messages.
	Legal string
	// Check reports why a complete name is not legal, as words that
	// follow "which" ("is forbidden by Kafka"), or "" (nil: every name within
	// MaxLen is).
	Check func(name string) string
}

// Kafka is the destination of the Kafka sinks: a topic name of 1..249
// characters from a-z A-Z 0-9 . _ -, not "." or "..".
var Kafka = &Destination{
	Noun:    "Kafka topic",
	Default: DefaultTopic,
	MaxLen:  maxTopicLen,
	Literal: kafkaByte,
	Value:   kafkaByte,
	Legal:   "a-z A-Z 0-9 . _ -",
	Check: func(s string) string {
		if s == "." || s == ".." {
			return "is forbidden by Kafka"
		}
		return ""
	},
}

func kafkaByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-'
}

// dest returns d, or Kafka when d is nil.
func dest(d *Destination) *Destination {
	if d == nil {
		return Kafka
	}
	return d
}

// illegalByte returns the index of the first byte of s that ok rejects, or
// -1.
func illegalByte(s string, ok func(byte) bool) int {
	if ok == nil {
		return -1
	}
	for i := 0; i < len(s); i++ {
		if !ok(s[i]) {
			return i
		}
	}
	return -1
}

// check reports why a complete name is not legal, or "".
func (d *Destination) check(s string) string {
	switch {
	case s == "":
		return "empty " + d.Noun
	case d.MaxLen > 0 && len(s) > d.MaxLen:
		return "longer than the " + strconv.Itoa(d.MaxLen) + "-byte limit of a " + d.Noun
	}
	if i := illegalByte(s, d.Literal); i >= 0 {
		return quoteByte(s[i]) + " is not allowed in a " + d.Noun + " (legal: " + d.Legal + ")"
	}
	if d.Check != nil {
		if why := d.Check(s); why != "" {
			return "a " + d.Noun + " " + strconv.Quote(s) + ", which " + why
		}
	}
	return ""
}

// Invalid reports why name (a complete destination, such as
// pipeline.dlq_topic) is not legal, or "".
func (d *Destination) Invalid(name string) string { return dest(d).check(name) }
