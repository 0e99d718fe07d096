// Package checkpoint stores the position the connector resumes from.
//
// File is the embedded default: one small file, replaced atomically on
// every save. Its format is three text lines:
//
//	outbox-cdc-checkpoint 1
//	{"position":"mysql:0-1-42","saved_at":"2026-03-14T15:09:26.123456789Z"}
//	crc32c 1a2b3c4d
//
// The first line names the format and its version, the second holds the
// data as JSON (so any position text, newlines included, survives), and
// the third is the CRC-32C (Castagnoli) of the first two lines including
// their newlines. A file that fails any check is refused, never read as
// "no checkpoint": starting from source.start after a damaged checkpoint
// would silently skip or repeat events.
package checkpoint

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
)

// DefaultPath is where the file store keeps the checkpoint unless told.
const DefaultPath = "./outbox-cdc.checkpoint"

// FileConfig configures the file store (checkpoint.path).
type FileConfig struct {
	// Path is the checkpoint file; it is replaced atomically on every save.
	Path string `yaml:"path"`
}

// DefaultFileConfig returns the defaults.
func DefaultFileConfig() FileConfig { return FileConfig{Path: DefaultPath} }

// Validate checks the configuration without touching the filesystem.
func (c FileConfig) Validate() error {
	switch {
	case c.Path == "":
		return outboxcdc.KeyErrorf("path", "set a file path such as "+DefaultPath, "empty")
	case strings.HasSuffix(c.Path, "/"):
		return outboxcdc.KeyErrorf("path", "", "%q names a directory; give a file path inside it", c.Path)
	case strings.ContainsRune(c.Path, 0):
		return outboxcdc.KeyErrorf("path", "", "%q contains a NUL byte", c.Path)
	}
	return nil
}

// ErrUntrusted is wrapped by Load errors about a checkpoint file that exists
// but cannot be trusted (unreadable, corrupted, truncated, unknown format).
var ErrUntrusted = errors.New("checkpoint cannot be trusted")

const (
	magic       = "outbox-cdc-checkpoint"
	version     = 1
	tempSuffix  = ".tmp"
	refuseHint  = "restore the file from a backup, or move it away deliberately to start where source.start says"
	crcPrefix   = "crc32c "
	maxFileSize = 1 << 20
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// File is a Checkpointer backed by one file. Save writes a temporary file
// beside it (always the same name, path + ".tmp"), fsyncs it, renames it
// over the checkpoint and fsyncs the directory, so a crash at any point
// leaves either the old or the new checkpoint, complete.
type File struct {
	path string // absolute
	tmp  string
	dir  string
	log  zerolog.Logger

	mu  sync.Mutex
	buf []byte
}

var _ outboxcdc.Checkpointer = (*File)(nil)

// NewFile checks cfg and that the checkpoint's directory exists. It does not
// read the checkpoint; Load does.
func NewFile(cfg FileConfig, log zerolog.Logger) (*File, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	path, err := filepath.Abs(cfg.Path)
	if err != nil {
		return nil, fmt.Errorf("checkpoint.path: %w", err)
	}
	dir := filepath.Dir(path)
	st, err := os.Stat(dir)
	switch {
	case err != nil:
		return nil, fmt.Errorf("checkpoint.path: directory of %s: %w (create it first)", path, err)
	case !st.IsDir():
		return nil, fmt.Errorf("checkpoint.path: %s: %s is not a directory", path, dir)
	}
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		return nil, fmt.Errorf("checkpoint.path: %s is a directory; give a file path inside it", path)
	}
	return &File{
		path: path,
		tmp:  path + tempSuffix,
		dir:  dir,
		log:  log.With().Str("component", "checkpoint").Str("path", path).Logger(),
	}, nil
}

// Path returns the checkpoint file's absolute path.
func (f *File) Path() string { return f.path }

// String describes the store for error messages.
func (f *File) String() string { return "checkpoint file " + f.path }

// Load returns the saved position, or a zero Position when the file does not
// exist. Any other problem is an error wrapping ErrUntrusted.
func (f *File) Load(ctx context.Context) (outboxcdc.Position, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := os.Lstat(f.tmp); err == nil {
		f.log.Warn().Str("temp_file", f.tmp).Msg("ignoring a temporary checkpoint left by an interrupted save; the checkpoint file itself is used")
	}
	s, err := ReadFile(f.path)
	if errors.Is(err, fs.ErrNotExist) {
		f.log.Info().Msg("no checkpoint yet; the source starts where source.start says")
		return "", nil
	}
	if err != nil {
		return "", err
	}
	f.log.Info().Str("position", string(s.Position)).Time("saved_at", s.SavedAt).Msg("checkpoint loaded")
	return s.Position, nil
}

// Save durably replaces the checkpoint with pos. An error (directory gone
// or unwritable, disk full, ...) leaves the previous checkpoint in place.
func (f *File) Save(ctx context.Context, pos outboxcdc.Position) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if pos.Kind() == "" {
		return fmt.Errorf("checkpoint: refusing to save position %q: it has no source kind prefix", string(pos))
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.buf = encode(f.buf[:0], pos, time.Now())
	if err := f.replace(f.buf); err != nil {
		return fmt.Errorf("saving checkpoint %q to %s: %w", string(pos), f.path, err)
	}
	f.log.Debug().Str("position", string(pos)).Msg("checkpoint saved")
	return nil
}

func (f *File) replace(content []byte) error {
	t, err := os.OpenFile(f.tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	_, err = t.Write(content)
	if err == nil {
		err = t.Sync()
	}
	if cerr := t.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.tmp, f.path)
	}
	if err != nil {
		_ = os.Remove(f.tmp)
		return err
	}
	d, err := os.Open(f.dir)
	if err != nil {
		return fmt.Errorf("syncing directory: %w", err)
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("syncing directory %s: %w", f.dir, err)
	}
	return nil
}

