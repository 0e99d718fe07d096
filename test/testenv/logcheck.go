package testenv

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
)

// CheckJSONLines reads r as JSON lines, the shape of every line the
// connector writes with log.format json, and returns an error naming the
// first line (by number and text) that is not exactly one JSON object, or
// whose objects repeat a key at any depth. encoding/json keeps the last of
// two equal keys without a word; log pipelines and strict parsers reject
// the line or drop a field, so a repeated key is a defect here. Empty
// lines are allowed.
func CheckJSONLines(r io.Reader) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Bytes()
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		if err := checkJSONLine(line); err != nil {
			return fmt.Errorf("log line %d: %v:\n%s", n, err, line)
		}
	}
	return sc.Err()
}

// checkJSONLine checks that line is one JSON object with unique keys.
func checkJSONLine(line []byte) error {
	if b := bytes.TrimSpace(line); b[0] != '{' {
		return errors.New("not a JSON object")
	}
	d := json.NewDecoder(bytes.NewReader(line))
	d.UseNumber()
	if err := checkValue(d, ""); err != nil {
		return err
	}
	if _, err := d.Token(); err != io.EOF {
		return errors.New("more than one JSON value on the line, or text after the object")
	}
	return nil
}

// checkValue reads one value from d, checking every object in it for
// repeated keys; path names where it is, for the message.
func checkValue(d *json.Decoder, path string) error {
	tok, err := d.Token()
	if err != nil {
		return fmt.Errorf("not JSON: %v", err)
	}
	switch tok {
	case json.Delim('{'):
		seen := map[string]bool{}
		for d.More() {
			k, err := d.Token()
			if err != nil {
				return fmt.Errorf("not JSON: %v", err)
			}
			key := k.(string)
			if seen[key] {
				return fmt.Errorf("duplicate key %q", strings.TrimPrefix(path+"."+key, "."))
			}
			seen[key] = true
			if err := checkValue(d, path+"."+key); err != nil {
				return err
			}
		}
		_, err = d.Token() // '}'
	case json.Delim('['):
		for i := 0; d.More(); i++ {
			if err := checkValue(d, fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
		_, err = d.Token() // ']'
	}
	if err != nil {
		return fmt.Errorf("not JSON: %v", err)
	}
	return nil
}
