package outboxconsumer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
)

// Absent is the "from" state of a transition that creates its aggregate:
// the business row does not exist yet.
const Absent = ""

// Transition is what one event type does to its aggregate's state.
type Transition struct {
	// Event is the event type (Message.EventType).
	Event string
	// From are the states the event applies in (Absent: it creates the
	// aggregate); To is the state it leaves. To may not be among From.
	From []string
	To   string
}

// MachineConfig names the business table holding each aggregate's state.
type MachineConfig struct {
	Dialect Dialect
	// Table holds one row per aggregate; KeyColumn is its key (the
	// aggregate id, unique) and StateColumn its state.
	Table       string
	KeyColumn   string
	StateColumn string
}

// Move is what Machine.Apply did.
type Move int

const (
	// Moved: the effect ran and the state is now the transition's To.
	Moved Move = iota + 1
	// Repeated: the aggregate is already in To; nothing ran.
	Repeated
	// Backward: the aggregate is already past To (To leads to its
	// state); nothing ran.
	Backward
	// Conflict: the aggregate is in a state from which To can neither be
	// reached nor was passed (an order CANCELLED receiving SHIPPED);
	// nothing ran.
	Conflict
)

func (m Move) String() string {
	switch m {
	case Moved:
		return "moved"
	case Repeated:
		return "repeated"
	case Backward:
		return "backward"
	case Conflict:
		return "conflict"
	}
	return "none"
}

// ErrEarly is returned (wrapped) by Apply for an event that arrived before
// the one it depends on: the aggregate does not exist yet, or is in a
// state that leads to one of the event's From states. Nothing ran; let the
// transaction roll back and the message be delivered again later (with
// Dedupe, returning the error from the handler does both). It happens when
// a broker reorders an aggregate's messages after a failure (see
// docs/consumers.md); a predecessor that never comes (dead-lettered by the
// relay) keeps it early, which the counter shows.
var ErrEarly = errors.New("the event arrived before the event it depends on")

// ErrUnknownEvent is returned (wrapped) by Apply for an event type with no
// transition.
var ErrUnknownEvent = errors.New("no transition for this event type")

// Machine applies each event's state transition at most once, using the
// aggregate's state in the business table: it is idempotent by itself
// (the article's "business state machine"), and the last guard when the
// dedupe table no longer holds an old id (a replay older than its
// retention). Safe for concurrent use.
type Machine struct {
	cfg   MachineConfig
	d     Dialect
	byEv  map[string]Transition
	next  map[string][]string // state -> states one transition away
	stats struct{ moved, repeated, backward, conflict, early atomic.Int64 }
}

// MachineStats are a Machine's counters since New.
type MachineStats struct{ Moved, Repeated, Backward, Conflict, Early int64 }

// NewMachine validates cfg and the transitions: one per event type, and
// no cycle (in a cycle, an event whose target was passed cannot be told
// from one not yet applied; give such aggregates a sequence and use
// OrderCheck).
func NewMachine(cfg MachineConfig, transitions ...Transition) (*Machine, error) {
	if err := cfg.Dialect.valid(); err != nil {
		return nil, err
	}
	if cfg.Table == "" || cfg.KeyColumn == "" || cfg.StateColumn == "" {
		return nil, errors.New("outboxconsumer: MachineConfig needs Table, KeyColumn and StateColumn")
	}
	m := &Machine{cfg: cfg, d: cfg.Dialect, byEv: map[string]Transition{}, next: map[string][]string{}}
	for _, t := range transitions {
		if t.Event == "" || t.To == Absent || len(t.From) == 0 {
			return nil, fmt.Errorf("outboxconsumer: transition %+v needs an event type, a To state and at least one From state", t)
		}
		if _, dup := m.byEv[t.Event]; dup {
			return nil, fmt.Errorf("outboxconsumer: two transitions for event type %q", t.Event)
		}
		if slices.Contains(t.From, t.To) {
			return nil, fmt.Errorf("outboxconsumer: transition %q goes from %q to itself", t.Event, t.To)
		}
		m.byEv[t.Event] = t
		for _, f := range t.From {
			if !slices.Contains(m.next[f], t.To) {
				m.next[f] = append(m.next[f], t.To)
			}
		}
	}
	for _, t := range transitions {
		for _, f := range t.From {
			if m.reaches(t.To, f) {
				return nil, fmt.Errorf("outboxconsumer: transition %q makes a cycle: %q leads back to %q", t.Event, t.To, f)
			}
		}
	}
	return m, nil
}

