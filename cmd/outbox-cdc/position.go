package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
	"time"

	"github.com/rs/zerolog"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
	"github.com/outbox-cdc/outbox-cdc/checkpoint"
	"github.com/outbox-cdc/outbox-cdc/debezium"
	"github.com/outbox-cdc/outbox-cdc/ha"
	"github.com/outbox-cdc/outbox-cdc/sink/kafka"
)

// The position commands act on the store run uses: the checkpoint file or
// table in at-least-once mode (also with HA on), the progress topic in
// exactly-once mode (with the file or table as its witness, see
// delivery.go). A running connector would overwrite a new position at its
// next checkpoint, or resume from it mid-stream, so:
//
//   - exactly-once: the progress record is written in a Kafka transaction
//     with the connector's own transactional id, which fences a running
//     instance (it exits; restarted, it resumes from the new position);
//   - ha.enabled: the command takes the HA lock first, and refuses while an
//     instance holds it;
//   - otherwise a running instance cannot be detected: stop it first.

// positionOptions are the flags of the position commands.
type positionOptions struct {
	config, connector string
	json              bool   // show
	to                string // set
	offset            string // import-debezium
	debeziumName      string // import-debezium
	force, dryRun     bool   // set, import-debezium
	logLevel          string
}

// positionFlags defines the flags of position sub.
func positionFlags(sub string, o *positionOptions) func(*flag.FlagSet) {
	return func(fs *flag.FlagSet) {
		configFlag(&o.config)(fs)
		connectorFlag(&o.connector, "the connector to act on")(fs)
		fs.StringVar(&o.logLevel, "log-level", "", "log at this `level` and above (debug, info, warn, error) instead of warn; log.format still applies")
		switch sub {
		case "show":
			fs.BoolVar(&o.json, "json", false, "print JSON")
			return
		case "set":
			fs.StringVar(&o.to, "to", "", "the new position (`POS`), or latest")
		case "import-debezium":
			fs.StringVar(&o.offset, "offset", "", "the Debezium offset: a `file` (offsets topic dump, offset value, Debezium Server offsets file) or - for stdin")
			fs.StringVar(&o.debeziumName, "debezium-connector", "", "the Debezium connector (or Debezium Server engine) whose offset to take, by `name`, when the input holds several (default: the --connector name)")
		}
		fs.BoolVar(&o.force, "force", false, "replace an existing position")
		fs.BoolVar(&o.dryRun, "dry-run", false, "print what would be written (old and new position, direction), write nothing")
	}
}

// runPosition implements `outbox-cdc position SUB ...`; args follow SUB.
// Exit codes: 0 done (or nothing to do, or a dry run), 1 refused or
// failed, 2 usage or configuration error.
//
// These commands are for people: stdout says what was found and done,
// and the log (stderr) shows warnings and errors only, unless --log-level
// asks for more.
func runPosition(sub string, args []string, stdout, stderr io.Writer) int {
	var o positionOptions
	c := findCommand("position " + sub)
	if code, ok := c.parse(c.flags(positionFlags(sub, &o)), args, stdout, stderr); !ok {
		return code
	}
	level := "warn"
	if o.logLevel != "" {
		switch o.logLevel {
		case "debug", "info", "warn", "error":
		default:
			c.usageError(stderr, fmt.Sprintf("--log-level %q: want debug, info, warn or error", o.logLevel))
			return 2
		}
		level = o.logLevel
	}
	pc, err := loadProcessConfig(o.config, environ())
	if err != nil {
		fmt.Fprintf(stderr, "outbox-cdc: %v\n", err)
		return 2
	}
	if sub == "import-debezium" && o.debeziumName == "" {
		o.debeziumName = o.connector
		// Before connectors: lists, --connector named the Debezium
		// connector only; with one connector configured it still may.
		if len(pc.Connectors) == 1 && o.connector != pc.Connectors[0].Name {
			o.connector = ""
		}
	}
	cfg, err := pickConnector(pc, o.connector)
	if err != nil {
		fmt.Fprintf(stderr, "outbox-cdc position %s: %v\n", sub, err)
		return 2
	}
	kind := cfg.Source.Type
	logCfg := cfg.Log
	logCfg.Level = level
	log := newLogger(logCfg, stderr)
	store, err := openPositionStore(cfg, kind, log)
	if err != nil {
		var ce *configError
		fmt.Fprintf(stderr, "outbox-cdc: %v\n", err)
		if errors.As(err, &ce) {
			return 2
		}
		return 1
	}
	defer store.close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	switch sub {
	case "show":
		return positionShow(ctx, store, kind, o.json, stdout, stderr)
	case "set":
		if strings.TrimSpace(o.to) == "" {
			fmt.Fprintf(stderr, "outbox-cdc position set: --to is required\n")
			return 2
		}
		var pos outboxcdc.Position
		if strings.EqualFold(strings.TrimSpace(o.to), "latest") {
			form := ""
			if old, err := store.read(ctx); err == nil && old.exists {
				form = positionForm(old.pos)
			}
			qctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			pos, err = cfg.source().latest(qctx, cfg, form)
			cancel()
			if err != nil {
				fmt.Fprintf(stderr, "outbox-cdc: reading the server's current position: %v\n", err)
				return 1
			}
			fmt.Fprintf(stdout, "the server's current position is %s (%s)\n", pos, describePosition(pos))
		} else {
			pos, err = parsePosition(kind, o.to)
			if err != nil {
				fmt.Fprintf(stderr, "outbox-cdc position set: --to: %v\n", err)
				return 2
			}
		}
		if code := refuseUnresumable(ctx, cfg, pos, "position set", stdout, stderr); code != 0 {
			return code
		}
		return writePosition(ctx, cfg, store, pos, o.force, o.dryRun, "position set", stdout, stderr, log)
	default: // import-debezium
		if o.offset == "" {
			fmt.Fprintf(stderr, "outbox-cdc position import-debezium: --offset is required (a file, or - for stdin)\n")
			return 2
		}
		var data []byte
		if o.offset == "-" {
			data, err = io.ReadAll(io.LimitReader(os.Stdin, 64<<20))
		} else {
			data, err = os.ReadFile(o.offset)
		}
		if err != nil {
			fmt.Fprintf(stderr, "outbox-cdc: reading the Debezium offset: %v\n", err)
			return 1
		}
		pos, notes, err := debezium.Convert(kind, data, debezium.Options{
			Connector:  o.debeziumName,
			PreferFile: cfg.source().preferFileForm(cfg),
		})
		if err != nil {
			fmt.Fprintf(stderr, "outbox-cdc: %v\n", err)
			return 1
		}
		if notes.Key != "" {
			fmt.Fprintf(stdout, "Debezium offset of %s:\n", notes.Key)
		} else {
			fmt.Fprintf(stdout, "Debezium offset:\n")
		}
		fmt.Fprintf(stdout, "  %s\n", notes.Offset)
		fmt.Fprintf(stdout, "derived position: %s (%s)\n", pos, describePosition(pos))
		for _, l := range notes.Lines {
			fmt.Fprintf(stdout, "  - %s\n", l)
		}
		if notes.Alternative != "" {
			fmt.Fprintf(stdout, "  - The same point in the other form is %s; `outbox-cdc position set --to %s` writes that instead.\n", notes.Alternative, notes.Alternative)
		}
		log.Info().Str("debezium_key", notes.Key).Str("debezium_offset", notes.Offset).
			Str("position", string(pos)).Bool("resend_transaction", notes.Resend).Msg("Debezium offset converted")
		if code := refuseUnresumable(ctx, cfg, pos, "position import-debezium", stdout, stderr); code != 0 {
			return code
		}
		return writePosition(ctx, cfg, store, pos, o.force, o.dryRun, "position import-debezium", stdout, stderr, log)
	}
}

// saved is what a position store holds.
type saved struct {
	pos     outboxcdc.Position
	savedAt time.Time
	exists  bool
}

// positionStore is the store run resumes from.
type positionStore interface {
	// String names it for people ("checkpoint file /x", "progress topic t
	// (connector n)").
	String() string
	// read returns what the store holds; an error means it exists but
	// cannot be trusted (damaged) or cannot be reached.
	read(ctx context.Context) (saved, error)
	// write replaces the position.
	write(ctx context.Context, pos outboxcdc.Position) error
	// witness returns the store that mirrors this one (exactly-once:
	// the file or table), or nil.
	witness() positionStore
	close()
}

