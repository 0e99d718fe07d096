package checkpoint

import (
	"context"
	"errors"
	"hash/crc32"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
)

var ctx = context.Background()

func newFile(t testing.TB) *File {
	t.Helper()
	f, err := NewFile(FileConfig{Path: filepath.Join(t.TempDir(), "cp")}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func TestRoundTrip(t *testing.T) {
	f := newFile(t)
	pos, err := f.Load(ctx)
	if err != nil || !pos.IsZero() {
		t.Fatalf("Load of a missing file = %q, %v; want zero, nil", pos, err)
	}
	for _, p := range []outboxcdc.Position{
		"mysql:mariadb-bin.000003:1234",
		"mysql:gtid:3E11FA47-71CA-11E1-9E33-C80AA9429562:1-5,\n4F11FA47-71CA-11E1-9E33-C80AA9429562:1-9",
		`postgres:0/16B3748 "quoted" \ ünïcode`,
	} {
		if err := f.Save(ctx, p); err != nil {
			t.Fatal(err)
		}
		got, err := f.Load(ctx)
		if err != nil || got != p {
			t.Fatalf("Load = %q, %v; want %q", got, err, p)
		}
	}
	s, err := ReadFile(f.Path())
	if err != nil || time.Since(s.SavedAt) > time.Minute {
		t.Fatalf("ReadFile = %+v, %v", s, err)
	}
	if _, err := os.Stat(f.Path() + ".tmp"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("temp file left after a successful save: %v", err)
	}
	if err := f.Save(ctx, "nokind"); err == nil {
		t.Error("Save accepted a position without a kind")
	}
}

func TestFormatIsReadable(t *testing.T) {
	got := string(encode(nil, "mysql:f.000001:4", time.Date(2026, 3, 14, 15, 9, 26, 5, time.UTC)))
	want := "outbox-cdc-checkpoint 1\n" +
		`{"position":"mysql:f.000001:4","saved_at":"2026-03-14T15:09:26.000000005Z"}` + "\n" +
		"crc32c "
	if !strings.HasPrefix(got, want) || len(got) != len(want)+9 {
		t.Fatalf("encoded:\n%s", got)
	}
}

// A crash between writing the temp file and renaming it leaves a stray
// temp file (complete or not) beside the old checkpoint, which must still
// load, and the next save must succeed over the stray file.
func TestInterruptedSaveKeepsOldCheckpoint(t *testing.T) {
	f := newFile(t)
	old := outboxcdc.Position("mysql:bin.000001:100")
	if err := f.Save(ctx, old); err != nil {
		t.Fatal(err)
	}
	for _, stray := range [][]byte{
		encode(nil, "mysql:bin.000001:200", time.Now()),      // written, not renamed
		encode(nil, "mysql:bin.000001:200", time.Now())[:20], // half written
		nil, // created, nothing written
	} {
		if err := os.WriteFile(f.Path()+".tmp", stray, 0o644); err != nil {
			t.Fatal(err)
		}
		got, err := f.Load(ctx)
		if err != nil || got != old {
			t.Fatalf("Load with a stray temp file = %q, %v; want %q", got, err, old)
		}
	}
	if err := f.Save(ctx, "mysql:bin.000001:300"); err != nil {
		t.Fatal(err)
	}
	if got, err := f.Load(ctx); err != nil || got != "mysql:bin.000001:300" {
		t.Fatalf("Load after save over a stray temp file = %q, %v", got, err)
	}
}

func TestDamagedFileRefused(t *testing.T) {
	good := encode(nil, "mysql:mariadb-bin.000003:1234", time.Now())
	flip := func(i int) []byte {
		b := append([]byte(nil), good...)
		b[i] ^= 0x01
		return b
	}
	tests := []struct {
		name    string
		content []byte
		want    string
	}{
		{"empty", []byte{}, "is empty"},
		{"garbage", []byte("\x7fELF\x02\x01\x01\x00garbage"), "is not an outbox-cdc checkpoint"},
		{"other tool's json", []byte(`{"file":"mysql-bin.000003","pos":1234}` + "\n"), "is not an outbox-cdc checkpoint"},
		{"future version", []byte(strings.Replace(string(good), "checkpoint 1", "checkpoint 2", 1)), `format version "2"`},
		{"truncated in the body", good[:40], "is truncated"},
		{"truncated in the checksum", good[:len(good)-3], "checksum"},
		{"checksum line without newline", good[:len(good)-1], "is truncated"},
		{"flipped byte in the position", flip(strings.Index(string(good), "1234")), "checksum mismatch"},
		{"flipped byte in the checksum", flip(len(good) - 2), "checksum mismatch"},
		{"extra line", append(append([]byte(nil), good...), "crc32c 00000000\n"...), "checksum mismatch"},
		{"valid checksum, bad json", withSum(`{"position":"mysql:x"`), "unreadable content"},
		{"valid checksum, unknown field", withSum(`{"position":"mysql:x","saved_at":"2026-01-01T00:00:00Z","lsn":1}`), "unreadable content"},
		{"valid checksum, empty position", withSum(`{"position":"","saved_at":"2026-01-01T00:00:00Z"}`), "no source kind"},
		{"valid checksum, bad time", withSum(`{"position":"mysql:x","saved_at":"yesterday"}`), "saved_at"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFile(t)
			if err := os.WriteFile(f.Path(), tc.content, 0o644); err != nil {
				t.Fatal(err)
			}
			pos, err := f.Load(ctx)
			if err == nil {
				t.Fatalf("Load accepted a damaged file: %q", pos)
			}
			if !pos.IsZero() {
				t.Errorf("Load returned position %q with the error", pos)
			}
			if !errors.Is(err, ErrUntrusted) {
				t.Errorf("error does not wrap ErrUntrusted: %v", err)
			}
			msg := outboxcdc.Cause(err)
			for _, s := range []string{tc.want, f.Path()} {
				if !strings.Contains(msg, s) {
					t.Errorf("error %q does not mention %q", msg, s)
				}
			}
			// The remedy is the hint, once, not part of the cause.
			if h := outboxcdc.Hint(err); !strings.Contains(h, "restore the file") || !strings.Contains(h, "source.start") || strings.Contains(msg, h) {
				t.Errorf("error %q, hint %q: want the remedy as the hint only", msg, h)
			}
		})
	}
}

func withSum(js string) []byte {
	b := []byte(magic + " 1\n" + js + "\n")
	sum := crc32Sum(b)
	b = append(b, crcPrefix...)
	b = appendHex32(b, sum)
	return append(b, '\n')
}

func TestUnreadableFileRefused(t *testing.T) {
	f := newFile(t)
	if err := os.Mkdir(f.Path(), 0o755); err != nil { // a directory where the file should be
		t.Fatal(err)
	}
	_, err := f.Load(ctx)
	if !errors.Is(err, ErrUntrusted) || !strings.Contains(err.Error(), f.Path()) {
		t.Fatalf("Load = %v, want an ErrUntrusted naming the file", err)
	}
}

func TestForeignKindRefused(t *testing.T) {
	f := newFile(t)
	if err := f.Save(ctx, "postgres:0/16B3748"); err != nil {
		t.Fatal(err)
	}
	cp := Expect("mysql", f)
	pos, err := cp.Load(ctx)
	if !errors.Is(err, outboxcdc.ErrForeignPosition) || !pos.IsZero() {
		t.Fatalf("Load = %q, %v; want zero and ErrForeignPosition", pos, err)
	}
	for _, s := range []string{f.Path(), `"postgres"`, `"mysql"`} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not mention %s", err, s)
		}
	}
	if h := outboxcdc.Hint(err); !strings.Contains(h, "this source's own store") {
		t.Errorf("hint %q, want the remedy", h)
	}
	if err := cp.Save(ctx, "postgres:0/16B3750"); !errors.Is(err, outboxcdc.ErrForeignPosition) {
		t.Errorf("Save of a foreign position = %v", err)
	}

	// The right kind, and no checkpoint at all, pass.
	if pos, err := Expect("postgres", f).Load(ctx); err != nil || pos != "postgres:0/16B3748" {
		t.Errorf("Load = %q, %v", pos, err)
	}
	if pos, err := Expect("mysql", newFile(t)).Load(ctx); err != nil || !pos.IsZero() {
		t.Errorf("Load of no checkpoint = %q, %v", pos, err)
	}
}

