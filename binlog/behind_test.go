package binlog

import "testing"

func TestFilesAfter(t *testing.T) {
	files := []binlogFile{{name: "b.000007"}, {name: "b.000008"}, {name: "b.000009"}}
	for cur, want := range map[string]int{"b.000009": 0, "b.000008": 1, "b.000007": 2, "b.000003": 3} {
		if got := filesAfter(files, cur); got != want {
			t.Errorf("filesAfter(%s) = %d, want %d", cur, got, want)
		}
	}
}