// Saved is the content of a checkpoint file.
type Saved struct {
	Position outboxcdc.Position
	SavedAt  time.Time
}

type body struct {
	Position string `json:"position"`
	SavedAt  string `json:"saved_at"`
}

// encode appends the file content for pos to dst.
func encode(dst []byte, pos outboxcdc.Position, now time.Time) []byte {
	dst = append(dst, magic...)
	dst = append(dst, ' ')
	dst = strconv.AppendInt(dst, version, 10)
	dst = append(dst, '\n')
	b, _ := json.Marshal(body{Position: string(pos), SavedAt: now.UTC().Format(time.RFC3339Nano)}) // strings only: cannot fail
	dst = append(dst, b...)
	dst = append(dst, '\n')
	sum := crc32.Checksum(dst, castagnoli)
	dst = append(dst, crcPrefix...)
	dst = appendHex32(dst, sum)
	return append(dst, '\n')
}

func appendHex32(dst []byte, v uint32) []byte {
	const hex = "0123456789abcdef"
	for shift := 28; shift >= 0; shift -= 4 {
		dst = append(dst, hex[(v>>uint(shift))&0xf])
	}
	return dst
}

// ReadFile reads and verifies a checkpoint file. A missing file is an error
// wrapping fs.ErrNotExist; any other problem wraps ErrUntrusted and says
// what to do.
func ReadFile(path string) (Saved, error) {
	fh, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return Saved{}, err
	}
	if err != nil {
		return Saved{}, untrusted(path, "cannot be opened (%v)", err)
	}
	defer fh.Close()
	data, err := io.ReadAll(io.LimitReader(fh, maxFileSize+1))
	if err != nil {
		return Saved{}, untrusted(path, "cannot be read (%v)", err)
	}
	s, why := decode(data)
	if why != "" {
		return Saved{}, untrusted(path, "%s", why)
	}
	return s, nil
}

func untrusted(path, format string, args ...any) error {
	return outboxcdc.Permanent(fmt.Errorf("%w: checkpoint file %s %s", ErrUntrusted, path, fmt.Sprintf(format, args...)), refuseHint)
}

// decode parses a checkpoint file's content; why says what is wrong.
func decode(data []byte) (s Saved, why string) {
	switch {
	case len(data) == 0:
		return s, "is empty (a save was interrupted before any data reached the disk, or the file was truncated)"
	case len(data) > maxFileSize:
		return s, "is too large to be a checkpoint"
	}
	head, rest, ok := bytes.Cut(data, []byte{'\n'})
	name, ver, _ := strings.Cut(string(head), " ")
	if !ok || name != magic {
		return s, "is not an outbox-cdc checkpoint (its first line is not \"" + magic + " <version>\")"
	}
	if ver != strconv.Itoa(version) {
		return s, fmt.Sprintf("has format version %q, which this build does not read (it reads %d; was it written by a newer outbox-cdc?)", ver, version)
	}
	js, tail, ok := bytes.Cut(rest, []byte{'\n'})
	if !ok || !bytes.HasPrefix(tail, []byte(crcPrefix)) || !bytes.HasSuffix(tail, []byte{'\n'}) {
		return s, "is truncated (the checksum line is missing or incomplete)"
	}
	want := strings.TrimSuffix(strings.TrimPrefix(string(tail), crcPrefix), "\n")
	covered := data[:len(data)-len(tail)]
	if len(want) != 8 || string(appendHex32(nil, crc32.Checksum(covered, castagnoli))) != want {
		return s, "is corrupted (checksum mismatch)"
	}
	var b body
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&b); err != nil {
		return s, fmt.Sprintf("has unreadable content (%v)", err)
	}
	pos := outboxcdc.Position(b.Position)
	if pos.Kind() == "" {
		return s, fmt.Sprintf("holds position %q, which has no source kind prefix", b.Position)
	}
	t, err := time.Parse(time.RFC3339Nano, b.SavedAt)
	if err != nil {
		return s, fmt.Sprintf("has an invalid saved_at (%v)", err)
	}
	return Saved{Position: pos, SavedAt: t}, ""
}

// Expect wraps cp so that Load refuses a checkpoint written by another kind
// of source (the error wraps outboxcdc.ErrForeignPosition) and Save refuses
// to store one. A zero position (no checkpoint) passes.
func Expect(kind string, cp outboxcdc.Checkpointer) outboxcdc.Checkpointer {
	return &expectKind{cp: cp, kind: kind}
}

type expectKind struct {
	cp   outboxcdc.Checkpointer
	kind string
}

func (e *expectKind) Load(ctx context.Context) (outboxcdc.Position, error) {
	pos, err := e.cp.Load(ctx)
	if err != nil || pos.IsZero() {
		return pos, err
	}
	if err := pos.CheckKind(e.kind); err != nil {
		return "", outboxcdc.Permanent(fmt.Errorf("%s: %w", describe(e.cp), err),
			"point the checkpoint at this source's own store, or move it away deliberately to start where source.start says")
	}
	return pos, nil
}

func (e *expectKind) Save(ctx context.Context, pos outboxcdc.Position) error {
	if err := pos.CheckKind(e.kind); err != nil {
		return fmt.Errorf("%s: refusing to save: %w", describe(e.cp), err)
	}
	return e.cp.Save(ctx, pos)
}

func (e *expectKind) String() string { return describe(e.cp) }

func describe(cp outboxcdc.Checkpointer) string {
	if s, ok := cp.(fmt.Stringer); ok {
		return s.String()
	}
	return "checkpoint"
}