func TestSaveFailsWhenDirectoryUnwritable(t *testing.T) {
	t.Run("directory removed", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "state")
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		f, err := NewFile(FileConfig{Path: filepath.Join(dir, "cp")}, zerolog.Nop())
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Save(ctx, "mysql:a:1"); err != nil {
			t.Fatal(err)
		}
		// Replace the directory by a regular file: even root cannot
		// create files under it.
		if err := os.RemoveAll(dir); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dir, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		err = f.Save(ctx, "mysql:a:2")
		if err == nil || !strings.Contains(err.Error(), f.Path()) || !strings.Contains(err.Error(), "mysql:a:2") {
			t.Fatalf("Save = %v, want an error naming the file and position", err)
		}
	})
	t.Run("procfs", func(t *testing.T) {
		if st, err := os.Stat("/proc/self"); err != nil || !st.IsDir() {
			t.Skip("no /proc")
		}
		f, err := NewFile(FileConfig{Path: "/proc/outbox-cdc.checkpoint"}, zerolog.Nop())
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Save(ctx, "mysql:a:1"); err == nil {
			t.Fatal("Save into /proc succeeded")
		}
	})
	t.Run("full disk", func(t *testing.T) {
		if _, err := os.Stat("/dev/full"); err != nil {
			t.Skip("no /dev/full")
		}
		// The temp file is path+".tmp"; point it at /dev/full through a
		// symlink, so the write fails with ENOSPC as on a full disk.
		f := newFile(t)
		if err := f.Save(ctx, "mysql:a:1"); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink("/dev/full", f.Path()+".tmp"); err != nil {
			t.Fatal(err)
		}
		err := f.Save(ctx, "mysql:a:2")
		if err == nil || !strings.Contains(err.Error(), "no space left") {
			t.Fatalf("Save to a full disk = %v", err)
		}
		if pos, err := f.Load(ctx); err != nil || pos != "mysql:a:1" {
			t.Fatalf("after a failed save Load = %q, %v; want the old checkpoint", pos, err)
		}
	})
}

