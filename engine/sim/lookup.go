package sim

import (
	"bytes"
	"encoding/binary"
	"math"

	"github.com/onerma/onerma/abi"
)

// LOOKUPs in the simulator (scenario "lookup"; App.LookupFrac > 0 only,
// so no other scenario draws anything for them).
//
// Each portal registers an index (simBuckets buckets of the lookup
// layout, PermRemoteLookup, linked to its slab) and a slab (simAreas
// areas of simAreaBytes, local only). At every application tick the owner
// changes one entry of one bucket, RCU-style: a new record of a fresh
// stamp and random length goes into a free slab area, then the entry
// switches to it (tag, pointer, length, stamp); or the entry is removed.
// A slab area is written again only a grace period (longer than any op
// lives) after its last entry left it, so a record an entry points to is
// never changed while an op that may have read that entry is in flight.
// Every state of every bucket is kept with the virtual times it held.
//
// Invariant: a LOOKUP returns bytes that were in the regions at one
// instant of the owner's updates, never a mix. An OK answer's entry must
// be the first entry with the op's tag in a state of its bucket that held
// while the op was in flight, and its target must be exactly that entry's
// record; REMOTE_NOT_FOUND needs a state without the tag (with the bucket
// in the sink: exactly that state's bytes), REMOTE_LOOKUP_TOO_LARGE a
// state whose entry and record exceed the op's length. The owner never
// writes a corrupt entry: REMOTE_LOOKUP_BOUNDS is a failure.

const (
	simBuckets     = 8
	simEntries     = 8
	simEntryBytes  = 32
	simBucketBytes = simEntries * simEntryBytes
	simAreas       = 32
	simAreaBytes   = 2048
	simTags        = 12 // tags 1..simTags: a bucket holds few, lookups of absent ones are common
)

var simLayout = abi.BucketLayout{BucketBytes: simBucketBytes, EntryBytes: simEntryBytes, TagOff: 0, TagWidth: 8,
	PtrOff: 8, PtrWidth: 8, LenOff: 16, LenWidth: 4}

// lookupModel is a portal's index and slab as its owner wrote them.
type lookupModel struct {
	idx, slab *region
	buckets   [simBuckets][]bucketState // each bucket's states, oldest first; the last holds now
	areaFree  [simAreas]int64           // an area may be written from then on (MaxInt64: an entry points to it)
}

// bucketState is one state of a bucket and the times it held: [from, to).
type bucketState struct {
	from, to int64
	b        [simBucketBytes]byte
}

// registerLookup gives portal p its slab and index.
func (a *app) registerLookup(p *portal) error {
	s := a.s
	m := &lookupModel{}
	slab, err := a.register(p, alignedBytes(simAreas*simAreaBytes), abi.PermLocalRead, regSlab)
	if err != nil {
		return err
	}
	m.slab = slab
	lay := simLayout
	lay.Linked = slab.id
	idx, err := a.registerIndex(p, alignedBytes(simBuckets*simBucketBytes), lay)
	if err != nil {
		return err
	}
	m.idx = idx
	for b := range m.buckets {
		m.buckets[b] = []bucketState{{from: s.now, to: math.MaxInt64}}
	}
	p.lk = m
	return nil
}

// lookupGrace is how long after an entry left a slab area the area may be
// written again: longer than any op can be in flight.
func (s *Sim) lookupGrace() int64 {
	e := &s.cfg.Engine
	return 4*int64(e.DispatchTimeout+e.ResolveTimeout+e.ARPRetry) + 8*s.maxTimeout + 2*s.slack()
}