// openPositionStore opens the store run would use with cfg.
func openPositionStore(cfg Config, kind string, log zerolog.Logger) (positionStore, error) {
	local, err := openLocalStore(cfg, kind, log)
	if err != nil {
		return nil, err
	}
	if cfg.Delivery != deliveryExactlyOnce {
		return local, nil
	}
	if cfg.Sink.Type != "kafka" {
		local.close()
		return nil, configErrorf("delivery: exactly-once needs sink.type kafka")
	}
	return &progressStore{cfg: cfg, kind: kind, log: log, mirror: local}, nil
}

// openLocalStore opens the file or table store of checkpoint.type (kafka:
// the file, the witness of exactly-once mode).
func openLocalStore(cfg Config, kind string, log zerolog.Logger) (positionStore, error) {
	if cfg.Checkpoint.Type == "table" {
		dsn, err := cfg.sourceDSN()
		if err != nil {
			return nil, err
		}
		t, err := checkpoint.NewTable(cfg.Source.Type, dsn, cfg.Checkpoint.TableConfig, cfg.Name, log)
		if err != nil {
			return nil, &configError{Msg: err.Error()}
		}
		return &tableStore{t: t, cp: checkpoint.Expect(kind, t), claim: cfg.HA.Enabled}, nil
	}
	f, err := checkpoint.NewFile(cfg.Checkpoint.FileConfig, log)
	if err != nil {
		return nil, &configError{Msg: err.Error()}
	}
	return &fileStore{f: f, cp: checkpoint.Expect(kind, f)}, nil
}

type fileStore struct {
	f  *checkpoint.File
	cp outboxcdc.Checkpointer
}

func (s *fileStore) String() string { return "checkpoint file " + s.f.Path() }
func (s *fileStore) read(context.Context) (saved, error) {
	st, err := checkpoint.ReadFile(s.f.Path())
	if errors.Is(err, fs.ErrNotExist) {
		return saved{}, nil
	}
	if err != nil {
		return saved{}, err
	}
	return saved{pos: st.Position, savedAt: st.SavedAt, exists: true}, nil
}
func (s *fileStore) write(ctx context.Context, pos outboxcdc.Position) error {
	return s.cp.Save(ctx, pos)
}
func (s *fileStore) witness() positionStore { return nil }
func (s *fileStore) close()                 {}

type tableStore struct {
	t  *checkpoint.Table
	cp outboxcdc.Checkpointer
	// claim: with HA the command claims the row before writing (the HA
	// lock is held then), so an instance that lost the lock without
	// noticing yet cannot overwrite the new position (checkpoint.ErrFenced).
	claim bool
}

func (s *tableStore) String() string { return s.t.String() }
func (s *tableStore) read(ctx context.Context) (saved, error) {
	pos, at, found, err := s.t.Peek(ctx)
	if err != nil {
		return saved{}, err
	}
	return saved{pos: pos, savedAt: at, exists: found}, nil
}
func (s *tableStore) write(ctx context.Context, pos outboxcdc.Position) error {
	if s.claim {
		if _, err := s.t.Claim(ctx); err != nil {
			return err
		}
	}
	return s.cp.Save(ctx, pos)
}
func (s *tableStore) witness() positionStore { return nil }
func (s *tableStore) close()                 { s.t.Close() }

// progressStore is the exactly-once position: the connector's record in
// the progress topic, mirrored to the witness store.
type progressStore struct {
	cfg    Config
	kind   string
	log    zerolog.Logger
	mirror positionStore
}

func (s *progressStore) String() string {
	return fmt.Sprintf("progress topic %s (connector %q)", s.cfg.Sink.ProgressTopic, s.cfg.Name)
}
func (s *progressStore) read(ctx context.Context) (saved, error) {
	p, err := kafka.ReadProgress(ctx, s.cfg.Sink.KafkaConfig, s.cfg.Sink.ProgressTopic, s.cfg.Name, "")
	if err != nil {
		return saved{}, err
	}
	if p.Position.IsZero() {
		return saved{}, nil
	}
	return saved{pos: p.Position, savedAt: p.SavedAt, exists: true}, nil
}
func (s *progressStore) write(ctx context.Context, pos outboxcdc.Position) error {
	if err := kafka.WriteProgress(ctx, s.cfg.Sink.KafkaConfig, s.cfg.Sink.TxnConfig, s.cfg.Name, s.kind, pos, s.log); err != nil {
		return fmt.Errorf("writing the progress record: %w", err)
	}
	// The witness follows, so that it never claims more than the progress.
	if err := s.mirror.write(ctx, pos); err != nil {
		return fmt.Errorf("the progress record was written, but not its witness in %s: %w", s.mirror, err)
	}
	return nil
}
func (s *progressStore) witness() positionStore { return s.mirror }
func (s *progressStore) close()                 { s.mirror.close() }

