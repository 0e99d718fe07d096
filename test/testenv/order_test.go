package testenv

import "testing"

func TestOrderOf(t *testing.T) {
	rank := map[string]int{"a1": 0, "b1": 1, "a2": 2, "a3": 3}
	arr := func(ids ...string) []Arrival {
		var as []Arrival
		for _, id := range ids {
			as = append(as, Arrival{id, id[:1]})
		}
		return as
	}
	for _, c := range []struct {
		ids  []string
		want Order
	}{
		{[]string{"a1", "b1", "a2", "a3"}, Order{}},
		// A retried write: each key's last copies in order.
		{[]string{"a1", "a2", "a1", "a2", "a3"}, Order{Copies: 2, Late: 1}},
		// A copy sent on an abandoned connection arrives after a later row.
		{[]string{"a1", "a2", "a3", "a2"}, Order{Copies: 1, Late: 1, LastOutOfOrder: 1}},
		// A nacked row whose successor was stored: first copies out of order.
		{[]string{"a2", "a1", "a2", "a3"}, Order{Copies: 1, Late: 1, FirstOutOfOrder: 1}},
		{[]string{"x", "a1"}, Order{}},
	} {
		if got := OrderOf(arr(c.ids...), rank); got != c.want {
			t.Errorf("%v: %+v, want %+v", c.ids, got, c.want)
		}
	}
}
