package engine

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/aesni"
	"github.com/onerma/onerma/wire"
)

// LOOKUP (RedN's offloaded lookup, done by the serving engine): a region
// registered with a bucket layout (abi.BucketLayout) may be scanned by a
// remote LOOKUP holding a K_d of it for abi.OpLookup, when the region has
// abi.PermRemoteLookup. The request names a bucket (its offset) and a tag;
// the serving core scans the bucket's entries in order for the first
// whose tag field equals the tag, reads its pointer and length fields,
// checks that [pointer, pointer+length) lies inside the region pointers
// lead into (the layout's linked region, or the bucket's own), and
// answers with the entry at offset 0 and that target from
// abi.LookupTargetOffset(EntryBytes) on, streamed like a READ's data
// straight from region memory. The work is bounded: one scan of at most
// BucketBytes (≤ 4 KB), one hop, no loop over anything the request or
// the memory chose, and nothing outside the two regions is ever read.
//
// What is guaranteed against the owner's concurrent stores: the scan, and
// the answer's bytes, are read by the serving core in the Poll that
// grants the request (the rest of an answer in a later one when it ran
// out of tx buffers partway; an answer none of which went is scanned
// again when it goes), but the owner may store while they are read; and with a batching seal
// backend the answer's bytes are read when the batch runs, after the
// scan. So the entry returned may not be the one the scan matched, and
// the target may be torn. The client checks what it got: the entry's
// tag is the one it asked for, its pointer and length are those of the
// target it got, and the target checks itself (kv: a record's stamp and
// checksum), as after a READ.
//
// Cost: the serving core's work per LOOKUP is a READ's of the answer's
// bytes, plus the scan (one compare per entry) and a region lookup for a
// linked region: the entry and the target's first bytes share the first
// frame (sender.gather), so an answer that fits a chunk is one frame, as
// a READ's is; BenchmarkLookupLoopback64 and ...4096 beside
// BenchmarkReadLoopback64 and ...4096 measure the ratio
// (docs/protocol.md, Lookups).

// Lookup registration errors.
var (
	ErrLayout       = errors.New("engine: invalid bucket layout")
	ErrLinkedRegion = errors.New("engine: linked region not a live region of the portal")
)

// RegisterLookupRegion registers mem as RegisterRegion does, with the
// bucket layout lay, for LOOKUPs (perm must hold abi.PermRemoteLookup).
// The layout must be valid (abi.BucketLayout.Validate), a bucket must
// fit the region, the region must hold at most abi.MaxLookupRegionBytes,
// and a linked region must be a live region of the same portal (ErrLayout,
// ErrLinkedRegion, ErrRegionSize; nothing is registered then).
func (c *Core) RegisterLookupRegion(id PortalID, mem []byte, perm abi.Perm, kr aesni.Key, lay abi.BucketLayout) (abi.RegionID, error) {
	p, err := c.portals.getLive(id)
	if err != nil {
		return 0, err
	}
	if len(mem) == 0 || uint64(len(mem)) > abi.MaxLookupRegionBytes {
		return 0, fmt.Errorf("%w: %d bytes, a region with a bucket layout holds at most %d", ErrRegionSize, len(mem), uint64(abi.MaxLookupRegionBytes))
	}
	if perm&abi.PermRemoteLookup == 0 {
		return 0, fmt.Errorf("%w: a bucket layout without PermRemoteLookup", ErrLayout)
	}
	if err := lay.Validate(); err != nil {
		return 0, fmt.Errorf("%w: %w", ErrLayout, err)
	}
	if uint64(lay.BucketBytes) > uint64(len(mem)) {
		return 0, fmt.Errorf("%w: bucket of %d bytes, region of %d", ErrLayout, lay.BucketBytes, len(mem))
	}
	if lay.Linked != 0 {
		if _, err := c.regions.owned(id, lay.Linked); err != nil {
			return 0, fmt.Errorf("%w: %w", ErrLinkedRegion, err)
		}
	}
	l := lay
	return c.regions.add(id, p.tenant, mem, perm, kr, &l)
}

// lookupAnswer is what a LOOKUP's scan found (inbound.lk): the answer's
// first part (the matched entry, or the bucket) at offset at of the
// bucket's region, and its target in region target.
type lookupAnswer struct {
	tag     uint64 // the request's tag
	scanned bool
	err     abi.Status // the scan's status when it is the answer (not OK)
	bucket  bool       // FlagBucket: a miss answers with the bucket
	st      abi.Status // OK, or REMOTE_NOT_FOUND when the answer is the bucket
	head    uint32     // bytes of the first part
	pad     uint32     // where the target starts in the answer
	total   uint32     // the answer's length
	at      uint64
	target  abi.RegionID
	toff    uint64
	tlen    uint32
}

// checkLookup is checkRequest for a LOOKUP of region rg: its layout and
// permission, the bucket inside the region.
func checkLookup(e *inbound, rg *region) abi.Status {
	if rg.perm&abi.PermRemoteLookup == 0 || rg.lay == nil {
		return abi.StatusRemotePermission
	}
	b := uint64(rg.lay.BucketBytes)
	if e.offset > uint64(len(rg.mem)) || uint64(len(rg.mem))-e.offset < b {
		return abi.StatusRemoteBounds
	}
	return abi.StatusOK
}