func TestNewFileAndValidate(t *testing.T) {
	if err := DefaultFileConfig().Validate(); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	regular := filepath.Join(dir, "regular")
	if err := os.WriteFile(regular, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path, want string
	}{
		{"", "path: empty"},
		{dir + "/", "names a directory"},
		{dir, "is a directory"},
		{filepath.Join(dir, "missing", "cp"), "create it first"},
		{filepath.Join(regular, "cp"), "is not a directory"},
	} {
		_, err := NewFile(FileConfig{Path: tc.path}, zerolog.Nop())
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("NewFile(%q) = %v, want %q", tc.path, err, tc.want)
		}
	}
}

func TestContextDone(t *testing.T) {
	f := newFile(t)
	c, cancel := context.WithCancel(ctx)
	cancel()
	if err := f.Save(c, "mysql:a:1"); !errors.Is(err, context.Canceled) {
		t.Errorf("Save = %v", err)
	}
	if _, err := f.Load(c); !errors.Is(err, context.Canceled) {
		t.Errorf("Load = %v", err)
	}
}

func BenchmarkSave(b *testing.B) {
	f := newFile(b)
	pos := outboxcdc.Position("mysql:gtid:0-1-123456789")
	b.ReportAllocs()
	for b.Loop() {
		if err := f.Save(ctx, pos); err != nil {
			b.Fatal(err)
		}
	}
}

func crc32Sum(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }
