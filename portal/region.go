package portal

import (
	"crypto/rand"
	"errors"
	"fmt"
	"net/netip"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/aesni"
	"github.com/onerma/onerma/ctlmsg"
)

// Region is memory registered with the engine: the engine created it,
// registered it in its region table, and both processes map it.
type Region struct {
	p       *Portal
	id      abi.RegionID
	mapping []byte // MapSize bytes; nil once deregistered
	mem     []byte // mapping[:size:size]
	size    uint64
	perm    abi.Perm
	hugetlb bool

	// The region key K_r. Key and DeriveKey may be called from any
	// goroutine, also while Rekey runs on the portal's.
	kmu sync.Mutex
	kr  aesni.Key
}

// ErrZeroKey: a region key of all zero bytes (the engine refuses it: it
// is what an uninitialised key looks like).
var ErrZeroKey = errors.New("portal: region key is all zero")

// Key returns the region's current key K_r. It is secret: give peers only
// keys derived from it (DeriveKey).
func (r *Region) Key() Key {
	r.kmu.Lock()
	defer r.kmu.Unlock()
	return r.kr
}

// DeriveKey returns the key K_d that the process with engine-stamped PID
// pid, initiating op through the engine at address initiator, must put in
// its commands to access this region (paper §4.2 and Fig. 5 step 2: the
// server side hands K_d to an authorised client, never K_r). initiator and
// pid are what the client's portal reports as its Identity. For an
// address that is not IPv4 it returns the zero Key, which no engine
// accepts.
func (r *Region) DeriveKey(initiator netip.Addr, pid uint32, op OpType) Key {
	a := initiator.Unmap()
	if !a.Is4() {
		return aesni.Key{}
	}
	return aesni.DeriveKey(r.Key(), a.As4(), pid, uint8(op))
}

// ID is the region id to name in commands (and to hand to peers).
func (r *Region) ID() RegionID { return r.id }

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
// given permissions, under a fresh random region key K_r (crypto/rand; see
// Region.Key), and maps it. The memory starts zeroed. It is faulted in by
// this process, which the kernel charges for it (its memory cgroup and
// RSS), and counts against the tenant's quotas in the engine
// (errors.Is(err, ErrQuota)). The engine seals it: no hole can be punched
// in it (fallocate, MADV_REMOVE) while it exists.
func (p *Portal) RegisterRegion(size uint64, perm Perm) (*Region, error) {
	var kr aesni.Key
	for kr == (aesni.Key{}) {
		if _, err := rand.Read(kr[:]); err != nil {
			return nil, fmt.Errorf("portal: register_region: generating a region key: %w", err)
		}
	}
	return p.RegisterRegionKey(size, perm, kr)
}

// RegisterRegionKey is RegisterRegion with a region key K_r the
// application chose (paper §4.2). kr must not be all zero (ErrZeroKey).
// The key goes to the local engine over the control socket only.
func (p *Portal) RegisterRegionKey(size uint64, perm Perm, kr Key) (*Region, error) {
	if perm == 0 || perm&^abi.PermAll != 0 {
		return nil, fmt.Errorf("portal: register_region: perm %#x, want a non-zero subset of %#x (PermRemoteLookup: RegisterLookupRegion)", perm, abi.PermAll)
	}
	return p.register(size, perm, kr, BucketLayout{})
}

// RegisterLookupRegion is RegisterRegion for a region that remote LOOKUPs
// may scan: its buckets are laid out as lay says, and perm must hold
// PermRemoteLookup (with any of PermAll's bits). The layout must be valid
// (BucketLayout.Validate), a bucket must fit the region, the region may
// hold at most abi.MaxLookupRegionBytes, and lay.Linked, when not 0, must
// be a region of this portal (the slab pointers lead into; it must stay
// registered while the index is: a LOOKUP whose entry points into a
// linked region that is gone ends REMOTE_LOOKUP_BOUNDS).
func (p *Portal) RegisterLookupRegion(size uint64, perm Perm, lay BucketLayout) (*Region, error) {
	var kr aesni.Key
	for kr == (aesni.Key{}) {
		if _, err := rand.Read(kr[:]); err != nil {
			return nil, fmt.Errorf("portal: register_region: generating a region key: %w", err)
		}
	}
	return p.RegisterLookupRegionKey(size, perm, lay, kr)
}

// RegisterLookupRegionKey is RegisterLookupRegion with a region key K_r
// the application chose.
func (p *Portal) RegisterLookupRegionKey(size uint64, perm Perm, lay BucketLayout, kr Key) (*Region, error) {
	if perm&abi.PermRemoteLookup == 0 || perm&^abi.PermAny != 0 {
		return nil, fmt.Errorf("portal: register_region: perm %#x, want PermRemoteLookup and a subset of %#x", perm, abi.PermAny)
	}
	if err := lay.Validate(); err != nil {
		return nil, fmt.Errorf("portal: register_region: %w", err)
	}
	if size > abi.MaxLookupRegionBytes || uint64(lay.BucketBytes) > size {
		return nil, fmt.Errorf("portal: register_region: size %d, want %d..%d for buckets of %d bytes", size, lay.BucketBytes, uint64(abi.MaxLookupRegionBytes), lay.BucketBytes)
	}
	if lay.Linked != 0 {
		p.mu.Lock()
		_, ok := p.regions[lay.Linked]
		p.mu.Unlock()
		if !ok {
			return nil, fmt.Errorf("portal: register_region: linked region %#x is not a region of this portal", uint32(lay.Linked))
		}
	}
	return p.register(size, perm, kr, lay)
}

