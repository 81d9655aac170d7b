package engine

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/aesni"
)

// The registered region table (RRT, paper §4.3) is the engine's, not a
// core's: a region is registered once, by its portal's core, and served
// by every core of the engine (requests are steered by their sender lane,
// not by region). It is read-mostly: every request and every op looks a
// region up, registrations and rekeys are control-plane events.
//
// Each entry is an atomic pointer to an immutable descriptor (region): a
// lookup is one atomic load, no lock, and whatever a core does with the
// descriptor it loaded stays consistent. A change publishes a new
// descriptor (a rekey: a copy with the new key and a new key epoch) or
// none (deregistration). The allocation of indices and generations is
// the control plane's, under a mutex the data path never takes.
//
// Memory safety across cores (quiescence): the descriptor a core loaded
// may be in use until the end of the call into the core that loaded it.
// So the memory of a region that left the table is freed only once every
// core has passed a quiescent point after the change: each core, at the
// start of every Poll, runs what the change needs of it (regionView.sync:
// seals queued in its batch run, the memory it registered with its seal
// backend is unregistered) and records the table's version it has seen
// (Group.Quiesced). The control plane (engine/ctl) waits for that before
// its call returns and before it unmaps anything. Keys need no wait: a
// core's derived keys are cached per region and key epoch (responder
// serverKey), so a new key is in force on every core from its
// publication on.
//
// Tombstones: a region that leaves the table leaves its key behind, at
// its index, until the next region at that index leaves in turn (dead,
// below): its generation, K_r and key epoch, no memory. A request naming
// it that authenticates with a K_d of that key (an initiator that could
// read or write the region) is answered REMOTE_REGION, sealed under its
// K_d: the region is gone, which it may know and can trust, within a
// round trip. Any other request for a region that is not live (a wrong
// key, an older generation, an index never used) still fails
// authentication: the engine says nothing of regions to those who hold
// no key of theirs.

// region is one RRT entry: an immutable descriptor, replaced as a whole.
type region struct {
	mem    []byte
	perm   abi.Perm
	owner  regionOwner
	tenant uint16 // its portal's PortalSpec.Tenant: whose region it is
	gen    uint16
	// epoch names the key: unique per descriptor published with a new
	// K_r (registration, rekey), so a core's cached K_d of an older key
	// never match.
	epoch uint64
	// kr is K_r. Each core expands it into a Deriver of its own when it
	// first needs a K_d under this epoch (responder.serverKey): a Deriver
	// holds scratch and serves one goroutine.
	kr aesni.Key
	// tomb is what the table keeps of this descriptor once it leaves
	// (the same generation, key and epoch, no memory): made with the
	// descriptor, so taking a region away inside Poll allocates nothing.
	// A tombstone's own tomb is nil.
	tomb *region
	// lay is its bucket layout (lookup.go), nil when it has none;
	// immutable, like the descriptor.
	lay *abi.BucketLayout
}

// withTomb sets r's tombstone and returns r.
func (r *region) withTomb() *region {
	r.tomb = &region{perm: r.perm, owner: r.owner, tenant: r.tenant, gen: r.gen, epoch: r.epoch, kr: r.kr}
	return r
}

// regionOwner is the portal that registered a region: its core and its
// id on that core.
type regionOwner uint32

func ownerOf(core uint16, id PortalID) regionOwner { return regionOwner(core)<<16 | regionOwner(id) }

// regionTable is the RRT of an engine, shared by its cores. A RegionID is
// generation << 16 | index: removing a region frees its index, and the
// next region registered there bumps the generation, so stale ids miss.
// Index 0 is never valid.
type regionTable struct {
	r []atomic.Pointer[region] // by index: the live descriptor, or nil
	// dead is, by index, the tombstone of the last region that left
	// there (nil: none yet).
	dead []atomic.Pointer[region]
	// version counts changes of which memory the table holds (a region
	// added or removed); cores sync to it (regionView.sync).
	version atomic.Uint64
	epochs  atomic.Uint64 // the last key epoch handed out

	// The control plane's books (under mu): free indices, generations,
	// and who holds each index (an index stays held after a core took
	// its region away on its own, until its portal is closed).
	mu    sync.Mutex
	free  []uint16
	gen   []uint16
	held  []bool
	owner []regionOwner
}

