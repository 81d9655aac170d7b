package abi

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// MaxLookupRegionBytes bounds a region registered with a bucket layout:
// every bucket offset fits the u32 of an OpLookup command. (A linked
// region, which holds the targets, may be as large as any region.)
const MaxLookupRegionBytes = 1<<32 - 1

// MaxPtrShift bounds BucketLayout.PtrShift.
const MaxPtrShift = 32

// BucketLayout is how the owner of a region lays out its buckets, for
// OpLookup (RedN-style offloaded lookup: one bucket scan, one hop). A
// bucket is BucketBytes at the offset a LOOKUP names; its entries start
// every EntryBytes from the bucket's start, as many as fit the bucket
// whole. In an entry, the tag, the pointer and the length are
// little-endian unsigned integers of TagWidth, PtrWidth and LenWidth
// bytes (1, 2, 4 or 8) at TagOff, PtrOff and LenOff. The pointer is an
// offset in Linked (a region of the same portal: the slab), or in the
// bucket's own region when Linked is 0, in units of 2^PtrShift bytes (0:
// bytes; an index of 64-byte aligned records stores offset/64: 6).
//
// A LOOKUP's answer is the matched entry (EntryBytes from its start)
// at offset 0 and, from the next multiple of 64 (LookupTargetOffset),
// the Length bytes its pointer names: at most MaxOpBytes in all.
type BucketLayout struct {
	BucketBytes uint32
	EntryBytes  uint32
	TagOff      uint32
	TagWidth    uint32
	PtrOff      uint32
	PtrWidth    uint32
	PtrShift    uint32 // 0..MaxPtrShift
	LenOff      uint32
	LenWidth    uint32
	Linked      RegionID
}

// Layout errors: Validate wraps them with the offending values.
var (
	ErrLayoutBucket = errors.New("abi: bucket layout: bucket size not in 1..4096")
	ErrLayoutEntry  = errors.New("abi: bucket layout: entry stride not in 1..bucket size")
	ErrLayoutWidth  = errors.New("abi: bucket layout: field width not 1, 2, 4 or 8")
	ErrLayoutField  = errors.New("abi: bucket layout: field outside the entry")
	ErrLayoutFit    = errors.New("abi: bucket layout: the entry leaves no room for a target")
	ErrLayoutShift  = errors.New("abi: bucket layout: pointer shift above 32")
)

// Validate checks the layout on its own (the engine checks it against the
// regions when the region is registered).
func (l *BucketLayout) Validate() error {
	if l.BucketBytes < 1 || l.BucketBytes > MaxOpBytes {
		return fmt.Errorf("%w: %d", ErrLayoutBucket, l.BucketBytes)
	}
	if l.EntryBytes < 1 || l.EntryBytes > l.BucketBytes {
		return fmt.Errorf("%w: stride %d, bucket %d", ErrLayoutEntry, l.EntryBytes, l.BucketBytes)
	}
	if LookupTargetOffset(l.EntryBytes) >= MaxOpBytes {
		return fmt.Errorf("%w: stride %d", ErrLayoutFit, l.EntryBytes)
	}
	if l.PtrShift > MaxPtrShift {
		return fmt.Errorf("%w: %d", ErrLayoutShift, l.PtrShift)
	}
	for _, f := range [...]struct {
		name       string
		off, width uint32
	}{{"tag", l.TagOff, l.TagWidth}, {"pointer", l.PtrOff, l.PtrWidth}, {"length", l.LenOff, l.LenWidth}} {
		switch f.width {
		case 1, 2, 4, 8:
		default:
			return fmt.Errorf("%w: %s width %d", ErrLayoutWidth, f.name, f.width)
		}
		if f.off > l.EntryBytes || l.EntryBytes-f.off < f.width {
			return fmt.Errorf("%w: %s at %d, %d bytes, entry %d bytes", ErrLayoutField, f.name, f.off, f.width, l.EntryBytes)
		}
	}
	return nil
}

// Entries is the number of entries in a bucket.
func (l *BucketLayout) Entries() uint32 { return l.BucketBytes / l.EntryBytes }

// LookupTargetOffset is where a LOOKUP's answer puts the target: the
// first multiple of 64 at or after the entry's end (answer chunks start
// at multiples of 64).
func LookupTargetOffset(entryBytes uint32) uint32 { return (entryBytes + 63) &^ 63 }

// Field reads the little-endian unsigned integer of width bytes (1, 2, 4
// or 8) at b[0:width].
func Field(b []byte, width uint32) uint64 {
	switch width {
	case 1:
		return uint64(b[0])
	case 2:
		return uint64(binary.LittleEndian.Uint16(b))
	case 4:
		return uint64(binary.LittleEndian.Uint32(b))
	}
	return binary.LittleEndian.Uint64(b)
}
