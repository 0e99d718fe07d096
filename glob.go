package outboxcdc

// GlobMatch matches name against pat, where * and % stand for any run of
// bytes (the table patterns of source.tables), case-insensitively (ASCII)
// when fold is set. It backtracks to the last wildcard only, so it is linear in
// practice.
func GlobMatch(pat string, name []byte, fold bool) bool {
	p, n := 0, 0
	star, mark := -1, 0
	for n < len(name) {
		switch {
		case p < len(pat) && (pat[p] == '*' || pat[p] == '%'):
			star, mark = p, n
			p++
		case p < len(pat) && sameByte(pat[p], name[n], fold):
			p++
			n++
		case star >= 0:
			p = star + 1
			mark++
			n = mark
		default:
			return false
		}
	}
	for p < len(pat) && (pat[p] == '*' || pat[p] == '%') {
		p++
	}
	return p == len(pat)
}

func sameByte(a, b byte, fold bool) bool {
	if a == b {
		return true
	}
	if !fold {
		return false
	}
	if 'A' <= a && a <= 'Z' {
		a += 'a' - 'A'
	}
	if 'A' <= b && b <= 'Z' {
		b += 'a' - 'A'
	}
	return a == b
}