// updateLookup: the owner changes one entry of one bucket of p's index.
func (p *portal) updateLookup() {
	s := p.a.s
	m := p.lk
	if m == nil || m.idx.deadAt != math.MaxInt64 {
		return
	}
	r := s.appRng
	bi := r.IntN(simBuckets)
	mem := m.idx.mem[bi*simBucketBytes : (bi+1)*simBucketBytes]
	tag := uint64(1 + r.IntN(simTags))
	slot := -1 // the entry holding tag, else a free one, else any
	for i := 0; i < simEntries; i++ {
		if t := binary.LittleEndian.Uint64(mem[i*simEntryBytes:]); t == tag {
			slot = i
			break
		}
	}
	if slot < 0 {
		for i := 0; i < simEntries; i++ {
			if binary.LittleEndian.Uint64(mem[i*simEntryBytes:]) == 0 {
				slot = i
				break
			}
		}
	}
	if slot < 0 {
		slot = r.IntN(simEntries)
	}
	e := mem[slot*simEntryBytes : (slot+1)*simEntryBytes]
	old := -1
	if binary.LittleEndian.Uint64(e) != 0 {
		old = int(binary.LittleEndian.Uint64(e[8:]) / simAreaBytes)
	}
	if r.IntN(5) == 0 { // remove the entry
		clear(e)
	} else {
		area := -1
		for k, at := 0, r.IntN(simAreas); k < simAreas; k++ {
			if c := (at + k) % simAreas; m.areaFree[c] <= s.now {
				area = c
				break
			}
		}
		if area < 0 {
			return // every area in use or in its grace period: no change this tick
		}
		n := uint32(r.IntN(simAreaBytes + 1))
		if r.IntN(4) == 0 {
			n = uint32(r.IntN(64))
		}
		stamp := s.nextStamp()
		stampBytes(m.slab.mem[area*simAreaBytes:area*simAreaBytes+int(n)], stamp, 0)
		m.areaFree[area] = math.MaxInt64
		binary.LittleEndian.PutUint64(e[0:], tag)
		binary.LittleEndian.PutUint64(e[8:], uint64(area*simAreaBytes))
		binary.LittleEndian.PutUint32(e[16:], n)
		binary.LittleEndian.PutUint32(e[20:], 0)
		binary.LittleEndian.PutUint64(e[24:], stamp)
	}
	if old >= 0 {
		m.areaFree[old] = s.now + s.lookupGrace()
	}
	h := m.buckets[bi]
	h[len(h)-1].to = s.now
	st := bucketState{from: s.now, to: math.MaxInt64}
	copy(st.b[:], mem)
	m.buckets[bi] = append(h, st)
	s.res.LookupUpdates++
	s.tracef("node %d portal %d: index %#x bucket %d entry %d: %x", p.a.n.id, p.id, uint32(m.idx.id), bi, slot, e)
}

// postLookup posts a LOOKUP of a bucket of another node's index: a tag
// the bucket holds (mostly) or any; sometimes with the bucket asked for
// on a miss, sometimes with a length its answer may not fit. Its kind is
// valid or a wrong key (the other defects are the engine tests').
func (p *portal) postLookup() bool {
	a := p.a
	s := a.s
	r := s.appRng
	tgt := a.pickRegion(false, func(rg *region) bool { return rg.kind == regIdx })
	kind := p.pickKind()
	if !kind.wrongKey() {
		kind = kValid
	}
	if tgt == nil {
		return false
	}
	m := tgt.p.lk
	bi := r.IntN(simBuckets)
	cur := &m.buckets[bi][len(m.buckets[bi])-1].b
	tag := uint64(1 + r.IntN(simTags))
	if r.IntN(3) != 0 {
		for i, at := 0, r.IntN(simEntries); i < simEntries; i++ {
			if t := binary.LittleEndian.Uint64(cur[((at+i)%simEntries)*simEntryBytes:]); t != 0 {
				tag = t
				break
			}
		}
	}
	var flags uint8
	if r.IntN(2) == 0 {
		flags = abi.FlagLookupBucket
	}
	length := uint32(abi.MaxOpBytes)
	if r.IntN(4) == 0 {
		length = uint32(1 + r.IntN(simAreaBytes+64))
	}
	return p.postOpType(abi.OpLookup, kind, tgt, length, uint64(bi*simBucketBytes), func(o *op, c *abi.Command) {
		c.Tag, c.Flags = tag, flags
		o.lookup, o.lkModel, o.lkBucket = true, m, bi
		p.mutate(o, c)
	})
}

