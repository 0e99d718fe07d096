package router

import (
	"fmt"
	"regexp"
	"strings"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
)

// topicRegex is Debezium's route.topic.regex / route.topic.replacement:
// the EventRouter hands the routing value to Kafka Connect's RegexRouter
// as the record's topic, which (apache/kafka
// connect/transforms/.../RegexRouter.java) replaces the topic only when
// the regex matches it whole (Matcher.matches), with
// Matcher.replaceFirst(replacement), and otherwise leaves it unchanged.
//
// The regex is compiled by Go's RE2, which accepts Java's syntax for
// everything but look-around, back-references and possessive
// quantifiers; those are refused when the configuration is loaded. The
// replacement follows java.util.regex.Matcher's rules: "$n" takes as many
// digits as name an existing group, "${name}" a named group, "\x" is a
// literal x.
type topicRegex struct {
	whole *regexp.Regexp // anchored: Matcher.matches
	find  *regexp.Regexp // unanchored: replaceFirst's find
	repl  []replPart
	src   string
}

type replPart struct {
	lit   string
	group int // -1: literal
}

// Debezium's defaults for the two settings.
const (
	debeziumTopicRegex       = "(?<routedByValue>.*)"
	debeziumTopicReplacement = "outbox.event.${routedByValue}"
)

func newTopicRegex(expr, replacement string) (*topicRegex, error) {
	if expr == "" {
		expr = debeziumTopicRegex
	}
	if replacement == "" {
		replacement = debeziumTopicReplacement
	}
	find, err := regexp.Compile(expr)
	if err != nil {
		return nil, outboxcdc.KeyErrorf("topic_regex", "", "%q: %v (look-around, back-references and possessive quantifiers of Java's regex are not supported)", expr, err)
	}
	whole := regexp.MustCompile(`^(?:` + expr + `)$`)
	t := &topicRegex{whole: whole, find: find, src: expr}
	if t.repl, err = parseReplacement(replacement, find); err != nil {
		return nil, outboxcdc.KeyErrorf("topic_replacement", "", "%q: %v", replacement, err)
	}
	return t, nil
}

// parseReplacement splits a java.util.regex replacement into literals and
// group references, checking every reference against re's groups.
func parseReplacement(s string, re *regexp.Regexp) ([]replPart, error) {
	var parts []replPart
	var lit strings.Builder
	flush := func() {
		if lit.Len() > 0 {
			parts = append(parts, replPart{lit: lit.String(), group: -1})
			lit.Reset()
		}
	}
	groups := re.NumSubexp()
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '\\':
			i++
			if i == len(s) {
				return nil, fmt.Errorf("character to be escaped is missing")
			}
			lit.WriteByte(s[i])
		case '$':
			i++
			if i == len(s) {
				return nil, fmt.Errorf("illegal group reference: group index is missing")
			}
			flush()
			if s[i] == '{' {
				end := strings.IndexByte(s[i:], '}')
				if end < 0 {
					return nil, fmt.Errorf("named capturing group is missing trailing '}'")
				}
				name := s[i+1 : i+end]
				idx := re.SubexpIndex(name)
				if name == "" || idx < 0 {
					return nil, fmt.Errorf("no group with name {%s}", name)
				}
				parts = append(parts, replPart{group: idx})
				i += end
				continue
			}
			if s[i] < '0' || s[i] > '9' {
				return nil, fmt.Errorf("illegal group reference")
			}
			n := int(s[i] - '0')
			if n > groups {
				return nil, fmt.Errorf("no group %d", n)
			}
			// Java takes further digits while the number still names a group.
			for i+1 < len(s) && s[i+1] >= '0' && s[i+1] <= '9' {
				next := n*10 + int(s[i+1]-'0')
				if next > groups {
					break
				}
				n = next
				i++
			}
			parts = append(parts, replPart{group: n})
		default:
			lit.WriteByte(c)
		}
	}
	flush()
	return parts, nil
}

// route returns the topic for a routing value.
func (t *topicRegex) route(v string) string {
	if !t.whole.MatchString(v) {
		return v
	}
	loc := t.find.FindStringSubmatchIndex(v)
	if loc == nil {
		return v
	}
	var b strings.Builder
	b.WriteString(v[:loc[0]])
	for _, p := range t.repl {
		if p.group < 0 {
			b.WriteString(p.lit)
			continue
		}
		if s, e := loc[2*p.group], loc[2*p.group+1]; s >= 0 {
			b.WriteString(v[s:e])
		}
	}
	b.WriteString(v[loc[1]:])
	return b.String()
}