func newRegionTable(n int) *regionTable {
	t := &regionTable{
		r:     make([]atomic.Pointer[region], n+1),
		dead:  make([]atomic.Pointer[region], n+1),
		free:  make([]uint16, 0, n),
		gen:   make([]uint16, n+1),
		held:  make([]bool, n+1),
		owner: make([]regionOwner, n+1),
	}
	for i := n; i >= 1; i-- {
		t.free = append(t.free, uint16(i))
	}
	return t
}

// lookup is the live region rid names, or nil (data path: one atomic
// load).
func (t *regionTable) lookup(rid abi.RegionID) *region {
	idx := int(rid.Index())
	if idx == 0 || idx >= len(t.r) {
		return nil
	}
	r := t.r[idx].Load()
	if r == nil || r.gen != rid.Gen() {
		return nil
	}
	return r
}

// lookupDead is the tombstone of the region rid named, when it was the
// last to leave its index, or nil (data path: two atomic loads). A
// region live under rid has none.
func (t *regionTable) lookupDead(rid abi.RegionID) *region {
	idx := int(rid.Index())
	if idx == 0 || idx >= len(t.dead) {
		return nil
	}
	d := t.dead[idx].Load()
	if d == nil || d.gen != rid.Gen() {
		return nil
	}
	if r := t.r[idx].Load(); r != nil && r.gen == d.gen {
		return nil // 65,536 registrations at the index since: the generation came round
	}
	return d
}

// add enters mem for owner under a fresh generation of a free index.
func (t *regionTable) add(owner regionOwner, tenant uint16, mem []byte, perm abi.Perm, kr aesni.Key, lay *abi.BucketLayout) (abi.RegionID, *region, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.free) == 0 {
		return 0, nil, ErrRegionsFull
	}
	idx := t.free[len(t.free)-1]
	t.free = t.free[:len(t.free)-1]
	t.gen[idx]++
	if t.gen[idx] == 0 {
		t.gen[idx] = 1
	}
	t.held[idx], t.owner[idx] = true, owner
	r := (&region{mem: mem, perm: perm, owner: owner, tenant: tenant, gen: t.gen[idx], epoch: t.epochs.Add(1), kr: kr, lay: lay}).withTomb()
	t.r[idx].Store(r)
	t.version.Add(1)
	return abi.MakeRegionID(idx, r.gen), r, nil
}

// remove takes the region at idx out of the table and frees the index
// (control plane). It returns the descriptor that was live, or nil when
// a core had taken it away already.
func (t *regionTable) remove(idx uint16) *region {
	t.mu.Lock()
	defer t.mu.Unlock()
	r := t.r[idx].Swap(nil)
	if r != nil {
		t.dead[idx].Store(r.tomb)
	}
	if t.held[idx] {
		t.held[idx] = false
		t.free = append(t.free, idx)
	}
	t.version.Add(1)
	return r
}

// takeAway removes r, live at idx, from the table without freeing its
// index (data path, no lock: a core reclaiming a portal whose rings are
// corrupt). The index is freed when the portal is closed (release).
func (t *regionTable) takeAway(idx uint16, r *region) bool {
	if !t.r[idx].CompareAndSwap(r, nil) {
		return false
	}
	t.dead[idx].Store(r.tomb)
	t.version.Add(1)
	return true
}

// release frees every index owner holds (control plane, when the portal
// closes) and returns the regions that were still live there, in index
// order (at most one per index; nil entries are skipped).
func (t *regionTable) release(owner regionOwner, out func(idx uint16, r *region)) {
	t.mu.Lock()
	var live []uint16
	for i := 1; i < len(t.held); i++ {
		if t.held[i] && t.owner[i] == owner {
			live = append(live, uint16(i))
		}
	}
	t.mu.Unlock()
	for _, idx := range live {
		if r := t.remove(idx); r != nil {
			out(idx, r)
		}
	}
}

