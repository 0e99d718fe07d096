package outboxcdc

import "testing"

func TestLogKeysUnique(t *testing.T) {
	k := NewLogKeys("group")
	for _, c := range []struct{ in, want string }{
		{"group", "group_2"}, {"group", "group_3"}, {"err", "err"}, {"err", "err_2"},
		{"component", "component_2"}, {"message", "message_2"}, {"time", "time_2"}, {"group_2", "group_2_2"},
	} {
		if got := k.Unique(c.in); got != c.want {
			t.Errorf("Unique(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}