type showJSON struct {
	Store       string `json:"store"`
	Path        string `json:"path,omitempty"`
	Where       string `json:"where"`
	Exists      bool   `json:"exists"`
	Position    string `json:"position,omitempty"`
	Kind        string `json:"kind,omitempty"`
	Form        string `json:"form,omitempty"`
	Description string `json:"description,omitempty"`
	SavedAt     string `json:"saved_at,omitempty"`
	Error       string `json:"error,omitempty"`
	// Witness is the exactly-once witness (file or table).
	Witness *showJSON `json:"witness,omitempty"`
}

func storeKind(s positionStore) (kind, path string) {
	switch st := s.(type) {
	case *fileStore:
		return "file", st.f.Path()
	case *tableStore:
		return "table", ""
	default:
		return "kafka", ""
	}
}

// describeSaved fills a showJSON from a store read; code is 1 when the
// store cannot be trusted or holds another source's position.
func describeSaved(ctx context.Context, s positionStore, kind string) (showJSON, int) {
	k, path := storeKind(s)
	out := showJSON{Store: k, Path: path, Where: s.String()}
	st, err := s.read(ctx)
	switch {
	case err != nil:
		out.Error = err.Error()
		return out, 1
	case !st.exists:
		return out, 0
	}
	out.Exists = true
	out.Position = string(st.pos)
	out.Kind = st.pos.Kind()
	out.Form = positionForm(st.pos)
	out.Description = describePosition(st.pos)
	if !st.savedAt.IsZero() {
		out.SavedAt = st.savedAt.UTC().Format(time.RFC3339Nano)
	}
	if err := st.pos.CheckKind(kind); err != nil {
		out.Error = err.Error() + "; the connector refuses to start with it"
		return out, 1
	}
	return out, 0
}

func positionShow(ctx context.Context, store positionStore, kind string, asJSON bool, stdout, stderr io.Writer) int {
	out, code := describeSaved(ctx, store, kind)
	var w showJSON
	wcode := 0
	if ws := store.witness(); ws != nil {
		w, wcode = describeSaved(ctx, ws, kind)
		out.Witness = &w
		if !out.Exists && out.Error == "" && (w.Exists || w.Error != "") {
			out.Error = "no progress record, but the witness shows the connector ran before: run refuses to start (resume with `position set --to <position>`, or start fresh deliberately with `run --fresh-start`)"
			code = 1
		}
	}
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(out)
		return max(code, wcode)
	}
	if !out.Exists && out.Error == "" {
		fmt.Fprintf(stdout, "no checkpoint in %s: the connector starts where source.start says\n", out.Where)
	} else if out.Exists {
		saved := out.SavedAt
		if saved == "" {
			saved = "unknown"
		}
		fmt.Fprintf(stdout, "position: %s\nmeaning:  %s\nsaved at: %s\nstore:    %s\n", out.Position, out.Description, saved, out.Where)
	}
	if out.Witness != nil {
		switch {
		case w.Exists:
			fmt.Fprintf(stdout, "witness:  %s in %s (saved %s)\n", w.Position, w.Where, w.SavedAt)
		case w.Error != "":
			fmt.Fprintf(stdout, "witness:  %s: unreadable\n", w.Where)
		default:
			fmt.Fprintf(stdout, "witness:  none in %s\n", w.Where)
		}
	}
	if out.Error != "" {
		fmt.Fprintf(stderr, "outbox-cdc: %s\n", out.Error)
	}
	if w.Error != "" {
		fmt.Fprintf(stderr, "outbox-cdc: witness: %s\n", w.Error)
	}
	return max(code, wcode)
}

