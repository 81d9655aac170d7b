package portal

import (
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/engine/ctl/ctlmsg"
)

// Region is memory registered with the engine: the engine created it,
// registered it in its region table, and both processes map it.
type Region struct {
	p       *Portal
	id      abi.RegionID
	mapping []byte // MapSize bytes; nil once deregistered
	mem     []byte // mapping[:size:size]
	size    uint64
	perm    Perm
	hugetlb bool
}

// ID is the region id to name in commands (and to hand to peers).
func (r *Region) ID() abi.RegionID { return r.id }

// Bytes is the region's memory, shared with the engine: data READ into the
// region lands here, data served to remote READs is read from here. nil
// after deregistration.
func (r *Region) Bytes() []byte { return r.mem }

// Size is the registered size in bytes.
func (r *Region) Size() uint64 { return r.size }

// Perm is the region's permission set.
func (r *Region) Perm() Perm { return r.perm }

// Hugetlb reports whether the region is backed by huge pages.
func (r *Region) Hugetlb() bool { return r.hugetlb }

func (r *Region) unmap() error {
	if r.mapping == nil {
		return nil
	}
	err := unix.Munmap(r.mapping)
	r.mapping, r.mem = nil, nil
	return err
}

// RegisterRegion asks the engine for size bytes of shared memory with the
// given permissions and maps it. The memory starts zeroed.
func (p *Portal) RegisterRegion(size uint64, perm Perm) (*Region, error) {
	if size < 1 || size > ctlmsg.MaxRegionBytes {
		return nil, fmt.Errorf("portal: register_region: size %d, want 1..%d", size, uint64(ctlmsg.MaxRegionBytes))
	}
	if perm == 0 || perm&^PermAll != 0 {
		return nil, fmt.Errorf("portal: register_region: perm %#x, want a non-zero subset of %#x", perm, PermAll)
	}
	resp, fd, err := p.roundTrip(&ctlmsg.Request{Op: ctlmsg.OpRegisterRegion, Size: size, Perm: uint8(perm)})
	if err != nil {
		return nil, err
	}
	rr := resp.Region
	if rr == nil || fd < 0 || rr.Size != size || rr.MapSize < size || rr.Region == 0 {
		if fd >= 0 {
			unix.Close(fd)
		}
		return nil, fmt.Errorf("portal: register_region: malformed reply %+v", rr)
	}
	mapping, err := mapFD(fd, rr.MapSize)
	if err != nil {
		// The engine registered it; give it back rather than leak it.
		p.deregister(abi.RegionID(rr.Region))
		return nil, fmt.Errorf("portal: register_region: %w", err)
	}
	r := &Region{p: p, id: abi.RegionID(rr.Region), mapping: mapping, mem: mapping[:size:size],
		size: size, perm: perm, hugetlb: rr.Hugetlb}
	p.mu.Lock()
	p.regions[r.id] = r
	p.mu.Unlock()
	return r, nil
}

// DeregisterRegion invalidates r in the engine (which never touches its
// memory again once this returns) and unmaps it. Ops in flight that name
// r complete with an error status.
func (p *Portal) DeregisterRegion(r *Region) error {
	if r == nil || r.p != p || r.mapping == nil {
		return ErrRegion
	}
	if err := p.deregister(r.id); err != nil {
		return err
	}
	p.mu.Lock()
	delete(p.regions, r.id)
	p.mu.Unlock()
	return r.unmap()
}

func (p *Portal) deregister(id abi.RegionID) error {
	_, _, err := p.roundTrip(&ctlmsg.Request{Op: ctlmsg.OpDeregisterRegion, Region: uint32(id)})
	return err
}
