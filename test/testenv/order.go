package testenv

// Arrival is one message as an independent consumer read it: its dedupe
// id (the row's message id) and its key (the aggregate id).
type Arrival struct{ ID, Key string }

// Order is what a run of arrivals did to per-key order, rank giving each
// message id its place in commit order.
type Order struct {
	// Copies counts arrivals of a message id seen before.
	Copies int
	// Late counts arrivals (copies or not) that came after a message of
	// the same key later in commit order had arrived.
	Late int
	// FirstOutOfOrder and LastOutOfOrder count keys whose first copies,
	// or whose last copies, are not in commit order.
	FirstOutOfOrder, LastOutOfOrder int
}

// OrderOf judges arrivals against rank; ids without a rank are left out.
func OrderOf(arrivals []Arrival, rank map[string]int) Order {
	var o Order
	seen := map[string]bool{}
	high := map[string]int{}     // per key, the highest rank arrived
	first := map[string][]int{}  // per key, ranks of first copies in arrival order
	lastAt := map[string]int{}   // per id, the index of its last arrival
	keyOf := map[string]string{} // per id, its key
	for i, a := range arrivals {
		r, ok := rank[a.ID]
		if !ok {
			continue
		}
		if seen[a.ID] {
			o.Copies++
		} else {
			seen[a.ID] = true
			first[a.Key] = append(first[a.Key], r)
		}
		if h, ok := high[a.Key]; ok && h > r {
			o.Late++
		}
		if h, ok := high[a.Key]; !ok || r > h {
			high[a.Key] = r
		}
		lastAt[a.ID], keyOf[a.ID] = i, a.Key
	}
	for _, rs := range first {
		if !increasing(rs) {
			o.FirstOutOfOrder++
		}
	}
	last := map[string][]int{}
	for i, a := range arrivals {
		if r, ok := rank[a.ID]; ok && lastAt[a.ID] == i {
			last[keyOf[a.ID]] = append(last[keyOf[a.ID]], r)
		}
	}
	for _, rs := range last {
		if !increasing(rs) {
			o.LastOutOfOrder++
		}
	}
	return o
}

func increasing(rs []int) bool {
	for i := 1; i < len(rs); i++ {
		if rs[i] < rs[i-1] {
			return false
		}
	}
	return true
}