// register creates, maps and registers a region (lay.BucketBytes 0: no
// bucket layout).
func (p *Portal) register(size uint64, perm Perm, kr Key, lay BucketLayout) (*Region, error) {
	if kr == (aesni.Key{}) {
		return nil, fmt.Errorf("portal: register_region: %w", ErrZeroKey)
	}
	if size < 1 || size > ctlmsg.MaxRegionBytes {
		return nil, fmt.Errorf("portal: register_region: size %d, want 1..%d", size, uint64(ctlmsg.MaxRegionBytes))
	}
	resp, fd, err := p.roundTrip(&ctlmsg.Request{Op: ctlmsg.OpCreateRegion, Size: size})
	if err != nil {
		return nil, err
	}
	mr := resp.Memory
	if mr == nil || fd < 0 || mr.Size != size || mr.MapSize < size || mr.Memory == 0 {
		if fd >= 0 {
			unix.Close(fd)
		}
		return nil, fmt.Errorf("portal: create_region: malformed reply %+v", mr)
	}
	// Mapped and faulted in here first: the engine seals the memory when
	// it registers it, after which no new writable mapping is possible.
	mapping, err := mapFD(fd, mr.MapSize)
	if err != nil {
		return nil, fmt.Errorf("portal: create_region: %w", err)
	}
	resp, _, err = p.roundTrip(&ctlmsg.Request{Op: ctlmsg.OpRegisterRegion, Memory: mr.Memory, Perm: perm, Key: ctlmsg.Key(kr), Layout: lay})
	if err != nil {
		// Whatever failed, the engine dropped the memory or drops it at the
		// next create_region: let go of it, so the tenant is not charged
		// for it.
		unix.Munmap(mapping)
		return nil, err
	}
	rr := resp.Region
	if rr == nil || rr.Size != size || rr.MapSize != mr.MapSize || rr.Region == 0 {
		// The engine may have registered it; give it back rather than leak it.
		if rr != nil && rr.Region != 0 {
			p.deregister(abi.RegionID(rr.Region))
		}
		unix.Munmap(mapping)
		return nil, fmt.Errorf("portal: register_region: malformed reply %+v", rr)
	}
	r := &Region{p: p, id: abi.RegionID(rr.Region), mapping: mapping, mem: mapping[:size:size],
		size: size, perm: perm, hugetlb: rr.Hugetlb, kr: kr}
	p.mu.Lock()
	p.regions[r.id] = r
	p.mu.Unlock()
	return r, nil
}

// Rekey replaces r's region key with kr through the control socket (the
// local rekey of paper §5.2): once it returns, the engine authenticates
// requests for r only with keys derived from kr, so every reader needs a
// new K_d (r.DeriveKey); reads with keys derived from the old K_r fail
// with REMOTE_AUTHENTICATION_FAILURE. Requests the engine authenticated
// before may still be answered, but a remote REKEY of r asked under an
// earlier key is never installed (it ends REMOTE_REGION). Other regions
// are not affected. r.Key() returns kr afterwards; on error the key is
// unchanged as far as this portal knows (ErrNoRegion: the engine no longer
// holds r for this portal).
func (p *Portal) Rekey(r *Region, kr Key) error {
	if r == nil || r.p != p || r.mapping == nil {
		return ErrRegion
	}
	if kr == (aesni.Key{}) {
		return fmt.Errorf("portal: rekey: %w", ErrZeroKey)
	}
	req := ctlmsg.Request{Op: ctlmsg.OpRekey, Region: uint32(r.id), Key: ctlmsg.Key(kr)}
	if _, _, err := p.roundTrip(&req); err != nil {
		return err
	}
	r.kmu.Lock()
	r.kr = kr
	r.kmu.Unlock()
	return nil
}

// DeregisterRegion invalidates r in the engine (which never touches its
// memory again once this returns) and unmaps it. Ops in flight that name
// r complete with an error status. When the engine no longer holds r for
// this portal (ErrNoRegion, or the engine closed the portal), r is
// unmapped too and the error returned: the engine charges the tenant for
// the region's memory until every mapping of it is gone. Other errors
// leave r mapped and registered, to try again (or Close).
func (p *Portal) DeregisterRegion(r *Region) error {
	if r == nil || r.p != p || r.mapping == nil {
		return ErrRegion
	}
	if err := p.deregister(r.id); err != nil {
		var pe *Error
		if errors.As(err, &pe) && (pe.Code == ctlmsg.CodeNoRegion || pe.Code == ctlmsg.CodeState) {
			p.mu.Lock()
			delete(p.regions, r.id)
			p.mu.Unlock()
			r.unmap()
		}
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
