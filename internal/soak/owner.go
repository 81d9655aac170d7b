package soak

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"net/netip"
	"sync"

	"github.com/onerma/onerma/aesni"
	"github.com/onerma/onerma/keyx"
	"github.com/onerma/onerma/portal"
)

// Region layouts. An owner's data region holds staticBlocks blocks of
// 4 KB that only the owner writes (once, when it registers them), then a
// lane of laneSlots × len(sizes) blocks per engine of the testbed: the
// blocks of slot s in lane i are written and read back only by slot s
// of the raw worker on engine i, one block per op size (a block written
// at one size only, so that its bytes are always of one generation).
// Its exec region holds one partition of partBytes per engine, written
// and read back only by that engine's executor.
const (
	blockBytes   = portal.MaxOpBytes
	staticBlocks = 256
	laneSlots    = 8
	partBytes    = 16 << 20
	engines      = 4
	dataBytes    = uint64(staticBlocks+engines*laneSlots*len(sizes)) * blockBytes
	execBytes    = engines * partBytes
	ownerPerm    = portal.PermRemoteRead | portal.PermRemoteWrite | portal.PermRemoteRekey | portal.PermLocalRead | portal.PermLocalWrite
)

// blockTag is the tag of block b of engine j's data region.
func blockTag(j, b int) uint64 { return uint64(j+1)<<40 | uint64(b) }

// laneBlock is the block of size index z of slot s of the lane of
// engine i.
func laneBlock(i, s, z int) int { return staticBlocks + (i*laneSlots+s)*len(sizes) + z }

// partTag is the tag of engine i's partition of engine j's exec region.
func partTag(j, i int) uint64 { return uint64(j+1)<<8 | uint64(i+1) }

// served is a region an owner serves K_d for. It keeps its own copy of
// the region key: a remote REKEY installs a key the owner's portal never
// saw, which the soak then records here (setKey).
type served struct {
	r  *portal.Region
	mu sync.Mutex
	kr portal.Key
}

func (s *served) ID() portal.RegionID { return s.r.ID() }
func (s *served) Size() uint64        { return s.r.Size() }
func (s *served) Perm() portal.Perm   { return s.r.Perm() }

// DeriveKey derives K_d from the key the region holds now.
func (s *served) DeriveKey(initiator netip.Addr, pid uint32, op portal.OpType) portal.Key {
	s.mu.Lock()
	kr := s.kr
	s.mu.Unlock()
	a := initiator.Unmap()
	if !a.Is4() {
		return portal.Key{}
	}
	return aesni.DeriveKey(kr, a.As4(), pid, uint8(op))
}

func (s *served) setKey(kr portal.Key) {
	s.mu.Lock()
	s.kr = kr
	s.mu.Unlock()
}

// owner is the application on engine j that owns its data and exec
// regions and hands out K_d for them over its key service (keyx, TLS 1.3
// with client certificates). When its engine is restarted it redials,
// registers the regions anew (new ids, new random keys), copies their
// bytes over from the old mappings and serves the new ones.
type owner struct {
	j    int
	sock string
	srv  *keyx.Server
	addr string // the key service's TCP address

	mu   sync.RWMutex // the fields below; held for reading while a worker checks region bytes
	p    *portal.Portal
	gen  int // registrations so far (the first, then one per reconnection)
	data *served
	exec *served
}

// newOwner opens owner j's portal on the engine at sock and its key
// service, with creds, granting permits.
func newOwner(j int, sock string, creds *keyx.Credentials, permits []keyx.Permit) (*owner, error) {
	o := &owner{j: j, sock: sock}
	p, err := portal.DialOptions(sock, fmt.Sprintf("soak-owner%d", j+1), portal.Options{WaitSpins: -1})
	if err != nil {
		return nil, err
	}
	if o.srv, err = keyx.NewServer(keyx.Config{Credentials: creds, Owner: p.Identity().Addr, Permits: permits}); err != nil {
		p.Close()
		return nil, err
	}
	ap, err := o.srv.Start("")
	if err != nil {
		p.Close()
		return nil, err
	}
	o.addr = ap.String()
	data, exec, err := o.register(p)
	if err != nil {
		p.Close()
		o.srv.Close()
		return nil, err
	}
	for b := range int(dataBytes / blockBytes) {
		fillBlock(data.r.Bytes()[b*blockBytes:(b+1)*blockBytes], blockTag(j, b), 0)
	}
	o.publish(p, data, exec)
	return o, nil
}