// reaches reports whether state to can be reached from state from by one
// or more transitions.
func (m *Machine) reaches(from, to string) bool {
	seen := map[string]bool{}
	stack := slices.Clone(m.next[from])
	for len(stack) > 0 {
		s := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if s == to {
			return true
		}
		if !seen[s] {
			seen[s] = true
			stack = append(stack, m.next[s]...)
		}
	}
	return false
}

// Stats returns the counters.
func (m *Machine) Stats() MachineStats {
	return MachineStats{Moved: m.stats.moved.Load(), Repeated: m.stats.repeated.Load(), Backward: m.stats.backward.Load(),
		Conflict: m.stats.conflict.Load(), Early: m.stats.early.Load()}
}

// Apply moves the aggregate aggregateID by the transition of eventType, in
// tx: it locks the aggregate's row (SELECT ... FOR UPDATE), decides, and
// only for a move runs effect (the business change) and then sets the
// state column to To. For a creating transition (From Absent) effect must
// insert the row; its state is then set to To. Repeated, backward and
// conflicting events run nothing and return their Move with a nil error;
// an early one returns ErrEarly. On MySQL/MariaDB the locking read of an
// aggregate that does not exist yet takes a gap lock, so creating
// transitions of neighbouring aggregates applied at the same moment can
// deadlock: the server rolls one back (error 1213), and the message is
// retried as after any failure.
func (m *Machine) Apply(ctx context.Context, tx Tx, aggregateID, eventType string, effect func(ctx context.Context) error) (Move, error) {
	t, ok := m.byEv[eventType]
	if !ok {
		return 0, fmt.Errorf("outboxconsumer: %w: %q", ErrUnknownEvent, eventType)
	}
	q := m.d.quoteIdent
	table, key, state := q(m.cfg.Table), q(m.cfg.KeyColumn), q(m.cfg.StateColumn)
	var cur string
	found, err := tx.QueryRow(ctx, m.d.bind("SELECT "+state+" FROM "+table+" WHERE "+key+" = ? FOR UPDATE"), []any{aggregateID}, &cur)
	if err != nil {
		return 0, wrapf(err, "read the state of %s", aggregateID)
	}
	if !found {
		cur = Absent
	}
	switch {
	case found && cur == t.To:
		m.stats.repeated.Add(1)
		return Repeated, nil
	case slices.Contains(t.From, cur):
	case !found:
		m.stats.early.Add(1)
		return 0, fmt.Errorf("outboxconsumer: %s of %s: %w (the aggregate does not exist yet)", eventType, aggregateID, ErrEarly)
	case m.reaches(t.To, cur):
		m.stats.backward.Add(1)
		return Backward, nil
	default:
		for _, f := range t.From {
			if m.reaches(cur, f) {
				m.stats.early.Add(1)
				return 0, fmt.Errorf("outboxconsumer: %s of %s: %w (it is %s, the event applies from %v)", eventType, aggregateID, ErrEarly, cur, t.From)
			}
		}
		m.stats.conflict.Add(1)
		return Conflict, nil
	}
	if err := effect(ctx); err != nil {
		return 0, err
	}
	if _, err := tx.Exec(ctx, m.d.bind("UPDATE "+table+" SET "+state+" = ? WHERE "+key+" = ?"), t.To, aggregateID); err != nil {
		return 0, wrapf(err, "set the state of %s", aggregateID)
	}
	if !found {
		// MySQL counts changed rows only, so the UPDATE's count cannot say
		// whether the effect inserted the row: look.
		var now string
		ok, err := tx.QueryRow(ctx, m.d.bind("SELECT "+state+" FROM "+table+" WHERE "+key+" = ?"), []any{aggregateID}, &now)
		if err != nil {
			return 0, wrapf(err, "read the state of %s", aggregateID)
		}
		if !ok || now != t.To {
			return 0, fmt.Errorf("outboxconsumer: %s creates %s, but its effect inserted no row with %s = %s", eventType, aggregateID, m.cfg.KeyColumn, aggregateID)
		}
	}
	m.stats.moved.Add(1)
	return Moved, nil
}