// keySet is what setKey did.
type keySet uint8

const (
	keyInstalled  keySet = iota // the new K_r is the region's, under a new epoch
	keyGone                     // rid is no longer live: nothing changed
	keySuperseded               // the region's key is no longer the one of epoch want: nothing changed
)

// setKey publishes region rid with a new K_r under a new key epoch (a
// local or remote rekey) and returns the new descriptor. want is the key
// epoch the rekey was asked under: a remote REKEY's, whose request
// authenticated under that key; it installs only while that key is still
// the region's (the compare-and-swap makes this hold against every core's
// rekeys), so a REKEY never lands over a key its asker did not hold: not
// over its owner's revoking Rekey, nor over another REKEY's key. want 0
// (the owner's local Rekey; epochs start at 1) installs whatever the key
// is.
func (t *regionTable) setKey(rid abi.RegionID, kr aesni.Key, want uint64) (*region, keySet) {
	for {
		old := t.lookup(rid)
		if old == nil {
			return nil, keyGone
		}
		if want != 0 && old.epoch != want {
			return nil, keySuperseded
		}
		r := *old
		r.kr, r.epoch = kr, t.epochs.Add(1)
		r.withTomb()
		if t.r[rid.Index()].CompareAndSwap(old, &r) {
			return &r, keyInstalled
		}
	}
}

// audit checks the control plane's books against the table: every live
// descriptor sits at a held index under that index's generation and
// owner, and no free index is held.
func (t *regionTable) audit() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	free := make([]bool, len(t.r))
	for _, i := range t.free {
		if free[i] || t.held[i] {
			return fmt.Errorf("audit: region index %d free twice or free and held", i)
		}
		free[i] = true
	}
	held := 0
	for i := 1; i < len(t.r); i++ {
		if t.held[i] {
			held++
		}
		if d := t.dead[i].Load(); d != nil && (d.mem != nil || d.tomb != nil || d.gen == 0) {
			return fmt.Errorf("audit: region index %d: a tombstone of generation %d with memory or a tombstone of its own", i, d.gen)
		}
		r := t.r[i].Load()
		if r == nil {
			continue
		}
		if r.tomb == nil || r.tomb.gen != r.gen || r.tomb.epoch != r.epoch || r.tomb.kr != r.kr {
			return fmt.Errorf("audit: region index %d: its tombstone is not of its generation and key", i)
		}
		if !t.held[i] || r.gen != t.gen[i] || r.owner != t.owner[i] {
			return fmt.Errorf("audit: region index %d: live generation %d of owner %#x, books say held=%v generation %d owner %#x",
				i, r.gen, r.owner, t.held[i], t.gen[i], t.owner[i])
		}
	}
	if held+len(t.free) != len(t.r)-1 {
		return fmt.Errorf("audit: region indices: %d held, %d free of %d", held, len(t.free), len(t.r)-1)
	}
	return nil
}

// ---- a core's view of the table -------------------------------------------

// regionView is one core's part of the shared region table: the regions
// each of its portals holds (PortalStats), the memory it registered with
// its seal backend, and its quiescent point (sync).
type regionView struct {
	t    *regionTable
	core uint16
	// use is what each portal of this core holds (by PortalID), kept by
	// the core's own control plane, so reading it costs no walk.
	use []regionUse
	// held is, by index, the region memory this core registered with
	// its seal backend (nil: none); synced is the table version it has
	// synced to, published in quiet for the control plane.
	held   [][]byte
	synced uint64
	quiet  *atomic.Uint64
	out    *sender // its seal backend (out.seal, chosen after the view is built)
	track  bool    // the backend registers memory: keep held in step
}

