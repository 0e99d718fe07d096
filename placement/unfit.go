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
// and keeps the unfit partitions and what each member owns. A member with
// any unfit connector (one that cannot deliver) is left out of the sticky
// balancing, so that it is given no connector it does not already run;
// unless every member is unfit for something, then all are balanced as
// usual (nobody is better placed).
func (b *unfitBalancer) MemberBalancer(members []kmsg.JoinGroupResponseMember) (kgo.GroupMemberBalancer, map[string]struct{}, error) {
	mb := &unfitMemberBalancer{topic: b.topic, unfit: map[string]map[int32]bool{}, owned: map[string]map[int32]bool{}}
	var plain, clean []kmsg.JoinGroupResponseMember
	for _, m := range members {
		pm := m
		var meta kmsg.ConsumerMemberMetadata
		if err := meta.ReadFrom(m.ProtocolMetadata); err == nil {
			var env unfitEnvelope
			if json.Unmarshal(meta.UserData, &env) == nil {
				meta.UserData = env.Sticky
				pm.ProtocolMetadata = meta.AppendTo(nil)
				if len(env.Unfit) > 0 {
					mb.unfit[m.MemberID] = setOf(env.Unfit)
				}
			}
			for _, o := range meta.OwnedPartitions {
				if o.Topic == b.topic {
					mb.owned[m.MemberID] = setOf(o.Partitions)
				}
			}
		} // else the sticky balancer reports it
		plain = append(plain, pm)
		if mb.unfit[m.MemberID] == nil {
			clean = append(clean, pm)
		} else {
			mb.unclean = append(mb.unclean, m.MemberID)
		}
	}
	if len(clean) == 0 {
		mb.unclean, clean = nil, plain
	}
	inner, topics, err := b.sticky.MemberBalancer(clean)
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
	inner   kgo.GroupMemberBalancer // over the members without unfit connectors
	topic   string
	unclean []string                  // members left out of inner, in group order
	unfit   map[string]map[int32]bool // member -> partitions it cannot serve
	owned   map[string]map[int32]bool // member -> partitions it owned when joining
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
	if plan, ok := into.(*kgo.BalancePlan); ok && len(b.unclean) > 0 {
		b.placeUnclean(plan.AsMemberIDMap())
	}
	return into, nil
}

// placeUnclean adds the members left out of the sticky balancing to its
// plan: each keeps the partitions it owns and is fit for, and lets go of
// the ones it is unfit for. Those are assigned to nobody in this round
// (cooperative rebalancing: a partition is given to its next owner only
// once the last one has let it go; its revocation starts the next round,
// where the sticky balancer hands it to a fit member).
func (b *unfitMemberBalancer) placeUnclean(plan map[string]map[string][]int32) {
	taken := map[int32]bool{}
	mine := map[string][]int32{}
	for _, u := range b.unclean {
		for p := range b.owned[u] {
			taken[p] = true // kept by u, or let go this round
			if !b.unfit[u][p] {
				mine[u] = append(mine[u], p)
			}
		}
	}
	for _, ts := range plan {
		ps := ts[b.topic][:0:0]
		for _, p := range ts[b.topic] {
			if !taken[p] {
				ps = append(ps, p)
			}
		}
		ts[b.topic] = ps
	}
	for _, u := range b.unclean {
		slices.Sort(mine[u])
		plan[u] = map[string][]int32{b.topic: mine[u]}
	}
}
