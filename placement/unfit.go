package placement

import (
	"encoding/json"
	"slices"
	"sync"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// A replica that cannot deliver gives its connectors up. When a connector
// steps down because its sink is unreachable from this replica while
// another replica proved it reaches it (ha.sink_unreachable_timeout, the
// HA step-down), the supervisor marks it unfit here; the replica then
// rejoins the group with the unfit connectors in its join metadata, and
// the balancer moves them to a replica that is not unfit for them. Once
// this replica reaches the sink again for the hold (hysteresis), it clears
// the mark and rejoins, and the sticky balancer may give it its share back.
//
// The metadata travels under a protocol of our own (unfitProtocol) that
// wraps the cooperative sticky balancer: the sticky's member metadata with
// its user data enveloped beside the unfit partitions. Every replica also
// offers plain cooperative-sticky, so a group with replicas of an older
// version falls back to it (and to not moving unfit connectors) instead of
// failing to agree on a protocol.

// Unfit is an optional interface of Connectors: the connectors this
// replica cannot serve at the moment, and a channel that receives a value
// whenever the set changes (placement then rejoins the group).
type Unfit interface {
	Unfit() []string
	UnfitChanged() <-chan struct{}
}

// UnfitSet is a concurrency-safe Unfit.
type UnfitSet struct {
	mu      sync.Mutex
	names   map[string]bool
	changed chan struct{}
}

// NewUnfitSet returns an empty set.
func NewUnfitSet() *UnfitSet {
	return &UnfitSet{names: map[string]bool{}, changed: make(chan struct{}, 1)}
}

// Set marks name unfit (or fit again) and reports whether that changed
// the set.
func (u *UnfitSet) Set(name string, unfit bool) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.names[name] == unfit {
		return false
	}
	if unfit {
		u.names[name] = true
	} else {
		delete(u.names, name)
	}
	select {
	case u.changed <- struct{}{}:
	default:
	}
	return true
}

// Has reports whether name is marked unfit.
func (u *UnfitSet) Has(name string) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.names[name]
}