// writePosition replaces the position with pos, guarded: an existing (or
// damaged) one is only replaced with force, after saying which way the
// move goes. With HA on it holds the HA lock while it writes.
func writePosition(ctx context.Context, cfg Config, store positionStore, pos outboxcdc.Position, force, dryRun bool,
	what string, stdout, stderr io.Writer, log zerolog.Logger) int {
	old, err := store.read(ctx)
	exists := err == nil && old.exists
	damaged := err != nil
	fmt.Fprintf(stdout, "%s\n", store)
	dir, why := 0, ""
	switch {
	case damaged:
		fmt.Fprintf(stdout, "  old: unreadable: %v\n", err)
	case exists:
		at := "unknown"
		if !old.savedAt.IsZero() {
			at = old.savedAt.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(stdout, "  old: %s (%s, saved %s)\n", old.pos, describePosition(old.pos), at)
		var err error
		if dir, err = comparePositions(old.pos, pos); err != nil {
			dir, why = notComparable, err.Error()
		}
	default:
		fmt.Fprintf(stdout, "  old: none\n")
	}
	fmt.Fprintf(stdout, "  new: %s (%s)\n", pos, describePosition(pos))
	if exists {
		switch dir {
		case 0:
			fmt.Fprintf(stdout, "the position is already this one; nothing to do\n")
			return 0
		case 1:
			fmt.Fprintf(stdout, "  direction: BACKWARD: transactions between the new and the old position are published again\n")
		case -1:
			fmt.Fprintf(stdout, "  direction: FORWARD: transactions between the old and the new position are skipped and never published\n")
		default:
			fmt.Fprintf(stdout, "  direction: not comparable (%s): check by hand what is re-published or skipped\n", why)
		}
	}
	if dryRun {
		fmt.Fprintf(stdout, "dry run: nothing was written\n")
		if (exists || damaged) && !force {
			fmt.Fprintf(stdout, "the write needs --force, as it replaces the existing position; stop the connector first (every replica)\n")
		}
		return 0
	}
	if (exists || damaged) && !force {
		fmt.Fprintf(stderr, "outbox-cdc %s: refusing to replace the existing position without --force. Stop the connector first (every replica, whichever holds the lock): a running connector overwrites the position at its next commit.\n", what)
		return 1
	}
	if cfg.HA.Enabled {
		release, err := holdHALock(ctx, cfg, log)
		if err != nil {
			fmt.Fprintf(stderr, "outbox-cdc %s: %v\n", what, err)
			return 1
		}
		defer release()
	}
	if _, ok := store.(*progressStore); ok {
		fmt.Fprintf(stdout, "writing the progress record with transactional id %s: a running instance of the connector is fenced and exits\n", cfg.Sink.TxnConfig.WithName(cfg.Name).TransactionalID)
	}
	if err := store.write(ctx, pos); err != nil {
		fmt.Fprintf(stderr, "outbox-cdc: %v\n", err)
		return 1
	}
	// stdout said it all; the log line is for --log-level info.
	ev := log.Info().Str("command", what).Str("position", string(pos)).Str("store", store.String())
	if exists {
		ev = ev.Str("old_position", string(old.pos)).Str("direction", directionName(dir))
	}
	ev.Msg("position set by hand")
	fmt.Fprintf(stdout, "checkpoint written to %s: the connector resumes from %s at its next start\n", store, pos)
	return 0
}

// holdHALock takes the connector's HA lock, so that no instance streams
// while the position changes; it refuses when an instance holds it.
func holdHALock(ctx context.Context, cfg Config, log zerolog.Logger) (func(), error) {
	dsn, err := cfg.sourceDSN()
	if err != nil {
		return nil, err
	}
	l, err := ha.New(cfg.Source.Type, dsn, cfg.Name, cfg.HA, log)
	if err != nil {
		return nil, err
	}
	lctx, cancel := context.WithTimeout(ctx, 2*cfg.HA.CheckInterval+3*time.Second)
	defer cancel()
	_, release, err := l.Lock(lctx)
	if err != nil {
		if lctx.Err() != nil {
			return nil, fmt.Errorf("an instance of connector %q holds the HA lock %q (it is running): stop every instance first", cfg.Name, ha.LockName(cfg.Name))
		}
		return nil, fmt.Errorf("taking the HA lock: %w", err)
	}
	return release, nil
}

// notComparable is writePosition's direction when comparePositions could
// not order the old and the new position.
const notComparable = 2

// directionName names the move from old to new for comparePositions'
// result dir = compare(old, new).
func directionName(dir int) string {
	switch dir {
	case 0:
		return "same"
	case 1:
		return "backward"
	case -1:
		return "forward"
	}
	return "not comparable"
}