// register registers a data and an exec region on p under fresh random
// keys.
func (o *owner) register(p *portal.Portal) (data, exec *served, err error) {
	reg := func(size uint64) (*served, error) {
		var kr portal.Key
		for kr == (portal.Key{}) {
			rand.Read(kr[:])
		}
		r, err := p.RegisterRegionKey(size, ownerPerm, kr)
		if err != nil {
			return nil, err
		}
		return &served{r: r, kr: kr}, nil
	}
	if data, err = reg(dataBytes); err != nil {
		return nil, nil, fmt.Errorf("owner %d: data region: %w", o.j+1, err)
	}
	if exec, err = reg(execBytes); err != nil {
		return nil, nil, fmt.Errorf("owner %d: exec region: %w", o.j+1, err)
	}
	return data, exec, nil
}

// publish makes p's regions the ones served.
func (o *owner) publish(p *portal.Portal, data, exec *served) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.data != nil {
		o.srv.Remove(o.data.ID())
		o.srv.Remove(o.exec.ID())
	}
	o.p, o.data, o.exec = p, data, exec
	o.gen++
	o.srv.Add(data)
	o.srv.Add(exec)
}

// reconnect follows the owner's engine to its next incarnation: the old
// portal must have seen it go (ENGINE_GONE); the new one's regions get
// the old ones' bytes before anyone can reach them.
func (o *owner) reconnect(ctx context.Context) error {
	o.mu.RLock()
	old, oldData, oldExec := o.p, o.data, o.exec
	o.mu.RUnlock()
	if old.Gone() == nil {
		return fmt.Errorf("owner %d: its engine was restarted, but its portal has not seen it go", o.j+1)
	}
	np, err := old.Redial(ctx)
	if err != nil {
		return fmt.Errorf("owner %d: redial: %w", o.j+1, err)
	}
	data, exec, err := o.register(np)
	if err != nil {
		np.Close()
		return err
	}
	copy(data.r.Bytes(), oldData.r.Bytes())
	copy(exec.r.Bytes(), oldExec.r.Bytes())
	o.publish(np, data, exec)
	return old.Close()
}

// view is what a worker needs to reach one of the owner's regions.
type view struct {
	gen  int
	addr netip.Addr
	id   portal.RegionID
}

// region returns where region r is served now.
func (o *owner) region(r role) view {
	o.mu.RLock()
	defer o.mu.RUnlock()
	s := o.data
	if r == roleExec {
		s = o.exec
	}
	return view{gen: o.gen, addr: o.p.Identity().Addr, id: s.ID()}
}

// holds reports whether the owner's region r holds want at off: what a
// WRITE that completed OK must have left there.
func (o *owner) holds(r role, off uint64, want []byte) error {
	o.mu.RLock()
	defer o.mu.RUnlock()
	s := o.data
	if r == roleExec {
		s = o.exec
	}
	got := s.r.Bytes()[off : off+uint64(len(want))]
	if bytes.Equal(got, want) {
		return nil
	}
	i := 0
	for got[i] == want[i] {
		i++
	}
	return fmt.Errorf("the owner's %s region holds %#x at offset %d, the WRITE wrote %#x", r, got[i], off+uint64(i), want[i])
}

// localRekey replaces region r's key through the owner's engine
// (portal.Rekey) while no K_d is being derived: once it returns, the key
// service hands out K_d of the new key only.
func (o *owner) localRekey(r role) error {
	var kr portal.Key
	for kr == (portal.Key{}) {
		rand.Read(kr[:])
	}
	o.mu.RLock()
	defer o.mu.RUnlock()
	s := o.data
	if r == roleExec {
		s = o.exec
	}
	return o.srv.Update(func() error {
		if err := o.p.Rekey(s.r, kr); err != nil {
			return err
		}
		s.setKey(kr)
		return nil
	})
}

// installed records that a remote REKEY installed kr as region r's key
// (if the region is still the one registered as id).
func (o *owner) installed(r role, id portal.RegionID, kr portal.Key) {
	o.mu.RLock()
	defer o.mu.RUnlock()
	s := o.data
	if r == roleExec {
		s = o.exec
	}
	if s.ID() == id {
		o.srv.Update(func() error { s.setKey(kr); return nil })
	}
}

// close stops the key service and closes the portal (the engine reclaims
// its regions).
func (o *owner) close() error {
	o.srv.Close()
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.p.Close()
}
