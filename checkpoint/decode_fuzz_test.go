package checkpoint

import (
	"testing"
	"time"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
)

// FuzzDecode: whatever a checkpoint file holds, decode either refuses it
// with a reason or returns a position with a source kind, never panics;
// and what it accepts survives encode and decode again unchanged.
func FuzzDecode(f *testing.F) {
	at := time.Date(2026, 11, 30, 20, 21, 31, 123456789, time.UTC)
	for _, pos := range []outboxcdc.Position{
		"mysql:file:mariadb-bin.000003:1234",
		"mysql:gtid:3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5",
		"mysql:mariadb-gtid:0-1-57;restart=mariadb-gtid:0-1-42",
		"postgres:0/16B3748",
		"postgres:" + `"quoted\u0000"`,
	} {
		f.Add(encode(nil, pos, at))
	}
	f.Add([]byte(magic + " 1\n{}\n" + crcPrefix + "00000000\n"))
	f.Add([]byte(magic + " 2\n"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		s, why := decode(data)
		if why != "" {
			if s != (Saved{}) {
				t.Fatalf("refused (%s) but returned %+v", why, s)
			}
			return
		}
		if s.Position.Kind() == "" {
			t.Fatalf("accepted a position without a kind: %q", s.Position)
		}
		again := encode(nil, s.Position, s.SavedAt)
		s2, why := decode(again)
		if why != "" || s2.Position != s.Position || !s2.SavedAt.Equal(s.SavedAt) {
			t.Fatalf("re-encoded checkpoint decodes as %+v (%s), want %+v", s2, why, s)
		}
	})
}