// scan runs LOOKUP e's one bucket scan and one hop over region rg (live,
// checked by checkLookup) and fills e.lk; a status other than OK is the
// answer (an error: nothing is streamed), kept in e.lk.err.
func (r *responder) scan(e *inbound, rg *region) abi.Status {
	st := r.scanBucket(e, rg)
	e.lk.scanned, e.lk.err = true, st
	return st
}

func (r *responder) scanBucket(e *inbound, rg *region) abi.Status {
	l := rg.lay
	k := &e.lk
	bucket := rg.mem[e.offset : e.offset+uint64(l.BucketBytes)]
	if i, ok := findTag(bucket, l, k.tag); ok {
		ent := bucket[i*l.EntryBytes : (i+1)*l.EntryBytes]
		ptr, ln := abi.Field(ent[l.PtrOff:], l.PtrWidth), abi.Field(ent[l.LenOff:], l.LenWidth)
		t := rg
		k.target = abi.RegionID(e.region)
		if l.Linked != 0 {
			k.target = l.Linked
			if t = r.regions.lookup(l.Linked); t == nil || t.owner != rg.owner {
				return abi.StatusRemoteLookupBounds // the slab is gone: nothing to point into
			}
		}
		if ptr > uint64(len(t.mem))>>l.PtrShift { // (checked before the shift: it cannot overflow)
			return abi.StatusRemoteLookupBounds
		}
		if ptr <<= l.PtrShift; uint64(len(t.mem))-ptr < ln {
			return abi.StatusRemoteLookupBounds
		}
		k.st, k.head, k.at = abi.StatusOK, l.EntryBytes, e.offset+uint64(i*l.EntryBytes)
		k.pad, k.total = l.EntryBytes, l.EntryBytes
		k.toff, k.tlen = ptr, 0
		if ln > 0 {
			k.pad = abi.LookupTargetOffset(l.EntryBytes)
			if ln > uint64(e.length) || uint64(k.pad)+ln > uint64(e.length) {
				return abi.StatusRemoteLookupTooLarge
			}
			k.tlen, k.total = uint32(ln), k.pad+uint32(ln)
		}
		if k.total > e.length {
			return abi.StatusRemoteLookupTooLarge
		}
		return abi.StatusOK
	}
	if !k.bucket || l.BucketBytes > e.length {
		return abi.StatusRemoteNotFound
	}
	k.st, k.head, k.pad, k.total, k.at, k.tlen = abi.StatusRemoteNotFound, l.BucketBytes, l.BucketBytes, l.BucketBytes, e.offset, 0
	return abi.StatusOK
}

// findTag returns the first entry of bucket (layout l) whose tag field
// equals tag. The common 8-byte tag is read without abi.Field's switch.
func findTag(bucket []byte, l *abi.BucketLayout, tag uint64) (uint32, bool) {
	n, eb := l.Entries(), l.EntryBytes
	if l.TagWidth == 8 {
		for i, off := uint32(0), l.TagOff; i < n; i, off = i+1, off+eb {
			if binary.LittleEndian.Uint64(bucket[off:off+8]) == tag {
				return i, true
			}
		}
		return 0, false
	}
	for i, off := uint32(0), l.TagOff; i < n; i, off = i+1, off+eb {
		if abi.Field(bucket[off:], l.TagWidth) == tag {
			return i, true
		}
	}
	return 0, false
}

// streamLookup sends the rest of LOOKUP e's answer: its first part from
// region rg (the bucket's), its target from its target region, each
// chunk sealed straight from region memory like a READ's. It returns
// false when it ran out of tx buffers (resumed on a later Poll), and
// sets gone when a region left the table meanwhile (the initiator times
// out, as for a READ whose region went).
func (r *responder) streamLookup(e *inbound, rg *region) (done, gone bool) {
	k := &e.lk
	o := r.out
	f := &o.hdr
	f.DstMAC, f.SrcMAC = e.mac, o.mac
	f.SrcIP, f.DstIP = o.ip, e.ip
	f.SrcPort, f.DstPort = o.udp, e.port
	f.DSCP = o.dscp[e.class]
	f.Type, f.Status, f.Flags, f.Aux = wire.TypeLookupResp, uint8(k.st), 0, k.total
	f.PID, f.Tag, f.Region = e.pid, e.tag, e.region
	head := rg.mem[k.at : k.at+uint64(k.head)]
	if k.tlen == 0 {
		return o.stream(e.aead, head, int(e.chunk), &e.sent, 0, e.base, e.iv[:]), false
	}
	t := rg
	if k.target != abi.RegionID(e.region) {
		if t = r.regions.lookup(k.target); t == nil {
			return true, true
		}
	}
	target := t.mem[k.toff : k.toff+uint64(k.tlen)]
	if e.sent < k.head {
		if e.sent == 0 && k.pad < uint32(e.chunk) {
			// The entry and the target's first bytes share a frame.
			if !o.gather(e.aead, head, int(k.pad-k.head), target, int(e.chunk), &e.sent, e.base, e.iv[:]) {
				return false, false
			}
		} else if !o.stream(e.aead, head, int(e.chunk), &e.sent, 0, e.base, e.iv[:]) {
			return false, false
		}
	}
	sent := e.sent - min(e.sent, k.pad)
	ok := o.stream(e.aead, target, int(e.chunk), &sent, k.pad, e.base, e.iv[:])
	e.sent = k.pad + sent
	return ok, false
}
