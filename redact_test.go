package outboxcdc

import "testing"

func TestRedactDSN(t *testing.T) {
	cases := map[string]string{
		"root:secret@tcp(127.0.0.1:3306)/shop":          "root:xxxxx@tcp(127.0.0.1:3306)/shop",
		"root:@tcp(127.0.0.1:3306)/shop":                "root:xxxxx@tcp(127.0.0.1:3306)/shop",
		"root@tcp(127.0.0.1:3306)/shop":                 "root@tcp(127.0.0.1:3306)/shop",
		"postgres://u:p%40ss@h:5432/db?sslmode=disable": "postgres://u:xxxxx@h:5432/db?sslmode=disable",
		"postgres://u@h/db?password=hunter2":            "postgres://u@h/db?password=xxxxx",
		"host=h user=u password=hunter2 dbname=d":       "host=h user=u password=xxxxx dbname=d",
		"u:p@ss:word@tcp(h)/d":                          "u:xxxxx@tcp(h)/d",
	}
	for in, want := range cases {
		if got := RedactDSN(in); got != want {
			t.Errorf("RedactDSN(%q) = %q, want %q", in, got, want)
		}
	}
}