// Unfit returns the unfit names, sorted.
func (u *UnfitSet) Unfit() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	out := make([]string, 0, len(u.names))
	for n := range u.names {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// UnfitChanged implements Unfit.
func (u *UnfitSet) UnfitChanged() <-chan struct{} { return u.changed }

const unfitProtocol = "outbox-cdc-sticky-v1"

// unfitEnvelope is the user data of a member's metadata under
// unfitProtocol.
type unfitEnvelope struct {
	Sticky []byte  `json:"sticky"` // the cooperative sticky balancer's user data
	Unfit  []int32 `json:"unfit,omitempty"`
}

// unfitBalancer is the cooperative sticky balancer that moves each
// member's unfit partitions to members fit for them.
type unfitBalancer struct {
	sticky kgo.GroupBalancer
	topic  string
	// unfit returns this member's unfit partitions of topic, sorted.
	unfit func() []int32
}

func newUnfitBalancer(topic string, unfit func() []int32) *unfitBalancer {
	return &unfitBalancer{sticky: kgo.CooperativeStickyBalancer(), topic: topic, unfit: unfit}
}

func (b *unfitBalancer) ProtocolName() string { return unfitProtocol }
func (b *unfitBalancer) IsCooperative() bool  { return true }

func (b *unfitBalancer) ParseSyncAssignment(a []byte) (map[string][]int32, error) {
	return b.sticky.ParseSyncAssignment(a)
}

func (b *unfitBalancer) JoinGroupMetadata(interests []string, current map[string][]int32, generation int32) []byte {
	raw := b.sticky.JoinGroupMetadata(interests, current, generation)
	var meta kmsg.ConsumerMemberMetadata
	if err := meta.ReadFrom(raw); err != nil {
		return raw
	}
	env, err := json.Marshal(unfitEnvelope{Sticky: meta.UserData, Unfit: b.unfit()})
	if err != nil {
		return raw
	}
	meta.UserData = env
	return meta.AppendTo(nil)
}

// MemberBalancer unwraps every member's metadata for the sticky balancer
// and keeps the unfit partitions and what each member owns.
func (b *unfitBalancer) MemberBalancer(members []kmsg.JoinGroupResponseMember) (kgo.GroupMemberBalancer, map[string]struct{}, error) {
	mb := &unfitMemberBalancer{topic: b.topic, unfit: map[string]map[int32]bool{}, owned: map[string]map[int32]bool{}}
	plain := make([]kmsg.JoinGroupResponseMember, len(members))
	for i, m := range members {
		plain[i] = m
		mb.order = append(mb.order, m.MemberID)
		var meta kmsg.ConsumerMemberMetadata
		if err := meta.ReadFrom(m.ProtocolMetadata); err != nil {
			continue // the sticky balancer reports it
		}
		var env unfitEnvelope
		if json.Unmarshal(meta.UserData, &env) == nil {
			meta.UserData = env.Sticky
			plain[i].ProtocolMetadata = meta.AppendTo(nil)
			mb.unfit[m.MemberID] = setOf(env.Unfit)
		}
		for _, o := range meta.OwnedPartitions {
			if o.Topic == b.topic {
				mb.owned[m.MemberID] = setOf(o.Partitions)
			}
		}
	}
	inner, topics, err := b.sticky.MemberBalancer(plain)
	mb.inner = inner
	return mb, topics, err
}

func setOf(ps []int32) map[int32]bool {
	s := make(map[int32]bool, len(ps))
	for _, p := range ps {
		s[p] = true
	}
	return s
}

type unfitMemberBalancer struct {
	inner kgo.GroupMemberBalancer
	topic string
	order []string
	unfit map[string]map[int32]bool // member -> partitions it cannot serve
	owned map[string]map[int32]bool // member -> partitions it owned when joining
}

func (b *unfitMemberBalancer) Balance(topics map[string]int32) kgo.IntoSyncAssignment {
	into, _ := b.BalanceOrError(topics)
	return into
}

func (b *unfitMemberBalancer) BalanceOrError(topics map[string]int32) (kgo.IntoSyncAssignment, error) {
	var into kgo.IntoSyncAssignment
	if e, ok := b.inner.(kgo.GroupMemberBalancerOrError); ok {
		var err error
		if into, err = e.BalanceOrError(topics); err != nil {
			return nil, err
		}
	} else {
		into = b.inner.Balance(topics)
	}
	if plan, ok := into.(*kgo.BalancePlan); ok {
		b.moveUnfit(plan.AsMemberIDMap())
	}
	return into, nil
}

// moveUnfit takes every partition planned for a member unfit for it away
// from that member, when another member is fit for it. A partition the
// member owned is only revoked in this round (cooperative rebalancing: it
// is assigned once the member has let it go, in the next round, which the
// member's revocation starts); one it did not own goes at once to the fit
// member with the fewest partitions.
func (b *unfitMemberBalancer) moveUnfit(plan map[string]map[string][]int32) {
	load := func(m string) int { return len(plan[m][b.topic]) }
	for _, m := range b.order {
		if len(b.unfit[m]) == 0 || plan[m] == nil {
			continue
		}
		keep := plan[m][b.topic][:0:0]
		for _, p := range plan[m][b.topic] {
			if !b.unfit[m][p] {
				keep = append(keep, p)
				continue
			}
			to := ""
			for _, o := range b.order {
				if o != m && !b.unfit[o][p] && (to == "" || load(o) < load(to)) {
					to = o
				}
			}
			switch {
			case to == "":
				keep = append(keep, p) // nobody fit: it stays
			case b.owned[m][p]:
				// revoked now, assigned in the next round
			default:
				if plan[to] == nil {
					plan[to] = map[string][]int32{}
				}
				plan[to][b.topic] = append(plan[to][b.topic], p)
			}
		}
		plan[m][b.topic] = keep
	}
}
