package engine

import (
	"fmt"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/aesni"
)

// region is one RRT entry.
type region struct {
	mem   []byte
	perm  abi.Perm
	owner PortalID
	gen   uint16
	valid bool
	kr    *aesni.Deriver // K_r, expanded: derives each initiator's K_d
}

// regionTable is the registered region table (RRT, paper §4.3). A
// RegionID is generation << 16 | index: removing a region frees its index,
// and the next region registered there bumps the generation, so stale ids
// miss. Index 0 is never valid.
type regionTable struct {
	r    []region
	free []uint16
	// use is what each portal holds (by PortalID), for PortalStats:
	// kept by add and remove, so reading it costs no walk of the table.
	use []regionUse
}

// regionUse is the regions one portal holds.
type regionUse struct {
	n     int
	bytes uint64
}

func newRegionTable(n, portals int) *regionTable {
	t := &regionTable{r: make([]region, n+1), free: make([]uint16, 0, n), use: make([]regionUse, portals)}
	for i := n; i >= 1; i-- {
		t.free = append(t.free, uint16(i))
	}
	return t
}

// lookup is the live region rid names, or nil.
func (t *regionTable) lookup(rid abi.RegionID) *region {
	idx := int(rid.Index())
	if idx == 0 || idx >= len(t.r) {
		return nil
	}
	r := &t.r[idx]
	if !r.valid || r.gen != rid.Gen() {
		return nil
	}
	return r
}

// owned is portal id's live region rid.
func (t *regionTable) owned(id PortalID, rid abi.RegionID) (*region, error) {
	r := t.lookup(rid)
	if r == nil {
		return nil, fmt.Errorf("%w: %#x", ErrNoRegion, uint32(rid))
	}
	if r.owner != id {
		return nil, fmt.Errorf("%w: %#x", ErrNotOwner, uint32(rid))
	}
	return r, nil
}

// add enters mem for portal id under a fresh generation of a free index.
func (t *regionTable) add(id PortalID, mem []byte, perm abi.Perm, kr aesni.Key) (abi.RegionID, error) {
	if len(t.free) == 0 {
		return 0, ErrRegionsFull
	}
	idx := t.free[len(t.free)-1]
	t.free = t.free[:len(t.free)-1]
	r := &t.r[idx]
	r.gen++
	if r.gen == 0 {
		r.gen = 1
	}
	r.mem, r.perm, r.owner, r.valid = mem, perm, id, true
	r.kr = aesni.NewDeriver(kr)
	u := &t.use[id]
	u.n++
	u.bytes += uint64(len(mem))
	return abi.MakeRegionID(idx, r.gen), nil
}

// remove invalidates the region at idx and frees the index.
func (t *regionTable) remove(idx uint16) {
	r := &t.r[idx]
	u := &t.use[r.owner]
	u.n--
	u.bytes -= uint64(len(r.mem))
	r.valid, r.mem, r.kr = false, nil, nil
	t.free = append(t.free, idx)
}

// audit checks that use is what the table holds, portal by portal.
func (t *regionTable) audit() error {
	want := make([]regionUse, len(t.use))
	for i := 1; i < len(t.r); i++ {
		if r := &t.r[i]; r.valid {
			want[r.owner].n++
			want[r.owner].bytes += uint64(len(r.mem))
		}
	}
	for id := range want {
		if want[id] != t.use[id] {
			return fmt.Errorf("audit: portal %d holds %d regions of %d bytes, counted %d of %d", id, want[id].n, want[id].bytes, t.use[id].n, t.use[id].bytes)
		}
	}
	return nil
}
