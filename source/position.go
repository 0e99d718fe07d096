package source

import (
	"errors"
	"fmt"

	outboxcdc "github.com/outbox-cdc/outbox-cdc"
	"github.com/outbox-cdc/outbox-cdc/backfill"
)

// Positions is the position text of one source kind (`outbox-cdc
// position`, checks, logs), written once for every source: a position of a
// pending backfill is the backfill's (backfill.Describe,
// backfill.ComparePending), an unreadable one says so, and the source
// gives only what its stream positions P mean.
type Positions[P any] struct {
	Kind   string // the position kind (source.type)
	Server string // names the server in "unreadable <Server> position"
	// Parse reads a stream position of this kind.
	Parse func(outboxcdc.Position) (P, error)
	// Words says in words what a readable stream position is.
	Words func(P) string
	// FormOf names a readable stream position's form.
	FormOf func(P) string
	// Order orders two readable stream positions (cmp.Compare's sign), or
	// says why they cannot be ordered.
	Order func(x, y P) (int, error)
}

// FormPending is the form of a pending backfill's position.
const FormPending = "pending"

// Describe says in words what a position is.
func (k Positions[P]) Describe(p outboxcdc.Position) string {
	if backfill.IsPending(p) {
		return backfill.Describe(p, k.Kind, k.Describe)
	}
	x, err := k.Parse(p)
	if err != nil {
		return "unreadable " + k.Server + " position (" + err.Error() + ")"
	}
	return k.Words(x)
}

// Form names a position's form: FormPending, the source's, or "" when it
// cannot be read.
func (k Positions[P]) Form(p outboxcdc.Position) string {
	if backfill.IsPending(p) {
		return FormPending
	}
	x, err := k.Parse(p)
	if err != nil {
		return ""
	}
	return k.FormOf(x)
}

// Compare orders two positions as cmp.Compare does: -1 when a is before b,
// 0 when they are the same point, +1 when a is after b. A backfill in
// progress, or positions the source cannot order, give the reason.
func (k Positions[P]) Compare(a, b outboxcdc.Position) (int, error) {
	if a == b {
		return 0, nil
	}
	if ok, err := backfill.ComparePending(a, b); ok {
		return 0, err
	}
	x, err1 := k.Parse(a)
	y, err2 := k.Parse(b)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("a position cannot be read: %w", err)
	}
	return k.Order(x, y)
}