// lookupAllowed: the statuses a valid LOOKUP may end with besides the
// network's and the region's (checkLookup checks each against the model).
func lookupAllowed(st abi.Status) bool {
	return st == abi.StatusOK || st == abi.StatusRemoteNotFound || st == abi.StatusRemoteLookupTooLarge
}

// checkLookup checks a LOOKUP's completion and its sink range got
// (the op's LocalOffset, Length bytes) against the states its bucket held
// while the op was in flight.
func (p *portal) checkLookup(o *op, c *abi.Completion, got []byte, zeroOK bool) {
	s := p.a.s
	if o.kind != kValid {
		return
	}
	tag := o.cmd.Tag
	var states []*bucketState
	for i := range o.lkModel.buckets[o.lkBucket] {
		if st := &o.lkModel.buckets[o.lkBucket][i]; st.from <= s.now && st.to > o.postedAt {
			states = append(states, st)
		}
	}
	// first: the first entry with tag in state b, or nil.
	first := func(b *[simBucketBytes]byte) []byte {
		for i := 0; i < simEntries; i++ {
			if e := b[i*simEntryBytes : (i+1)*simEntryBytes]; binary.LittleEndian.Uint64(e) == tag {
				return e
			}
		}
		return nil
	}
	answer := func(e []byte) uint32 { // the answer's length for entry e
		n := binary.LittleEndian.Uint32(e[16:])
		if n == 0 {
			return simEntryBytes
		}
		return abi.LookupTargetOffset(simEntryBytes) + n
	}
	untouched := func() bool {
		for _, b := range got {
			if b != poison && !(b == 0 && zeroOK) {
				return false
			}
		}
		return true
	}
	switch c.Status {
	case abi.StatusOK:
		for _, st := range states {
			e := first(&st.b)
			if e == nil || !bytes.Equal(got[:simEntryBytes], e) || c.Length != answer(e) {
				continue
			}
			n := binary.LittleEndian.Uint32(e[16:])
			want := make([]byte, n)
			stampBytes(want, binary.LittleEndian.Uint64(e[24:]), 0)
			pad := abi.LookupTargetOffset(simEntryBytes)
			if n > 0 && !bytes.Equal(got[pad:pad+n], want) {
				s.fail("%s: OK with the entry of a state of its bucket, but its target is not that entry's record: a mix", o)
				return
			}
			s.res.LookupsFound++
			return
		}
		s.fail("%s: OK (%d bytes) with an entry %x that no state of its bucket %d held first for tag %d while it was in flight (%d states, the last %x)",
			o, c.Length, got[:simEntryBytes], o.lkBucket, tag, len(states), states[len(states)-1].b)
	case abi.StatusRemoteNotFound:
		for _, st := range states {
			if first(&st.b) != nil {
				continue
			}
			if c.Length == 0 && (o.cmd.Flags&abi.FlagLookupBucket == 0 || o.cmd.Length < simBucketBytes) && untouched() {
				s.res.LookupsMissed++
				return
			}
			if c.Length == simBucketBytes && o.cmd.Flags&abi.FlagLookupBucket != 0 && bytes.Equal(got[:simBucketBytes], st.b[:]) {
				s.res.LookupsMissed++
				return
			}
		}
		s.fail("%s: REMOTE_NOT_FOUND (%d bytes) but no state of its bucket while it was in flight lacked tag %d, or the sink is not that state", o, c.Length, tag)
	case abi.StatusRemoteLookupTooLarge:
		for _, st := range states {
			if e := first(&st.b); e != nil && answer(e) > o.cmd.Length && untouched() {
				s.res.LookupsTooLarge++
				return
			}
		}
		s.fail("%s: REMOTE_LOOKUP_TOO_LARGE but no state of its bucket while it was in flight had an answer above %d bytes for tag %d", o, o.cmd.Length, tag)
	}
}
