package sim

import (
	"encoding/binary"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/aesni"
)

// Region keys (paper §4.2; see doc.go, "Keys"): the directory of every
// K_r a region had, the K_d a command carries, and the "rekey" fault
// (Core.Rekey by the owner).

// keyVersion is one K_r of a region: installed on the owner's core at
// `at` (registration or Rekey); node i's applications know it from
// learn[i] on (the key distribution delay; the owner at once).
type keyVersion struct {
	kr    aesni.Key
	d     *aesni.Deriver
	at    int64
	learn []int64
}

// known returns the newest key version node has learnt by now.
func (rg *region) known(node int, now int64) int {
	for v := len(rg.keys) - 1; v > 0; v-- {
		if rg.keys[v].learn[node] <= now {
			return v
		}
	}
	return 0
}

// addKey records a new K_r, effective at the owner now; every other node
// learns it within delay.
func (s *Sim) addKey(rg *region, kr aesni.Key, delay int64) {
	kv := keyVersion{kr: kr, d: aesni.NewDeriver(kr), at: s.now, learn: make([]int64, len(s.nodes))}
	for i := range kv.learn {
		kv.learn[i] = s.now
		if i != rg.node && delay > 0 {
			kv.learn[i] += s.faultRng.Int64N(delay + 1)
		}
	}
	rg.keys = append(rg.keys, kv)
}

// newKey draws a region key from the run's key stream.
func (s *Sim) newKey() aesni.Key {
	var k aesni.Key
	binary.LittleEndian.PutUint64(k[0:8], s.keyRng.Uint64())
	binary.LittleEndian.PutUint64(k[8:16], s.keyRng.Uint64())
	return k
}

// key writes the command's K_d: derived from the newest K_r of the region
// it reads (of tgt for commands that name no live region) this node
// knows, for this node's address, the portal's PID and READ (paper §4.2),
// or a wrong one for the wrong-key kinds. A valid read with a key the
// owner has replaced since becomes a stale-key op.
func (p *portal) key(o *op, tgt *region) {
	a := p.a
	s := a.s
	r := s.appRng
	c := &o.cmd
	o.keyRg = o.target
	if o.keyRg == nil {
		o.keyRg = tgt
	}
	rg := o.keyRg
	if rg == nil {
		return // unreachable address, no region at all: any key
	}
	o.keyVer = rg.known(a.n.id, s.now)
	// (A region of an engine that restarted since: the new engine has
	// none of its keys.)
	o.stale = o.keyVer < len(rg.keys)-1 || (rg.gone && rg.deadAt <= s.now)
	kv := &rg.keys[o.keyVer]
	ip, pid, opType := a.n.ip.As4(), p.pid, uint8(abi.OpRead)
	if o.rekey {
		opType = uint8(abi.OpRekey)
	} else if o.write {
		opType = uint8(abi.OpWrite)
	} else if o.lookup {
		opType = uint8(abi.OpLookup)
	}
	switch o.kind {
	case kKeyRandom:
		binary.LittleEndian.PutUint64(c.Key[0:8], r.Uint64())
		binary.LittleEndian.PutUint64(c.Key[8:16], r.Uint64())
		return
	case kKeyInitiator:
		switch r.IntN(3) {
		case 0: // another portal's PID (maybe of another node: it stole a key)
			pid = 1000 + uint32(r.IntN(len(s.nodes)))*100 + uint32(r.IntN(4))
			if pid == p.pid {
				pid++
			}
		case 1: // the K_d another node was given
			m := s.nodes[(a.n.id+1+r.IntN(len(s.nodes)-1))%len(s.nodes)]
			ip = m.ip.As4()
		default:
			pid ^= 1 << r.IntN(32)
		}
	case kKeyOp: // a WRITE's K_d on a READ, a READ's on a WRITE, REKEY's, nonsense
		others := [...]uint8{uint8(abi.OpWrite), uint8(abi.OpRekey), 0, 0xff}
		if o.rekey {
			others[1] = uint8(abi.OpRead)
		} else if o.write || o.lookup {
			others[0] = uint8(abi.OpRead) // a LOOKUP with a READ's K_d, a WRITE's, REKEY's, nonsense
		}
		opType = others[r.IntN(len(others))]
		if o.keyOp != 0 { // a test chose it
			opType = o.keyOp
		}
	}
	c.Key = kv.d.Derive(ip, pid, opType)
	if o.kind == kValid && o.stale {
		o.kind = kStaleKey
	}
}

// rekey: the owner replaces the K_r of one of its regions (Core.Rekey):
// requests that arrive afterwards authenticate only with K_d derived from
// the new key. The other nodes learn it after the key distribution delay;
// until then they post with the old key, and those ops must fail
// authentication. Rekeys that must be refused are tried first.
func (a *app) rekey() {
	s := a.s
	r := s.faultRng
	if len(a.portals) == 0 {
		return
	}
	p := a.portals[r.IntN(len(a.portals))]
	var rg *region
	switch r.IntN(5) {
	case 0:
		rg = p.sink // a target of remote-perm commands
	case 1, 2:
		rg = p.wdst // writes (and reads) in flight with the old key
	default:
		rg = p.src
	}
	if p.lk != nil && r.IntN(3) == 0 { // (lookup scenario only: no draw otherwise)
		rg = p.lk.idx // LOOKUPs in flight with the old key
	}
	for _, q := range a.portals {
		if q != p && q.c.core.Rekey(q.id, rg.id, s.newKey()) == nil {
			s.fail("node %d: Rekey of region %#x by portal %d, which does not own it, succeeded", a.n.id, uint32(rg.id), q.id)
			return
		}
	}
	if n := a.n; len(n.cores) > 1 { // the owner's portal id, on another core: another portal
		if o := n.cores[s.mcRng.IntN(len(n.cores))]; o != p.c && o.core.Rekey(p.id, rg.id, s.newKey()) == nil {
			s.fail("node %d: Rekey of region %#x through core %d, not its portal's core %d, succeeded", n.id, uint32(rg.id), o.idx, p.c.idx)
			return
		}
	}
	c := p.c.core
	if len(a.deadIDs) > 0 {
		id := a.deadIDs[r.IntN(len(a.deadIDs))]
		if c.Rekey(p.id, id, s.newKey()) == nil {
			s.fail("node %d: Rekey of deregistered region %#x succeeded", a.n.id, uint32(id))
			return
		}
	}
	a.rekeyRegion(p, rg)
}

// rekeyRegion installs a new K_r for region rg of portal p on the core and
// in the directory; the other nodes learn it within Faults.KeyDelayNs.
func (a *app) rekeyRegion(p *portal, rg *region) {
	s := a.s
	kr := s.newKey()
	if err := p.c.core.Rekey(p.id, rg.id, kr); err != nil {
		s.fail("node %d: Rekey(%#x): %v", a.n.id, uint32(rg.id), err)
		return
	}
	a.rekeys++
	s.res.Rekeys++
	s.addKey(rg, kr, s.cfg.Faults.KeyDelayNs)
	s.tracef("node %d portal %d: region %#x rekeyed (v%d)", a.n.id, p.id, uint32(rg.id), len(rg.keys)-1)
	a.n.afterCall("Rekey")
}
