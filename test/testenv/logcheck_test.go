package testenv

import (
	"strings"
	"testing"
)

func TestCheckJSONLines(t *testing.T) {
	for _, c := range []struct {
		name, log, want string // want: "" for valid, else a part of the error
	}{
		{"valid", `{"level":"info","component":"ha","message":"x"}` + "\n\n" + `{"a":{"b":[1,{"c":2}]}}` + "\n", ""},
		{"no trailing newline", `{"a":1}`, ""},
		{"duplicate top-level key", `{"a":1}` + "\n" + `{"component":"ha","lock":"x","component":"ha"}` + "\n", `log line 2: duplicate key "component"`},
		{"duplicate nested key", `{"a":{"b":1,"b":2}}`, `duplicate key "a.b"`},
		{"duplicate key in an array's object", `{"a":[{"b":1},{"b":1,"c":1,"b":2}]}`, `duplicate key "a[1].b"`},
		{"equal keys in sibling objects are fine", `{"a":{"k":1},"b":{"k":1}}`, ""},
		{"text line", `{"a":1}` + "\nPASS  mysql.position ok\n", "log line 2: not a JSON object"},
		{"array line", `[1,2]`, "not a JSON object"},
		{"truncated", `{"a":`, "not JSON"},
		{"two objects on a line", `{"a":1}{"b":2}`, "more than one JSON value"},
		{"text after the object", `{"a":1} trailing`, "more than one JSON value"},
		{"panic trace", "panic: boom\n\ngoroutine 1 [running]:\n", "log line 1: not a JSON object"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := CheckJSONLines(strings.NewReader(c.log))
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("valid log refused: %v", err)
			case c.want != "" && err == nil:
				t.Fatalf("accepted, want an error with %q", c.want)
			case c.want != "" && !strings.Contains(err.Error(), c.want):
				t.Fatalf("error %q does not say %q", err, c.want)
			}
		})
	}
}