// regionUse is the regions one portal holds.
type regionUse struct {
	n     int
	bytes uint64
}

func newRegionView(t *regionTable, core uint16, portals int, quiet *atomic.Uint64, out *sender) *regionView {
	return &regionView{t: t, core: core, use: make([]regionUse, portals), held: make([][]byte, len(t.r)), quiet: quiet, out: out}
}

func (v *regionView) lookup(rid abi.RegionID) *region { return v.t.lookup(rid) }

// mine reports whether r belongs to portal id of this core.
func (v *regionView) mine(r *region, id PortalID) bool { return r.owner == ownerOf(v.core, id) }

// owned is portal id's live region rid.
func (v *regionView) owned(id PortalID, rid abi.RegionID) (*region, error) {
	r := v.lookup(rid)
	if r == nil {
		return nil, fmt.Errorf("%w: %#x", ErrNoRegion, uint32(rid))
	}
	if !v.mine(r, id) {
		return nil, fmt.Errorf("%w: %#x", ErrNotOwner, uint32(rid))
	}
	return r, nil
}

// add registers mem for portal id (its core's control plane).
func (v *regionView) add(id PortalID, tenant uint16, mem []byte, perm abi.Perm, kr aesni.Key, lay *abi.BucketLayout) (abi.RegionID, error) {
	rid, r, err := v.t.add(ownerOf(v.core, id), tenant, mem, perm, kr, lay)
	if err != nil {
		return 0, err
	}
	u := &v.use[id]
	u.n++
	u.bytes += uint64(len(r.mem))
	if v.track {
		v.out.seal.register(mem)
		v.held[rid.Index()] = mem
	}
	return rid, nil
}

// gone does this core's part when region r, at idx, has left the table:
// its portal's count, the seals that may still read it, its registration.
func (v *regionView) gone(idx uint16, r *region) {
	u := &v.use[r.owner&0xffff]
	u.n--
	u.bytes -= uint64(len(r.mem))
	v.drop(idx)
}

// drop runs the queued seals (they may read the memory) and unregisters
// what this core registered at idx.
func (v *regionView) drop(idx uint16) {
	s := v.out.seal
	s.run()
	if m := v.held[idx]; m != nil {
		s.unregister(m)
		v.held[idx] = nil
	}
}

// sync is the core's quiescent point, at the start of every Poll: when
// the table has changed since the last one, it runs the queued seals,
// unregisters the memory of regions that left the table (registering
// that of new ones), and then records the version it has seen, after
// which this core never touches the memory of a region removed before
// that version.
func (v *regionView) sync() {
	ver := v.t.version.Load()
	if ver == v.synced {
		return
	}
	if v.track {
		s := v.out.seal
		s.run()
		for i := 1; i < len(v.t.r); i++ {
			var mem []byte
			if r := v.t.r[i].Load(); r != nil {
				mem = r.mem
			}
			if h := v.held[i]; !sameMem(h, mem) {
				if h != nil {
					s.unregister(h)
				}
				if mem != nil {
					s.register(mem)
				}
				v.held[i] = mem
			}
		}
	}
	v.synced = ver
	v.quiet.Store(ver)
}

func sameMem(a, b []byte) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

// audit checks that use is what the table holds for this core's
// portals. Only this core changes which regions its portals hold, so the
// walk sees a stable picture of them.
func (v *regionView) audit() error {
	want := make([]regionUse, len(v.use))
	for i := 1; i < len(v.t.r); i++ {
		if r := v.t.r[i].Load(); r != nil && uint16(r.owner>>16) == v.core {
			want[r.owner&0xffff].n++
			want[r.owner&0xffff].bytes += uint64(len(r.mem))
		}
	}
	for id := range want {
		if want[id] != v.use[id] {
			return fmt.Errorf("audit: portal %d holds %d regions of %d bytes, counted %d of %d", id, want[id].n, want[id].bytes, v.use[id].n, v.use[id].bytes)
		}
	}
	return nil
}
